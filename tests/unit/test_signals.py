"""How a service, spout or bolt process stops on signals (`acker.cli.run_until_signalled`): a real child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from acker.cli import TerminatedError, interrupted_status, sigterm_as_interrupt

PROGRAM = """
import time
from acker.cli import run_until_signalled

class Stage:
    def run(self, stop):
        print("running", flush=True)
        stop.wait()
        print("stopping", flush=True)
        if STUCK:
            time.sleep(120)  # a flush that never ends: the broker is gone

raise SystemExit(run_until_signalled(Stage()))
"""


def _start(stuck: bool) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", f"STUCK = {stuck}\n{PROGRAM}"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "running\n"
    return process


def test_the_first_signal_stops_cleanly() -> None:
    process = _start(stuck=False)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert process.stdout is not None and process.stdout.read() == "stopping\n"


def test_a_second_signal_ends_a_process_stuck_while_stopping() -> None:
    process = _start(stuck=True)
    try:
        process.send_signal(signal.SIGINT)
        assert process.stdout is not None and process.stdout.readline() == "stopping\n"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 128 + signal.SIGTERM
    finally:
        process.kill()
        process.wait()


def test_sigterm_within_a_runner_raises_as_ctrl_c_does_and_the_handler_before_comes_back() -> None:
    """The demo and `wordcount run` stop what they started on SIGTERM as on Ctrl-C, and say which it was."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TerminatedError) as stopped, sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs in the main thread, at once
    assert signal.getsignal(signal.SIGTERM) is before
    assert interrupted_status(stopped.value) == 143 and interrupted_status(KeyboardInterrupt()) == 130


def test_a_second_signal_ends_a_process_whose_stop_is_stuck_in_a_call_that_does_not_return() -> None:
    """A consumer's close stuck inside librdkafka (librdkafka#4041: a wait on a condition variable that is never
    signalled) never returns to Python, and Python runs a signal's handler in the main thread once its call returns:
    the second signal went unanswered while the stage ran in the main thread. The same wait here, through ctypes."""
    stuck = PROGRAM.replace(
        "time.sleep(120)",
        "libc = ctypes.CDLL(None); mutex, cond = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64); "
        "libc.pthread_mutex_lock(mutex); libc.pthread_cond_wait(cond, mutex)",  # glibc: zeroes are their initial state
    ).replace("import time", "import ctypes, time")
    process = subprocess.Popen([sys.executable, "-c", f"STUCK = True\n{stuck}"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "running\n"
        process.send_signal(signal.SIGINT)
        assert process.stdout.readline() == "stopping\n"
        time.sleep(0.5)  # in the wait by now
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 128 + signal.SIGTERM
    finally:
        process.kill()
        process.wait()


def test_what_the_stage_raises_is_raised_by_the_runner() -> None:
    program = PROGRAM.replace('print("running", flush=True)', 'raise RuntimeError("the stage failed")')
    command = [sys.executable, "-c", f"STUCK = False\n{program}"]
    run = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "RuntimeError: the stage failed" in run.stderr
