"""`spark_jobs.cli._supervise` with stand-ins for Spark's queries and session (its edge): what it starts again, what
it stops first, and how it ends."""

from __future__ import annotations

import argparse
import functools
import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from py4j.protocol import Py4JNetworkError

from acker.errors import AckerError
from acker.examples.demo import SPARK_RESTARTS, SparkJobs
from acker.retries import Backoff
from spark_jobs import cli, restarts, session


class _Query:
    def __init__(self, spark: _Session, name: str, why: str | None = "Timed out waiting for a node assignment") -> None:
        if any(q.name == name for q in spark.streams.active):  # as Spark refuses it
            raise AckerError(f"Spark could not start the commit job: a query named {name} is already active")
        self.name, self.isActive, self.why = name, True, why
        self.lastProgress: dict[str, int] | None = {"batchId": 0}
        spark.streams.active.append(self)

    def exception(self) -> str | None:
        return self.why

    def fail(self) -> None:
        self.isActive = False


class _Session:
    def __init__(self) -> None:
        self.streams = SimpleNamespace(active=[])


@pytest.fixture(autouse=True)
def at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restarts without their delays; queries stopped as `stop_queries` stops them."""
    monkeypatch.setattr(restarts, "Restarts", functools.partial(restarts.Restarts, backoff=Backoff(1, max_ms=1)))

    def stop_queries(spark: _Session, queries: Any) -> None:
        for query in list(queries):
            query.isActive = False
            if query in spark.streams.active:
                spark.streams.active.remove(query)

    monkeypatch.setattr(session, "stop_queries", stop_queries)


def _args(restarts: int = 3) -> argparse.Namespace:
    return argparse.Namespace(restarts=restarts, spark_job="commit")


def _supervise(spark: _Session, queries: list[_Query], start: Any, stopping: threading.Event | None = None, *,
               restarts: int = 3, kafka_answers: bool = True) -> tuple[list[Any], bool]:  # fmt: skip
    watched: Any = queries  # stand-ins for Spark's
    return cli._supervise(cast(Any, spark), watched, start, stopping or threading.Event(), _args(restarts),
                          kafka_answers=lambda: kafka_answers)  # fmt: skip


def test_a_start_that_failed_half_way_leaves_no_query_running_to_block_the_next(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The commit job starts its main query, then its dead letters' query: when the second could not start, the
    first ran on, unwatched, and every later start was refused its name until the restarts ran out."""
    spark, stopping, attempts = _Session(), threading.Event(), []
    failed = _Query(spark, "acker-commit")
    queries = [failed, _Query(spark, "acker-dead-letters")]

    def start() -> list[Any]:
        attempts.append(1)
        main = _Query(spark, "acker-commit")
        if len(attempts) == 1:
            raise AckerError("Spark could not start the commit job: its checkpoint could not be read")
        stopping.set()  # running again: the test ends here
        return [main, _Query(spark, "acker-dead-letters")]

    failed.fail()
    running, job_failed = _supervise(spark, queries, start, stopping)
    assert (len(attempts), job_failed) == (2, False)
    assert [q.name for q in running] == ["acker-commit", "acker-dead-letters"] and all(q.isActive for q in running)
    assert spark.streams.active == running  # nothing else left running
    said = capsys.readouterr().err
    assert "its checkpoint could not be read" in said and "already active" not in said


def test_the_jvm_gone_during_a_restart_ends_the_job_in_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    spark = _Session()
    query = _Query(spark, "acker-replay")
    query.fail()

    def start() -> list[Any]:
        raise Py4JNetworkError("An error occurred while trying to connect to the Java server")

    assert _supervise(spark, [query], start) == ([], True)
    assert capsys.readouterr().err.splitlines()[-1] == "acker: Spark's JVM has gone (Py4JNetworkError)"


def test_out_of_restarts_the_job_fails_and_a_query_without_an_error_is_said_stopped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spark = _Session()
    query = _Query(spark, "acker-commit", why=None)
    query.fail()

    def start() -> list[Any]:
        again = _Query(spark, "acker-commit", why=None)
        again.fail()
        return [again]

    assert _supervise(spark, [query], start, restarts=2)[1]
    said = capsys.readouterr().err.splitlines()
    assert said.count("acker: query acker-commit stopped") == 3
    assert said[-1] == "acker: 2 restarts in a row have failed: the job stops"


def test_a_job_that_fails_before_its_first_micro_batch_with_kafka_answering_is_not_started_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spark = _Session()
    query = _Query(spark, "acker-commit", why="Failed to create new KafkaAdminClient")
    query.lastProgress = None
    query.fail()

    def start() -> list[Any]:
        raise AssertionError("started again")

    assert _supervise(spark, [query], start) == ([query], True)
    assert "not started again" in capsys.readouterr().err


def test_a_job_started_while_kafka_is_away_is_started_again() -> None:
    """Its first micro-batch fails on Spark's Kafka timeout: an outage, not a setting."""
    spark, stopping = _Session(), threading.Event()
    query = _Query(spark, "acker-commit", why="Timed out waiting for a node assignment. Call: listNodes")
    query.lastProgress = None
    query.fail()

    def start() -> list[Any]:
        stopping.set()
        return [_Query(spark, "acker-commit")]

    running, failed = _supervise(spark, [query], start, stopping, kafka_answers=False)
    assert [q.isActive for q in running] == [True] and not failed


def test_the_demos_jobs_start_again_after_a_failed_query_and_stop_after_too_many_in_a_row() -> None:
    """The demo ran its jobs in its process unwatched: a query that a broker outage (--kill-broker) failed stayed
    stopped, the watermarks stood still, and the run ended at --max-wait-s saying records were lost."""
    spark, events, starts = _Session(), list[str](), [0]

    def start() -> list[Any]:
        starts[0] += 1
        return [_Query(spark, "acker-commit"), _Query(spark, "acker-replay")]

    jobs = SparkJobs(spark, start, events.append)
    jobs.check()
    assert starts == [1] and events == []  # running: nothing to do
    for row in range(SPARK_RESTARTS):
        jobs.queries[0].fail()
        jobs.check()  # stopped: the other query too, and due again after the delay
        assert jobs.queries == [] and spark.streams.active == []
        assert events[-2:] == [
            "Spark query acker-commit stopped: Timed out waiting for a node assignment",
            "the Spark jobs start again from their checkpoints in 0.001 s",
        ]
        time.sleep(0.002)
        jobs.check()
        assert starts == [row + 2] and events[-1] == "the Spark jobs started again"
        assert [q.name for q in spark.streams.active] == ["acker-commit", "acker-replay"]
    jobs.queries[1].fail()
    with pytest.raises(SystemExit, match=f"the Spark jobs failed {SPARK_RESTARTS} times in a row"):
        jobs.check()


def test_a_start_of_the_demos_jobs_spark_refuses_is_one_failed_restart_of_the_row() -> None:
    """A start that failed (Spark refusing it, Kafka still away) ended the demo at once, with restarts left."""
    spark, events, refusals = _Session(), list[str](), [1]

    def start() -> list[Any]:
        if refusals[0]:
            refusals[0] -= 1
            raise AckerError("Spark could not start the commit job: Kafka is away")
        return [_Query(spark, "acker-commit")]

    jobs = SparkJobs(spark, lambda: [_Query(spark, "acker-commit")], events.append)
    jobs._start = start
    jobs.queries[0].fail()
    jobs.check()
    time.sleep(0.002)
    jobs.check()  # refused: due again
    assert events[-2:] == [
        "the Spark jobs could not start again: Spark could not start the commit job: Kafka is away",
        "the Spark jobs start again from their checkpoints in 0.001 s",
    ]
    time.sleep(0.002)
    jobs.check()
    assert events[-1] == "the Spark jobs started again" and [q.name for q in spark.streams.active] == ["acker-commit"]
