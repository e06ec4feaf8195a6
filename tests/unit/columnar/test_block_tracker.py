"""The columnar tracker decides exactly what the reference tracker decides (differential tests)."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acker.columnar import BlockTracker, MessageBlock
from acker.columnar import _kernels as k
from acker.columnar.block import RecordSpans, join_msg_id, split_msg_id
from acker.columnar.tracker import _MIN_CAPACITY, _ladder, _table_capacity
from acker.core import TICK, Ack, Init, Message, Outcome, Tracker, TrackerConfig
from acker.core.ids import IdGenerator
from acker.workload import WorkloadSpec, generate
from tests.strategies import raw_messages, scenarios, tracker_configs


def _reference(config: TrackerConfig, messages: list[Message]) -> tuple[list[list[Outcome]], Tracker]:
    tracker = Tracker(config)
    return [sorted(tracker.handle(m), key=repr) for m in messages], tracker


def _columnar(
    config: TrackerConfig, messages: list[Message], cuts: list[int], ahead: int = k.AHEAD
) -> tuple[list[list[Outcome]], BlockTracker]:
    tracker = BlockTracker(config, prefetch_ahead=ahead, prefetch_from_bytes=0)
    per_message: list[list[Outcome]] = [[] for _ in messages]
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(messages)), len(messages)]
    for start, end in itertools.pairwise(bounds):
        block = MessageBlock.from_messages(messages[start:end])
        result = tracker.process(block)
        # The room the block was given for burials was enough: no tombstone set is past half full.
        assert int(tracker._tomb_counts.max()) <= tracker._tombs.shape[1] // 2
        for index, outcome in zip(result.index.tolist(), result.to_outcomes(), strict=True):
            per_message[start + index].append(outcome)
    return [sorted(o, key=repr) for o in per_message], tracker


def _assert_same(config: TrackerConfig, messages: list[Message], cuts: list[int], ahead: int = k.AHEAD) -> None:
    want, ref = _reference(config, messages)
    got, fast = _columnar(config, messages, cuts, ahead)
    assert got == want
    assert fast.counters == ref.counters
    assert fast.pending == ref.pending


@settings(max_examples=500)
@given(tracker_configs, raw_messages, st.lists(st.integers(0, 120), max_size=4), st.sampled_from([k.AHEAD, 0, 1]))
def test_same_decisions_on_raw_traffic(
    config: TrackerConfig, messages: list[Message], cuts: list[int], ahead: int
) -> None:
    """Whatever the prefetch distance (0: none): a prefetch reads nothing the loop's decisions depend on."""
    _assert_same(config, messages, cuts, ahead)


@settings(max_examples=100)
@given(scenarios(fail_rate=0.1), st.lists(st.integers(0, 200), max_size=4))
def test_same_decisions_on_pipelines(case, cuts: list[int]) -> None:  # type: ignore[no-untyped-def]
    _, arrivals = case
    _assert_same(TrackerConfig(), [m for m, _ in arrivals], cuts)


def test_same_decisions_on_a_large_workload_with_growth_and_shrink() -> None:
    workload = generate(WorkloadSpec(trees=30_000, fail_rate=0.02, drop_rate=0.02, window=3000, seed=5))
    rng = random.Random(5)
    cuts = sorted(rng.sample(range(len(workload.messages)), 40))
    _assert_same(TrackerConfig(), workload.messages, cuts)


def test_many_pending_trees_then_expiry_frees_the_table() -> None:
    gen = IdGenerator(11)
    tracker = BlockTracker(TrackerConfig(buckets=2))
    inits: list[Message] = [Init(gen(), "s", f"t/0/{i}", gen()) for i in range(50_000)]
    for start in range(0, len(inits), 8192):
        tracker.process(MessageBlock.from_messages(inits[start : start + 8192]))
    assert tracker.pending == 50_000
    tomb_bytes = 3 * 4 * 8192 * 8  # buckets + 1 sets, sized for a block's worth of finished trees
    assert (tracker.table_bytes() - tomb_bytes) / tracker.pending <= 40 / 0.5  # 4/5 full at most, a third at least
    outcomes = tracker.process(MessageBlock.from_messages([Init(gen(), "s", "t/0/x", 1), TICK, TICK, TICK, TICK]))
    assert len(outcomes) == 50_001
    assert tracker.pending == 0
    tracker.process(MessageBlock.from_messages([]))
    assert tracker.capacity <= 2048  # shrinks back once empty


def test_a_tick_sizes_the_tombstone_sets_for_the_trees_it_may_expire_not_for_every_pending_one() -> None:
    """Each block with a tick sized every tombstone set for all pending trees, at half load: a service's sets held
    about 2.4 × its table at steady state (141 bytes a pending tree at 200,000, against 59 between ticks)."""
    ids = IdGenerator(1)
    tracker = BlockTracker(TrackerConfig(buckets=3))
    trees = [(ids(), ids()) for _ in range(200_000)]
    for s in range(0, len(trees), 8192):
        inits: list[Message] = [Init(a, "s", f"t/0/{i}", v) for i, (a, v) in enumerate(trees[s : s + 8192], s)]
        tracker.process(MessageBlock.from_messages(inits))
    assert tracker.table_bytes() / tracker.pending <= 63
    tracker.process(MessageBlock.from_messages([TICK]))  # nothing due: the trees are one tick old
    assert tracker.table_bytes() / tracker.pending <= 63
    tracker.process(MessageBlock.from_messages([TICK, TICK]))  # all due on the second: buried at once
    assert (tracker.pending, tracker.counters.nacked_timeout) == (0, 200_000)
    assert int(tracker._tomb_counts.max()) <= tracker._tombs.shape[1] // 2


def test_updates_before_their_inits_grow_the_table_within_a_block() -> None:
    # The table is sized for a block's inits; updates that come before their tree's init open entries too, and the
    # compiled loop stops to let the table grow, then goes on where it stopped. The first block holds 10,000 such
    # entries and 2,000 inits; the second decides most trees and opens 10,000 more.
    gen = IdGenerator(13)
    trees = [(gen(), gen()) for _ in range(20_000)]
    acks: list[Message] = [Ack(anchor, edge) for anchor, edge in trees]
    inits: list[Message] = [Init(anchor, "s", f"t/0/{i}", edge) for i, (anchor, edge) in enumerate(trees)]
    messages = acks[:10_000] + inits[:5_000] + acks[10_000:] + inits[5_000:]
    _assert_same(TrackerConfig(), messages, [12_000])
    got, tracker = _columnar(TrackerConfig(), messages, [12_000])
    assert sum(map(len, got)) == 20_000
    assert tracker.pending == 0


def test_the_loop_resumes_exactly_where_a_full_table_stopped_it() -> None:
    # Blocks of several records, ticks, a high-water mark, and windows of the stream shuffled so that many acks come
    # before their tree's init and open entries: the table fills mid-block over and over, and each time the loop
    # resumes after the growth with its inits, records and outcome rows part-way. Same decisions as the reference.
    resumed: list[tuple[int, ...]] = []
    process = BlockTracker._process

    def recording(tracker: BlockTracker, *args: Any) -> int:
        stop = process(tracker, *args)
        resumed.append(tuple(int(c) for c in args[-1]))  # the cursor: message, inits, records, outcome rows
        return stop

    rng = random.Random(21)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BlockTracker, "_process", recording)
        for seed in range(6):
            spec = WorkloadSpec(trees=3000, fail_rate=0.05, drop_rate=0.02, window=2000, tick_every=4000, seed=seed)
            messages = generate(spec).messages
            window = 3000
            for start in range(0, len(messages), window):
                part = messages[start : start + window]
                rng.shuffle(part)
                messages[start : start + window] = part
            config = TrackerConfig(buckets=3, high_water=rng.choice([None, 1500]), relocate_on_update=seed % 2 == 1)
            want, ref = _reference(config, messages)
            tracker = BlockTracker(config)
            got: list[list[Outcome]] = [[] for _ in messages]
            start = 0
            while start < len(messages):
                end = min(len(messages), start + rng.randint(500, 12_000))
                cuts = sorted(rng.sample(range(1, end - start), min(5, end - start - 1)))
                lengths = [b - a for a, b in itertools.pairwise([0, *cuts, end - start])]
                spans = RecordSpans.of(lengths, list(range(len(lengths))), [1] * len(lengths))
                result = tracker.process_records(MessageBlock.from_messages(messages[start:end]), spans)
                for index, outcome in zip(result.index.tolist(), result.to_outcomes(), strict=True):
                    got[start + index].append(outcome)
                start = end
            assert [sorted(o, key=repr) for o in got] == want
            assert tracker.counters == ref.counters
            assert tracker.pending == ref.pending
    stopped = [c for c in resumed if c[0] and c[1] and c[2] and c[3]]
    assert stopped, "no stop part-way through inits, records and outcome rows: the test lost its point"


def test_same_decisions_across_the_wrap_of_the_16_bit_tick_stamps() -> None:
    # Entries keep the low 16 bits of their tick: start just before 65,536 ticks so that trees open before the wrap
    # and expire, or are decided, after it.
    workload = generate(WorkloadSpec(trees=3000, fail_rate=0.05, drop_rate=0.05, window=500, tick_every=400, seed=9))
    messages = [TICK] * 65_530 + workload.messages
    _assert_same(TrackerConfig(buckets=3), messages, [65_530, 70_000, 80_000])


_RUNGS = list(itertools.accumulate(range(60), lambda c, _: _ladder(c, 1.25), initial=_MIN_CAPACITY))


@given(st.sampled_from(_RUNGS), st.integers(0, 20_000_000))
def test_the_table_stays_on_its_ladder_between_two_fifths_and_four_fifths_full(current: int, needed: int) -> None:
    want = _table_capacity(current, needed)
    assert want in _RUNGS
    assert needed <= want * 0.8  # room, at load ≤ 4/5
    assert _table_capacity(want, needed) == want  # settled: the next block with as many entries keeps it
    if want > current:  # grew to the lowest rung with room: at least 0.64 full, 63 bytes a tree at 40 a slot
        assert needed > _RUNGS[_RUNGS.index(want) - 1] * 0.8
    if want != current and want > 4 * _MIN_CAPACITY:
        assert needed / want >= 0.8 / 1.25 / 1.25 - 0.01  # shrinking leaves it about 0.51 full or more
    if want == current and current > _MIN_CAPACITY:
        assert needed >= current * 0.8 / 1.25**3  # kept while 0.41 full or more


@given(st.text(max_size=12) | st.sampled_from(["t/0/0", "t/0/00", "t/12/34", "a/-1", "x/١٢"]))
def test_message_ids_round_trip(msg_id: str) -> None:
    source, offset = split_msg_id(msg_id)
    assert join_msg_id(source, offset) == msg_id
    assert offset >= -1


def test_block_round_trip() -> None:
    messages = generate(WorkloadSpec(trees=50, fail_rate=0.1)).messages
    assert MessageBlock.from_messages(messages).to_messages() == messages
    assert MessageBlock.from_messages(messages).kinds.dtype == np.uint8


def test_oldest_needed_and_latency_in_ms() -> None:
    tracker = BlockTracker()
    assert tracker.oldest_needed(100) == 100  # nothing pending: resume where reading stopped
    tracker.process(MessageBlock.from_messages([Ack(5, 7)]), record_offset=10, timestamp_ms=1_000)
    tracker.process(MessageBlock.from_messages([Init(6, "s", "t/0/1", 9)]), 12, timestamp_ms=(1 << 32) - 1_000)
    assert tracker.oldest_needed(20) == 10
    result = tracker.process(MessageBlock.from_messages([Init(5, "s", "t/0/0", 7)]), 13, 2_500)
    assert result.to_outcomes()[0].msg_id == "t/0/0" and result.latency_ms.tolist() == [0]  # from its own init
    # Tree 5 is decided, but a replay from 12 would see its init without its ack: the offset stays at 10 as long as
    # the tree is remembered (buckets ticks), so that a replay decides it again from all of its messages.
    assert tracker.oldest_needed(20) == 10
    result = tracker.process(MessageBlock.from_messages([Ack(6, 9)]), record_offset=40, timestamp_ms=(1 << 32) + 500)
    assert result.latency_ms.tolist() == [1_500]  # ms kept modulo 2**32, across the wrap
    # A completing record stamped before the init's (another producer, another linger) took no time, not 49 days.
    tracker.process(MessageBlock.from_messages([Init(8, "s", "t/0/2", 3)]), 41, timestamp_ms=5_000)
    result = tracker.process(MessageBlock.from_messages([Ack(8, 3)]), record_offset=42, timestamp_ms=4_990)
    assert result.latency_ms.tolist() == [0]
    assert tracker.oldest_needed(43) == 10
    tracker.process(MessageBlock.from_messages([TICK, TICK, TICK]), record_offset=43)
    assert tracker.oldest_needed(44) == 44  # the tombstones expired: nothing is needed any more


def test_oldest_needed_across_the_32_bit_wrap() -> None:
    tracker = BlockTracker()
    start = (1 << 32) - 3
    tracker.process(MessageBlock.from_messages([Ack(5, 7)]), record_offset=start)
    assert tracker.oldest_needed(start + 10) == start


def test_a_tombstone_keeps_the_whole_offset_of_its_opening_record_across_the_32_bit_wrap() -> None:
    """A slot keeps the low 32 bits of the record that opened its tree; a tombstone set keeps the whole offset of
    the oldest, rebuilt when the tree is decided by a record past the wrap."""
    tracker = BlockTracker(TrackerConfig(buckets=2))
    start = (2 << 32) - 3  # its low 32 bits are not the offset
    tracker.process(MessageBlock.from_messages([Init(5, "s", "t/0/0", 7)]), record_offset=start)
    tracker.process(MessageBlock.from_messages([Init(6, "s", "t/0/1", 9)]), record_offset=start + 1)
    tracker.process(MessageBlock.from_messages([Ack(6, 9)]), record_offset=start + 4)  # past the wrap
    tracker.process(MessageBlock.from_messages([TICK]), record_offset=start + 5)
    tracker.process(MessageBlock.from_messages([Ack(5, 7)]), record_offset=start + 6)  # decided a tick later
    assert tracker.oldest_needed(start + 10) == start  # tree 5's set: the oldest of all
    tracker.process(MessageBlock.from_messages([TICK]), record_offset=start + 7)  # tree 6's set expires
    assert tracker.oldest_needed(start + 10) == start
    tracker.process(MessageBlock.from_messages([TICK]), record_offset=start + 8)  # and tree 5's
    assert tracker.oldest_needed(start + 10) == start + 10


def test_message_ids_that_are_not_coordinates_cost_memory_only_while_pending() -> None:
    """Each such id is a source of its own; once decided, its source is dropped (and the pending ones renumbered,
    their outcomes still naming them right), so a long-lived tracker does not grow with them."""
    gen = IdGenerator(12)
    ids = [f"order-{i}" for i in range(30_000)]
    trees = [(gen(), gen()) for _ in ids]
    tracker = BlockTracker()
    want: list[Message] = [Init(a, "s", m, v) for (a, v), m in zip(trees, ids, strict=True)]
    reference = Tracker()
    for message in want:
        reference.handle(message)
    tracker.process(MessageBlock.from_messages(want))
    acks: list[Message] = [Ack(a, v) for a, v in trees]
    decided = []
    for start in range(0, len(acks), 1000):  # many blocks: compaction runs between them
        block = acks[start : start + 1000]
        got = tracker.process(MessageBlock.from_messages(block)).to_outcomes()
        assert sorted(got, key=repr) == sorted((o for m in block for o in reference.handle(m)), key=repr)
        decided += got
    assert sorted(o.msg_id for o in decided) == sorted(ids)
    assert tracker.pending == 0
    assert len(tracker._sources) <= 4096 + 4 * 1000  # not one per tree ever seen


@given(st.lists(st.integers(0, 9), max_size=30))
def test_renumber_is_unique_with_the_inverse(values: list[int]) -> None:
    used, local = k.renumber(np.array(values, np.int64), 10)
    want_used, want_local = np.unique(np.array(values, np.int64), return_inverse=True)
    assert used.tolist() == want_used.tolist() and local.tolist() == want_local.reshape(-1).tolist()


@given(tracker_configs, raw_messages, st.sampled_from([(1 << 32) - 40, (3 << 32) - 7, 1 << 40]))
def test_offsets_anywhere_give_the_same_decisions_and_recovery_offsets(
    config: TrackerConfig, messages: list[Message], base: int
) -> None:
    """Slots keep the low 32 bits of offsets and tombstone sets rebuild whole ones: records carried at offsets across
    a 32-bit wrap (or far beyond) are decided, and held for recovery, exactly as the same records at 0, 1, 2, …"""
    near, far = BlockTracker(config), BlockTracker(config)
    for offset, message in enumerate(messages):
        block = MessageBlock.from_messages([message])
        here = near.process(block, record_offset=offset, timestamp_ms=offset)
        there = far.process(block, record_offset=base + offset, timestamp_ms=offset)
        assert there.to_outcomes() == here.to_outcomes()
        assert far.oldest_needed(base + offset + 1) - base == near.oldest_needed(offset + 1)
