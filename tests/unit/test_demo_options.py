"""The demo refuses settings under which its own check could not tell the injected failures' work from a loss."""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from rich.console import Console

import acker.examples.demo as demo_module
from acker.errors import ConfigError
from acker.examples.demo import (
    BROKER,
    BROKER_DOWN_S,
    CHAOS_DOWN_S,
    CHAOS_SPAN,
    GIVE_UP_S,
    Demo,
    DemoOptions,
    Kill,
    SparkJobs,
    check_options,
    check_report_path,
    kill_plan,
    prune_runs,
    run,
)
from acker.examples.ledger import SPARE_BAD_LUCK, Ledger
from acker.kafka import lookups


def test_a_timeout_every_attempt_of_which_a_failover_outlasts_is_refused() -> None:
    """With --timeout-s 1 and --max-attempts 1 a record caught by the crash timed out at both attempts before its
    partitions moved: good records were dead-lettered, and the run said FAILED though nothing was lost."""
    short = replace(DemoOptions(), timeout_s=1.0, max_attempts=1)
    with pytest.raises(ConfigError, match=r"--timeout-s 1 with --max-attempts 1: every attempt"):
        check_options(short)
    check_options(replace(short, crash_split=False, kill_acker=False))  # no failover: nothing to outlast
    with pytest.raises(ConfigError, match=r"and no --chaos"):
        check_options(replace(short, crash_split=False, kill_acker=False, chaos=1))  # kills of its own
    check_options(replace(short, max_attempts=7))  # attempts that outlast it
    check_options(DemoOptions())


def test_a_run_that_gave_up_or_never_crashed_says_so_among_its_failures() -> None:
    """A run that stopped at --max-wait-s printed "46 source record(s) lost" and nothing else: the "gave up" line went
    to the JSON report only. And a run whose split process never crashed passed without the failure it shows."""
    demo = Demo(DemoOptions(max_wait_s=25), "127.0.0.1:1", Console(file=io.StringIO()))
    assert demo.failures() == [
        "no split process crashed (none read its share of sentences before the end)",
        "1 kill(s) not dealt (the writing ended before their moment)",  # the acker instance's
    ]
    demo.gave_up = True
    assert demo.failures()[0] == "not finished within --max-wait-s (25 s)"
    marker = Path(demo.stages.crash_flags("split", 1)[1].removeprefix("--crash-marker="))
    demo.stages.stop()
    assert not marker.parent.exists()
    quiet = Demo(
        replace(DemoOptions(), crash_split=False, kill_acker=False), "127.0.0.1:1", Console(file=io.StringIO())
    )
    assert quiet.failures() == []
    quiet.stages.stop()


def test_a_run_keeps_the_newest_run_directories_and_removes_the_rest(tmp_path: Path) -> None:
    """Each run left about 1 MB of checkpoints and logs under .cache/demo, never removed."""
    for i in range(7):
        run = tmp_path / f"demo-{i:06x}"
        (run / "checkpoints").mkdir(parents=True)
        (run / "spark.log").write_text("x")
        os.utime(run, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "other").mkdir()
    removed = prune_runs(tmp_path, 4)
    assert sorted(p.name for p in removed) == ["demo-000000", "demo-000001", "demo-000002"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "demo-000003",
        "demo-000004",
        "demo-000005",
        "demo-000006",
        "other",
    ]


def test_a_cleanup_kafka_refuses_is_said_and_leaves_the_runs_outcome_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The end of a run on a named cluster deletes its topics and groups; a failure there (the cluster not
    answering) replaced the run's report, or its "interrupted" and exit status 130, with a traceback."""

    def refused(*_args: object, **_kwargs: object) -> tuple[list[str], list[str]]:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "the cluster does not answer"))

    monkeypatch.setattr("acker.examples.demo.named_under", refused)
    out = io.StringIO()
    demo = Demo(DemoOptions(), "127.0.0.1:1", Console(file=out, width=200))
    demo.leave(keep=False)
    demo.stages.stop()
    assert f"left behind: this run's topics and groups, {demo.prefix}*" in out.getvalue()
    assert "the cluster does not answer" in out.getvalue()


def test_a_runs_kills_are_the_ackers_and_one_in_each_slot_of_the_chaos_span_drawn_from_the_seed() -> None:
    plan = kill_plan(replace(DemoOptions(), chaos=4, seed=3))
    assert plan == sorted(plan, key=lambda kill: kill.at) and len(plan) == 5
    assert Kill(0.4, "acker-0", 3.0) in plan
    chaos = [kill for kill in plan if kill.stage is None]
    first, last = CHAOS_SPAN
    slot = (last - first) / 4
    for i, kill in enumerate(chaos):
        assert first + slot * i <= kill.at < first + slot * (i + 1)
        assert CHAOS_DOWN_S[0] <= kill.down_s <= CHAOS_DOWN_S[1]
    assert kill_plan(replace(DemoOptions(), chaos=4, seed=3)) == plan  # a run can be dealt again
    assert kill_plan(replace(DemoOptions(), chaos=4, seed=4)) != plan
    assert kill_plan(replace(DemoOptions(), kill_acker=False)) == []
    assert kill_plan(replace(DemoOptions(), kill_acker=False, kill_broker=True)) == [Kill(0.5, BROKER, BROKER_DOWN_S)]


def test_the_broker_is_killed_only_when_the_demo_runs_its_own() -> None:
    """On a cluster named by --bootstrap-servers, --kill-broker is refused at once (nothing started); a run whose
    broker is not its own (none given to it) skips the kill and says so."""
    with pytest.raises(ConfigError, match="--kill-broker kills the demo's own local broker"):
        run(replace(DemoOptions(), kill_broker=True), "127.0.0.1:1", None, Console(file=io.StringIO()))
    demo = Demo(replace(DemoOptions(), kill_acker=False, crash_split=False, kill_broker=True, sentences=10),
                "127.0.0.1:1", Console(file=io.StringIO()))  # fmt: skip
    demo._deal_kills(10)
    assert demo.events[-1].endswith("no SIGKILL: broker is not running") and demo.failures() == []
    demo.stages.stop()


def test_an_empty_bootstrap_servers_is_refused_before_any_broker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--bootstrap-servers ""`` is a mistake, not "start a local broker": it was refused only once one had started."""
    started: list[object] = []
    monkeypatch.setattr(demo_module, "kafka_cluster", lambda *a, **k: started.append(a))
    with pytest.raises(ConfigError, match="--bootstrap-servers is empty"):
        run(DemoOptions(), "", None, Console(file=io.StringIO()))
    assert started == []


def test_the_kills_come_at_their_moment_and_the_processes_killed_start_again_after_their_time_down() -> None:
    """Each kill takes a process running then (the acker instance's is skipped, and said, if a random kill took it
    first); a killed process is not taken for a crash while down, and starts again after."""
    demo = Demo(replace(DemoOptions(), sentences=100, chaos=2, crash_split=False), "127.0.0.1:1",
                Console(file=io.StringIO()))  # fmt: skip
    sleeper: tuple[list[str], dict[str, str]] = ([sys.executable, "-c", "import time; time.sleep(120)"], {})
    try:
        for name in ("acker-0", "acker-1", "spout"):
            demo.stages.start(name, sleeper)
        demo._deal_kills(5)  # before the first one's moment
        assert demo.stages.up() == ["acker-0", "acker-1", "spout"] and not demo._down
        demo._deal_kills(100)
        dealt = [e for e in demo.events if "with SIGKILL" in e or "no SIGKILL" in e]
        assert len(dealt) == 3 and not demo._kills and demo.failures() == []
        killed = sorted(demo._down)
        assert killed and sorted(set(demo.stages.up()) | set(killed)) == ["acker-0", "acker-1", "spout"]
        assert not set(demo.stages.up()) & set(killed)
        demo.stages.watch(expected_down=frozenset(demo._down))  # down on purpose: no "exited with -9"
        demo._down = dict.fromkeys(demo._down, 0.0)  # their time down is over
        demo._deal_kills(100)
        assert demo.stages.up() == ["acker-0", "acker-1", "spout"] and not demo._down
        assert sum(e.split(maxsplit=1)[1].startswith("restarted ") for e in demo.events) == len(killed)
    finally:
        demo.stages.stop()


def test_a_run_whose_kills_did_not_all_come_says_so_among_its_failures() -> None:
    demo = Demo(replace(DemoOptions(), chaos=2, crash_split=False), "127.0.0.1:1", Console(file=io.StringIO()))
    assert demo.failures() == ["3 kill(s) not dealt (the writing ended before their moment)"]
    demo.gave_up = True  # said so already
    assert demo.failures() == ["not finished within --max-wait-s (300 s)"]
    demo.stages.stop()


class _Broker:
    """Stands in for the local broker (`LocalKafkaBroker.crash` and `start`), saying what was done to it."""

    def __init__(self, said: list[str]) -> None:
        self.said, self.running = said, True

    def is_running(self) -> bool:
        return self.running

    def crash(self) -> None:
        self.running = False
        self.said.append("broker crashed")

    def start(self) -> None:
        self.running = True
        self.said.append("broker started")


def test_processes_killed_while_the_broker_is_away_start_again_only_once_it_is_back() -> None:
    """Started while the broker was away, a stage process gave up after about 30 s (exit 2) and ended the run."""
    said: list[str] = []
    options = replace(DemoOptions(), sentences=100, kill_acker=False, crash_split=False, kill_broker=True, chaos=1)
    demo = Demo(options, "127.0.0.1:1", Console(file=io.StringIO()), broker=_Broker(said))  # type: ignore[arg-type]
    assert demo.ledger.spare == SPARE_BAD_LUCK + 2  # room for a good record failed at every attempt by each kill
    demo.stages.start("split-0", ([sys.executable, "-c", "import time; time.sleep(120)"], {}))
    try:
        demo._kills = deque([Kill(0.5, "split-0", 0.0), Kill(0.5, BROKER, 60.0)])
        demo._deal_kills(100)
        assert said == ["broker crashed"] and demo.stages.up() == [] and set(demo._down) == {"split-0", BROKER}
        demo._deal_kills(100)  # split-0's time down is over, the broker's is not
        assert demo.stages.up() == [] and said == ["broker crashed"]
        demo._down[BROKER] = 0.0
        demo._deal_kills(100)
        assert said == ["broker crashed", "broker started"] and demo.stages.up() == ["split-0"] and not demo._down
    finally:
        demo.stages.stop()


def _ending(code: int, said: str) -> tuple[list[str], dict[str, str]]:
    """A stage command that says ``said`` on its standard error, as `acker.cli.main` does, and exits with ``code``."""
    script = f"import sys, time; time.sleep(0.3); print({said!r}, file=sys.stderr); sys.exit({code})"
    return [sys.executable, "-c", script], {}


_NO_ANSWER_SAID = "acker: reading metadata of demo-1.acker: _TRANSPORT: Failed to get metadata: Local: Broker transport"


def test_a_stage_that_gave_up_on_the_broker_away_starts_again_once_it_is_back_other_ends_are_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A count process started as the broker was killed gave up on it (exit 2) before it came back: the run ended
    ("stage count-1 exited with 2"). Such an end, saying that Kafka did not answer, by GIVE_UP_S after the broker is
    back, is now a restart to come; one of a process started after the broker was back, or saying something else, or
    with another status, is still the run's error."""
    monkeypatch.chdir(tmp_path)  # the run's directory, with the stages' logs
    said: list[str] = []
    options = replace(DemoOptions(), sentences=100, kill_acker=False, crash_split=False, kill_broker=True)
    demo = Demo(options, "127.0.0.1:1", Console(file=io.StringIO()), broker=_Broker(said))  # type: ignore[arg-type]
    spare = demo.ledger.spare

    def ended(name: str) -> None:
        demo.stages.running[name][1].wait()

    try:
        demo.stages.start("count-1", _ending(2, _NO_ANSWER_SAID))
        demo._kills = deque([Kill(0.5, BROKER, 60.0)])
        demo._deal_kills(100)
        ended("count-1")
        demo.stages.watch(expected_down=frozenset(demo._down), excused=demo._gave_up)  # not the run's error
        assert set(demo._down) == {BROKER, "count-1"} and demo.ledger.spare == spare + 1
        assert "count-1 gave up on the broker away (acker: reading metadata" in demo.events[-1]
        demo._deal_kills(100)  # the broker still away: nothing starts
        assert said == ["broker crashed"] and demo.stages.up() == []
        demo._down[BROKER] = 0.0
        demo._deal_kills(100)
        assert said == ["broker crashed", "broker started"] and not demo._down and demo.stages.up() == ["count-1"]
        ended("count-1")  # says so again, started with the broker back: an error
        with pytest.raises(SystemExit, match="stage count-1 exited with 2"):
            demo.stages.watch(expected_down=frozenset(demo._down), excused=demo._gave_up)
        demo._outages = [(-GIVE_UP_S, demo.stages.since["count-1"] + 1.0)]  # as if it started with the broker away
        assert demo._gave_up("count-1", 2) and set(demo._down) == {"count-1"}
        del demo._down["count-1"]
        demo._outages = [(t - 2 * GIVE_UP_S, back - 2 * GIVE_UP_S) for t, back in demo._outages]  # back long ago
        assert not demo._gave_up("count-1", 2) and not demo._down
        demo._outages = [(0.0, math.inf)]  # away again: other ends are errors all the same
        for name, code, line in (("spout", 3, _NO_ANSWER_SAID), ("split-0", 2, "acker: unknown wire version 9"),
                                 ("split-1", 2, "Traceback (most recent call last):")):  # fmt: skip
            demo.stages.start(name, _ending(code, line))
            ended(name)
            assert not demo._gave_up(name, code), name
        assert not demo._down
        demo.stages.start("count-2", _ending(2, "acker: Kafka did not answer in time: is it running, and reachable?"))
        ended("count-2")  # as `acker.cli` says a timeout: given up on the broker away
        assert demo._gave_up("count-2", 2) and set(demo._down) == {"count-2"}
    finally:
        demo.stages.stop()


def test_the_watch_asks_the_lookups_of_the_moment_after_a_spark_restart_closed_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watch took the process's lookups once; a Spark job started again closes them all (`stop_job`), and the
    next watermark question raised "these Kafka lookups are closed": the demo died without a report."""

    def committed(kafka: lookups.KafkaLookups, *_args: object) -> dict[tuple[str, int], int]:
        kafka._admin_client()  # raises once closed, as the lookups do
        return {}  # no Kafka here

    monkeypatch.setattr(lookups.KafkaLookups, "committed", committed)
    monkeypatch.setattr("spark_jobs.session.stop_queries", lambda _spark, queries: [q.stop() for q in list(queries)])
    demo = Demo(replace(DemoOptions(), kill_acker=False, crash_split=False, max_wait_s=1.5), "127.0.0.1:1",
                Console(file=io.StringIO()))  # fmt: skip

    class Query:
        def __init__(self, name: str) -> None:
            self.name, self.isActive = name, True

        def exception(self) -> str:
            return "Timed out waiting for a node assignment"

        def stop(self) -> None:
            self.isActive = False

    queries = [Query("acker-commit"), Query("acker-replay")]
    demo.jobs = SparkJobs(SimpleNamespace(streams=SimpleNamespace(active=[])), lambda: queries, demo.event)
    queries[0].isActive = False  # an outage failed it

    def writer() -> Iterator[int]:
        while True:
            yield 10

    reader: Any = SimpleNamespace(consume=lambda *_args, **_kwargs: [])
    try:
        demo._watch([reader] * 6, writer())
    finally:
        demo.stages.stop()
        lookups.close_all()
    assert demo.gave_up and any("Spark query acker-commit stopped" in e for e in demo.events)


class _Reader:
    made: list[_Reader] = []  # noqa: RUF012 - the test's record of them

    def __init__(self, _settings: dict[str, Any]) -> None:
        self.closed = False
        _Reader.made.append(self)

    def assign(self, _partitions: list[Any]) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_the_watchs_readers_made_before_one_kafka_did_not_describe_are_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """They were handed over only once all were made: a topic not described in time (30 s) left those made before
    it open, in their groups, until the process ended."""
    asked = []

    def described(_reader: object, topic: str, timeout_s: float) -> list[int]:
        asked.append(topic)
        if len(asked) == 3:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer"))
        return [0]

    monkeypatch.setattr("acker.examples.demo.Consumer", _Reader)
    monkeypatch.setattr("acker.examples.demo.topic_partitions", described)
    demo = Demo(DemoOptions(), "127.0.0.1:1", Console(file=io.StringIO()))
    readers: list[Any] = []
    try:
        with pytest.raises(KafkaException):
            demo._readers(readers)
    finally:
        demo.stages.stop()
    assert readers == _Reader.made and len(readers) == 3  # the caller's to close, the third one too


def test_a_report_file_that_cannot_be_written_is_refused_before_the_run_and_never_hides_its_verdict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Written after the run, before its verdict: an unwritable --report said the file's error (exit 2), and a run that
    lost records never said FAILED (exit 1)."""
    with pytest.raises(ConfigError, match="is a directory"):
        check_report_path(str(tmp_path))
    with pytest.raises(ConfigError, match="there is no directory"):
        check_report_path(str(tmp_path / "gone" / "report.json"))
    check_report_path(str(tmp_path / "report.json"))  # a new file in a writable directory

    class _Losing:  # a run that lost a record
        prefix, gave_up = "demo-x", False
        events: list[str] = []  # noqa: RUF012 - read only

        def __init__(self, *_args: object, **_kwargs: object) -> None:
            pass

        def run(self) -> Any:
            ledger = Ledger()
            ledger.written("t", 0, 0, b"a b", poison=False)
            return ledger.report()

        def failures(self) -> list[str]:
            return []

    @contextlib.contextmanager
    def cluster(_bootstrap: object, use_docker: bool) -> Iterator[Any]:
        yield SimpleNamespace(kind="local", bootstrap_servers="127.0.0.1:1", local=None)

    monkeypatch.setattr("acker.examples.demo.kafka_cluster", cluster)
    monkeypatch.setattr("acker.examples.demo.Demo", _Losing)
    report = tmp_path / "report.json"
    monkeypatch.setattr("acker.examples.demo.check_report_path", lambda _path: None)  # the disk fills meanwhile, say
    report.mkdir()
    out = io.StringIO()
    assert run(DemoOptions(), None, str(report), Console(file=out, width=200)) == 1
    assert "the report could not be written to" in out.getvalue() and "FAILED:" in out.getvalue()
