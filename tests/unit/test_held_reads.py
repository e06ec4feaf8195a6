"""The watch of reads held by an open transaction: librdkafka's statistics read, and what is decided from them."""

from __future__ import annotations

import json
import logging

import pytest

from acker.kafka.held_reads import Ends, Held, HeldReads, _Watch, partition_ends


def _stats(**partitions: dict[str, object]) -> str:
    """librdkafka's statistics document, trimmed to what is read, with ``partitions`` of topic ``t`` by number
    (``p0``, ``p1``, ...) and the unassigned-partition queue (-1) as librdkafka lists it."""
    listed = {"-1": {"partition": -1, "fetch_state": "none", "next_offset": 0, "ls_offset": -1001, "hi_offset": -1001}}
    for name, fields in partitions.items():
        number = name.removeprefix("p")
        listed[number] = {"partition": int(number), "fetch_state": "active", "app_offset": 3, **fields}
    return json.dumps({"name": "rdkafka#consumer-1", "type": "consumer", "topics": {"t": {"partitions": listed}}})


def test_the_partitions_fetched_are_read_with_their_offsets_and_the_others_left_out() -> None:
    stats = _stats(
        p0={"next_offset": 5, "ls_offset": 5, "hi_offset": 9},
        p1={"next_offset": 7, "ls_offset": 7, "hi_offset": 7},
        p2={"fetch_state": "stopped", "next_offset": 1, "ls_offset": 1, "hi_offset": 4},
    )
    assert partition_ends(stats) == {("t", 0): Ends(5, 5, 9), ("t", 1): Ends(7, 7, 7)}
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


def test_a_partition_held_past_the_limit_is_said_once_then_said_released_when_its_reads_move_on() -> None:
    reads = HeldReads(60)
    key = ("t", 0)
    assert reads.observe(0, {key: Ends(5, 5, 9)}) == ([], [])
    assert reads.observe(59, {key: Ends(5, 5, 12)}) == ([], [])
    assert reads.observe(60, {key: Ends(5, 5, 12)}) == ([Held("t", 0, 5, 12, 60)], [])
    assert reads.observe(120, {key: Ends(5, 5, 12)}) == ([], [])  # said once
    assert reads.observe(130, {key: Ends(12, 12, 12)}) == ([], [Held("t", 0, 5, 12, 130)])
    assert reads.observe(300, {key: Ends(12, 12, 12)}) == ([], [])


def test_a_new_transaction_further_on_is_timed_from_when_it_holds_the_reads() -> None:
    """The LSO moving on means the transaction there ended: another holding the reads at a later offset counts from
    when it is first seen, and the partition said held is said released."""
    reads = HeldReads(10)
    key = ("t", 0)
    reads.observe(0, {key: Ends(5, 5, 9)})
    assert reads.observe(10, {key: Ends(5, 5, 9)})[0] == [Held("t", 0, 5, 9, 10)]
    assert reads.observe(15, {key: Ends(8, 8, 20)}) == ([], [Held("t", 0, 5, 20, 15)])
    assert reads.observe(24, {key: Ends(8, 8, 20)}) == ([], [])
    assert reads.observe(25, {key: Ends(8, 8, 20)}) == ([Held("t", 0, 8, 20, 10)], [])


def test_a_paused_partition_is_not_timed_its_statistics_standing_still_while_it_is_not_fetched() -> None:
    reads = HeldReads(10)
    key = ("t", 0)
    reads.observe(0, {key: Ends(5, 5, 9)})
    reads.pause([key])
    assert reads.observe(30, {key: Ends(5, 5, 9)}) == ([], [])
    reads.resume([key])
    assert reads.observe(31, {key: Ends(5, 5, 9)}) == ([], [])  # timed from now
    assert reads.observe(41, {key: Ends(5, 5, 9)}) == ([Held("t", 0, 5, 9, 10)], [])


def test_a_partition_no_longer_fetched_is_forgotten_without_being_said_released() -> None:
    reads = HeldReads(10)
    key = ("t", 0)
    reads.observe(0, {key: Ends(5, 5, 9)})
    assert reads.observe(10, {key: Ends(5, 5, 9)})[0]
    assert reads.observe(20, {}) == ([], [])  # revoked: another process reads it now
    reads.observe(30, {key: Ends(5, 5, 9)})  # back: timed again, and said again if still held
    assert reads.observe(40, {key: Ends(5, 5, 9)})[0] == [Held("t", 0, 5, 9, 10)]


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
    assert held.getMessage().startswith("step-1: its reads of t [2] have stood at offset 14 for 5 s")
    assert '"A transaction that does not end"' in held.getMessage()
    watch(_stats(p2={"next_offset": 15, "ls_offset": 15, "hi_offset": 15}))
    assert (
        caplog.records[-1].getMessage()
        == "step-1: its reads of t [2] move on past offset 14, where a transaction held them 6 s"
    )
    caplog.clear()
    watch("not json")
    watch(json.dumps({"topics": {"t": {"partitions": {"0": {"fetch_state": "active"}}}}}))
    [unreadable] = caplog.records  # said once
    assert "statistics could not be read" in unreadable.getMessage()
