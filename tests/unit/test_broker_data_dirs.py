"""The local broker's temporary data dirs: one left by an owner that died without stopping its broker is removed by
the next broker started, once its processes are gone; others are left alone."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from acker.kafka.local_broker import (
    KAFKA_VERSION,
    POM_PATH,
    LocalKafkaBroker,
    _pid_namespace,
    _sweep_dead_dumps,
    fetch_jars,
    sweep_orphaned_data_dirs,
)


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


def test_class_data_dumps_of_owners_gone_are_swept_once_no_jvm_can_still_write_them(tmp_path: Path) -> None:
    """A killed owner's JVM writes its dump (50 MB) as it stops, and nothing removed it: each stayed in the jar
    cache for good."""
    archive = tmp_path / "broker-classes-0123456789abcdef.jsa"
    orphan = tmp_path / f"{archive.name}.{_dead_pid()}-7f00.tmp"
    fresh = tmp_path / f"{archive.name}.{_dead_pid()}-7f01.tmp"  # its JVM may still be writing it
    mine = tmp_path / f"{archive.name}.{os.getpid()}-7f02.tmp"
    other = tmp_path / "broker-classes-fedcba9876543210.jsa.1-7f03.tmp"  # another archive's
    for dump in (orphan, fresh, mine, other):
        dump.write_bytes(b"x")
    old = time.time() - 3600
    for dump in (orphan, mine, other):
        os.utime(dump, (old, old))
    assert _sweep_dead_dumps(archive) == [orphan]
    assert [d.exists() for d in (orphan, fresh, mine, other)] == [False, True, True, True]


def test_class_data_dumps_of_owners_gone_are_swept_also_once_the_archive_exists(tmp_path: Path) -> None:
    """Brokers started together with no archive yet (a test run's workers) each dump one; one whose owner was
    killed stayed for good once a sibling had put the archive in place: only a start without an archive swept."""
    archive = tmp_path / "broker-classes-0123456789abcdef.jsa"
    archive.write_bytes(b"archive")
    orphan = tmp_path / f"{archive.name}.{_dead_pid()}-7f00.tmp"
    orphan.write_bytes(b"x")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    broker = LocalKafkaBroker()
    broker._cds_archive, broker._data_dir = archive, tmp_path
    command = broker._java_command("java", tmp_path, "kafka.Kafka", dump_classes=True)
    assert f"-XX:SharedArchiveFile={archive}" in command
    assert not orphan.exists() and archive.exists()


def test_the_work_dir_of_a_fetch_killed_midway_is_swept_once_the_jars_are_there_unless_a_fetch_runs(
    tmp_path: Path,
) -> None:
    """A fetch killed midway left its work dir (tens of MB); the sweep ran only before a fetch, and once another fetch
    had put the jars there none ran again."""
    version_dir = tmp_path / f"kafka-{KAFKA_VERSION}"
    (version_dir / "lib").mkdir(parents=True)
    (version_dir / ".complete").write_text(hashlib.sha256(POM_PATH.read_bytes()).hexdigest() + "\n")
    stale = version_dir / "fetch-killed"
    (stale / "lib").mkdir(parents=True)
    with open(version_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a fetch of another process is running: its work dir may be this one
        assert fetch_jars(tmp_path) == version_dir / "lib" and stale.is_dir()
    assert fetch_jars(tmp_path) == version_dir / "lib" and not stale.exists()
