"""A stage's trouble said in its log, at most once per interval (`acker.trouble`), and what its consumer reads
that is not a record."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from confluent_kafka import KafkaError, Message

from acker.kafka.clients import readable
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
        "bolt b since the last report: invalid anchor headers 2 (counted in its counters)",
        "bolt b since the last report: errors 1, invalid anchor headers 5 (counted in its counters)",
    ]


def test_a_stage_stopping_says_what_was_counted_since_the_last_line_whatever_the_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A spout's inits failed by close's flush (the broker away) were said only as counts in its last INFO line."""
    now = [0.0]
    report = TroubleReport(logging.getLogger("t"), "spout s", ("init_delivery_failures",), 60, lambda: now[0])
    counters: Counter[str] = Counter(init_delivery_failures=1)
    with caplog.at_level(logging.WARNING, "t"):
        report.check(counters)
        counters["init_delivery_failures"] += 3
        now[0] = 5.0
        report.check(counters)  # within the interval: held
        report.check(counters, at_once=True)
        report.check(counters, at_once=True)  # nothing new
    assert [r.getMessage() for r in caplog.records] == [
        "spout s since the last report: init delivery failures 1 (counted in its counters)",
        "spout s since the last report: init delivery failures 3 (counted in its counters)",
    ]


def test_the_first_exception_since_the_last_line_is_said_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """A bolt raising on every message logged only "5 errors": the cause was at DEBUG, without a traceback."""
    now = [0.0]
    report = TroubleReport(logging.getLogger("t"), "bolt b", ("errors",), 60, lambda: now[0])
    counters: Counter[str] = Counter()
    with caplog.at_level(logging.WARNING, "t"):
        for i, at in enumerate((0.0, 30.0, 40.0)):
            now[0] = at
            try:
                counts: dict[str, int] = {}
                counts["word"] += 1  # the user's bug
            except KeyError as error:
                counters["errors"] += 1
                report.example(f"words/0/{i}", error)
            report.check(counters)  # said at 0, held at 30 and 40
        now[0] = 61.0
        report.check(counters)
    first, second = caplog.records
    assert first.getMessage().endswith("; the first raised on words/0/0: KeyError('word')")
    assert second.getMessage().startswith("bolt b since the last report: errors 2")
    assert second.getMessage().endswith("words/0/1: KeyError('word')")  # the first since the last line
    assert first.exc_info is not None and "in test_the_first_exception" in caplog.text  # the traceback


def test_a_missing_input_topic_says_how_to_create_it(caplog: pytest.LogCaptureFixture) -> None:
    """A stage subscribed to a topic nobody created logged librdkafka's error alone, and waited. The acker's own topic
    is not made with ``--topic`` (refused: "one of the acker's own topics"), which the hint once told `acker run`."""
    error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Subscribed topic not available: mine.stage1")
    with caplog.at_level(logging.WARNING, "t"):
        assert not readable(Message(error=error), logging.getLogger("t"), "consumer")
    assert caplog.messages == [
        "consumer error: Subscribed topic not available: mine.stage1 (`acker topics create` makes the acker's own "
        "topics, with `--topic NAME:PARTITIONS` a pipeline's)"
    ]
