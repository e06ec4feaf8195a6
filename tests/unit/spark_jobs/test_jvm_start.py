"""Starting Spark's JVM: one start at a time over the connectors' shared Ivy cache, and a start that fails said
with where the JVM printed why."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from acker.cli import main
from spark_jobs import session


class _LaunchedError(Exception):
    """Raised in place of the JVM's start: the session goes no further."""


def _held_by_another(lock: Path) -> bool:
    with lock.open("a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


@pytest.mark.parametrize("jvm_output", [None, "jvm.log"])
def test_a_jvm_starts_holding_the_ivy_caches_lock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jvm_output: str | None
) -> None:
    """The commit and replay jobs started together on an empty cache: Ivy's own artifact lock did not keep their
    downloads apart, and one JVM exited before it sent its port ("Java gateway process exited")."""
    monkeypatch.setenv("ACKER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)  # not under spark-submit
    monkeypatch.setenv("PYSPARK_PYTHON", "python3")
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "python3")
    monkeypatch.setattr(SparkContext, "_gateway", None)  # no JVM yet: this call starts one
    lock = tmp_path / "ivy-central" / "start.lock"
    held: list[bool] = []

    def launch(*_: object, **__: object) -> None:
        held.append(_held_by_another(lock))
        raise _LaunchedError

    class Builder:  # without jvm_output (a session this process made already would be got, not made: a fake)
        def config(self, **_: object) -> Builder:
            return self

        def getOrCreate(self) -> None:
            launch()

    monkeypatch.setattr(session, "launch_gateway", launch)  # with jvm_output
    monkeypatch.setattr(SparkSession, "builder", Builder())
    with pytest.raises(_LaunchedError):
        session.spark_session("t", jvm_output=tmp_path / jvm_output if jvm_output else None)
    assert held == [True]
    assert not _held_by_another(lock)  # let go, the start failed


def test_a_jvm_started_already_takes_no_lock(tmp_path: Path) -> None:
    with session._resolving_alone(tmp_path, starting=False):
        assert not (tmp_path / "start.lock").exists()
    with session._resolving_alone(tmp_path, starting=True):
        assert _held_by_another(tmp_path / "start.lock")


def test_a_jvm_that_exits_at_its_start_is_said_with_where_it_printed_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The job said "Java gateway process exited before sending its port number" alone; why (a connector's
    download failed) was in the --spark-log file."""

    def exited(*_: object, **__: object) -> None:
        raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})

    monkeypatch.setattr("spark_jobs.session.spark_session", exited)
    monkeypatch.setattr("spark_jobs.commit_job.OutcomeSource.check_login", lambda _: False)
    monkeypatch.setattr("acker.kafka.clients.ensure_topics", lambda *_, **__: None)
    log = tmp_path / "spark.log"
    argv = ["spark", "commit", "--checkpoint", str(tmp_path / "c"), "--spout", "s", "--restarts", "0"]
    assert main([*argv, "--spark-log", str(log)]) != 0
    err = capsys.readouterr().err
    assert "Spark could not start the commit job: [JAVA_GATEWAY_EXITED]" in err, err
    assert f"(what its JVM printed: {log})" in err
