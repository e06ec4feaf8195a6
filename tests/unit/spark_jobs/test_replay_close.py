"""The replay job's producers closed at its stop within a bound: `Producer.close` aborts an open transaction and
flushes without one, and with Kafka away the job waited for Kafka's return, deaf to SIGTERM and Ctrl-C."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

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
            replay_job.close_publishers()  # returned with Kafka still away
    finally:
        kafka_back.set()
    assert plain.closed and waiting.closed and not unsettled.closed and replay_job._publishers == []
    said = [r.getMessage() for r in caplog.records]
    assert any("could not be aborted is left unclosed" in line for line in said)
    assert any("did not close within 0.2 s" in line for line in said)
