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
import ctypes, time
from acker.cli import run_until_signalled

class Stage:
    def run(self, stop):
        print("running", flush=True)
        stop.wait()
        print("stopping", flush=True)
        STUCK

raise SystemExit(run_until_signalled(Stage()))
"""
SLEEPING = "time.sleep(120)  # a flush that never ends: the broker is gone"
# A consumer's close stuck inside librdkafka (librdkafka#4041): a wait on a condition variable nobody signals, which
# never returns to Python, where a signal's handler runs (in the main thread, once its call returns). The same wait,
# through ctypes (glibc: zeroed memory is a mutex's and a condition's initial state).
IN_C = ("libc = ctypes.CDLL(None); mutex, cond = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64); "
        "libc.pthread_mutex_lock(mutex); libc.pthread_cond_wait(cond, mutex)")  # fmt: skip


def _start(stuck: str = "pass") -> subprocess.Popen[str]:
    program = PROGRAM.replace("STUCK", stuck)
    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "running\n"
    return process


def test_the_first_signal_stops_cleanly() -> None:
    process = _start()
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert process.stdout is not None and process.stdout.read() == "stopping\n"


@pytest.mark.parametrize("stuck", [SLEEPING, IN_C], ids=["sleeping", "in a call into C"])
def test_a_second_signal_ends_a_process_stuck_while_stopping(stuck: str) -> None:
    """Stuck in a call into C too: the stage ran in the main thread, and the second signal went unanswered."""
    process = _start(stuck)
    try:
        process.send_signal(signal.SIGINT)
        assert process.stdout is not None and process.stdout.readline() == "stopping\n"
        time.sleep(0.5)  # stuck by now
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


def test_what_the_stage_raises_is_raised_by_the_runner() -> None:
    program = PROGRAM.replace('print("running", flush=True)', 'raise RuntimeError("the stage failed")')
    command = [sys.executable, "-c", program.replace("STUCK", "pass")]
    run = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "RuntimeError: the stage failed" in run.stderr
