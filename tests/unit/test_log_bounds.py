"""`log_bounds` asks again while a new topic has no leader, and gives a clear error when the broker never answers."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from acker.kafka.clients import KafkaClientError, end_offsets, log_bounds


class _Flaky:
    """A consumer whose first ``failures`` offset queries fail as a just-created topic's do."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 3, 10 + tp.partition


def test_asks_again_until_the_partition_has_a_leader() -> None:
    consumer = _Flaky(failures=2)
    assert log_bounds(consumer, TopicPartition("t", 1), timeout_s=10) == (3, 11)  # type: ignore[arg-type]
    assert consumer.calls == 3
    assert end_offsets(_Flaky(1), [TopicPartition("t", 0), TopicPartition("t", 2)]) == [10, 12]  # type: ignore[arg-type]


def test_a_broker_that_never_answers_is_a_clear_error() -> None:
    with pytest.raises(KafkaClientError, match=r"t\[0\].*NOT_LEADER_FOR_PARTITION"):
        log_bounds(_Flaky(failures=10**6), TopicPartition("t", 0), timeout_s=0.3)  # type: ignore[arg-type]


def test_a_read_not_allowed_is_said_at_once() -> None:
    """Not authorized to read the topic: no wait mends that (the service's read-back of a previous owner's outcomes
    asked for 30 s, the loop held, for each partition of such a topic)."""

    class _Refusing(_Flaky):
        def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
            self.calls += 1
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    consumer = _Refusing(failures=0)
    with pytest.raises(KafkaClientError, match=r"t\[0\].*TOPIC_AUTHORIZATION_FAILED"):
        log_bounds(consumer, TopicPartition("t", 0), timeout_s=30)  # type: ignore[arg-type]
    assert consumer.calls == 1


class _Stale:
    """A consumer handle that knows its topic's partitions as they were: one added since is unknown to it, at once,
    until it looks the topic up."""

    def __init__(self) -> None:
        self.lookups = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if not self.lookups:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition"))
        return 0, 4

    def list_topics(self, topic: str, timeout: float) -> object:
        self.lookups += 1
        return object()


def test_a_partition_unknown_to_the_handle_is_looked_up_before_it_is_asked_again() -> None:
    consumer = _Stale()
    assert log_bounds(consumer, TopicPartition("t", 1), timeout_s=10) == (0, 4)  # type: ignore[arg-type]
    assert consumer.lookups == 1
