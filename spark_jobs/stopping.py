"""Stopping a streaming query interrupts the micro-batch it runs: that batch's failure is expected then, and kept
short and quiet. Between micro-batches is not always possible: a job catching up runs them back to back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame

_stopping = threading.Event()  # set by `stopping`: a micro-batch failing now was interrupted by it


def batch_function(function: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
    """``function`` as a foreachBatch sink whose failure while its query is being stopped is one short error.

    The batch still fails (it runs again after a restart, so nothing it did is lost or taken as done). Raised as it
    is, the interrupted Java call's error, pages long, went back to Spark, which printed it and then overflowed its
    stack matching a pattern against it: a thousand lines at every Ctrl-C."""

    def run(batch: DataFrame, batch_id: int) -> None:
        try:
            function(batch, batch_id)
        except Exception:
            if _stopping.is_set():
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
    a call to the JVM waits (Spark starting, say) printed that traceback before the command's own "interrupted"."""

    def filter(self, record: logging.LogRecord) -> bool:
        interrupted = record.exc_info is not None and record.exc_info[0] is KeyboardInterrupt
        return not interrupted or super().filter(record)


INTERRUPTED = _Interrupted()  # on the root logger from the first session on (`spark_jobs.session.spark_session`)


@contextmanager
def stopping() -> Iterator[None]:
    """While this process stops its queries and its session (`spark_jobs.session.stop_queries`, `.stop`): the
    batches they interrupt fail with a short error, and py4j, which logs each such failure with its Java trace, and
    each call to a JVM gone with a traceback, logs only what is critical."""
    py4j, root, gone = logging.getLogger("py4j.clientserver"), logging.getLogger(), _GatewayGone()
    level = py4j.level
    _stopping.set()
    py4j.setLevel(logging.CRITICAL)
    root.addFilter(gone)
    try:
        yield
    finally:
        _stopping.clear()
        py4j.setLevel(level)
        root.removeFilter(gone)
