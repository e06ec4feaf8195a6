"""The local broker's temporary data dirs: one left by an owner that died without stopping its broker is removed by
the next broker started, once its processes are gone; others are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from acker.kafka.local_broker import _pid_namespace, sweep_orphaned_data_dirs


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_directories_whose_owner_and_jvm_are_both_gone_are_swept(tmp_path: Path) -> None:
    names = ("orphan", "owner-alive", "jvm-alive", "kept", "other", "container")
    dirs = {name: tmp_path / f"acker-kafka-{name}" for name in names}
    for path in dirs.values():
        path.mkdir()
        (path / "server.properties").write_text("x")
    dead, ns = _dead_pid(), _pid_namespace()
    (dirs["orphan"] / ".owners").write_text(f"{ns}\n{dead} {_dead_pid()}\n")
    (dirs["owner-alive"] / ".owners").write_text(f"{ns}\n{os.getpid()}\n")
    (dirs["jvm-alive"] / ".owners").write_text(f"{ns}\n{dead} {os.getpid()}\n")  # its JVM still shutting down, say
    (dirs["container"] / ".owners").write_text(f"{ns + 1}\n{dead}\n")  # another PID namespace's: its ids are not ours
    (tmp_path / "acker-kafka-other").rename(tmp_path / "other-tool-dir")  # not a broker's: another name
    # "kept" has no owners file: keep_data, or made by an earlier version
    assert sweep_orphaned_data_dirs(tmp_path) == [dirs["orphan"]]
    assert not dirs["orphan"].exists()
    assert all(dirs[name].exists() for name in ("owner-alive", "jvm-alive", "kept", "container"))
