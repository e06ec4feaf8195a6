"""What processes used, read from /proc: CPU seconds (user + system, all threads), where a run's time went, and
peak resident memory."""

from __future__ import annotations

import os
import time


def _stat_seconds(path: str) -> float:
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` (Linux): in clock ticks (10 ms) from /proc, to the nanosecond for
    this process itself (its CPU clock, every thread)."""
    return time.process_time() if pid == os.getpid() else _stat_seconds(f"/proc/{pid}/stat")


def peak_rss_mib(pid: int) -> float:
    """The peak resident memory of process ``pid`` so far (Linux's VmHWM), in MiB; NaN where it cannot be read (the
    process ended, or not Linux)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return float("nan")


def reset_peak_rss() -> bool:
    """Set this process's peak resident memory (VmHWM) back to what it holds now (Linux ≥ 4.0: ``5`` written to
    ``/proc/self/clear_refs``), so that `peak_rss_mib` tells the peak of what runs next; False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


JVM_COMPILER = "CompilerThre"
"""What the names of HotSpot's JIT compiler threads contain ("C1 CompilerThre", "C2 CompilerThre")."""


def threads(pid: int, name_contains: str) -> dict[int, float]:
    """CPU seconds used so far by each live thread of process ``pid`` whose name contains ``name_contains`` (a JVM's
    ``C2 CompilerThre``, say), by thread id. Compare two of these with `threads_spent`."""
    out: dict[int, float] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # the process ended
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as comm:
                if name_contains in comm.read():
                    out[int(task)] = _stat_seconds(f"/proc/{pid}/task/{task}/stat")
        except OSError:  # the thread ended
            continue
    return out


def threads_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the threads of ``after`` used since ``before``. A thread that ended in between is not counted: a
    lower bound (a JVM stops compiler threads it no longer needs)."""
    return sum(seconds - before.get(tid, 0.0) for tid, seconds in after.items())


def snapshot(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def spent(before: dict[str, float], pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds each process used since ``before`` (a `snapshot` of the same processes)."""
    return {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}


class Window:
    """Wall-clock and CPU seconds of some processes (every thread of each) from its making to `close`: what a timed
    section of a benchmark cost the machine, not only how long it took."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before = snapshot(pids)
        self.started = time.perf_counter()

    def close(self) -> tuple[float, float]:
        """(seconds elapsed, CPU seconds the processes used together) since the window was made."""
        elapsed = time.perf_counter() - self.started
        return elapsed, sum(self.by_process().values())

    def by_process(self) -> dict[str, float]:
        """CPU seconds each process used since the window was made."""
        return spent(self.before, self.pids)
