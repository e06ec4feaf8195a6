"""`release` closes a stopped owner's producer when it holds nothing, leaves one still holding records to collection
(closing would flush it without a bound), and logs a producer's error on closing rather than raise it."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from acker.kafka.clients import release

NOWHERE = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}


class _Flushed:
    """A producer that holds nothing (``left``: what its ``flush`` says it still holds), recording its close."""

    def __init__(self, left: int = 0) -> None:
        self.left, self.closed = left, False

    def flush(self, timeout: float) -> int:
        return self.left

    def close(self) -> bool:
        self.closed = True
        return True


def test_a_producer_holding_nothing_is_closed_one_holding_anything_is_not() -> None:
    empty, busy = _Flushed(), _Flushed(left=1)
    release(empty, "spout s")  # type: ignore[arg-type]
    release(busy, "spout s")  # type: ignore[arg-type]
    assert (empty.closed, busy.closed) == (True, False)


def test_a_producer_still_holding_records_is_left_open() -> None:
    producer = Producer({**NOWHERE, "message.timeout.ms": 600_000})
    producer.produce("t", b"undelivered")
    release(producer, "spout s")  # at once: no flush
    producer.produce("t", b"still open")
    producer.purge()


class _FailedForGood:
    """A producer whose close raises its fatal error, as a fenced transactional one's does."""

    def flush(self, timeout: float) -> int:
        return 0

    def close(self) -> bool:
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))


def test_an_error_on_closing_is_logged_with_its_owner(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "acker.kafka"):
        release(_FailedForGood(), "bolt split")  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records] == [
        "bolt split: its producer closed with its error: fenced by a newer instance"
    ]
