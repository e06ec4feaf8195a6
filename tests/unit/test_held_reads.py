"""The watch of reads held by an open transaction: librdkafka's statistics read, and what is decided from them."""

from __future__ import annotations

import json
import logging

import pytest

from acker.kafka.held_reads import Ends, Held, HeldReads, _Watch, partition_ends


def _stats(leader_up: bool = True, **partitions: dict[str, object]) -> str:
    """librdkafka's statistics document, trimmed to what is read, with ``partitions`` of topic ``t`` by number
    (``p0``, ``p1``, ...) led by broker 1, and the unassigned-partition queue (-1) as librdkafka lists it."""
    listed = {"-1": {"partition": -1, "fetch_state": "none", "next_offset": 0, "ls_offset": -1001, "hi_offset": -1001}}
    for name, fields in partitions.items():
        number = name.removeprefix("p")
        listed[number] = {"partition": int(number), "leader": 1, "fetch_state": "active", "app_offset": 3, **fields}
    brokers = {"127.0.0.1:9092/1": {"nodeid": 1, "state": "UP" if leader_up else "CONNECT"}}
    return json.dumps({"name": "rdkafka#consumer-1", "brokers": brokers, "topics": {"t": {"partitions": listed}}})


def test_the_partitions_assigned_are_read_with_their_offsets_fresh_those_fetched_from_a_broker_up() -> None:
    stats = _stats(
        p0={"next_offset": 5, "ls_offset": 5, "hi_offset": 9},
        p1={"next_offset": 7, "ls_offset": 7, "hi_offset": 7},
        p2={"fetch_state": "stopped", "next_offset": 1, "ls_offset": 1, "hi_offset": 4},
        p3={"fetch_state": "offset-query", "next_offset": 1, "ls_offset": 1, "hi_offset": 4},
    )
    assert partition_ends(stats) == {("t", 0): Ends(5, 5, 9), ("t", 1): Ends(7, 7, 7), ("t", 3): Ends(1, 1, 4, False)}
    away = _stats(leader_up=False, p0={"next_offset": 5, "ls_offset": 5, "hi_offset": 9})
    assert partition_ends(away) == {("t", 0): Ends(5, 5, 9, False)}
    assert partition_ends(json.dumps({"topics": {}})) == {}
    with pytest.raises(ValueError):
        partition_ends("[1, 2]")


@pytest.mark.parametrize(
    ("ends", "held"),
    [
        (Ends(5, 5, 9), True),  # at the LSO, records after it
        (Ends(3, 5, 9), False),  # not there yet: records before the LSO to read
        (Ends(9, 9, 9), False),  # at the end: nothing open
        (Ends(0, -1001, -1001), False),  # not known yet
    ],
)
def test_reads_are_held_when_the_fetcher_stands_at_a_last_stable_offset_below_the_logs_end(
    ends: Ends, held: bool
) -> None:
    assert ends.held is held


KEY = ("t", 0)


def test_a_partition_held_past_the_limit_is_said_once_then_said_released_when_its_reads_move_on() -> None:
    reads = HeldReads(60)
    assert reads.observe(0, {KEY: Ends(5, 5, 9)}) == ([], [])
    assert reads.observe(59, {KEY: Ends(5, 5, 12)}) == ([], [])
    assert reads.observe(60, {KEY: Ends(5, 5, 12)}) == ([Held("t", 0, 5, 12, 60)], [])
    assert reads.said == 1
    assert reads.observe(120, {KEY: Ends(5, 5, 12)}) == ([], [])  # said once
    assert reads.observe(130, {KEY: Ends(12, 12, 12)}) == ([], [Held("t", 0, 5, 12, 130)])
    assert reads.observe(300, {KEY: Ends(12, 12, 12)}) == ([], []) and reads.said == 0


def test_a_new_transaction_further_on_is_timed_from_when_it_holds_the_reads() -> None:
    """The LSO moving on means the transaction there ended: another holding the reads at a later offset counts from
    when it is first seen, and the partition said held is said released."""
    reads = HeldReads(10)
    reads.observe(0, {KEY: Ends(5, 5, 9)})
    assert reads.observe(10, {KEY: Ends(5, 5, 9)})[0] == [Held("t", 0, 5, 9, 10)]
    assert reads.observe(15, {KEY: Ends(8, 8, 20)}) == ([], [Held("t", 0, 5, 20, 15)])
    assert reads.observe(24, {KEY: Ends(8, 8, 20)}) == ([], [])
    assert reads.observe(25, {KEY: Ends(8, 8, 20)}) == ([Held("t", 0, 8, 20, 10)], [])


def test_a_pause_neither_restarts_the_clock_nor_says_the_reads_moved_on() -> None:
    """A spout at max_pending pauses and resumes its partitions many times a second: a partition held all along is
    still said held, and one said held is not said released by a pause. Statistics while paused, and the first
    after a resume, may say what was before: they are not taken for news."""
    reads = HeldReads(10)
    reads.observe(0, {KEY: Ends(5, 5, 9)})
    for t in range(1, 10):
        reads.pause([KEY])
        reads.resume([KEY])
        assert reads.observe(t, {KEY: Ends(5, 5, 9)}) == ([], [])  # each the first after a resume
    assert reads.observe(10, {KEY: Ends(5, 5, 9)}) == ([Held("t", 0, 5, 9, 10)], [])
    reads.pause([KEY])
    assert reads.observe(30, {KEY: Ends(5, 5, 9)}) == ([], [])
    assert reads.said == 1
    reads.resume([KEY])
    assert reads.observe(31, {KEY: Ends(9, 9, 9)}) == ([], [])  # possibly from before the resume
    assert reads.observe(32, {KEY: Ends(9, 9, 9)}) == ([], [Held("t", 0, 5, 9, 32)])


def test_statistics_not_fresh_a_lower_lso_or_a_fetcher_sent_back_keep_the_transaction_held() -> None:
    """A fetch restarting, a leader away, a new leader behind, a seek back: none says the transaction ended."""
    reads = HeldReads(10)
    reads.observe(0, {KEY: Ends(5, 5, 9)})
    assert reads.observe(5, {KEY: Ends(5, 5, 9, fresh=False)}) == ([], [])
    assert reads.observe(6, {KEY: Ends(4, 4, 4)}) == ([], [])  # a leader behind
    assert reads.observe(7, {KEY: Ends(2, 5, 9)}) == ([], [])  # sent back: not there yet
    assert reads.observe(10, {KEY: Ends(3, 5, 9)}) == ([], [])  # nor yet held, though long open
    assert reads.observe(11, {KEY: Ends(5, 5, 9)}) == ([Held("t", 0, 5, 9, 11)], [])
    assert reads.observe(12, {KEY: Ends(5, 5, 9, fresh=False)}) == ([], []) and reads.said == 1


def test_a_partition_no_longer_assigned_is_forgotten_without_being_said_released() -> None:
    reads = HeldReads(10)
    reads.observe(0, {KEY: Ends(5, 5, 9)})
    assert reads.observe(10, {KEY: Ends(5, 5, 9)})[0]
    assert reads.observe(20, {}) == ([], []) and reads.said == 0  # revoked: another process reads it now
    reads.observe(30, {KEY: Ends(5, 5, 9)})  # back: timed again, and said again if still held
    assert reads.observe(40, {KEY: Ends(5, 5, 9)})[0] == [Held("t", 0, 5, 9, 10)]


def test_the_watch_logs_a_held_partition_with_the_way_out_and_never_raises_into_the_poll(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([0.0, 5.0, 6.0])
    monkeypatch.setattr("acker.kafka.held_reads.time.monotonic", lambda: next(clock))
    watch = _Watch("step-1", 5)
    caplog.set_level(logging.INFO, "acker.kafka.held_reads")
    watch(_stats(p2={"next_offset": 14, "ls_offset": 14, "hi_offset": 15}))
    watch(_stats(p2={"next_offset": 14, "ls_offset": 14, "hi_offset": 15}))
    [held] = caplog.records
    assert held.levelno == logging.WARNING
    assert held.getMessage().startswith("step-1: its reads of t [2] have stood at offset 14 for at least 5 s")
    assert '"A transaction that does not end"' in held.getMessage()
    watch(_stats(p2={"next_offset": 15, "ls_offset": 15, "hi_offset": 15}))
    assert (
        caplog.records[-1].getMessage()
        == "step-1: its reads of t [2] move on past offset 14, where a transaction held them about 6 s"
    )
    caplog.clear()
    watch("not json")
    watch(json.dumps({"topics": {"t": {"partitions": {"0": {"fetch_state": "active"}}}}}))
    [unreadable] = caplog.records  # said once
    assert "statistics could not be read (JSONDecodeError(" in unreadable.getMessage()
