"""The local broker's spawner thread: children forked from a thread that lives as long as the process, whichever
thread starts them, and a forked child that starts one of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from acker.kafka import local_broker


def _from_a_thread(value: int) -> int | None:
    """``value``, as `_forked_lastingly` hands it back to a worker thread, or None after 5 s."""
    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(local_broker._forked_lastingly(lambda: value)), daemon=True)
    worker.start()
    worker.join(5)
    return got[0] if got else None


def test_a_child_forked_after_the_spawner_ran_spawns_with_a_spawner_of_its_own() -> None:
    """The spawner thread is not in a forked child: its first start from a worker thread waited for ever."""
    assert _from_a_thread(1) == 1  # the spawner runs now
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's outcome is its exit status)
        os._exit(0 if _from_a_thread(2) == 2 else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's start never came back"


_UNDER_FIRE = """
import logging, os, signal, subprocess, sys, threading, time
from acker.cli import TerminatedError
from acker.kafka.local_broker import spawn

ballast = bytearray(200 * 1024 * 1024)  # a process the size of a demo's: each fork takes a while
main = threading.main_thread().ident
children = []  # kept, as a caller keeps what it started (`spawn`'s ``started``), and waited for at the end
start = lambda argv: spawn(argv, started=children.append)  # subprocess.Popen(argv, preexec_fn=...) hung here
spawned = raised = 0
armed = False  # SIGTERM raises only while a spawn runs: one raised anywhere else (the shooter's own start, a loop's
deadline = time.monotonic() + 4  # test) would end this script, not show what a spawn does with it

def on_term(*_):
    global raised
    if armed:
        raised += 1
        raise TerminatedError  # as `acker.cli.sigterm_as_interrupt` does

def held():
    return f"owner={main} " in repr(logging._lock)

signal.signal(signal.SIGTERM, on_term)
shooter = subprocess.Popen(["sh", "-c", f"for i in $(seq 1500); do kill -TERM {os.getpid()}; sleep 0.003; done"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while time.monotonic() < deadline and not held():
    try:
        armed = True
        start(["true"])
        armed = False
        spawned += 1
    except TerminatedError:
        armed = False
signal.signal(signal.SIGTERM, signal.SIG_IGN)
shooter.kill()
shooter.wait()
for child in children:
    child.wait()
got = []
other = threading.Thread(target=lambda: got.append(logging._lock.acquire(timeout=2)), daemon=True)
other.start()
other.join()
print(spawned, raised, got[0], flush=True)
os._exit(0)
"""


def test_a_sigterm_while_a_child_is_forked_stops_the_parent_and_leaves_loggings_lock_free() -> None:
    """Forked with a ``preexec_fn``, a child has Python run its at-fork hooks in the parent, logging's among them: a
    SIGTERM handled in one raised where Python drops the exception. The demo carried on, its stop lost, and logging's
    lock stayed held: its Spark batches, and its next stop, hung for good."""
    ran = subprocess.run([sys.executable, "-c", _UNDER_FIRE], capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    _, raised, free = ran.stdout.split()  # each SIGTERM raised once the child is forked, outside Python's hooks
    assert int(raised) > 0 and free == "True", ran.stdout + ran.stderr
    assert "_releaseLock" not in ran.stderr, ran.stderr  # "Exception ignored in: <function _releaseLock ...>"


def test_handlers_put_back_after_a_spawn_are_all_put_back_when_a_signal_pending_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Putting SIGINT's back first ran a pending SIGINT's handler (KeyboardInterrupt) before SIGTERM's was: SIGTERM
    kept the recorder for good, and every later SIGTERM was swallowed."""
    put: dict[int, object] = {}
    calls = iter([KeyboardInterrupt(), None, None])

    def fake_signal(sig: int, handler: object) -> object:
        pending = next(calls, None)
        if pending is not None:
            raise pending  # as signal.signal runs a pending signal's handler before it installs the new one
        put[sig] = handler
        return None

    monkeypatch.setattr(signal, "signal", fake_signal)  # the module local_broker calls it through
    with pytest.raises(KeyboardInterrupt):
        local_broker._put_back({signal.SIGINT: "int handler", signal.SIGTERM: "term handler"}, [signal.SIGTERM])
    assert put == {signal.SIGINT: "int handler", signal.SIGTERM: "term handler"}


def test_a_second_ctrl_c_while_the_broker_is_stopped_kills_it_rather_than_leave_it_unwatched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait for the JVM to take its SIGTERM, interrupted, went no further: neither the SIGKILL past the grace
    period nor the reaping, and the JVM lived on, its owner gone."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, "
         "flush=True); time.sleep(60)"], start_new_session=True, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline() == b"1\n"  # its SIGTERM handler is in place

    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(local_broker, "time", SimpleNamespace(monotonic=time.monotonic, sleep=interrupted))
    try:
        with pytest.raises(KeyboardInterrupt):
            local_broker._terminate_group(child)
        assert child.returncode == -signal.SIGKILL  # killed and reaped before the interruption went on
    finally:
        if child.returncode is None:
            child.kill()
            child.wait()
        child.stdout.close()


class _StoppedTwice:
    """A broker at the edge whose start gets a SIGTERM, and a second one while it cleans up after the first."""

    cleaned = False

    def __init__(self, **_settings: object) -> None:
        pass

    def start(self) -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        except BaseException:
            os.kill(os.getpid(), signal.SIGTERM)  # as a second Ctrl-C in `_cleanup`'s wait for the JVM
            time.sleep(0.2)
            _StoppedTwice.cleaned = True
            raise

    def stop(self) -> None:
        pass


def test_a_second_signal_while_the_start_is_stopped_does_not_cut_the_stop_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each signal raised while the broker started, the second one too, in the middle of the cleanup the first one
    began: its wait for the JVM went no further, and the JVM lived on after the command had exited."""
    monkeypatch.setattr(local_broker, "LocalKafkaBroker", _StoppedTwice)
    assert local_broker.main(["--port", "1"]) == 130
    assert _StoppedTwice.cleaned
