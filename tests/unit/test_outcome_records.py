"""`acker.service.outcome_records`: what a group of acker records decided, cut into outcome-topic records (one spout
each, at most OUTCOMES_PER_RECORD outcomes and OUTCOME_RECORD_MAX_BYTES), each naming the acker records that decided
its first and last outcome."""

from __future__ import annotations

import numpy as np
import pytest

from acker import fail_reasons
from acker.columnar.block import Code, Kind, MessageBlock, OutcomeBlock, RecordSpans
from acker.columnar.tracker import BlockTracker
from acker.core.ids import partition_of
from acker.core.messages import Ack, Fail, Init, Message
from acker.service import failing_inits, outcome_records
from acker.wire import (
    OUTCOME_RECORD_MAX_BYTES,
    OUTCOMES_PER_RECORD,
    WireError,
    check_block,
    decode_outcomes,
    encode_batch,
    encode_outcome_rows,
    parse_batch,
    split_outcomes,
)


def test_outcomes_are_cut_per_spout_in_decision_order_and_name_their_deciding_records() -> None:
    rng = np.random.default_rng(3)
    n = OUTCOMES_PER_RECORD + 40
    source = np.zeros(n, np.int32)
    source[rng.choice(n, 25, replace=False)] = 1  # a few of the second spout's, scattered among the first's
    records = RecordSpans.of([n // 4, n // 4, n // 4, n - 3 * (n // 4)], [100, 105, 107, 120], [0, 0, 0, 0])
    outcomes = OutcomeBlock(
        index=np.arange(n, dtype=np.int64),  # outcome j decided by message j of the block
        code=np.where(rng.random(n) < 0.9, Code.ACK, Code.TIMEOUT).astype(np.uint8),
        anchor=rng.integers(1, 2**62, n, dtype=np.int64),
        source=source,
        offset=np.arange(n, dtype=np.int64),
        latency_ticks=np.zeros(n, np.int64),
        latency_ms=rng.integers(0, 1000, n, dtype=np.int64),
        sources=[("first", "in/0"), ("second", "in/1")],
    )

    encoded = outcome_records(3, records, outcomes)

    assert [(e.spout, len(decode_outcomes(e.value).anchors)) for e in encoded] == [
        ("first", OUTCOMES_PER_RECORD),
        ("first", n - 25 - OUTCOMES_PER_RECORD),
        ("second", 25),
    ]
    for spout, local in (("first", 0), ("second", 1)):
        rows = np.flatnonzero(source == local)
        mine = [e for e in encoded if e.spout == spout]
        assert [a for e in mine for a in decode_outcomes(e.value).anchors] == outcomes.anchor[rows].tolist()
        start = 0
        for e in mine:
            decoded = decode_outcomes(e.value)
            first_row, last_row = rows[start], rows[start + len(decoded.anchors) - 1]
            assert e.first == records.offsets[records.record_of(int(first_row))]
            assert e.last == records.offsets[records.record_of(int(last_row))]
            assert (decoded.acker_partition, decoded.acker_offset) == (3, e.last)
            start += len(decoded.anchors)
    assert (encoded[0].first, encoded[0].last, encoded[1].first) == (100, 120, 120)  # cut within the last record


def test_a_spout_whose_trees_come_from_many_sources_gets_one_record_not_one_per_source() -> None:
    """Sources are (spout, message-id prefix): a spout reading many partitions, or whose message ids have no
    ``/<offset>`` (each its own source), still gets its outcomes of a group in one record, in decision order."""
    n = 12
    sources = [("s", f"in/{p}") for p in range(3)] + [("t", "key-a"), ("s", "key-b")]
    source = np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1], np.int32)
    outcomes = OutcomeBlock(
        index=np.arange(n, dtype=np.int64),
        code=np.full(n, Code.ACK, np.uint8),
        anchor=np.arange(1, n + 1, dtype=np.int64),
        source=source,
        offset=np.where(np.isin(source, [3, 4]), -1, np.arange(n)).astype(np.int64),
        latency_ticks=np.zeros(n, np.int64),
        latency_ms=np.zeros(n, np.int64),
        sources=sources,
    )

    encoded = outcome_records(0, RecordSpans.of([n], [7], [0]), outcomes)

    assert [e.spout for e in encoded] == ["s", "t"]
    s = decode_outcomes(encoded[0].value)
    expected = [i for i in range(n) if sources[source[i]][0] == "s"]
    assert s.anchors == [i + 1 for i in expected]
    assert s.msg_ids == [sources[source[i]][1] if source[i] == 4 else f"{sources[source[i]][1]}/{i}" for i in expected]
    assert decode_outcomes(encoded[1].value).msg_ids == ["key-a", "key-a"]


def test_long_message_ids_are_cut_by_bytes_too_in_order_and_every_record_names_its_deciding_records() -> None:
    """Message ids that are not record coordinates are written whole: 16,384 of them would pass the broker's 1 MB.
    Records are cut so that none passes OUTCOME_RECORD_MAX_BYTES, and together they hold every outcome in order."""
    n = OUTCOMES_PER_RECORD
    sources = [("s", f"order-service/request/{i:08d}-6f1c2a9e-1b7d-4c55-9a0e-2f9d1c3b7a") for i in range(n)]
    records = RecordSpans.of([n // 2, n - n // 2], [10, 11], [0, 0])
    outcomes = OutcomeBlock(
        index=np.arange(n, dtype=np.int64),
        code=np.full(n, Code.TIMEOUT, np.uint8),
        anchor=np.arange(1, n + 1, dtype=np.int64),
        source=np.arange(n, dtype=np.int32),  # each id its own source
        offset=np.full(n, -1, np.int64),
        latency_ticks=np.zeros(n, np.int64),
        latency_ms=np.zeros(n, np.int64),
        sources=sources,
    )

    encoded = outcome_records(0, records, outcomes)

    assert len(encoded) > 1 and all(len(e.value) <= OUTCOME_RECORD_MAX_BYTES for e in encoded)
    decoded = [decode_outcomes(e.value) for e in encoded]
    assert [m for d in decoded for m in d.msg_ids] == [source for _, source in sources]
    start = 0
    for e, d in zip(encoded, decoded, strict=True):
        assert (e.first, e.last) == (10 if start < n // 2 else 11, 10 if start + len(d.anchors) <= n // 2 else 11)
        start += len(d.anchors)


def test_the_inits_of_a_rejected_record_are_failed_once_where_they_name_a_tree() -> None:
    block = MessageBlock.from_messages([Ack(9, 1), Init(4, "s", "in/0/7", 3), Ack(4, 3), Init(5, "t", "in/1/2", 1)])
    block.anchors[3] = 0  # an init that names no tree (what made the record invalid)
    block.kinds[2] = Kind.OK
    failing = failing_inits(block)
    assert failing is not None
    assert failing.to_messages() == [Fail(4), Init(4, "s", "in/0/7", 3)]
    outcomes = BlockTracker().process(failing)
    assert [Code(c) for c in outcomes.code.tolist()] == [Code.FAILED] and outcomes.anchor.tolist() == [4]
    assert [outcomes.sources[s] for s in outcomes.source.tolist()] == [("s", "in/0")] and outcomes.offset.tolist() == [
        7
    ]
    replayed = BlockTracker()  # after a restart, the tree was read back as decided: no second outcome
    replayed.set_decided(np.array([4], np.int64))
    assert len(replayed.process(failing)) == 0
    assert failing_inits(MessageBlock.from_messages([Ack(9, 1)])) is None


def test_a_rejected_record_fails_a_tree_whose_childrens_acks_came_first_and_cancel_its_init() -> None:
    """A spout's record whose emit function raised after emitting a child: ``Fail(A)`` then ``Init(A)``, with the
    child's edge. The child's ack, in a bolt's record placed by the acker topic's new partition count, is applied
    first; the spout's record, placed by the old count, is rejected for another tree's init. In place of it the tree
    must fail: an init applied before the fail cancels the ack and acks a tree whose record never emitted the rest."""
    a, b, child = 8, 6, 111
    assert partition_of(a, 2) == partition_of(a, 4) == partition_of(b, 2) == 0 and partition_of(b, 4) == 2
    tracker = BlockTracker()
    assert len(tracker.process(MessageBlock.from_messages([Ack(a, child)]))) == 0
    record = MessageBlock.from_messages([Init(b, "s", "src/0/1", 5), Fail(a), Init(a, "s", "src/0/0", child)])
    with pytest.raises(WireError) as rejected:
        check_block(record, 0, 4)
    assert rejected.value.reason == "wrong-partition"
    failing = failing_inits(record)
    assert failing is not None
    outcomes = tracker.process(failing)
    assert sorted(zip(outcomes.anchor.tolist(), [Code(c) for c in outcomes.code.tolist()], strict=True)) == [
        (b, Code.FAILED),
        (a, Code.FAILED),
    ]


def test_a_record_rejected_for_a_spout_name_still_fails_the_inits_of_its_valid_spouts() -> None:
    """A spout name that cannot name a topic rejects the record, found when it is checked (not parsed), so that the
    trees of the record's other spouts get their FAILED outcome; the bad spout's have no topic to get one on."""
    for bad in ("bad spout!", "dlq"):  # nor a reserved one's: its outcome topic is a Spark job's own
        messages: list[Message] = [Init(5, "good", "src/0/1", 3), Init(7, bad, "x/0/1", 1)]
        block = parse_batch(encode_batch(MessageBlock.from_messages(messages)))
        with pytest.raises(WireError) as raised:
            check_block(block, 0, 0)
        assert raised.value.reason == "bad-spout"
        failing = failing_inits(block)
        assert failing is not None and failing.to_messages() == [Fail(5), Init(5, "good", "src/0/1", 3)]


def test_a_record_too_large_for_its_topic_splits_in_halves_that_keep_its_order_and_its_acker_coordinates() -> None:
    rows = [("ACK", 11, "src/0/1", 5), ("TIMEOUT", -12, "src/1/9", 2000), ("FAILED", 13, "other", 7)]
    whole = encode_outcome_rows("words", rows, acker_partition=3, acker_offset=41)
    halves = split_outcomes(whole)
    assert halves is not None
    decoded = [decode_outcomes(h) for h in halves]
    assert [(d.spout, d.acker_partition, d.acker_offset) for d in decoded] == [("words", 3, 41)] * 2
    got = [row for d in decoded for row in zip(d.outcomes, d.anchors, d.msg_ids, d.latency_ms, strict=True)]
    assert got == rows
    assert split_outcomes(halves[0]) is None  # one outcome: nothing to split


def test_failed_outcomes_carry_the_reasons_kept_for_their_trees_by_message_id() -> None:
    """`acker.fail_reasons`: a reason read beside a fail goes with its tree's FAILED outcome, once, by message id;
    other outcomes, and a record without a reason, carry none."""
    block = MessageBlock.from_messages(
        [Init(1, "s", "in/0/5", 1), Fail(1), Init(2, "s", "in/0/6", 2), Fail(2), Init(3, "s", "in/0/7", 3), Ack(3, 3)]
    )
    outcomes = BlockTracker().process(block)
    kept = fail_reasons.Kept()
    kept.add({1: "bolt b: ValueError: x", 3: "a fail of an acked tree"})
    [encoded] = outcome_records(0, RecordSpans.of([len(block)], [40], [0]), outcomes, kept)
    assert encoded.reasons is not None
    assert fail_reasons.decode(encoded.reasons) == {"in/0/5": "bolt b: ValueError: x"}
    assert len(kept) == 1  # tree 3 was acked: its reason is not taken
    [again] = outcome_records(0, RecordSpans.of([len(block)], [40], [0]), outcomes, kept)
    assert again.reasons is None


def test_a_burst_of_fails_goes_in_records_whose_headers_say_every_reason() -> None:
    """A header holds `fail_reasons.PER_RECORD` reasons (and `HEADER_MAX_BYTES`): an outcome record of 131 FAILED
    said 100 of them, and the other records' dead letters said no reason. Cut further, in order, each saying all of
    its own; the acks among them keep their places."""
    count = 3 * fail_reasons.PER_RECORD + 31
    messages: list[Message] = []
    for tree in range(1, count + 1):
        messages += [Init(tree, "s", f"in/0/{tree}", tree), Fail(tree) if tree % 5 else Ack(tree, tree)]
    block = MessageBlock.from_messages(messages)
    outcomes = BlockTracker().process(block)
    kept = fail_reasons.Kept()
    kept.add({tree: f"bolt b: ValueError: tree {tree} " + "x" * 100 for tree in range(1, count + 1) if tree % 5})
    encoded = outcome_records(0, RecordSpans.of([len(block)], [40], [0]), outcomes, kept)
    said: dict[str, str] = {}
    ids: list[str] = []
    for record in encoded:
        assert record.reasons is not None and len(record.reasons) <= fail_reasons.HEADER_MAX_BYTES
        said.update(fail_reasons.decode(record.reasons))
        ids += decode_outcomes(record.value).msg_ids
    assert len(encoded) >= 4 and ids == [f"in/0/{tree}" for tree in range(1, count + 1)]
    assert said == {f"in/0/{t}": f"bolt b: ValueError: tree {t} " + "x" * 100 for t in range(1, count + 1) if t % 5}
