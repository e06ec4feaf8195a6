"""CPU seconds used by processes (user + system, all threads), read from /proc: where a run's time went."""

from __future__ import annotations

import os


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def snapshot(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def spent(before: dict[str, float], pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds each process used since ``before`` (a `snapshot` of the same processes)."""
    return {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
