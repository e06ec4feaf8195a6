"""A spout's hold of a replay whose backoff has not passed (`Spout._hold`), at its edge: a consumer that records."""

from __future__ import annotations

from collections import Counter
from typing import Any

from confluent_kafka import Message, TopicPartition

from acker.retries import NOT_BEFORE, ORIGIN
from acker.spout import Spout


class _Consumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.calls += [("pause", tp.partition, tp.offset) for tp in partitions]

    def seek(self, partition: TopicPartition) -> None:
        self.calls.append(("seek", partition.partition, partition.offset))


def _spout() -> Any:
    spout: Any = Spout.__new__(Spout)  # the edge alone: no Kafka clients
    spout._held, spout.counters, spout.consumer = {}, Counter(), _Consumer()
    spout._replay_topic, spout._replay_of = "rp.sp", b"src/"
    return spout


def test_a_header_given_twice_holds_by_its_first_value_as_the_retries_count_it() -> None:
    """The hold read the last of two ``not-before`` headers (a dict of them), the retries the first: a record
    written by hand with two was held by one value and counted by the other."""
    now_ms = 1_000_000
    record = Message(topic="rp.sp", partition=1, offset=7)
    later, sooner = str(now_ms + 60_000).encode(), str(now_ms - 1).encode()
    held = _spout()
    assert held._hold(record, [(ORIGIN, b"src/0/1"), (NOT_BEFORE, later), (NOT_BEFORE, sooner)], now_ms)
    assert held._held == {("rp.sp", 1): now_ms + 60_000} and held.consumer.calls == [("pause", 1, 7), ("seek", 1, 7)]
    free = _spout()
    assert not free._hold(record, [(ORIGIN, b"src/0/1"), (NOT_BEFORE, sooner), (NOT_BEFORE, later)], now_ms)
    assert free._held == {} and free.consumer.calls == []
