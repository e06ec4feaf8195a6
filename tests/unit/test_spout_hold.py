"""A spout's hold of a replay whose backoff has not passed (`Spout._hold`), at its edge: a consumer that records; the
hold given up with its partition; and its inits sent at their linger however long its emit function takes over a
batch."""

from __future__ import annotations

import logging
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
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
    spout._held, spout.counters, spout.replays = {}, Counter(), _Consumer()
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
    assert held._held == {("rp.sp", 1): now_ms + 60_000} and held.replays.calls == [("pause", 1, 7), ("seek", 1, 7)]
    free = _spout()
    assert not free._hold(record, [(ORIGIN, b"src/0/1"), (NOT_BEFORE, sooner), (NOT_BEFORE, later)], now_ms)
    assert free._held == {} and free.replays.calls == []


def test_a_spout_sends_its_inits_at_their_linger_while_it_works_through_a_batch() -> None:
    """The inits of a batch's records went out once the whole batch was emitted: a slow emit function held the
    first record's init for the whole batch."""
    events: list[str] = []
    spout: Any = Spout.__new__(Spout)
    spout._hold, spout._on_outcome, spout._replay_topic = lambda _record, _headers, _now_ms: False, None, "s.replay"
    spout._start = lambda record, _now, **_: events.append(f"start {record.offset()}")
    spout.acker = SimpleNamespace(poll_due=lambda: events.append("poll if due"))
    spout._take([Message(topic="src", partition=0, offset=o) for o in (0, 1)], 0)
    assert events == ["start 0", "poll if due", "start 1", "poll if due"]


def test_each_tree_waits_for_its_outcome_from_when_its_own_record_was_started() -> None:
    """Every tree of a batch waited from the time the batch was read: behind a slow emit function, the last records'
    trees had the time the ones before took cut from their wait, and the spout could time them out early."""
    started: list[float] = []
    spout: Any = Spout.__new__(Spout)
    spout._hold, spout._on_outcome, spout._replay_topic = lambda _record, _headers, _now_ms: False, None, "s.replay"

    def start(_record: Message, now: float, **_: Any) -> None:
        started.append(now)
        time.sleep(0.05)  # the emit function

    spout._start = start
    spout.acker = SimpleNamespace(poll_due=lambda: False)
    spout._take([Message(topic="src", partition=0, offset=o) for o in range(3)], 0)
    assert started[1] - started[0] >= 0.05 and started[2] - started[1] >= 0.05


def test_a_hold_goes_with_its_partition_revoked_or_lost_and_a_loss_is_said_as_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A spout gave no ``on_lost``: the consumer called ``on_revoke`` for partitions lost, and the log said a process
    taken for dead had its partitions revoked, as in any rebalance."""
    spout = _spout()
    spout._held = {("rp.sp", 0): 1, ("rp.sp", 1): 2, ("rp.sp", 2): 3}
    with caplog.at_level(logging.INFO, logger="acker.spout"):
        spout._on_revoke(None, [TopicPartition("rp.sp", 0)])
        spout._on_lost(None, [TopicPartition("rp.sp", 1)])
    assert spout._held == {("rp.sp", 2): 3}
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("INFO", "revoked rp.sp/0"),
        ("WARNING", "lost rp.sp/1 (taken for dead: another process reads them now)"),
    ]
