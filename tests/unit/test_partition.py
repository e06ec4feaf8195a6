"""Per-partition state: the tick chain, tick scheduling, and the recovery offset a replay starts from."""

from __future__ import annotations

import numpy as np

from acker.columnar import MessageBlock
from acker.core import Ack, Init, TrackerConfig
from acker.partition import NO_TICK, PartitionState, encode_tick
from acker.wire import decode_batch


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


def test_a_tick_is_due_once_per_interval_and_one_at_a_time() -> None:
    state = _state()
    assert state.tick_due(999) is None
    assert state.tick_due(1000) == NO_TICK
    state.tick_sent()
    assert state.tick_due(5000) is None  # in flight
    state.tick_delivered(7)
    assert state.tick_due(5000) is None  # delivered, not read back yet
    state.apply(7, 1500, _tick(NO_TICK))
    assert state.tick_due(2499) is None
    assert state.tick_due(2500) == 7
    state.tick_sent()
    state.tick_delivered(None)  # failed: written again when due
    assert state.tick_due(2500) == 7


def test_recovery_offset_is_the_oldest_record_a_pending_tree_needs() -> None:
    state = _state()
    assert state.recovery_offset() is None
    state.apply(0, 0, MessageBlock.from_messages([Init(5, "s", "t/0/1", 3)]))
    state.apply(1, 0, MessageBlock.from_messages([Ack(6, 4)]))  # opens tree 6 (init later)
    state.apply(2, 0, MessageBlock.from_messages([Ack(5, 3)]))  # tree 5 done
    assert state.recovery_offset() == 1
    state.apply(3, 0, MessageBlock.from_messages([Init(6, "s", "t/0/2", 4)]))  # tree 6 done
    assert state.recovery_offset() == 4  # nothing pending, no tick: resume after the last record
    state.apply(4, 0, _tick(NO_TICK))
    state.skip(5)  # a dead-lettered record
    assert state.position == 6
    assert state.recovery_offset() == 4  # the last tick anchors the chain for the next owner


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
