"""How the acker service stops (`AckerService.run`, `close`), at its Kafka edge: stand-ins for the consumer and the
flush."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from acker.config import ServiceConfig
from acker.service import AckerService


class _Consumer:
    """Subscribes, and on close revokes what it holds, as librdkafka calls the revoke callback then."""

    reads_held = 0  # read by the stop's last log line

    def __init__(self) -> None:
        self.on_revoke: Any = None

    def subscribe(self, _topics: list[str], **callbacks: Any) -> None:
        self.on_revoke = callbacks["on_revoke"]

    def close(self) -> None:
        self.on_revoke(self, [TopicPartition("acker", 0)])


@pytest.mark.parametrize("undelivered", [0, 16])
def test_a_stop_waits_for_deliveries_once_not_again_at_the_revoke_of_its_close(
    monkeypatch: pytest.MonkeyPatch, undelivered: int
) -> None:
    """With the broker away, the stop's commit waited 30 s for deliveries, then the revoke of the consumer's close
    waited 30 s more for the same ones (the loop had stopped: nothing new to commit), before `close`'s own 10 s."""
    service = AckerService(ServiceConfig(metrics_port=0, kafka={"log_level": "0"}))
    service.consumer.close()
    service.consumer = consumer = _Consumer()  # type: ignore[assignment]
    stop = threading.Event()
    flushes: list[float] = []

    def flush(timeout_s: float) -> int:
        flushes.append(timeout_s)
        return undelivered

    monkeypatch.setattr(service, "_first_contact", lambda _stop: True)
    monkeypatch.setattr(service, "_ensure_topics", lambda *_a, **_k: set())
    monkeypatch.setattr(service, "_topic_exists", lambda *_a, **_k: True)
    monkeypatch.setattr(service, "step", lambda timeout_s: stop.set())
    monkeypatch.setattr(service, "_flush", flush)
    service.run(stop)
    assert consumer.on_revoke is not None and flushes == [30, 10]


def test_a_step_that_raised_leaves_nothing_for_the_close_to_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller driving `step` itself, as `close` says, calls `close` when a step raised: its revoke committed the
    offsets of what the step had read (maybe decided, not published). Only `run` stopped it before."""
    service = AckerService(ServiceConfig(metrics_port=0, kafka={"log_level": "0"}))
    service.consumer.close()
    service.consumer = consumer = _Consumer()  # type: ignore[assignment]
    consumer.subscribe(["acker"], on_revoke=service._on_revoke)
    consumer.consume = lambda *_a, **_k: []  # type: ignore[attr-defined]
    flushes: list[float] = []

    def flush(timeout_s: float) -> int:
        flushes.append(timeout_s)
        return 0

    def handle(_records: list[Any]) -> None:
        raise RuntimeError("between deciding and publishing")

    monkeypatch.setattr(service, "_flush", flush)
    monkeypatch.setattr(service, "_handle", handle)
    with pytest.raises(RuntimeError, match="between deciding"):
        service.step(0.0)
    service._commits = [(0, [TopicPartition("acker", 0, 7)])]  # planned before: not made by a caller's next step
    service._commit_passed()
    assert service._commits
    service.close()
    assert flushes == [10]  # close's own delivery, not the revoke's commit (its flush of 30 s first)
