"""The replay job's producers closed at its stop within a bound: `Producer.close` aborts an open transaction and
flushes without one, and with Kafka away the job waited for Kafka's return, deaf to SIGTERM and Ctrl-C."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_jobs import replay_job


class _Producer:
    def __init__(self, blocks: threading.Event | None = None) -> None:
        self.closed, self._blocks = False, blocks

    def close(self) -> bool:
        self.closed = True
        if self._blocks is not None:
            self._blocks.wait()
        return True


def test_producers_are_closed_within_the_bound_and_one_whose_transaction_could_not_be_aborted_is_left(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(replay_job, "CLOSE_WAIT_S", 0.2)
    kafka_back = threading.Event()
    plain, waiting, unsettled = _Producer(), _Producer(kafka_back), _Producer(kafka_back)
    publishers = [SimpleNamespace(producer=p, unsettled=p is unsettled) for p in (plain, waiting, unsettled)]
    monkeypatch.setattr(replay_job, "_publishers", publishers)
    try:
        with caplog.at_level(logging.WARNING, logger=replay_job.__name__):
            closing = threading.Thread(target=replay_job.close_publishers, daemon=True)
            closing.start()
            closing.join(10)
            assert not closing.is_alive(), "waited for Kafka's return"
    finally:
        kafka_back.set()
    assert plain.closed and waiting.closed and not unsettled.closed and replay_job._publishers == []
    said = [r.getMessage() for r in caplog.records]
    assert any("could not be aborted is left unclosed" in line for line in said)
    assert any("did not close within 0.2 s" in line for line in said)


class _Aborting:
    def __init__(self, error: KafkaError) -> None:
        self.error = error

    def abort_transaction(self, _timeout_s: float) -> None:
        raise KafkaException(self.error)


@pytest.mark.parametrize(
    ("error", "unsettled"),
    [(KafkaError(KafkaError._TIMED_OUT, retriable=True), True), (KafkaError(KafkaError._FENCED, fatal=True), False)],
)
def test_only_a_transaction_whose_abort_was_not_answered_leaves_its_producer_unclosed(
    error: KafkaError, unsettled: bool
) -> None:
    """A fenced producer's abort fails at once, and so does its close, which frees the client: left unclosed, each
    failed run of a job restarted in its process kept a client of its own, threads and sockets."""
    publisher: Any = replay_job._Publisher.__new__(replay_job._Publisher)
    publisher.producer, publisher.unsettled = _Aborting(error), False
    publisher._abort()
    assert publisher.unsettled is unsettled
