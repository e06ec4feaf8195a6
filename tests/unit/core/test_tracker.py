"""The tracker's rules one by one: orders, fail wins, expiry, overload, collisions, late messages, zero ids."""

from __future__ import annotations

import pytest

from acker.core import (
    TICK,
    Ack,
    Acked,
    Anchor,
    Fail,
    Init,
    Nacked,
    NackReason,
    Ok,
    ResetTimeout,
    Tracker,
    TrackerConfig,
)
from acker.errors import ConfigError, ProtocolError

A, B = 0x1111, -0x2222


def _nack(anchor: int, reason: NackReason, latency: int = 0, msg_id: str = "m") -> Nacked:
    return Nacked(anchor, "s", msg_id, reason, latency)


def test_acks_before_the_init_complete_when_the_init_arrives() -> None:
    tracker = Tracker()
    assert tracker.handle(Ack(A, 3 ^ 5)) == ()
    assert tracker.handle(Ack(A, 5)) == ()
    assert tracker.pending == 1
    assert tracker.handle(Init(A, "s", "m", 3)) == (Acked(A, "s", "m", 0),)
    assert tracker.pending == 0


def test_an_init_with_value_zero_waits_for_its_anchors() -> None:
    tracker = Tracker()
    assert tracker.handle(Init(A, "s", "m", 0)) == ()
    assert tracker.pending == 1


def test_fail_wins_and_later_messages_are_late() -> None:
    tracker = Tracker()
    tracker.handle(Init(A, "s", "m", 7))
    assert tracker.handle(Fail(A)) == (_nack(A, NackReason.FAILED),)
    assert tracker.handle(Ack(A, 7)) == ()
    assert tracker.handle(Fail(A)) == ()
    assert tracker.handle(ResetTimeout(A)) == ()
    assert tracker.counters.late == 3
    assert tracker.counters.nacked_failed == 1
    assert tracker.pending == 0


def test_duplicate_after_ack_is_late_until_the_tombstone_expires() -> None:
    tracker = Tracker(TrackerConfig(buckets=2))
    tracker.handle(Init(A, "s", "m", 7))
    tracker.handle(Ack(A, 7))
    assert tracker.handle(Ack(A, 7)) == ()
    assert tracker.counters.late == 1
    tracker.handle(TICK)
    tracker.handle(TICK)  # the tombstone is gone: a late message now opens an init-less entry
    tracker.handle(Ack(A, 7))
    assert tracker.pending == 1
    tracker.handle(TICK)
    tracker.handle(TICK)
    assert tracker.counters.expired_without_init == 1
    assert tracker.pending == 0


def test_expiry_without_init_has_no_outcome_and_is_counted() -> None:
    tracker = Tracker()
    tracker.handle(Ack(A, 1))
    tracker.handle(Fail(B))
    assert [tracker.handle(TICK) for _ in range(3)] == [(), (), ()]
    assert tracker.counters.expired_without_init == 2
    assert tracker.pending == 0


def test_timed_out_tree_ignores_its_stragglers() -> None:
    tracker = Tracker()
    tracker.handle(Init(A, "s", "m", 7))
    for _ in range(2):
        tracker.handle(TICK)
    assert tracker.handle(TICK) == (_nack(A, NackReason.TIMEOUT, 3),)
    assert tracker.handle(Ack(A, 7)) == ()
    assert tracker.counters.late == 1
    assert tracker.pending == 0


def test_reset_timeout_restarts_the_clock() -> None:
    tracker = Tracker()
    tracker.handle(Init(A, "s", "m", 7))
    tracker.handle(TICK)
    tracker.handle(TICK)
    tracker.handle(ResetTimeout(A))
    assert tracker.handle(TICK) == ()
    assert tracker.handle(TICK) == ()
    assert tracker.handle(TICK) == (_nack(A, NackReason.TIMEOUT, 5),)


def test_updates_do_not_restart_the_clock_by_default_but_do_when_relocating() -> None:
    plain, relocating = Tracker(), Tracker(TrackerConfig(relocate_on_update=True))
    for tracker in (plain, relocating):
        tracker.handle(Init(A, "s", "m", 7 ^ 9))
        tracker.handle(TICK)
        tracker.handle(TICK)
        tracker.handle(Ack(A, 7))
    assert plain.handle(TICK) == (_nack(A, NackReason.TIMEOUT, 3),)
    assert relocating.handle(TICK) == ()
    assert relocating.handle(TICK) == ()
    assert relocating.handle(TICK) == (_nack(A, NackReason.TIMEOUT, 5),)


def test_unknown_reset_is_counted_and_opens_nothing() -> None:
    tracker = Tracker()
    assert tracker.handle(ResetTimeout(A)) == ()
    assert tracker.counters.unknown_resets == 1
    assert tracker.pending == 0


def test_high_water_nacks_new_inits_as_overload() -> None:
    tracker = Tracker(TrackerConfig(high_water=1))
    tracker.handle(Init(A, "s", "m", 7))
    assert tracker.handle(Init(B, "s", "n", 9)) == (Nacked(B, "s", "n", NackReason.OVERLOAD, 0),)
    assert tracker.pending == 1  # not tracked
    assert tracker.handle(Ack(B, 9)) == ()  # its stragglers are late, not a new tree
    assert tracker.counters.late == 1
    tracker.handle(Ack(A, 7))
    assert tracker.handle(Init(B ^ 1, "s", "o", 5)) == ()  # room again
    assert tracker.counters.nacked_overload == 1


def test_high_water_does_not_refuse_the_init_of_a_tree_already_open() -> None:
    tracker = Tracker(TrackerConfig(high_water=1))
    tracker.handle(Ack(A, 7))
    assert tracker.handle(Init(A, "s", "m", 7)) == (Acked(A, "s", "m", 0),)


def test_root_id_collision_keeps_the_first_tree() -> None:
    tracker = Tracker()
    tracker.handle(Init(A, "s", "first", 7))
    assert tracker.handle(Init(A, "s", "second", 9)) == ()
    assert tracker.counters.collisions == 1
    assert tracker.handle(Ack(A, 7)) == (Acked(A, "s", "first", 0),)


def test_separate_anchor_ok_form_is_an_xor_update() -> None:
    tracker = Tracker()
    tracker.handle(Init(A, "s", "m", 11))
    tracker.handle(Anchor(A, 22))
    tracker.handle(Ok(A, 11))
    assert tracker.handle(Ok(A, 22)) == (Acked(A, "s", "m", 0),)


def test_latency_counts_ticks_from_the_init() -> None:
    tracker = Tracker()
    tracker.handle(Ack(A, 7))
    tracker.handle(TICK)
    tracker.handle(Init(A, "s", "m", 3 ^ 7))
    tracker.handle(TICK)
    assert tracker.handle(Ack(A, 3)) == (Acked(A, "s", "m", 1),)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Init(0, "s", "m", 1),
        lambda: Ack(0, 1),
        lambda: Anchor(A, 0),
        lambda: Ok(0, 5),
        lambda: Fail(0),
        lambda: ResetTimeout(0),
        lambda: Ack(1 << 63, 1),
        lambda: Ack(A, 1 << 64),
        lambda: Fail(True),
    ],
)
def test_invalid_ids_are_rejected_with_a_clear_error(build: object) -> None:
    with pytest.raises(ProtocolError, match="must be"):
        build()  # type: ignore[operator]


def test_config_is_checked() -> None:
    with pytest.raises(ConfigError):
        TrackerConfig(buckets=1)
    with pytest.raises(ConfigError):
        TrackerConfig(high_water=0)


def test_counters_add_up() -> None:
    tracker = Tracker(TrackerConfig(high_water=2))
    tracker.handle_all([Init(1, "s", "a", 1), Ack(1, 1), Init(2, "s", "b", 2), Fail(2), Init(3, "s", "c", 3)])
    tracker.handle_all([Init(4, "s", "d", 4), Init(5, "s", "e", 5), TICK, TICK, TICK])
    c = tracker.counters
    assert (c.acked, c.nacked_failed, c.nacked_overload, c.nacked_timeout) == (1, 1, 1, 2)
    assert c.messages == 10 and c.ticks == 3 and tracker.pending == 0
