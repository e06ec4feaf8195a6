"""The delivery barrier that holds commits back until what was produced before them is delivered."""

from acker.delivery import DeliveryTracker


def test_a_barrier_passes_once_everything_before_it_is_delivered_in_any_order() -> None:
    tracker = DeliveryTracker()
    first, second = tracker.track(), tracker.track()
    barrier = tracker.barrier()
    later = tracker.track()
    assert not tracker.passed(barrier)
    second(None, None)
    assert not tracker.passed(barrier)
    first(None, None)
    assert tracker.passed(barrier)  # the record produced after the barrier does not hold it back
    assert tracker.in_flight == 1
    later("an error", None)  # type: ignore[arg-type]
    tracker.track()("a later error", None)  # type: ignore[arg-type]
    assert tracker.failure == "an error"  # the first that failed for good
    assert tracker.passed(tracker.barrier())
