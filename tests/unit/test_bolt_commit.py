"""A bolt's commit at its edge: every producer is flushed, whatever the one before left undelivered."""

from __future__ import annotations

from collections import Counter
from typing import Any

from acker.bolt import Bolt


class _Flushing:
    def __init__(self, left: int) -> None:
        self.left, self.flushed = left, 0

    def flush(self, _timeout_s: float = 0) -> int:
        self.flushed += 1
        return self.left


class _Quiet:
    def check(self, _counters: Counter[str]) -> None:
        pass


def test_a_sink_record_not_delivered_does_not_keep_the_acks_and_children_of_other_inputs_unsent() -> None:
    """On close and on revoke the commit is the last flush: with one record of the sink undelivered, the acker's
    batches and the stage's children were never flushed, and their trees timed out though fully processed."""
    bolt: Any = Bolt.__new__(Bolt)  # the edge alone: no Kafka clients
    bolt.commit_interval_s, bolt.counters, bolt._processed, bolt._trouble = 1.0, Counter(), {("t", 0): 5}, _Quiet()
    bolt._sink, bolt.acker, bolt.producer = _Flushing(left=1), _Flushing(left=0), _Flushing(left=0)
    bolt._commit()
    assert (bolt._sink.flushed, bolt.acker.flushed, bolt.producer.flushed) == (1, 1, 1)
    assert bolt._processed == {("t", 0): 5}  # not committed: something is undelivered
