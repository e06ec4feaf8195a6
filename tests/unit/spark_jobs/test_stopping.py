"""A micro-batch interrupted because its query is being stopped fails with one short error; at any other time its
error goes to Spark as it is."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from py4j.protocol import Py4JNetworkError

from spark_jobs.session import stop
from spark_jobs.stopping import GATEWAY_GONE, INTERRUPTED, batch_function, interrupting, stopping


def _failing(_batch: Any, _batch_id: int) -> None:
    raise LookupError("a long Java trace " * 1000)


def test_a_batch_failing_while_its_query_runs_raises_its_own_error() -> None:
    with pytest.raises(LookupError, match="a long Java trace"):
        batch_function(_failing)(None, 7)  # type: ignore[arg-type]


def test_a_batch_failing_while_its_query_is_stopped_still_fails_with_a_short_error() -> None:
    with stopping(), pytest.raises(RuntimeError, match=r"^micro-batch 7 interrupted: its query is being stopped$"):
        batch_function(_failing)(None, 7)  # type: ignore[arg-type]
    with pytest.raises(LookupError, match="a long Java trace"):  # and no longer once the queries are stopped
        batch_function(_failing)(None, 8)  # type: ignore[arg-type]


def test_a_batch_failing_while_the_stop_waits_for_it_to_end_on_its_own_raises_its_own_error() -> None:
    """The queries' stop waits a few seconds for their running batches to end before it interrupts them: a batch that
    failed then, for a cause of its own (Kafka away, say), was said "interrupted", its cause dropped."""
    with stopping(interrupts=False):
        with pytest.raises(LookupError, match="a long Java trace"):
            batch_function(_failing)(None, 7)  # type: ignore[arg-type]
        with interrupting(), pytest.raises(RuntimeError, match=r"^micro-batch 8 interrupted"):  # the stop itself
            batch_function(_failing)(None, 8)  # type: ignore[arg-type]


def _gateway_error() -> logging.LogRecord:
    path = "/venv/lib/python3.11/site-packages/py4j/java_gateway.py"
    return logging.LogRecord("root", logging.ERROR, path, 1060, "Exception while sending command.", None, None)


def test_py4j_calls_to_a_jvm_gone_are_not_logged_while_stopping(caplog: pytest.LogCaptureFixture) -> None:
    """SIGTERM to the job's process group stops Spark's JVM with it: "job stopped", then py4j's "Exception while
    sending command." with a traceback, logged on the root logger, as the session was stopped."""
    root = logging.getLogger()
    root.removeFilter(GATEWAY_GONE)  # as while a session runs (a session stopped earlier in this process kept it)
    with caplog.at_level(logging.INFO):
        with stopping():
            root.handle(_gateway_error())
            root.handle(logging.LogRecord("root", logging.ERROR, __file__, 1, "ours", None, None))
        root.handle(_gateway_error())  # at any other time, said
    assert caplog.messages == ["ours", "Exception while sending command."]


def test_py4j_calls_to_a_jvm_gone_are_not_logged_after_the_session_stopped(caplog: pytest.LogCaptureFixture) -> None:
    """A call to the JVM from another thread a moment after the session stopped (the JVM killed with it) logged its
    failure with a traceback, after a failed start's one line ("says why in one line")."""
    root = logging.getLogger()
    try:
        with caplog.at_level(logging.INFO):
            stop(None)
            root.handle(_gateway_error())
            root.handle(logging.LogRecord("root", logging.ERROR, __file__, 1, "ours", None, None))
        assert caplog.messages == ["ours"]
    finally:
        root.removeFilter(GATEWAY_GONE)


def _raised(error: BaseException) -> Any:
    try:
        raise error
    except BaseException:
        return sys.exc_info()


def _reentrant_call() -> BaseException:
    """What py4j raises when a call to the JVM reads the socket another call, interrupted, was reading."""
    try:
        raise RuntimeError("reentrant call inside <_io.BufferedReader name=4>")
    except RuntimeError as error:
        reentrant: BaseException = Py4JNetworkError("Error while sending or receiving")
        reentrant.__cause__ = error
        return reentrant


@pytest.mark.parametrize(
    ("error", "message"),
    [
        # A Ctrl-C while Spark starts: py4j logged this with its traceback, before the command said "interrupted".
        (KeyboardInterrupt(), "KeyboardInterrupt while sending command."),
        # The same Ctrl-C runs pyspark's SIGINT handler (in place while its context starts), whose call to cancel
        # every job met the call it interrupted: py4j logged its failure with a traceback, in 2 runs of 6.
        (_reentrant_call(), "Exception while sending command."),
    ],
)
def test_a_ctrl_c_while_a_call_to_the_jvm_waits_is_not_logged_by_py4j(
    caplog: pytest.LogCaptureFixture, error: BaseException, message: str
) -> None:
    """py4j's records of it (on the root logger) are dropped; its other errors are still said."""
    root = logging.getLogger()
    path = "/venv/lib/python3.11/site-packages/py4j/java_gateway.py"
    root.addFilter(INTERRUPTED)
    try:
        with caplog.at_level(logging.INFO):
            root.handle(logging.LogRecord("root", logging.ERROR, path, 1070, message, None, _raised(error)))
            root.handle(_gateway_error())
    finally:
        root.removeFilter(INTERRUPTED)
    assert caplog.messages == ["Exception while sending command."]
