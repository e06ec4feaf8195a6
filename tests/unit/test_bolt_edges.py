"""A bolt at its edges: every producer flushed at a commit, whatever the one before left undelivered; records written
out of the pipeline through one producer."""

from __future__ import annotations

from collections import Counter
from typing import Any

from acker.bolt import Bolt
from acker.core.tuple_tree import UNTRACKED, TupleIds


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


class _Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def produce_anchored(self, topic: str, value: Any, key: Any, headers: Any, ids: Any, **kwargs: Any) -> None:
        self.calls.append(("stage", False) if kwargs.get("written_by") is None else ("sink", ids.tracked))


def test_once_records_are_written_through_the_sink_producer_untracked_ones_go_there_too() -> None:
    """A word's counts from an input without valid anchors went through the stage's producer, the others through the
    sink's: two producers, and a key's records could land out of the order written (a stale count last)."""
    bolt: Any = Bolt.__new__(Bolt)
    bolt.counters, bolt._sink, bolt.acker = Counter(), None, _Recording()
    bolt._write("counts", b"1", b"w", None, UNTRACKED)  # an untracked bolt: its own producer, no success reports
    bolt._sink = object()  # made by the first tracked write
    bolt._write("counts", b"2", b"w", None, TupleIds(((5, 6),)))
    bolt._write("counts", b"3", b"w", None, UNTRACKED)
    assert bolt.acker.calls == [("stage", False), ("sink", True), ("sink", False)]
