"""Property-based tests of the tracker on random tuple DAGs and arrival orders (strategies in tests/strategies.py)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from acker.core import TICK, Acked, Init, Message, Nacked, NackReason, Tracker, TrackerConfig
from tests.strategies import Scenario, build_scenario, interleave, scenarios


def _run(tracker: Tracker, arrivals: list[tuple[Message, str]]) -> list[tuple[int, Acked | Nacked]]:
    decided: list[tuple[int, Acked | Nacked]] = []
    for index, (message, _) in enumerate(arrivals):
        decided.extend((index, outcome) for outcome in tracker.handle(message))
    return decided


def _last_index(arrivals: list[tuple[Message, str]], msg_id: str) -> int:
    return max(i for i, (_, owner) in enumerate(arrivals) if owner == msg_id)


@settings(max_examples=300)
@given(scenarios())
def test_every_tree_acked_exactly_once_at_its_last_message(
    case: tuple[Scenario, list[tuple[Message, str]]],
) -> None:
    scenario, arrivals = case
    decided = _run(Tracker(), arrivals)
    assert sorted(o.msg_id for _, o in decided) == sorted(scenario.trees)
    for index, outcome in decided:
        assert isinstance(outcome, Acked)
        # Never early (and never late): the ack is decided by the very last message of its tree.
        assert index == _last_index(arrivals, outcome.msg_id)


@settings(max_examples=300)
@given(scenarios(fail_rate=0.15))
def test_any_fail_gives_exactly_one_nack_failed(case: tuple[Scenario, list[tuple[Message, str]]]) -> None:
    scenario, arrivals = case
    tracker = Tracker()
    decided = _run(tracker, arrivals)
    assert sorted(o.msg_id for _, o in decided) == sorted(scenario.trees)
    for index, outcome in decided:
        if outcome.msg_id in scenario.failed:
            assert isinstance(outcome, Nacked) and outcome.reason is NackReason.FAILED
            init_at = next(i for i, (m, o) in enumerate(arrivals) if isinstance(m, Init) and o == outcome.msg_id)
            first_fail = min(
                i for i, (m, o) in enumerate(arrivals) if o == outcome.msg_id and type(m).__name__ == "Fail"
            )
            assert index == max(init_at, first_fail)  # at once, or as soon as the init is known
        else:
            assert isinstance(outcome, Acked)
            assert index == _last_index(arrivals, outcome.msg_id)
    assert tracker.pending == 0


@settings(max_examples=200)
@given(st.randoms(use_true_random=False), st.integers(2, 5), st.integers(0, 30))
def test_a_lost_message_times_out_on_the_right_tick(rng: random.Random, buckets: int, ticks: int) -> None:
    scenario = build_scenario(rng, trees=4, producers=3, max_tuples=25, fail_rate=0.0, join_rate=0.0)
    arrivals = interleave(rng, scenario.streams)
    victim = rng.choice(sorted(scenario.trees))
    candidates = [i for i, (m, o) in enumerate(arrivals) if o == victim and not isinstance(m, Init)]
    arrivals.pop(rng.choice(candidates))
    for _ in range(ticks):  # ticks anywhere in the stream, then enough of them to expire everything
        arrivals.insert(rng.randint(0, len(arrivals)), (TICK, ""))
    arrivals.extend([(TICK, "")] * buckets)

    tracker = Tracker(TrackerConfig(buckets=buckets))
    decided = _run(tracker, arrivals)
    outcome_of = {o.msg_id: (i, o) for i, o in decided}
    assert len(outcome_of) == len(decided) == len(scenario.trees)
    for msg_id in scenario.trees:
        index, outcome = outcome_of[msg_id]
        want = _expected(arrivals, msg_id, buckets, lost=msg_id == victim)
        assert (index, type(outcome).__name__, getattr(outcome, "reason", None)) == want
    assert tracker.pending == 0


def _expected(arrivals: list[tuple[Message, str]], msg_id: str, buckets: int, lost: bool) -> tuple[int, str, object]:
    """A model of one tree's life: its entry opens at its first message and lives ``buckets`` ticks."""
    ticks = 0
    born: int | None = None  # tick count when the current entry was opened
    init_seen = False
    in_entry = 0  # messages of the tree that went into the current entry
    total = sum(1 for _, o in arrivals if o == msg_id)
    for index, (message, owner) in enumerate(arrivals):
        if message is TICK:
            ticks += 1
            if born is not None and ticks - born >= buckets:
                if init_seen:
                    return (index, "Nacked", NackReason.TIMEOUT)
                born, in_entry = None, 0  # expired without init: a later message opens a new entry
        elif owner == msg_id:
            if born is None:
                born = ticks
            init_seen |= isinstance(message, Init)
            in_entry += 1
            if in_entry == total and not lost:
                return (index, "Acked", None)
    raise AssertionError("the stream ends with enough ticks to decide every tree")
