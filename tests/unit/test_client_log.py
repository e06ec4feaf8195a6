"""The Kafka clients' log lines: through Python's logging, one line of a kind per interval, with the count held back;
and `acker run` with no broker to reach says so, at once and after a bounded wait."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import Consumer

from acker import service
from acker.config import ServiceConfig
from acker.kafka import client_log
from acker.kafka.client_log import LOGGER_NAME, RepeatFilter, reason_kind, template_kind
from acker.kafka.local_broker import free_ports


def _line(text: str, client: str = "rdkafka#consumer-1", level: int = logging.ERROR) -> logging.LogRecord:
    """A record as confluent-kafka makes it: "%s [%s] %s" with the facility, the client's name and the text."""
    return logging.LogRecord(LOGGER_NAME, level, "", 0, "%s [%s] %s", ("FAIL", client, text), None)


REFUSED = "[thrd:b:1/bootstrap]: b:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after {}ms)"


def test_the_service_says_one_dead_letter_of_a_reason_per_interval_whatever_its_offset() -> None:
    """A burst of foreign records on the acker topic logged a line each: 500 lines in 25 ms."""
    now = [0.0]
    kept = RepeatFilter(interval_s=30, clock=lambda: now[0], kind=reason_kind)

    def line(offset: int, reason: str) -> logging.LogRecord:
        args = ("acker", 0, offset, reason, "detail")
        return logging.LogRecord("acker.service.dead_letters", logging.WARNING, "", 0, "dead-lettering %s[%d]@%d: "
                                 "%s: %s", args, None)  # fmt: skip

    assert kept.filter(line(1, "bad-magic"))
    assert not kept.filter(line(2, "bad-magic")) and not kept.filter(line(3, "bad-magic"))
    assert kept.filter(line(4, "wrong-partition"))
    now[0] = 31.0
    shown = line(5, "bad-magic")
    assert kept.filter(shown)
    assert shown.getMessage() == (
        "dead-lettering acker[0]@5: bad-magic: detail (2 more like this in the last 31 s, not shown)"
    )
    assert service._dead_letter_log.filters and isinstance(service._dead_letter_log.filters[0], RepeatFilter)


@pytest.fixture
def filtered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's registry of filtered loggers, and its schedule, as they were once the test is over."""
    monkeypatch.setattr(client_log, "_filtered", [])
    monkeypatch.setattr(client_log, "_next_say", 0.0)


@pytest.mark.usefixtures("filtered")
def test_lines_held_back_are_said_once_their_interval_has_passed_without_waiting_for_the_next_of_their_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A burst of 930 dead letters was one line for 247 s: the count held back came with the next burst's line. The
    last line held back of each kind is said once the interval has passed, and at a stop whether it has or not."""
    now = [0.0]
    kept = RepeatFilter(interval_s=30, clock=lambda: now[0], kind=reason_kind)
    logger = logging.getLogger("acker.test.held_back")
    client_log.repeats_held_back(logger, kept)
    client_log.repeats_held_back(logger, RepeatFilter())  # once a logger
    assert logger.filters == [kept]

    def line(offset: int, reason: str = "wrong-partition") -> None:
        logger.warning("dead-lettering %s[%d]@%d: %s: %s", "acker", 0, offset, reason, "detail")

    def said() -> list[str]:
        lines = [r.getMessage() for r in caplog.records if r.name == "acker.test.held_back"]
        caplog.clear()
        return lines

    with caplog.at_level(logging.WARNING, logger="acker.test.held_back"):
        for offset in range(1, 5):
            line(offset)
        now[0] = 10.0
        line(5, "bad-magic")
        line(6, "bad-magic")
        assert said() == ["dead-lettering acker[0]@1: wrong-partition: detail", "dead-lettering acker[0]@5: bad-magic: "
                          "detail"]  # fmt: skip
        now[0] = 29.0
        client_log.say_held_back()
        assert said() == []  # within the interval of each kind
        now[0] = 35.0
        client_log._next_say = 0.0
        before = time.time()
        client_log.say_held_back()  # wrong-partition's interval has passed, bad-magic's not
        [record] = [r for r in caplog.records if r.name == "acker.test.held_back"]
        assert record.created >= before and record.args is None  # stamped when said; its text made when held
        assert said() == ["dead-lettering acker[0]@4: wrong-partition: detail (2 more like this in the last 35 s, not "
                          "shown; this one 35 s ago)"]  # fmt: skip
        now[0] = 45.0  # bad-magic's interval has passed too, but a second has not since the last say
        client_log.say_held_back()
        assert said() == []
        line(7)  # held: a line of its kind was said at 35 s
        now[0] = 46.0
        client_log.say_held_back(stopping=True)  # at a stop, every kind, its interval passed or not
        client_log.say_held_back(stopping=True)  # nothing held since
    assert said() == ["dead-lettering acker[0]@7: wrong-partition: detail (this one 1 s ago)",
                      "dead-lettering acker[0]@6: bad-magic: detail (this one 36 s ago)"]  # fmt: skip


def test_a_loop_says_what_is_held_back_at_its_stop_when_its_close_raises(caplog: pytest.LogCaptureFixture) -> None:
    """`run_turns`, the spouts', bolts' and coordinated steps' loop: turns until stopped, then closes; a line held back
    is said at the stop even when the close raises, and the close's error is not swallowed."""
    logger = logging.getLogger("acker.test.run_turns")
    client_log.repeats_held_back(logger, RepeatFilter(interval_s=30, kind=reason_kind))
    stop = threading.Event()
    turns: list[int] = []

    def turn() -> None:
        turns.append(len(turns))
        logger.warning("dead-lettering %s[%d]@%d: %s: %s", "acker", 0, len(turns), "bad-magic", "detail")
        if len(turns) == 3:
            stop.set()

    def close() -> None:
        raise OSError("the close failed")

    with caplog.at_level(logging.WARNING, logger="acker.test.run_turns"), pytest.raises(OSError, match="close failed"):
        client_log.run_turns(stop, turn, close)
    lines = [r.getMessage() for r in caplog.records if r.name == "acker.test.run_turns"]
    assert turns == [0, 1, 2]
    assert lines[0] == "dead-lettering acker[0]@1: bad-magic: detail"
    assert lines[1].startswith("dead-lettering acker[0]@3: bad-magic: detail (1 more like this in the last")
    assert len(lines) == 2


class _UnprintableError(Exception):
    def __repr__(self) -> str:
        raise RuntimeError("a user's __repr__")


def test_a_line_whose_arguments_cannot_be_made_text_is_held_back_not_raised_to_the_caller() -> None:
    """A step's exception whose ``__repr__`` raised went through the filter, which made the line's text to hold it
    back: the logging call raised, in the step's batch, at every try."""
    now = [0.0]
    kept = RepeatFilter(interval_s=30, clock=lambda: now[0], kind=template_kind)  # as the steps' request lines

    def line(error: Exception) -> logging.LogRecord:
        return logging.LogRecord("acker.coordinated.requests", logging.WARNING, "", 0, "request %s failed: %r",
                                 ("r1", error), None)  # fmt: skip

    assert kept.filter(line(ValueError("first")))
    held = line(_UnprintableError())
    assert not kept.filter(held)
    assert held.getMessage() == "request %s failed: %r (its arguments could not be made text: RuntimeError)"


def test_one_line_of_a_kind_per_interval_then_the_count_held_back() -> None:
    now = [0.0]
    kept = RepeatFilter(interval_s=30, clock=lambda: now[0])
    assert kept.filter(_line(REFUSED.format(0)))
    now[0] = 1.0
    # Another client, another duration: the same kind of line.
    assert not kept.filter(_line(REFUSED.format(3), client="acker-vm:1-reader#consumer-3"))
    assert not kept.filter(_line(REFUSED.format(0)))
    # librdkafka before 2.16 counts the lines it held back itself, in the line: the same kind too
    assert not kept.filter(_line(REFUSED.replace("ms)", "ms, 1 identical error(s) suppressed)").format(0)))
    other_broker = _line(REFUSED.replace("b:1", "c:2").format(0))
    assert kept.filter(other_broker)
    now[0] = 31.0
    shown = _line(REFUSED.format(0))
    assert kept.filter(shown)
    assert shown.getMessage().endswith("(3 more like this in the last 31 s, not shown)")
    now[0] = 32.0
    assert not kept.filter(_line(REFUSED.format(0)))


def test_the_count_held_back_is_added_to_any_line_as_it_reads() -> None:
    now = [0.0]
    kept = RepeatFilter(interval_s=30, clock=lambda: now[0])
    plain = logging.LogRecord(LOGGER_NAME, logging.ERROR, "", 0, "100% of brokers down", None, None)
    mapped = logging.LogRecord(LOGGER_NAME, logging.ERROR, "", 0, "%(n)d down", ({"n": 3},), None)
    for line in (plain, mapped):
        assert kept.filter(line)
        assert not kept.filter(line)
    now[0] = 40.0
    for line, text in ((plain, "100% of brokers down"), (mapped, "3 down")):
        assert kept.filter(line)
        assert line.getMessage() == f"{text} (1 more like this in the last 40 s, not shown)"


def test_debug_and_info_lines_all_go_through() -> None:
    kept = RepeatFilter(interval_s=30, clock=lambda: 0.0)
    for level in (logging.DEBUG, logging.INFO):
        assert all(kept.filter(_line("same text", level=level)) for _ in range(3))


def test_a_client_waiting_for_a_coordinator_still_loading_is_info_not_a_warning() -> None:
    """At every start of a broker the producers' first id requests meet a coordinator still loading, and retry."""
    line = "[thrd:main]: Failed to acquire idempotence PID from broker b:1/1: Coordinator load in progress: retrying"
    logger = logging.getLogger(LOGGER_NAME)
    kept, level = RepeatFilter(), logger.level
    try:
        logger.setLevel(logging.WARNING)
        waiting = _line(line, level=logging.WARNING)
        assert not kept.filter(waiting) and waiting.levelno == logging.INFO
        moved = "Failed to acquire transactional PID from broker TxnCoordinator/1: Broker: Not coordinator: retrying"
        assert not kept.filter(_line(moved, level=logging.WARNING))  # at INFO too (a coordinator elected anew)
        logger.setLevel(logging.INFO)
        assert kept.filter(_line(line, level=logging.WARNING))
        assert not kept.filter(_line(line, level=logging.WARNING))  # held back as any line of a kind
        other = _line("Coordinator load in progress: giving up", level=logging.WARNING)
        assert kept.filter(other) and other.levelno == logging.WARNING
    finally:
        logger.setLevel(level)


def test_a_setting_of_the_other_kind_of_client_is_info_not_a_warning() -> None:
    """``linger.ms`` in the shared [kafka] table, for the producers, made every consumer warn at start."""
    text = "[thrd:app]: Configuration property linger.ms is a producer property and will be ignored by this consumer "
    text += "instance"
    logger = logging.getLogger(LOGGER_NAME)
    level = logger.level
    try:
        logger.setLevel(logging.INFO)
        ignored = _line(text, level=logging.WARNING)
        assert RepeatFilter().filter(ignored) and ignored.levelno == logging.INFO
    finally:
        logger.setLevel(level)


def test_a_client_that_reaches_no_broker_logs_it_once(caplog: pytest.LogCaptureFixture) -> None:
    config = ServiceConfig(bootstrap_servers=f"127.0.0.1:{free_ports(1)[0]}")
    consumer = Consumer(config.client(**{"group.id": "nobody"}))
    consumer.subscribe(["nothing"])
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        started = time.monotonic()
        while time.monotonic() - started < 2:  # librdkafka retries about 20 times a second
            consumer.poll(0.1)
    consumer.close()
    refused = [r for r in caplog.records if r.name == LOGGER_NAME and "Connection refused" in r.getMessage()]
    assert len(refused) == 1


def test_acker_run_with_no_broker_says_what_the_client_met_then_gives_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(service, "FIRST_CONTACT_S", 2.0)
    acker = service.AckerService(ServiceConfig(bootstrap_servers=f"127.0.0.1:{free_ports(1)[0]}", metrics_port=0))
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME), pytest.raises(TimeoutError):
        acker.run(threading.Event())  # closes the service's clients, as after any failure
    assert any("Connection refused" in r.getMessage() for r in caplog.records if r.name == LOGGER_NAME)


def test_acker_run_asked_to_stop_before_kafka_answers_stops_at_once() -> None:
    acker = service.AckerService(ServiceConfig(bootstrap_servers=f"127.0.0.1:{free_ports(1)[0]}", metrics_port=0))
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    acker.run(stop)
    assert time.monotonic() - started < service.FIRST_CONTACT_S / 2
