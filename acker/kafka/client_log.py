"""Where the Kafka clients' own log lines go: Python's logging, logger ``acker.librdkafka``, each kind of line at
most once per `REPEAT_INTERVAL_S`.

librdkafka writes to stderr by default, a line per event. With no broker to reach, every client logs every
reconnection attempt: `acker run` printed 2,600 lines in 50 s, and a stage's log was unreadable through a broker's
restart. Given a Python logger instead (confluent-kafka's ``logger`` setting, which `ServiceConfig.client` puts in
every client's settings), the lines are handed over by the thread that polls the client, in the application's log
format, and `RepeatFilter` lets one line of a kind through per interval, saying how many it held back (with the
next line of its kind, or with the last one held back once the interval has passed: `say_held_back`, which the
processes' loops call).

A client hands its lines over only when it is polled: until then librdkafka queues them. The clients the project
keeps without polling them otherwise (admin clients, consumers used for lookups only) are given `serve_log_lines`
now and then, so that their lines show, and do not pile up through a long outage.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOGGER_NAME = "acker.librdkafka"
REPEAT_INTERVAL_S = 30.0
_MAX_KINDS = 1024  # kinds of line remembered; beyond, those not seen for an interval are forgotten
_attaching = threading.Lock()

# What varies between two lines of one kind: the time an attempt took, and the count of lines librdkafka held back
# itself (before 2.16: "(after 0ms in state CONNECT, 1 identical error(s) suppressed)" after the first line); a
# broker's address, which tells brokers apart, stays. confluent-kafka logs "%s [%s] %s" with the facility, the
# client's name and the text.
_VARYING = re.compile(r"\b\d+ms\b|, \d+ identical error\(s\) suppressed")
# Warnings that are not: a client waiting, and saying it will retry, for what a broker that has just started is still
# loading or electing (its transaction or group coordinator): the producer gets its id a moment later, by itself; and
# a setting of the shared ``[kafka]`` table that only producers read, given to a consumer (or the other way round),
# which ignores it as it should (``linger.ms`` for the stages' producers, in every consumer). At every start they read
# as errors; they are logged at INFO. A misspelt setting is still refused (librdkafka knows no such property).
_TRANSIENT = re.compile(
    r"(?:Coordinator load in progress|Not coordinator|Coordinator not available): retrying"
    r"|is a (?:producer|consumer) property and will be ignored by this (?:consumer|producer) instance"
)


@dataclass(slots=True)
class _Kind:
    shown_at: float  # when the last line of this kind went through
    held: int = 0  # lines of this kind held back since
    last: logging.LogRecord | None = None  # the last of them, its text made (`_frozen`)
    last_at: float = 0.0  # when it came


class RepeatFilter(logging.Filter):
    """Lets a line through unless one of its kind went through less than ``interval_s`` ago; the next line of the
    kind to go through ends with the number held back meanwhile. A line's kind is its level, its facility and its
    text, durations left out, whichever client logged it: five clients failing to reach one broker are one kind.
    Lines below ``min_level`` all go through: librdkafka logs debug lines only when its ``debug`` setting asks. A
    warning that a client waits for a coordinator still loading, and will retry, or that it ignores a setting of
    the other kind of client, is logged at INFO.

    Thread-safe: each client's lines come from the thread that polls it."""

    def __init__(
        self,
        interval_s: float = REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        min_level: int = logging.WARNING,
        kind: Callable[[logging.LogRecord], tuple[int, str]] | None = None,
    ) -> None:
        """``kind``: what makes two lines one kind, instead of `_kind` (their level and text)."""
        super().__init__()
        self.interval_s = interval_s
        self.min_level = min_level
        self._clock = clock
        self._kind_of = kind or self._kind
        self._kinds: dict[tuple[int, str], _Kind] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _kind(record: logging.LogRecord) -> tuple[int, str]:
        args = record.args if isinstance(record.args, tuple) else ()
        if len(args) == 3:  # facility, client name, text: leave the client's name out
            return record.levelno, f"{args[0]} {_VARYING.sub('', str(args[2]))}"
        return record.levelno, _VARYING.sub("", _text(record))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and _TRANSIENT.search(_text(record)):
            record.levelno, record.levelname = logging.INFO, "INFO"
            if not logging.getLogger(record.name).isEnabledFor(logging.INFO):
                return False
            return self._pass(record)  # held back as its kind of warning would be
        if record.levelno < self.min_level:
            return True
        return self._pass(record)

    def _pass(self, record: logging.LogRecord) -> bool:
        kind = self._kind_of(record)
        now = self._clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen.shown_at < self.interval_s:
                seen.held += 1
                seen.last, seen.last_at = _frozen(record), now
                return False
            if seen is not None and seen.held:
                _count_held(record, seen.held, now - seen.shown_at)
            if seen is None and len(self._kinds) >= _MAX_KINDS:
                # Those not seen for an interval first; all of them if every one is recent (their counts are lost).
                recent = {k: v for k, v in self._kinds.items() if now - v.shown_at < self.interval_s}
                self._kinds = recent if len(recent) < _MAX_KINDS // 2 else {}
            self._kinds[kind] = _Kind(now)
        return True

    def held_back(self, *, every: bool = False) -> list[logging.LogRecord]:
        """Of each kind with lines held back for an interval (``every``: for any time), the last of them, ending with
        the number held back before it: to be said now (`say_held_back`), not only once the next line of its kind
        goes through, which may be never (a burst of dead letters was one line for minutes, its count added to the
        next burst's line)."""
        now = self._clock()
        said: list[logging.LogRecord] = []
        with self._lock:
            for kind, seen in self._kinds.items():
                if seen.held and seen.last is not None and (every or now - seen.shown_at >= self.interval_s):
                    line, ago = seen.last, f"this one {now - seen.last_at:.0f} s ago"
                    more = f"{_held_note(seen.held - 1, now - seen.shown_at)}; " if seen.held > 1 else ""
                    line.msg = f"{line.msg} ({more}{ago})"
                    # Stamped when said, among the lines said then (its own time is in its text).
                    line.created = time.time()
                    line.msecs = line.created % 1 * 1000
                    said.append(line)
                    self._kinds[kind] = _Kind(now)
        return said


def _frozen(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its text made: held back, it keeps no argument alive (an exception, and its traceback's
    frames)."""
    record.msg, record.args = _text(record), None
    return record


def _count_held(record: logging.LogRecord, held: int, over_s: float) -> None:
    """``record`` as it reads, whatever its arguments were, ending with the number of its kind held back."""
    record.msg, record.args = f"{_text(record)} ({_held_note(held, over_s)})", None


def _held_note(held: int, over_s: float) -> str:
    return f"{held} more like this in the last {over_s:.0f} s, not shown"


def _text(record: logging.LogRecord) -> str:
    """``record``'s text; its format when its arguments cannot be made text (an exception whose ``__repr__`` raises,
    a user's): a filter runs inside the logging call, and what it raises would be raised to the caller."""
    try:
        return record.getMessage()
    except Exception as error:
        return f"{record.msg} (its arguments could not be made text: {type(error).__name__})"


# The loggers given a `RepeatFilter` (`repeats_held_back`), whose lines held back `say_held_back` says, at most once a
# `_SAY_EVERY_S` but at a stop: a loop may call it at every turn.
_filtered: list[tuple[logging.Logger, RepeatFilter]] = []
_SAY_EVERY_S = 1.0
_next_say = 0.0


def repeats_held_back(logger: logging.Logger, repeats: RepeatFilter) -> None:
    """Give ``logger`` the filter ``repeats``, once (a module imported again, a client made again)."""
    with _attaching:
        if not any(isinstance(f, RepeatFilter) for f in logger.filters):
            logger.addFilter(repeats)
            _filtered.append((logger, repeats))


def say_held_back(*, stopping: bool = False) -> None:
    """Say the lines every `RepeatFilter` has held back for an interval (`RepeatFilter.held_back`): a process's loop
    calls it at every turn, and at its stop (``stopping``: whether the interval has passed or not)."""
    global _next_say  # noqa: PLW0603 # one schedule per process, as the filters are
    now = time.monotonic()
    if now < _next_say and not stopping:  # read unlocked: a loop's every turn takes no lock (checked again in it)
        return
    with _attaching:
        if now < _next_say and not stopping:
            return
        _next_say = now + _SAY_EVERY_S
        filtered = list(_filtered)
    for logger, repeats in filtered:
        for record in repeats.held_back(every=stopping):
            logger.callHandlers(record)  # not `handle`: the filter passed it already, and would hold it again


def run_turns(stop: threading.Event, turn: Callable[[], object], close: Callable[[], None]) -> None:
    """A process's loop: ``turn`` until ``stop`` is set, saying held-back lines at each turn, then ``close``; the lines
    still held back are said at the stop even when ``turn`` or ``close`` raises."""
    try:
        while not stop.is_set():
            turn()
            say_held_back()
    finally:
        try:
            close()
        finally:
            say_held_back(stopping=True)


def reason_kind(record: logging.LogRecord) -> tuple[int, str]:
    """A dead-lettering line's kind (``kind`` of `RepeatFilter`): its level and its reason, the fourth argument of
    ``"dead-lettering %s[%s]@%s: %s: %s"`` (topic, partition, offset, reason, detail): one line per reason."""
    args = record.args if isinstance(record.args, tuple) else ()
    return record.levelno, str(args[3]) if len(args) > 3 else _text(record)


def template_kind(record: logging.LogRecord) -> tuple[int, str]:
    """A line's kind (``kind`` of `RepeatFilter`): its level and its format, whatever its arguments (a request's id,
    a record's offset)."""
    return record.levelno, str(record.msg)


def serve_log_lines(client: Any) -> None:
    """Hand over the log lines ``client`` has queued (an `AdminClient`, a `Producer`, or a `Consumer` that is not
    assigned anything: polling one that is would take a record from its owner)."""
    client.poll(0)


def client_logger() -> logging.Logger:
    """The logger every Kafka client of the project is given, its `RepeatFilter` attached once. Its level is the
    application's (`acker.logs`, ``--log-level``): librdkafka's info lines show at INFO, and the debug lines its
    ``debug`` setting asks for at DEBUG."""
    logger = logging.getLogger(LOGGER_NAME)
    repeats_held_back(logger, RepeatFilter())
    return logger
