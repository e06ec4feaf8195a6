"""A stage's trouble said in its log, at most once per interval (`acker.trouble`)."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from acker.trouble import TroubleReport


def test_trouble_is_said_at_once_then_at_most_once_per_interval_with_what_grew(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    report = TroubleReport(logging.getLogger("t"), "bolt b", ("errors", "invalid_anchor_headers"), 60, lambda: now[0])
    counters: Counter[str] = Counter(processed=10)
    with caplog.at_level(logging.WARNING, "t"):
        report.check(counters)  # nothing wrong: nothing said
        counters["invalid_anchor_headers"] += 2
        report.check(counters)
        counters["invalid_anchor_headers"] += 5
        counters["errors"] += 1
        now[0] = 30.0
        report.check(counters)  # within the interval: held
        now[0] = 61.0
        report.check(counters)
        now[0] = 200.0
        report.check(counters)  # nothing new
    assert [r.getMessage() for r in caplog.records] == [
        "bolt b: 2 invalid anchor headers since the last report (counted in its counters)",
        "bolt b: 1 errors, 5 invalid anchor headers since the last report (counted in its counters)",
    ]
