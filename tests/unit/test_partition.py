"""Per-partition state: the tick chain, tick scheduling, and the recovery offset a replay starts from."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import assume, event, given
from hypothesis import strategies as st

from acker.columnar import MessageBlock
from acker.columnar.block import Kind, RecordSpans
from acker.core import TICK, Ack, Acked, Init, Message, Nacked, NackReason, ResetTimeout, TrackerConfig
from acker.partition import NO_TICK, PartitionState, encode_tick
from acker.wire import decode_batch
from tests.strategies import Scenario, raw_messages, scenarios, tracker_configs


def _tick(after: int) -> MessageBlock:
    return decode_batch(encode_tick(after))


def _state() -> PartitionState:
    return PartitionState(0, TrackerConfig(buckets=2), tick_interval_ms=1000, now_ms=0)


def test_ticks_that_do_not_continue_the_chain_are_ignored() -> None:
    state = _state()
    state.apply(0, 10, MessageBlock.from_messages([Init(5, "s", "t/0/1", 9)]))
    state.apply(1, 1000, _tick(NO_TICK))  # the first tick read is accepted whatever its link
    state.apply(2, 1001, _tick(NO_TICK))  # a second writer's duplicate: ignored
    assert state.tracker.tick_count == 1 and state.ignored_ticks == 1
    out = state.apply(3, 2000, _tick(1))  # continues the chain: the tree expires (buckets = 2)
    assert state.tracker.tick_count == 2
    assert out.to_outcomes()[0].msg_id == "t/0/1"
    assert out.latency_ms.tolist() == [1990]


def test_a_record_of_several_ticks_moves_the_clock_one_step_at_most() -> None:
    """A record (a foreign producer's) holding ticks linked to the last tick and then to its own offset: each
    continued the chain, and one record timed out every pending tree (buckets = 2 here: two steps)."""
    state = _state()
    state.apply(0, 10, _tick(NO_TICK))
    state.apply(1, 20, MessageBlock.from_messages([Init(5, "s", "t/0/1", 9)]))
    forged = MessageBlock.concat([_tick(0), _tick(2), _tick(2)])
    out = state.apply(2, 1000, forged)
    assert state.tracker.tick_count == 2 and state.ignored_ticks == 2
    assert out.to_outcomes() == []  # the tree is still pending: it needs a second step


def test_a_tick_is_due_once_per_interval_and_one_at_a_time() -> None:
    state = _state()
    assert state.tick_due(999) is None
    assert state.tick_due(1000) == NO_TICK
    state.tick_sent(1000)
    assert state.tick_due(5000) is None  # in flight
    state.tick_delivered(7)
    assert state.tick_due(3999) is None  # delivered, not read back yet
    state.apply(7, 1500, _tick(NO_TICK))
    assert state.tick_due(2499) is None
    assert state.tick_due(2500) == 7
    state.tick_sent(2500)
    state.tick_delivered(None)  # failed: written again when due
    assert state.tick_due(2500) == 7
    state.tick_sent(2500)
    state.tick_delivered(9)  # delivered, but never read back (the log was truncated, say)
    assert state.tick_due(5499) is None
    assert state.tick_due(5500) == 7  # after three intervals ticking starts again


def test_a_tick_stamped_by_a_clock_behind_this_one_does_not_bring_the_next_tick_early() -> None:
    """A previous owner's last tick stamped at 2000 (its clock 800 ms behind), read by a new owner that took the
    partition at 2500 by its own clock: the next tick is due an interval after 2500, not after 2000. The same for
    this instance's own tick stamped by a broker behind it (LogAppendTime): an interval after it was written."""
    state = PartitionState(0, TrackerConfig(buckets=2), tick_interval_ms=1000, now_ms=2500)
    state.apply(4, 2000, _tick(NO_TICK))
    assert state.tick_due(3000) is None and state.tick_due(3499) is None
    assert state.tick_due(3500) == 4
    state.tick_sent(3500)
    state.tick_delivered(5)
    state.apply(5, 3300, _tick(4))  # the broker's stamp, 200 ms behind this instance's clock
    assert state.tick_due(4499) is None
    assert state.tick_due(4500) == 5
    state.tick_sent(4500)
    state.apply(6, 4300, _tick(5))  # read back before its delivery report (the usual order on a quiet partition)
    state.tick_delivered(6)
    assert state.tick_due(5499) is None
    assert state.tick_due(5500) == 6


def test_another_writers_tick_read_after_this_owner_took_the_partition_counts_from_when_it_was_read() -> None:
    """A previous owner still writing after it lost the partition (its session timed out unnoticed), its clock 800 ms
    behind: its tick, stamped 2700, is read here at 3500, after this owner took the partition at 2500. The next tick
    is due an interval after it was read, not after its stamp (800 ms early: trees expired before `T`)."""
    state = PartitionState(0, TrackerConfig(buckets=2), tick_interval_ms=1000, now_ms=2500)
    state.apply(4, 2700, _tick(NO_TICK), read_ms=3500)
    assert state.tick_due(3700) is None and state.tick_due(4499) is None
    assert state.tick_due(4500) == 4
    state.tick_sent(4500)
    state.tick_delivered(5)  # ours too counts from when it was read: it may have reached the log long after it was sent
    state.apply(5, 4400, _tick(4), read_ms=4700)
    assert state.tick_due(5699) is None and state.tick_due(5700) == 5


def test_another_writers_ticks_read_while_ours_is_in_flight_count_from_when_they_were_read() -> None:
    """Ours held up in flight (a leader change, retries) while a stale writer's ticks, written after it, continue the
    chain: dated from when ours was written, the second came an interval early, and a tree opened just before it
    was timed out 1.1 s after its init, not `timeout` (2 s here)."""
    state = PartitionState(0, TrackerConfig(buckets=3), tick_interval_ms=1000, now_ms=0)
    state.apply(0, 0, _tick(NO_TICK), read_ms=0)
    assert state.tick_due(1000) == 0
    state.tick_sent(1000)  # ours: no delivery report for a while
    state.apply(1, 1500, _tick(0), read_ms=1510)  # the other writer's, written at 1500
    state.apply(2, 2480, MessageBlock.from_messages([Init(7, "s", "t/0/1", 9)]), read_ms=2490)
    state.apply(3, 2500, _tick(1), read_ms=2510)  # the other writer's, written at 2500
    state.tick_delivered(4)
    state.apply(4, 1000, _tick(0), read_ms=2610)  # ours, at last: its link is stale, ignored
    assert state.ignored_ticks == 1
    assert state.tick_due(2620) is None and state.tick_due(3509) is None and state.tick_due(3510) == 3
    offset, now = 5, 3510
    while True:  # ticking on, ours read back at once: the tree expires no earlier than `timeout` after its init
        link = state.tick_due(now)
        if link is not None:
            state.tick_sent(now)
            state.tick_delivered(offset)
            expired = state.apply(offset, now, _tick(link), read_ms=now + 10).to_outcomes()
            offset += 1
            if expired:
                assert [o.msg_id for o in expired] == ["t/0/1"] and now - 2480 >= 2000
                return
        now += 10


def test_a_tick_stamped_by_a_clock_ahead_of_this_one_does_not_stop_the_ticks_until_that_time() -> None:
    """A previous owner's clock an hour ahead: its last tick's timestamp is taken as the moment it was seen here."""
    state = _state()
    state.apply(0, 3_600_000, _tick(NO_TICK))
    assert state.tick_due(2000) is None  # seen here at 2000
    assert state.tick_due(2999) is None and state.tick_due(3000) == 0


def test_the_recovery_offset_is_not_held_below_where_the_replay_started() -> None:
    """Outcome records read back may name any acker offset (another acker topic's partition of the same number,
    sharing the outcome topic): held at the lowest, the offset to commit went back before the replay's start."""
    state = _state()
    state.recover(np.array([77, 88], np.int64), until=1001, since=5)
    state.apply(1000, 0, _tick(NO_TICK))
    state.apply(1001, 0, MessageBlock.from_messages([Init(9, "s", "t/0/1", 3)]))
    assert state.recovery_offset() == 1000


def test_the_recovery_offset_is_not_held_below_the_replays_start_when_its_first_record_is_dead_lettered() -> None:
    """The hold was moved to the replay's start only by a record applied: a first record dead-lettered (`skip`)
    left it at the lowest offset read back, and the next owner replayed from there, before any tick."""
    state = _state()
    state.recover(np.array([77, 88], np.int64), until=1001, since=3)
    state.skip(100)
    state.apply(101, 0, _tick(NO_TICK))
    assert state.recovery_offset() == 100


def test_a_clock_stepped_back_does_not_stop_the_ticks_until_it_passes_this_instances_own_times_again() -> None:
    """Stepped back ten minutes soon after the partition was assigned (or a tick was written): the next tick is
    due an interval later by the new clock, not ten minutes later."""
    minutes = 60_000
    assigned = 600 * minutes
    state = PartitionState(0, TrackerConfig(buckets=3), tick_interval_ms=1000, now_ms=assigned)
    state.apply(0, assigned - 4000, _tick(NO_TICK))  # the previous owner's last tick
    assert state.tick_due(assigned + 500) is None
    stepped = assigned + 500 - 10 * minutes
    assert state.tick_due(stepped) is None and state.tick_due(stepped + 1000) == 0
    state.tick_sent(stepped + 1000)
    state.tick_delivered(1)  # never read back (the log truncated?): written again after 3 intervals
    back_again = stepped + 1000 - 10 * minutes
    assert state.tick_due(back_again) is None and state.tick_due(back_again + 3000) is None  # the last tick: now
    assert state.tick_due(back_again + 4000) == 0


def test_recovery_offset_covers_pending_and_recently_decided_trees() -> None:
    state = _state()
    assert state.recovery_offset() is None
    state.apply(0, 0, MessageBlock.from_messages([Init(5, "s", "t/0/1", 3)]))
    state.apply(1, 0, MessageBlock.from_messages([Ack(6, 4)]))  # opens tree 6 (its init comes later)
    state.apply(2, 0, MessageBlock.from_messages([Ack(5, 3)]))  # tree 5 decided
    assert state.recovery_offset() == 0  # a replay from 1 would see tree 5's ack without its init
    state.apply(3, 0, MessageBlock.from_messages([Init(6, "s", "t/0/2", 4)]))  # tree 6 decided
    assert state.recovery_offset() == 0
    state.apply(4, 0, _tick(NO_TICK))
    state.skip(5)  # a dead-lettered record
    assert state.position == 6 and state.recovery_offset() == 0
    state.apply(6, 0, _tick(4))  # buckets = 2: the decided trees are forgotten
    assert state.recovery_offset() == 6  # nothing needed: from the last tick applied, which anchors the chain


def test_recovery_starts_at_an_applied_tick_so_a_stray_tick_cannot_start_a_new_chain() -> None:
    state = _state()
    state.apply(0, 0, _tick(NO_TICK))  # applied
    state.apply(1, 0, MessageBlock.from_messages([Init(5, "s", "t/0/1", 3)]))  # pending from 1
    state.apply(2, 0, _tick(NO_TICK))  # a stray from a second writer: ignored
    state.apply(3, 0, _tick(0))  # applied
    assert state.ignored_ticks == 1
    # A replay from 1 would accept the stray at 2 as the head of its chain and ignore the tick at 3.
    assert state.recovery_offset() == 0
    replayer = _state()
    for offset, block in ((0, _tick(NO_TICK)), (1, None), (2, _tick(NO_TICK)), (3, _tick(0))):
        if block is not None:
            replayer.apply(offset, 0, block)
    assert replayer.tracker.tick_count == state.tracker.tick_count == 2


def test_ignored_ticks_are_removed_without_disturbing_inits() -> None:
    state = _state()
    state.apply(0, 0, _tick(NO_TICK))
    mixed = MessageBlock.from_messages([Init(5, "s", "t/0/1", 3)])
    block = MessageBlock(
        np.concatenate([mixed.kinds, _tick(99).kinds]),
        np.concatenate([mixed.anchors, [0]]),
        np.concatenate([mixed.values, [99]]),
        mixed.init_source,
        mixed.init_offset,
        mixed.sources,
    )
    state.apply(1, 0, block)
    assert state.ignored_ticks == 1 and state.tracker.pending == 1


@given(
    messages=raw_messages,
    cuts=st.lists(st.integers(0, 60), max_size=8),
    links=st.lists(st.sampled_from([NO_TICK, 10, 12, 14, 16]), min_size=60, max_size=60),
)
def test_records_applied_together_decide_as_records_applied_one_by_one(
    messages: list[Message], cuts: list[int], links: list[int]
) -> None:
    """The service applies many records per call; nothing it decides, counts or commits may depend on that."""
    assume(messages)
    bounds = sorted({0, len(messages), *(c for c in cuts if c <= len(messages))})
    records = []
    for r, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        block = MessageBlock.from_messages(messages[lo:hi])
        # Ticks carry a chain link, some of which continue the chain and some of which do not.
        block.values[block.kinds == Kind.TICK] = links[r]
        records.append((10 + 2 * r, 1000 * r, block))
    one_by_one, together = _state(), _state()
    single = [one_by_one.apply(offset, stamp, block) for offset, stamp, block in records]
    spans = RecordSpans.of([len(b) for *_, b in records], [o for o, *_ in records], [t for _, t, _ in records])
    grouped = together.apply_records(MessageBlock.concat([b for *_, b in records]), spans)

    assert [o for out in single for o in out.to_outcomes()] == grouped.to_outcomes()
    assert np.concatenate([out.latency_ms for out in single] or [np.zeros(0, np.int64)]).tolist() == (
        grouped.latency_ms.tolist()
    )
    assert one_by_one.tracker.counters == together.tracker.counters
    assert one_by_one.ignored_ticks == together.ignored_ticks
    assert one_by_one.recovery_offset() == together.recovery_offset()
    assert one_by_one.position == together.position


@dataclass(frozen=True)
class _FailoverLog:
    """A log of records for `recover`: messages in records of ``lengths``, each followed by a tick record (continuing
    the chain) where ``ticks`` says; trees ``told`` (indices into the anchors seen) decided up to record ``until``."""

    lengths: list[int]
    ticks: list[bool]
    told: list[int]
    until: int


failover_logs = st.builds(
    _FailoverLog,
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.booleans(), min_size=41, max_size=41),
    st.lists(st.integers(0, 59), min_size=1, max_size=4),
    st.integers(0, 6),  # early in the log: ticks and messages after it
)


@given(config=tracker_configs, messages=raw_messages, log=failover_logs, groups=st.lists(st.integers(1, 8), min_size=1))
def test_after_a_failover_records_applied_in_any_groups_decide_as_records_applied_one_by_one(
    config: TrackerConfig, messages: list[Message], log: _FailoverLog, groups: list[int]
) -> None:
    """While the trees a previous owner decided are known (`recover`), nothing may depend on how many records a
    call applies either: that knowledge was counted down per call, and an init sent again was late or opened a
    tree as the log was read in more or fewer calls."""
    bounds = [b for b in itertools.accumulate(log.lengths, initial=0) if b < len(messages)] + [len(messages)]
    blocks: list[MessageBlock] = []
    last = NO_TICK
    for r, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        blocks.append(MessageBlock.from_messages(messages[lo:hi]))
        blocks[-1].values[blocks[-1].kinds == Kind.TICK] = 10**6  # ticks among the messages: ignored
        if log.ticks[r]:
            blocks.append(_tick(last))
            last = 10 + 2 * (len(blocks) - 1)
    records = [(10 + 2 * r, block) for r, block in enumerate(blocks)]
    anchors = [m.anchor for m in messages if hasattr(m, "anchor")]
    assume(records and anchors)
    decided = np.array(sorted({anchors[i % len(anchors)] for i in log.told}), np.int64)

    def run(sizes: list[int]) -> tuple[list[tuple[int, Any]], Any, int | None]:
        state = PartitionState(0, config, tick_interval_ms=1000, now_ms=0)
        state.recover(decided, until=records[min(log.until, len(records) - 1)][0], since=10)
        decided_by: list[tuple[int, Any]] = []
        done = 0
        for size in itertools.cycle(sizes):
            part = records[done : done + size]
            spans = RecordSpans.of([len(b) for _, b in part], [o for o, _ in part], [0] * len(part))
            out = state.apply_records(MessageBlock.concat([b for _, b in part]), spans)
            decided_by += [(int(spans.offsets[spans.record_of(i)]), o)
                           for i, o in zip(out.index.tolist(), out.to_outcomes(), strict=True)]  # fmt: skip
            done += len(part)
            if done == len(records):
                return decided_by, state.tracker.counters, state.recovery_offset()
        raise AssertionError("unreachable")

    assert run(groups) == run([1])


def test_the_trees_told_of_are_known_as_long_whatever_the_records_applied_together() -> None:
    """Tree 42, decided by the previous owner up to offset 10 (buckets = 3), is known for three ticks after that
    record. Applied one record a call, its init sent again after those ticks opened a tree (timed out); applied in
    one call, the countdown started at the call's end and the init was ignored as late."""
    log = [(10, MessageBlock.from_messages([Ack(7, 1)])), (11, _tick(NO_TICK)), (12, _tick(11)), (13, _tick(12)),
           (14, MessageBlock.from_messages([Init(42, "s", "t/0/99", 5)])), (15, _tick(13)), (16, _tick(15)),
           (17, _tick(16))]  # fmt: skip

    def run(together: bool) -> tuple[list[Any], Any]:
        state = PartitionState(0, TrackerConfig(buckets=3), tick_interval_ms=1000, now_ms=0)
        state.recover(np.array([42], np.int64), until=10, since=10)
        if together:
            spans = RecordSpans.of([len(b) for _, b in log], [o for o, _ in log], [0] * len(log))
            return state.apply_records(MessageBlock.concat([b for _, b in log]), spans).to_outcomes(), state.tracker
        return [o for offset, b in log for o in state.apply(offset, 0, b).to_outcomes()], state.tracker

    (single, one), (grouped, other) = run(False), run(True)
    assert single == grouped == [Nacked(42, "s", "t/0/99", NackReason.TIMEOUT, 3)]
    assert one.counters == other.counters


def _straddling_log() -> list[tuple[int, MessageBlock]]:
    """Tree 10's ack comes before its init with a tick between them; tree 20, opened in between and kept alive by
    resets, holds the recovery offset back after tree 10's tombstone is dropped: a replay cuts tree 10 in two."""
    blocks = [
        _tick(NO_TICK),
        MessageBlock.from_messages([Ack(10, 7)]),
        _tick(0),
        MessageBlock.from_messages([Init(20, "s", "t/0/1", 5)]),
        MessageBlock.from_messages([Init(10, "s", "t/0/2", 7)]),  # tree 10 acked, by the record at offset 4
        _tick(2),
        MessageBlock.from_messages([ResetTimeout(20)]),
        _tick(5),  # buckets = 2: tree 10's tombstone is dropped
        MessageBlock.from_messages([ResetTimeout(20)]),
        _tick(7),
        MessageBlock.from_messages([Ack(10, 1)]),  # a late message of tree 10
        _tick(9),
        _tick(11),  # tree 20 times out
    ]
    return list(enumerate(blocks))


def test_a_replay_told_what_was_decided_gives_a_tree_cut_in_two_no_second_outcome() -> None:
    log = _straddling_log()
    original = _state()
    decided = {}
    for offset, block in log[:9]:
        for outcome in original.apply(offset, 0, block).to_outcomes():
            decided[outcome.anchor] = (offset, outcome)
    start = original.recovery_offset()
    assert start == 2  # after tree 10's ack: the replay sees its init alone
    assert decided == {10: (4, decided[10][1])}

    def replay(told: bool) -> list[tuple[int, object]]:
        state = _state()
        if told:  # what the service reads back: outcomes published for decisions after the offset
            state.recover(np.array([a for a, (at, _) in decided.items() if at >= start], np.int64), until=4, since=4)
        return [(offset, o) for offset, block in log[start:] for o in state.apply(offset, 0, block).to_outcomes()]

    rest = [(offset, o) for offset, block in log[9:] for o in original.apply(offset, 0, block).to_outcomes()]
    assert [o.anchor for _, o in rest] == [20]  # without a crash: only tree 20's timeout
    untold = replay(told=False)
    assert any(isinstance(o, Nacked) and o.anchor == 10 for _, o in untold)  # the cut tree times out: wrong
    assert replay(told=True) == rest  # no second outcome for tree 10, none republished, the same timeout of 20


def test_the_recovery_offset_keeps_up_with_steady_traffic() -> None:
    """Trees living across ticks, acks before inits, and late acks of trees long decided: the offset to commit stays
    within a few ticks of the read position (a rule holding it back for every forgotten tree opened before it, tried
    once, never let it advance at all)."""
    rng = random.Random(1)
    state = PartitionState(0, TrackerConfig(buckets=3), tick_interval_ms=1000, now_ms=0)
    offset, last_tick, anchor, behind = 0, NO_TICK, 0, []
    later: list[tuple[int, Message]] = []  # (record it is due in, message)
    for _ in range(120):
        for _ in range(20):  # records per tick
            for _ in range(20):  # new trees per record
                anchor += 1
                edge, child = rng.getrandbits(62) | 1, rng.getrandbits(62) | 1
                tree: list[Message] = [Init(anchor, "s", f"t/0/{anchor}", edge), Ack(anchor, edge ^ child)]
                tree.append(Ack(anchor, child))
                rng.shuffle(tree)  # an ack may come before the init
                later += [(offset + rng.randint(0, 30), m) for m in tree]  # over up to 1.5 ticks
                if rng.random() < 0.01:
                    later.append((offset + rng.randint(100, 140), Ack(anchor, 7)))  # long after its tree
            due = [m for at, m in later if at <= offset]
            later = [(at, m) for at, m in later if at > offset]
            state.apply(offset, 0, MessageBlock.from_messages(due))
            offset += 1
        state.apply(offset, 0, _tick(last_tick))
        last_tick, offset = offset, offset + 1
        behind.append(offset - (state.recovery_offset() or 0))
    assert max(behind[20:]) <= 8 * 21  # a few ticks of 21 records: trees live 1.5 ticks, tombstones 3


@given(
    config=tracker_configs.map(lambda c: TrackerConfig(c.buckets, None, c.relocate_on_update)),
    messages=raw_messages,
    cuts=st.lists(st.integers(0, 120), max_size=30),
    stop=st.integers(0, 60),
    strays=st.lists(st.booleans(), min_size=120, max_size=120),
)
def test_a_replay_from_the_recovery_offset_decides_the_trees_after_it_as_before(
    config: TrackerConfig, messages: list[Message], cuts: list[int], stop: int, strays: list[bool]
) -> None:
    """Wherever an owner stops, a new owner replaying from the offset it committed follows the same tick chain and
    decides every tree whose records all come from there on exactly as the first owner did (ticks are records of
    their own, as the service writes them; some are strays from a second writer). Trees with records on both sides
    are the documented exception (`acker.partition`), and so is high_water."""
    bounds = sorted({0, len(messages), *(c for c in cuts if c <= len(messages))})
    blocks: list[MessageBlock] = []
    for lo, hi in itertools.pairwise(bounds):
        data: list[Message] = []
        for message in messages[lo:hi]:
            if message == TICK:
                if data:
                    blocks.append(MessageBlock.from_messages(data))
                    data = []
                blocks.append(_tick(NO_TICK))
            else:
                data.append(message)
        if data:
            blocks.append(MessageBlock.from_messages(data))
    last = NO_TICK
    for offset, block in enumerate(blocks):
        if block.kinds[0] == Kind.TICK and len(block) == 1:
            if strays[offset % len(strays)] and last != NO_TICK:
                block.values[0] = NO_TICK  # a second writer's tick: ignored
            else:
                block.values[0], last = last, offset
    assume(blocks)
    stop = min(stop, len(blocks))
    original = PartitionState(0, config, tick_interval_ms=1000, now_ms=0)
    decided, start = [], None
    for offset, block in enumerate(blocks):
        if offset == stop:
            start = original.recovery_offset()
        decided.append(original.apply(offset, 0, block).to_outcomes())
    if stop == len(blocks):
        start = original.recovery_offset()
    start = 0 if start is None else start
    seen_before = {int(a) for block in blocks[:start] for a in block.anchors[block.kinds != Kind.TICK]}
    replayed = PartitionState(0, config, tick_interval_ms=1000, now_ms=0)
    for offset in range(start, len(blocks)):
        again = [o for o in replayed.apply(offset, 0, blocks[offset]).to_outcomes() if o.anchor not in seen_before]
        assert again == [o for o in decided[offset] if o.anchor not in seen_before]


@given(
    config=tracker_configs.map(lambda c: TrackerConfig(c.buckets, None, c.relocate_on_update)),
    runs=st.lists(
        st.tuples(scenarios(fail_rate=0.1), st.integers(0, 6)), min_size=1, max_size=5
    ),  # each pipeline, then that many ticks
    record_size=st.integers(1, 8),
    stop=st.integers(0, 200),
    strays=st.lists(st.booleans(), min_size=16, max_size=16),
    lost=st.sets(st.integers(0, 60), max_size=8),
)
def test_every_tree_pending_where_an_owner_stops_is_decided_by_its_successor_as_by_it(
    *,
    config: TrackerConfig,
    runs: list[tuple[tuple[Scenario, list[tuple[Message, str]]], int]],
    record_size: int,
    stop: int,
    strays: list[bool],
    lost: set[int],
) -> None:
    """The recovery promise, on pipelines' own traffic (unique anchors, acks before inits, fails, joins): an owner
    stops anywhere, a new owner replays from the offset it committed, and every tree pending there is decided exactly
    as the first owner decided it (same outcome, at the same record): none lost, none expired early. Ticks come
    between pipelines, as many as drawn (some strays from a second writer), so trees outlive some and expire at
    others; none comes within a pipeline, where it could expire an ack more than a timeout before its init (the
    documented exception, `acker.partition`). Some acks and fails are lost, so that trees time out, at ticks the
    replay must count as the first owner did. The test above draws raw traffic over a few anchors, where the offset
    seldom moves and a pending tree is seldom compared."""
    blocks: list[MessageBlock] = []
    sent = itertools.count()
    for (_scenario, interleaved), ticks in runs:
        messages = [m for m, _ in interleaved if next(sent) not in lost or isinstance(m, Init)]
        blocks += [
            MessageBlock.from_messages(messages[i : i + record_size]) for i in range(0, len(messages), record_size)
        ]
        blocks += [_tick(NO_TICK) for _ in range(ticks)]
    drawn = len(blocks)
    blocks += [_tick(NO_TICK) for _ in range(config.buckets + 1)]  # every tree decided by the end
    last = NO_TICK
    for offset, block in enumerate(blocks):
        if block.kinds[0] == Kind.TICK:
            if offset < drawn and strays[offset % len(strays)] and last != NO_TICK:
                block.values[0] = NO_TICK  # a second writer's tick: ignored
            else:
                block.values[0], last = last, offset
    traffic = [offset for offset, block in enumerate(blocks) if block.kinds[0] != Kind.TICK]
    stop = traffic[stop % len(traffic)] + 1 if traffic else 0  # after a record of traffic, where trees are open
    original = PartitionState(0, config, tick_interval_ms=1000, now_ms=0)
    decided: list[list[Any]] = []
    start = None
    for offset, block in enumerate(blocks):
        if offset == stop:
            start = original.recovery_offset()
        decided.append(original.apply(offset, 0, block).to_outcomes())
    if start is None:
        start = original.recovery_offset()
    start = 0 if start is None else start
    seen = {int(a) for block in blocks[:stop] for a in block.anchors[block.kinds != Kind.TICK]}
    pending = seen - {o.anchor for outcomes in decided[:stop] for o in outcomes}  # where the first owner stopped
    event(f"trees pending at the stop: {'some' if pending else 'none'}; replay from {'past 0' if start else '0'}")
    replayed = PartitionState(0, config, tick_interval_ms=1000, now_ms=0)
    again = [replayed.apply(offset, 0, blocks[offset]).to_outcomes() for offset in range(start, len(blocks))]
    first_owner = {(offset, o) for offset in range(stop, len(blocks)) for o in decided[offset] if o.anchor in pending}
    successor = {(offset, o) for offset, outcomes in enumerate(again, start) for o in outcomes if o.anchor in pending}
    assert successor == first_owner
    assert {o.anchor for _, o in first_owner} == pending  # each decided by the end


@given(
    config=tracker_configs.map(lambda c: TrackerConfig(c.buckets, None, c.relocate_on_update)),
    runs=st.lists(scenarios(fail_rate=0.1), min_size=2, max_size=4),
    record_size=st.integers(1, 8),
    stop_after=st.integers(0, 2),
)
def test_a_replay_from_a_recovery_offset_past_decided_trees_decides_the_later_ones_as_before(
    config: TrackerConfig, runs: list[tuple[Scenario, list[tuple[Message, str]]]], record_size: int, stop_after: int
) -> None:
    """Pipelines run one after another, each followed by enough ticks for its tombstones to go: the committed offset
    passes the trees decided, a new owner replays from there, and decides every later tree as the first owner did.
    (The test above draws from a few anchors, where the offset seldom moves: this one always replays from past it.)"""
    blocks: list[MessageBlock] = []
    ends = []  # where each run's records and ticks end
    for _scenario, interleaved in runs:
        messages = [message for message, _ in interleaved]
        blocks += [
            MessageBlock.from_messages(messages[i : i + record_size]) for i in range(0, len(messages), record_size)
        ]
        blocks += [_tick(NO_TICK) for _ in range(config.buckets + 2)]
        ends.append(len(blocks))
    last = NO_TICK
    for offset, block in enumerate(blocks):
        if block.kinds[0] == Kind.TICK:
            block.values[0], last = last, offset
    stop = ends[min(stop_after, len(runs) - 2)]  # after a run, with one run at least after it
    original = PartitionState(0, config, tick_interval_ms=1000, now_ms=0)
    decided = []
    for offset, block in enumerate(blocks):
        if offset == stop:
            start = original.recovery_offset()
        decided.append(original.apply(offset, 0, block).to_outcomes())
    assert start is not None and start > 0  # past the decided trees
    replayed = PartitionState(0, config, tick_interval_ms=1000, now_ms=0)
    again = [replayed.apply(offset, 0, blocks[offset]).to_outcomes() for offset in range(start, len(blocks))]
    assert again == decided[start:] and any(again[stop - start :])  # the later runs' trees, each decided once more


def test_outcomes_point_at_the_deciding_message_in_the_block_given_ignored_ticks_included() -> None:
    state = _state()
    state.apply(10, 0, _tick(NO_TICK))
    state.apply(11, 0, MessageBlock.from_messages([Init(5, "s", "t/0/1", 3)]))
    block = MessageBlock.concat([_tick(NO_TICK), _tick(NO_TICK), MessageBlock.from_messages([Ack(5, 3)])])
    spans = RecordSpans.of([1, 1, 1], [12, 13, 14], [0, 0, 0])
    decided = state.apply_records(block, spans)  # two strays from a second writer, then the ack
    assert state.ignored_ticks == 2
    assert decided.index.tolist() == [2] and int(spans.offsets[spans.record_of(2)]) == 14  # the service's decided-by


def test_a_second_failover_still_knows_the_trees_the_first_one_was_told_of() -> None:
    """Tree 10 is acked (offset 2); its init arrives again (offset 4: a delivery reported failed though the record
    was written, sent again by the spout) while its tombstone lives. An owner that took over at offset 3 was told
    tree 10 was decided, and holds no tombstone of it: its recovery offset must not pass the record that decided it,
    or a third owner, replaying from there and told only of trees decided after, opens the copy as a new tree and
    times it out, a spurious replay."""
    log = list(
        enumerate(
            [
                _tick(NO_TICK),
                MessageBlock.from_messages([Init(10, "s", "t/0/1", 7)]),
                MessageBlock.from_messages([Ack(10, 7)]),  # tree 10 acked, by the record at offset 2
                _tick(0),
                MessageBlock.from_messages([Init(10, "s", "t/0/1", 7)]),  # the copy: late, tree 10 is a tombstone
                _tick(3),
                _tick(5),
                _tick(6),
            ]
        )
    )
    original = _state()
    decided_at = {}
    for offset, block in log:
        for outcome in original.apply(offset, 0, block).to_outcomes():
            decided_at[outcome.anchor] = offset
    assert decided_at == {10: 2}  # without a crash: acked once, the copy is late

    def owner(start: int, stop: int) -> tuple[PartitionState, list[Acked | Nacked]]:
        """An owner replaying from ``start``, told of the trees decided from there on, stopping at ``stop``."""
        told = {a: at for a, at in decided_at.items() if at >= start}
        state = _state()
        if told:
            state.recover(np.array(list(told), np.int64), until=max(told.values()), since=min(told.values()))
        outcomes = [o for offset, block in log[start:stop] for o in state.apply(offset, 0, block).to_outcomes()]
        return state, outcomes

    first, _ = owner(0, 3)
    second, again = owner(first.recovery_offset() or 0, 4)
    assert again == []
    _, after = owner(second.recovery_offset() or 0, len(log))
    assert [o for o in after if o.anchor == 10] == []


def test_a_copy_of_an_init_read_while_its_tombstone_lived_stays_late_for_a_new_owner() -> None:
    """Tree 10 is acked (offset 2); its init comes again (offset 5: a delivery reported failed though the record was
    written) while its tombstone lives, and tree 20 holds the recovery offset at the tick before it (3) once the
    tombstone is gone. Told only of the trees decided from offset 3 on, a new owner opened a tree with the copy and
    timed it out: acked, then timed out, a record replayed though done. The outcomes read back start ``buckets``
    ticks before the committed offset (`readback_from`)."""
    log = list(
        enumerate(
            [
                _tick(NO_TICK),
                MessageBlock.from_messages([Init(10, "s", "t/0/1", 7)]),
                MessageBlock.from_messages([Ack(10, 7)]),  # tree 10 acked by the record at offset 2
                _tick(0),
                MessageBlock.from_messages([Init(20, "s", "t/0/2", 5)]),  # tree 20, pending: holds the offset
                MessageBlock.from_messages([Init(10, "s", "t/0/1", 7)]),  # the copy: late here
                _tick(3),  # tree 10's tombstone dropped
                _tick(6),
                _tick(7),
                _tick(8),  # tree 20 times out
            ]
        )
    )
    original = _state()
    decided: list[tuple[int, Acked | Nacked]] = []
    committed = readback = -1
    for offset, block in log:
        decided += [(offset, o) for o in original.apply(offset, 0, block).to_outcomes()]
        if offset == 6:  # a commit here: every outcome so far delivered
            committed = original.recovery_offset() or 0
            readback = original.readback_from(committed)
    assert (committed, readback) == (3, 0)
    assert [o.anchor for _, o in decided] == [10, 20]

    def replayed(told_from: int) -> list[Acked | Nacked]:
        told = [(at, o.anchor) for at, o in decided if told_from <= at <= 6]
        state = _state()
        if told:
            anchors = np.array([a for _, a in told], np.int64)
            state.recover(anchors, until=max(at for at, _ in told), since=min(at for at, _ in told))
        return [o for offset, block in log[committed:] for o in state.apply(offset, 0, block).to_outcomes()]

    assert [o.anchor for o in replayed(committed)] == [10, 20]  # told from the committed offset: a second outcome
    assert [o.anchor for o in replayed(readback)] == [20]  # told from `buckets` ticks before it: none


def test_the_outcomes_read_back_start_buckets_ticks_back_or_where_this_owner_knows_from() -> None:
    state = _state()  # buckets = 2
    state.apply(5, 0, MessageBlock.from_messages([Init(1, "s", "t/0/1", 3)]))
    assert state.readback_from(5) == 5  # nothing before this owner's first record
    for offset in (6, 7, 8, 9):
        state.apply(offset, 0, _tick(NO_TICK if offset == 6 else offset - 1))
    assert [state.readback_from(at) for at in (6, 7, 8, 9)] == [5, 5, 6, 7]
    told = _state()
    told.recover(np.array([42], np.int64), until=12, since=2)  # decided by records from offset 2 on
    for offset in range(10, 16):
        told.apply(offset, 0, _tick(NO_TICK if offset == 10 else offset - 1))
    # Known until the record at 14 (two ticks after passing 12): read back again by the next owner while a record it
    # replays was read while they were known (a message of theirs there was late), not after.
    assert [told.readback_from(at) for at in (10, 13, 14, 15)] == [2, 2, 2, 13]


@dataclass
class _Writer:
    """An instance ticking the partition in `test_no_tree_expires_before_the_timeout_whoever_ticks_and_however_late`:
    each tick it sends reaches the log after one of ``delays`` and its delivery report after one of ``reports`` more,
    and it reads each record ``lag`` ms after it is in the log."""

    state: PartitionState
    delays: list[int]
    reports: list[int]
    lag: int
    read: int = 0  # the next offset it reads
    sent: list[list[int]] = field(default_factory=list)  # per tick: [in the log at, report at, link, offset or -1]

    def step(self, now: int, log: list[tuple[int, int | None, int]], written: dict[int, int]) -> None:
        """Its delivery reports, reads and tick at ``now``; ``log``: (in the log at, tick link or None, anchor)."""
        for tick in self.sent:
            if tick[3] >= 0 and now - _STEP < tick[1] <= now:
                self.state.tick_delivered(tick[3])
        while self.read < len(log) and log[self.read][0] <= now - self.lag:
            at, link, anchor = log[self.read]
            block = (
                _tick(link) if link is not None else MessageBlock.from_messages([Init(anchor, "s", f"t/0/{anchor}", 7)])
            )
            for outcome in self.state.apply(self.read, at, block, read_ms=now).to_outcomes():
                tree = int(outcome.msg_id.rsplit("/", 1)[1])
                assert now - written[tree] >= 2 * _INTERVAL, f"tree {tree} written at {written[tree]}, expired at {now}"
            self.read += 1
        link = self.state.tick_due(now)
        if link is not None:
            self.state.tick_sent(now)
            delay, report = (
                self.delays[len(self.sent) % len(self.delays)],
                self.reports[len(self.sent) % len(self.reports)],
            )
            self.sent.append([now + delay, now + max(delay, _STEP) + report, link, -1])


_INTERVAL, _STEP = 100, 5


@given(
    writers=st.lists(
        st.tuples(
            st.lists(st.sampled_from([0, 5, 20, 60, 90, 150, 400]), min_size=1, max_size=8),
            st.lists(st.sampled_from([0, 5, 30]), min_size=1, max_size=8),
            st.sampled_from([0, 5, 40]),
        ),
        min_size=1,
        max_size=2,
    ),
    trees=st.lists(st.integers(0, 400), max_size=20),
)
def test_no_tree_expires_before_the_timeout_whoever_ticks_and_however_late(
    writers: list[tuple[list[int], list[int], int]], trees: list[int]
) -> None:
    """One or two instances tick a partition (an owner, and a previous one that still writes), each tick reaching the
    log after a delay (a broker slow to append it, retries) and its delivery report before or after it is read back:
    a tree (buckets 3, timeout 200 ms) expires no earlier than the timeout after it was written. Ticks dated from when
    they were sent, or another writer's dated from when ours was, came early."""
    ticking = [_Writer(PartitionState(0, TrackerConfig(buckets=3), _INTERVAL, 0), *w) for w in writers]
    log: list[tuple[int, int | None, int]] = []
    written: dict[int, int] = {}
    due = sorted(t * _STEP for t in trees)
    for now in range(0, 3000, _STEP):
        for writer in ticking:
            for tick in writer.sent:
                if tick[3] < 0 and tick[0] <= now:
                    tick[3] = len(log)
                    log.append((now, tick[2], 0))
        while due and due[0] == now:
            due.pop(0)
            written[len(written) + 1] = now
            log.append((now, None, len(written)))
        for writer in ticking:
            writer.step(now, log, written)
