"""A failed job starts again after longer and longer delays, a bounded number of times in a row."""

from __future__ import annotations

from spark_jobs.restarts import HEALTHY_S, Restarts


def test_delays_double_to_their_cap_and_the_row_ends_at_its_limit() -> None:
    restarts = Restarts(limit=8)
    restarts.started(0.0)
    delays = []
    for now in range(1, 10):
        delays.append(restarts.after_failure(float(now)))  # each start failing at once
        restarts.started(float(now))
    assert delays == [5, 10, 20, 40, 80, 120, 120, 120, None]


def test_a_job_that_ran_long_enough_begins_a_new_row() -> None:
    restarts = Restarts(limit=2)
    restarts.started(0.0)
    assert restarts.after_failure(1.0) == 5
    restarts.started(6.0)
    assert restarts.after_failure(7.0) == 10
    restarts.started(17.0)
    assert restarts.after_failure(17.0 + HEALTHY_S - 1) is None  # not quite long enough: the row is over
    restarts.started(1000.0)
    assert restarts.after_failure(1000.0 + HEALTHY_S) == 5 and restarts.row == 1


def test_no_restarts_stops_at_the_first_failure() -> None:
    restarts = Restarts(limit=0)
    restarts.started(0.0)
    assert restarts.after_failure(10_000.0) is None
