"""Test-wide settings: Hypothesis profiles (CI runs more examples, never with a deadline on a shared machine), an
environment without the shell's acker settings or a terminal's size, and Ctrl-C that the commands the tests start
can receive. A command that failed (`subprocess.run(..., check=True)`) has its own output in the report."""

import os
import signal
import subprocess
from collections.abc import Generator

import pytest
from hypothesis import HealthCheck, settings

# The suite ignores the acker's settings of the shell that runs it (`ACKER_BOOTSTRAP_SERVERS`, `ACKER_KAFKA_*`, a
# `ACKER_CONFIG` file, ...), which the README has operators export: the tests' commands and configurations would take
# them up (a test's CLI call naming only some settings would take the rest from there, a SASL login say). Kept: the
# tests' own (`ACKER_TEST_*`) and where the jars are cached (`ACKER_CACHE_DIR`).
for _name in [n for n in os.environ if n.startswith("ACKER_") and not n.startswith(("ACKER_TEST_", "ACKER_CACHE_DIR"))]:
    del os.environ[_name]

# A table is as wide as ``COLUMNS`` says when it is set (`acker.console`): pytest-xdist's workers have COLUMNS=80 and
# LINES=24, which cut the rows that tests read whole. A test that wants a width sets it.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# A suite started in the background by a shell without job control (`cmd &` in a script) has SIGINT ignored, and
# every process it starts inherits that: the tests that send Ctrl-C to a command (`acker demo`, `acker replay -`)
# saw it carry on. Handled here, not ignored, the signal is the default again in those processes.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that ended with `subprocess.CalledProcessError` shows what the command wrote: the error names only its
    exit status, and the test's captured stderr is that of the whole process (a Spark job's warnings of another
    test, say), where the command's own lines are not."""
    report: pytest.TestReport = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, subprocess.CalledProcessError):
        for stream, text in (("stdout", error.stdout), ("stderr", error.stderr)):
            if text:
                shown = text.decode(errors="replace") if isinstance(text, bytes) else text
                report.sections.append((f"the failed command's {stream}", shown))
    return report
