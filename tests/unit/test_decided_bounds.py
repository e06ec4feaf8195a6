"""Reading back a previous owner's outcomes takes an outcome topic for gone only when two answers `CONFIRM_S` apart
say so: one broker's metadata may lag behind a topic made moments before a handover."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, TopicPartition

from acker.kafka import decided
from acker.kafka.lookups import CONFIRM_S


class _Lagging:
    """A consumer handle whose first ``absent`` metadata answers lack topic ``t`` (``error``: a broker that does not
    know it yet), the later ones have its partition 0."""

    def __init__(self, absent: int, error: int = KafkaError.UNKNOWN_TOPIC_OR_PART) -> None:
        self.absent, self.asked, self.error = absent, 0, error

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.asked += 1
        if self.asked <= self.absent:
            found = SimpleNamespace(partitions={}, error=KafkaError(self.error))
        else:
            found = SimpleNamespace(partitions={0: None}, error=None)
        return SimpleNamespace(topics={"t": found})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 2, 9


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def test_a_topic_missing_from_one_answer_is_asked_for_again(pauses: list[float]) -> None:
    consumer = _Lagging(absent=1)
    assert decided._bounds(consumer, "t", 0, set()) == (2, 9)  # type: ignore[arg-type]
    assert pauses == [CONFIRM_S]


def test_a_topic_missing_from_two_answers_is_gone(pauses: list[float], caplog: pytest.LogCaptureFixture) -> None:
    consumer, gone = _Lagging(absent=2), set[tuple[str, int | None]]()
    assert decided._bounds(consumer, "t", 0, gone) == (0, 0)  # type: ignore[arg-type]
    assert consumer.asked == 2 and pauses == [CONFIRM_S]
    assert "t[0] does not exist (any more)" in caplog.text
    # Taken as gone at once by the next read-back of the turn (another acker partition's), as the others before it
    assert gone == {("t", None)}
    assert decided._bounds(consumer, "t", 1, gone) == (0, 0)  # type: ignore[arg-type]
    assert consumer.asked == 2 and pauses == [CONFIRM_S]


def test_a_topic_without_a_leader_is_there_and_waited_for(pauses: list[float]) -> None:
    """A leader election, or a topic just made: taken for gone after a second, the previous owner's outcomes there were
    not read back, and its trees decided again."""
    consumer, gone = _Lagging(absent=5, error=KafkaError.LEADER_NOT_AVAILABLE), set[tuple[str, int | None]]()
    assert decided._bounds(consumer, "t", 0, gone) == (2, 9)  # type: ignore[arg-type]
    assert consumer.asked == 1 and pauses == [] and gone == set()
