"""Where an acker partition's outcome records lie: what each commit's metadata tells the next owner."""

from __future__ import annotations

import json

import pytest

from acker.outcome_log import FORGET_IDLE_S, MAX_METADATA_BYTES, OutcomeLog, parse_metadata


def test_the_metadata_points_at_the_first_record_deciding_at_or_after_the_committed_offset() -> None:
    log = OutcomeLog()
    log.delivered("out.a", 2, 10, acker_offset=5)
    log.delivered("out.a", 2, 11, acker_offset=9)
    log.delivered("out.b", 0, 40, acker_offset=7)
    assert parse_metadata(log.metadata(6)) == {"out.a": (2, 11), "out.b": (0, 40)}
    # Nothing decided from 10 on was delivered yet: whatever is in flight lands after the last record delivered.
    assert parse_metadata(log.metadata(10)) == {"out.a": (2, 12), "out.b": (0, 41)}
    log.delivered("out.a", 2, 12, acker_offset=10)
    assert log.starts(10) == {"out.a": (2, 12), "out.b": (0, 41)}


def test_no_metadata_while_a_topic_has_records_in_flight_and_none_delivered() -> None:
    """Its partition is chosen by the partitioner: leaving the topic out would hide its outcomes from the next
    owner, so the commit waits until a delivery report names the partition."""
    log = OutcomeLog()
    log.delivered("out.a", 2, 10, acker_offset=5)
    log.sent("out.b")
    assert log.metadata(6) is None and log.starts(6) is None
    log.delivered("out.b", 1, 0, acker_offset=7)
    assert parse_metadata(log.metadata(6)) == {"out.a": (2, 11), "out.b": (1, 0)}
    log.sent("out.c")
    log.failed("out.c")  # never delivered (the service stops on a failed delivery): nothing there to read back
    assert parse_metadata(log.metadata(6)) == {"out.a": (2, 11), "out.b": (1, 0)}
    log.sent("out.b")  # in flight to a known partition: it lands after the records delivered there
    assert parse_metadata(log.metadata(8)) == {"out.a": (2, 11), "out.b": (1, 1)}


def test_a_commit_put_off_for_a_topic_in_flight_forgets_nothing() -> None:
    """The commit of a later offset is put off (another topic's place not known yet), and the offset committed
    before is committed again (`AckerService._cover`): its metadata must still name the records deciding from it."""
    log = OutcomeLog()
    log.delivered("out.b", 0, 10, acker_offset=50)
    log.delivered("out.b", 0, 11, acker_offset=150)
    log.sent("out.c")  # by key: its partition not known until delivered
    assert log.metadata(100) is None
    log.delivered("out.c", 2, 0, acker_offset=160)
    assert parse_metadata(log.metadata(40)) == {"out.b": (0, 10), "out.c": (2, 0)}


def test_a_topic_whose_partition_changed_starts_over() -> None:
    log = OutcomeLog()
    log.delivered("out.a", 2, 10, acker_offset=5)
    log.delivered("out.a", 3, 4, acker_offset=6)
    assert log.starts(0) == {"out.a": (3, 4)}


def test_a_topic_expected_before_its_first_record_is_named_at_the_end_it_had_then() -> None:
    """Declared with its partition's end offset before anything is produced to it: every metadata names it from
    then on, in flight or not, and its deliveries carry on from there; another partition starts it over."""
    log = OutcomeLog()
    log.delivered("out.a", 2, 10, acker_offset=5)
    assert log.partition("out.b") is None and log.partition("out.a") == 2
    log.expect("out.b", 1, 30)
    assert log.partition("out.b") == 1
    log.sent("out.b")
    assert parse_metadata(log.metadata(6)) == {"out.a": (2, 11), "out.b": (1, 30)}
    log.delivered("out.b", 1, 33, acker_offset=8)  # other acker partitions' records came first
    log.expect("out.b", 1, 50)  # known already: nothing changes
    assert log.starts(8) == {"out.a": (2, 11), "out.b": (1, 33)}
    log.expect("out.b", 0, 7)
    assert log.starts(8) == {"out.a": (2, 11), "out.b": (0, 7)}


def test_metadata_stays_under_the_brokers_limit() -> None:
    log = OutcomeLog()
    for i in range(500):
        log.delivered(f"acker.outcomes.spout-with-a-long-name-{i:04}", 0, i, acker_offset=1)
    text = log.metadata(0)
    assert text is not None
    assert len(text.encode()) <= MAX_METADATA_BYTES
    assert 0 < len(parse_metadata(text)) < 500


def test_a_topic_with_nothing_to_read_back_for_a_while_is_forgotten_and_leaves_room_for_live_ones() -> None:
    """Spouts named per run: each run's topic stayed in every commit while the instance owned the partition, and past
    about 50 of them the metadata's bytes left out the live spout's topic (its outcomes published again after a
    failover). Forgotten, a topic written again is a first one (`written`): declared and covered again."""
    clock = [0.0]
    log = OutcomeLog(clock=lambda: clock[0])
    live = "acker.outcomes.words"
    for run in range(120):
        log.delivered(f"acker.outcomes.run-{run:04}-of-a-spout-named-per-run", 0, run, acker_offset=run)
        log.delivered(live, 1, run, acker_offset=run)
        assert log.metadata(run) is not None  # the live topic's latest record is read back, the run's too
        clock[0] += 300.0
    starts = parse_metadata(log.metadata(120))  # a record decided at 119 or before: none to read back
    assert live in starts and len(starts) == 4  # idle for less than FORGET_IDLE_S: runs 117, 118, 119
    assert log.written(live) and not log.written("acker.outcomes.run-0000-of-a-spout-named-per-run")
    clock[0] += FORGET_IDLE_S - 1  # since the last call, where the live topic and the last run's went idle
    last_run = "acker.outcomes.run-0119-of-a-spout-named-per-run"
    assert log.starts(120) == {live: (1, 120), last_run: (0, 120)}  # kept, with nothing to read back
    clock[0] += 1
    assert log.starts(120) == {}
    log.expect(live, 1, 200)  # written again: declared (the service covers it) before its record
    log.sent(live)
    assert log.starts(120) == {live: (1, 200)}


def test_a_topic_none_of_whose_records_was_delivered_is_forgotten_at_once() -> None:
    """A name refused (beyond `outcome_topics_per_hour`), its records dead-lettered: one a tree from a producer
    naming a spout per tree kept 1.4 KB in the service for each, for good."""
    log = OutcomeLog()
    for i in range(1000):
        log.sent(f"acker.outcomes.s{i}")
        log.failed(f"acker.outcomes.s{i}")
    assert log.starts(0) == {} and not log._streams


def test_metadata_not_ours_reads_as_nothing_to_read_back() -> None:
    assert parse_metadata(None) == parse_metadata("") == {}
    assert parse_metadata("written by another tool") == {}
    assert parse_metadata(json.dumps({"v": 99, "outcomes": {}})) == {}
    assert parse_metadata(json.dumps({"v": 1, "outcomes": {"t": "x"}})) == {}


@pytest.mark.parametrize("where", ["[0, 1e999]", "[Infinity, 0]", "[NaN, 0]", '"12"', "[0.9, 5.5]", "[-3, 5]",
                                   "[0, -1]", "[true, 5]", '["1", 5]', "[1, 2, 3]"])  # fmt: skip
def test_metadata_with_a_start_that_is_not_two_counts_reads_as_nothing(where: str) -> None:
    """``1e999`` raised OverflowError out of the service's read-back, which stopped it at every start while the
    commit stood (no new commit could replace it); the others were read as starts the service never wrote."""
    assert parse_metadata(f'{{"v": 1, "outcomes": {{"t": {where}, "u": [1, 2]}}}}') == {}
    assert parse_metadata('{"v": 1, "outcomes": {"t": [0, 0], "u": [1, 2]}}') == {"t": (0, 0), "u": (1, 2)}


def test_commit_metadata_nested_past_pythons_stack_is_not_understood_rather_than_raised() -> None:
    """Anyone who may commit the acker group's offsets can write it (4 KB): its RecursionError stopped the recovery
    at every assignment."""
    assert parse_metadata('{"v": 1, "outcomes": ' + "[" * 3000) == {}
