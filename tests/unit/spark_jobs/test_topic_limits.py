"""The replay job's size limit of each topic: asked once, and not at every record where the broker does not say; and
a record's size as the producer counts it."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from acker.headers import record_size
from spark_jobs.replay_job import _FRAMING, _LIMIT_RECHECK_S, TopicLimits


class _Broker:
    def __init__(self, limits: dict[str, int | None]) -> None:
        self.limits, self.asked = limits, 0

    def __call__(self, topic: str) -> int | None:
        self.asked += 1
        return self.limits[topic]


def test_a_topics_limit_is_asked_once_and_never_above_the_producers() -> None:
    broker = _Broker({"small": 1000, "large": 10**9})
    limits = TopicLimits(5000, broker)
    assert [limits("small"), limits("large"), limits("small"), limits("large")] == [1000, 5000, 1000, 5000]
    assert broker.asked == 2


def test_a_topic_the_broker_does_not_say_about_is_asked_again_only_after_a_while() -> None:
    """Asked at every record, with no right to describe the topic's configuration, each question waited up to 10 s
    inside the publication's transaction: a few nacks made it outlive its timeout, at every run of the batch."""
    now = [0.0]
    broker = _Broker({"rp.words": None})
    limits = TopicLimits(5000, broker, clock=lambda: now[0])
    assert [limits("rp.words") for _ in range(100)] == [5000] * 100
    assert broker.asked == 1
    now[0] += _LIMIT_RECHECK_S
    broker.limits["rp.words"] = 700  # told now (a topic just created is known by then)
    assert [limits("rp.words"), limits("rp.words")] == [700, 700]
    assert broker.asked == 2


@pytest.mark.parametrize("headers", [[("h", b"x")] * 1000, [("a-longer-name", b"v" * 200)] * 40, []])
def test_a_record_the_size_check_passes_is_one_the_producer_takes(
    headers: list[tuple[str, str | bytes | None]],
) -> None:
    """The check counted header names and values only: a record of a thousand tiny headers passed it, and librdkafka
    refused it inside the transaction, which aborted at every run of the batch (no nack replayed again)."""
    limit = 100_000
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.max.bytes": limit})
    try:
        value = b"v" * (limit - _FRAMING - record_size(None, None, headers))  # the largest the check passes
        assert record_size(value, None, headers) + _FRAMING == limit
        producer.produce("t", value, headers=headers, partition=0)  # refused: raises MSG_SIZE_TOO_LARGE
    finally:
        producer.purge()
