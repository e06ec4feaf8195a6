"""Stopping a streaming query interrupts the micro-batch it runs: that batch's failure is expected then, and kept
short and quiet. Between micro-batches is not always possible: a job catching up runs them back to back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from pyspark.sql import DataFrame


class _Interruptions:
    """How many stops that interrupt micro-batches are in progress (`interrupting`): a micro-batch failing while one
    is was interrupted by it. Counted, not a flag: the queries of a job are stopped at once, each in a thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0

    @contextmanager
    def during(self) -> Iterator[None]:
        with self._lock:
            self._open += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1

    def __bool__(self) -> bool:
        return self._open > 0


_interruptions = _Interruptions()


def batch_function(function: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
    """``function`` as a foreachBatch sink whose failure while its query is being stopped is one short error.

    The batch still fails (it runs again after a restart, so nothing it did is lost or taken as done). Raised as it
    is, the interrupted Java call's error, pages long, went back to Spark, which printed it and then overflowed its
    stack matching a pattern against it: a thousand lines at every Ctrl-C."""

    def run(batch: DataFrame, batch_id: int) -> None:
        try:
            function(batch, batch_id)
        except Exception:
            if _interruptions:
                raise RuntimeError(f"micro-batch {batch_id} interrupted: its query is being stopped") from None
            raise

    return run


class _GatewayGone(logging.Filter):
    """Drops py4j's "Exception while sending command." (logged on the root logger, with a traceback), which every
    call to a JVM that is stopping or gone logs: a Ctrl-C or SIGTERM to the process group stops the JVM with this
    process, and stopping then printed a traceback after "job stopped"."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.replace("\\", "/").endswith("py4j/java_gateway.py")


GATEWAY_GONE = _GatewayGone()  # on the root logger for good once the session is stopped (`spark_jobs.session.stop`)


class _Interrupted(_GatewayGone):
    """Drops py4j's "KeyboardInterrupt while sending command." (on the root logger, with a traceback): a Ctrl-C while
    a call to the JVM waits (Spark starting, say) printed that traceback before the command's own "interrupted". And
    its "Exception while sending command." of a call made while another waits in the same thread ("reentrant call"):
    pyspark's SIGINT handler, in place while its context starts, calls the JVM to cancel every job."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        interrupted = isinstance(error, KeyboardInterrupt) or _reentrant(error)
        return not interrupted or super().filter(record)


def _reentrant(error: BaseException | None) -> bool:
    """Whether ``error`` comes of a read of a socket begun while another read of it waits in the same thread."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:  # a chain may loop (an error made its own context)
        if isinstance(error, RuntimeError) and str(error).startswith("reentrant call"):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


INTERRUPTED = _Interrupted()  # on the root logger from the first session on (`spark_jobs.session.spark_session`)


def interrupted() -> bool:
    """Whether a stop that interrupts the micro-batches is in progress: a wait inside a batch gives up."""
    return bool(_interruptions)


def interrupting() -> AbstractContextManager[None]:
    """While a call that interrupts the micro-batch running (a query's stop, the session's) is in progress: a batch
    failing then fails with a short error (`batch_function`)."""
    return _interruptions.during()


@contextmanager
def stopping(*, interrupts: bool = True) -> Iterator[None]:
    """While this process stops its queries and its session (`spark_jobs.session.stop_queries`, `.stop`): py4j, which
    logs each batch's failure with its Java trace, and each call to a JVM gone with a traceback, logs only what is
    critical; and, with ``interrupts``, the batches that fail meanwhile fail with a short error (`interrupting`).
    Without: the caller says when it interrupts (a wait for the running batches to end on their own comes first, and
    a batch failing then has a cause of its own, which a short error would hide)."""
    py4j, root, gone = logging.getLogger("py4j.clientserver"), logging.getLogger(), _GatewayGone()
    level = py4j.level
    py4j.setLevel(logging.CRITICAL)
    root.addFilter(gone)
    try:
        with interrupting() if interrupts else nullcontext():
            yield
    finally:
        py4j.setLevel(level)
        root.removeFilter(gone)
