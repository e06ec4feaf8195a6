"""How a service, spout or bolt process stops on signals (`acker.cli.run_until_signalled`): a real child process."""

from __future__ import annotations

import signal
import subprocess
import sys

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
