"""The local broker's temporary data dirs: one left by an owner that died without stopping its broker is removed by
the next broker started, once its processes are gone; others are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from acker.kafka.local_broker import sweep_orphaned_data_dirs


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_directories_whose_owner_and_jvm_are_both_gone_are_swept(tmp_path: Path) -> None:
    dirs = {name: tmp_path / f"acker-kafka-{name}" for name in ("orphan", "owner-alive", "jvm-alive", "kept", "other")}
    for path in dirs.values():
        path.mkdir()
        (path / "server.properties").write_text("x")
    dead = _dead_pid()
    (dirs["orphan"] / ".owners").write_text(f"{dead} {_dead_pid()}\n")
    (dirs["owner-alive"] / ".owners").write_text(f"{os.getpid()}\n")
    (dirs["jvm-alive"] / ".owners").write_text(f"{dead} {os.getpid()}\n")  # its JVM still shutting down, say
    (tmp_path / "acker-kafka-other").rename(tmp_path / "other-tool-dir")  # not a broker's: another name
    # "kept" has no owners file: keep_data, or made by an earlier version
    assert sweep_orphaned_data_dirs(tmp_path) == [dirs["orphan"]]
    assert not dirs["orphan"].exists()
    assert all(dirs[name].exists() for name in ("owner-alive", "jvm-alive", "kept"))
