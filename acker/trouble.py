"""What went wrong in a stage, said in its log: counters of trouble (an input with an invalid anchor header, a
function that raised, a child that could not be delivered) are counted per message, and a line a message would
flood the log. `TroubleReport` says how many of each were counted since its last line, at most one line per interval.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

REPORT_INTERVAL_S = 60.0


class TroubleReport:
    """Logs a warning of what ``names`` counted since the last one, when they counted anything, at most once per
    ``interval_s`` (the first at once). Call `check` regularly with the stage's counters, and `example` with each
    exception counted: the first since the last line is said with it, traceback included (a count alone left the
    user of a bolt that raised on every message to guess at the cause)."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        names: Sequence[str],
        interval_s: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self._what, self._names = logger, what, tuple(names)
        self._interval_s, self._clock = interval_s, clock
        self._reported: dict[str, int] = dict.fromkeys(self._names, 0)
        self._next = clock()
        self._example: tuple[str, BaseException] | None = None  # (where, what was raised) since the last line

    def example(self, where: str, error: BaseException) -> None:
        """An exception counted under one of the names, raised on ``where`` (a record's coordinates); kept if it is
        the first since the last line."""
        if self._example is None:
            self._example = (where, error)

    def check(self, counters: Counter[str], *, at_once: bool = False) -> None:
        """Say what was counted since the last line, if the interval is over (or ``at_once``: a stage stopping)."""
        now = self._clock()
        if now < self._next and not at_once:
            return
        grown = {
            name: counters[name] - self._reported[name] for name in self._names if counters[name] > self._reported[name]
        }
        if not grown:
            return
        self._reported.update({name: counters[name] for name in grown})
        self._next = now + self._interval_s
        said = ", ".join(f"{name.replace('_', ' ')} {count}" for name, count in grown.items())
        example, self._example = self._example, None
        if example is None:
            self._log.warning("%s since the last report: %s (counted in its counters)", self._what, said)
            return
        where, error = example
        self._log.warning(
            "%s since the last report: %s (counted in its counters); the first raised on %s: %r",
            self._what, said, where, error, exc_info=(type(error), error, error.__traceback__),
        )  # fmt: skip
