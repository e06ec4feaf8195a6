"""`acker demo`: the whole system on a local Kafka broker it starts itself (the embedded default), under failures,
checking that it keeps its promise.

What runs: a local single-node Kafka broker (unless ``--bootstrap-servers`` names a cluster); two acker instances
in one group; Storm's word count as processes (a spout, split bolts, count bolts); the Spark commit and replay jobs
on local Spark, in this process. What goes wrong, on purpose: the split bolts fail a share of the sentences and
every poison sentence; the count bolts silently drop a share of the words (their trees time out); one split process
crashes and is restarted; the last count process joins late, so that words partitions move to it while words are
counted; one acker instance is killed with SIGKILL and restarted. With ``--chaos N``, N more processes, each picked
at random among those running then (acker instances, the spout, split and count bolts), are killed with SIGKILL
while the sentences are written, and restarted a few seconds later (the Spark jobs run in the demo's own process,
and are not killed). With ``--kill-broker``, the local broker itself is killed with SIGKILL half-way through the
writing and started again on its data some seconds later: every process waits for it and carries on, and a Spark
query the outage fails is started again from its checkpoint, as ``acker spark`` does.

What is checked (`acker.examples.ledger`): every sentence is acked, directly or after replays, or dead-lettered (the
poison ones, and a good one only if each of its attempts was nacked); the watermark reaches the end of every source
partition and never passed a record before it was done; no word of an acked sentence goes uncounted, and no word's
last count is below the times it was counted. The exit status is 1 if any of that fails.

On a cluster named by ``--bootstrap-servers``, the run's topics and consumer groups (all named under its prefix,
``demo-<6 hex digits>``) are deleted at its end, unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from acker.argtypes import at_least, positive, share
from acker.cli import DID_NOT_ANSWER, TerminatedError, interrupted_status, sigterm_as_interrupt
from acker.config import ServiceConfig
from acker.errors import AckerError, ConfigError
from acker.examples.ledger import SPARE_BAD_LUCK, Ledger, Report
from acker.examples.wordcount import COUNTS_TOPIC_CONFIG, POISON, SENTENCE, Topics, sentences
from acker.examples.wordcount_cli import PipelineStages, stage_command
from acker.headers import read_headers, text
from acker.help_text import prose
from acker.kafka.clients import (
    NO_ANSWER,
    TopicSpec,
    answering,
    create_topics,
    delete_groups,
    delete_topics,
    named_under,
    produce,
    topic_partitions,
)
from acker.kafka.local_broker import LocalKafkaBroker
from acker.kafka.lookups import lookups
from acker.kafka.provision import blank_bootstrap, kafka_cluster
from acker.retries import DETAIL, MAX_HOLD_MS, ORIGIN, Backoff
from acker.spout import SpoutSettings
from acker.wire import WireError, decode_outcomes
from spark_jobs import require_spark


@dataclass(frozen=True)
class DemoOptions:
    sentences: int = 3000
    rate: float = 150.0  # sentences written per second, so that the failures hit a stream in flight
    poison: int = 3  # sentences that fail at every attempt: they must end in the dead-letter topic
    fail_rate: float = 0.02  # share of sentences the split bolts fail
    drop_rate: float = 0.002  # share of words the count bolts drop silently
    split_processes: int = 2
    count_processes: int = 2
    partitions: int = 4
    timeout_s: float = 6.0
    # Storm's max.spout.pending: what the stages process well within the timeout even on a busy machine. Unbounded
    # (the spout's 10,000), a pipeline that fell behind the writing had every tree wait in the stages' queues past the
    # timeout: each replay added to the queues, and good records timed out at every attempt.
    max_pending: int = 250
    max_attempts: int = 3
    backoff_ms: int = 500
    crash_split: bool = True
    kill_acker: bool = True
    chaos: int = 0  # more SIGKILLs, of stage processes picked at random
    kill_broker: bool = False  # the local broker's SIGKILL, half-way through the writing
    max_wait_s: float = 300.0
    seed: int = 1


# How long a crashed process's or a killed acker's partitions take to move to a live one: the 6 s group session of
# `ServiceConfig.failing_over_fast`, the rebalance, the new owner's replay.
FAILOVER_S = 8.0

# The share of the sentences written when the last count process joins (with two or more): partitions of the words
# topic move to it while they are counted, and its counts must go on from the last ones written.
LATE_COUNT_AT = 0.2

# When the kills of ``--chaos`` come: spread evenly over this span of the writing (shares of the sentences written),
# each moved at random within its slot; how long a process killed so stays down.
CHAOS_SPAN = (0.1, 0.9)
CHAOS_DOWN_S = (1.0, 5.0)

# The kill of ``--kill-broker``: the stage (of `Kill`) that names the local broker, and how long it stays down.
BROKER = "broker"
BROKER_DOWN_S = 8.0

# A stage process that ends saying Kafka did not answer (exit status 2, `acker.cli`; `_no_answer`) while the broker is
# away, or up to this long after it came back, gave up on it: started again, as a supervisor would. One starting when
# the broker went gives up after about 10 s (an acker instance 30 s); so may one that was waiting for an answer (a
# read-back, a lookup).
GIVE_UP_S = 60.0

# How long the end of a run on a cluster named waits for each answer of the cluster, and asks again to delete a group
# the broker says still has members.
LEAVE_WAIT_S = 15.0

# Starts in a row of the demo's Spark jobs after a failed query (`SparkJobs`).
SPARK_RESTARTS = 5

# Runs whose directories (Spark's checkpoints and log, each process's log) a new run keeps; older ones are removed.
RUNS_KEPT = 5


def prune_runs(root: Path, keep: int = RUNS_KEPT) -> list[Path]:
    """Remove all but the ``keep`` newest run directories under ``root`` (by modification time); return those
    removed. A run's topics are its own, so nothing reads its checkpoints once it has ended."""
    runs = sorted((p for p in root.glob("demo-*") if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in runs[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return runs[keep:]


def check_options(options: DemoOptions) -> None:
    """`ConfigError` for settings under which the run cannot tell a good record dead-lettered by the injected failures
    from one lost to them: every attempt of a tree caught by a crash or a kill times out before its partitions move,
    and good records are dead-lettered in numbers the failure rates do not explain."""
    kills = options.crash_split or options.kill_acker or options.chaos > 0
    if kills and options.timeout_s * (options.max_attempts + 1) < FAILOVER_S:
        raise ConfigError(
            f"--timeout-s {options.timeout_s:g} with --max-attempts {options.max_attempts}: every attempt of a record "
            f"caught by the injected crash or kills may time out before its partitions move (about "
            f"{FAILOVER_S:.0f} s), and good records would be dead-lettered: give a longer timeout or more attempts, "
            "or --no-crash-split --no-kill-acker and no --chaos"
        )


@dataclass(frozen=True)
class Kill:
    """A SIGKILL the demo deals once the share ``at`` of the sentences is written: to ``stage``, or with None to a
    stage process picked at random among those running then; the process is restarted ``down_s`` later."""

    at: float
    stage: str | None
    down_s: float


def kill_plan(options: DemoOptions) -> list[Kill]:
    """The kills of a run, in the order they come: the acker instance's (``kill_acker``), the broker's
    (``kill_broker``), and ``chaos`` more, one in each of as many equal slots of `CHAOS_SPAN`, at a moment and for a
    time drawn from the run's seed."""
    plan = [Kill(0.4, "acker-0", 3.0)] if options.kill_acker else []
    if options.kill_broker:
        plan.append(Kill(0.5, BROKER, BROKER_DOWN_S))
    rng = random.Random(f"chaos-{options.seed}")
    first, last = CHAOS_SPAN
    slot = (last - first) / max(1, options.chaos)
    for i in range(options.chaos):
        plan.append(Kill(first + slot * (i + rng.random()), None, rng.uniform(*CHAOS_DOWN_S)))
    return sorted(plan, key=lambda kill: kill.at)


def run(
    options: DemoOptions, bootstrap: str | None, report_path: str | None, console: Console, *, keep: bool = False
) -> int:
    """The demo, on the cluster ``bootstrap`` names or on a local broker; on a cluster named, this run's topics and
    consumer groups are deleted at its end unless ``keep`` (the local broker's go with it)."""
    check_options(options)
    if options.kill_broker and bootstrap is not None:
        raise ConfigError("--kill-broker kills the demo's own local broker: not one of --bootstrap-servers")
    if report_path:
        check_report_path(report_path)
    # checked before any broker starts: an empty --bootstrap-servers is refused, not taken for "a local broker"
    if (blank := blank_bootstrap(bootstrap)) is not None:
        raise ConfigError(blank)
    named = None if bootstrap is None else ServiceConfig(bootstrap_servers=bootstrap)
    try:
        with sigterm_as_interrupt(), kafka_cluster(bootstrap, use_docker=False) as cluster:  # the local broker
            console.print(f"Kafka: {cluster.kind} cluster at {cluster.bootstrap_servers}")
            if named is not None:  # one that does not answer is said as every command says it, within seconds,
                # not after each topic's creation timed out, followed by leftovers that were never made
                answering(named.client(), named.acker_topic)
            demo = Demo(options, cluster.bootstrap_servers, console, broker=cluster.local)
            try:
                report = demo.run()
            finally:
                if bootstrap is not None:
                    demo.leave(keep)
    except (KeyboardInterrupt, TerminatedError) as stopped:
        console.print("\n[yellow]interrupted: everything the demo started has been stopped[/]")  # after a live line
        return interrupted_status(stopped)
    console.print(render_report(report))
    failures = demo.failures() + report.failures
    unwritten = False
    if report_path:
        document = {**asdict(report), "failures": failures, "prefix": demo.prefix, "events": demo.events}
        try:  # checked before the run, but a disk may fill or a directory go: the verdict below is said anyway
            Path(report_path).write_text(json.dumps(document, indent=2))
        except OSError as error:
            console.print(f"[red]the report could not be written to {report_path}: {error.strerror or error}[/]")
            unwritten = True
    if demo.gave_up:
        console.print(f"[yellow]the run did not finish within --max-wait-s ({options.max_wait_s:g} s): the figures "
                      "above are of an unfinished run (records not resolved yet count as lost)[/]")  # fmt: skip
    if failures:
        console.print("[bold red]FAILED:[/] " + "; ".join(failures))
        return 1
    console.print(
        "[bold green]OK:[/] every sentence was fully processed or dead-lettered (poison, or nacked at every attempt);"
        " none lost"
    )
    return 2 if unwritten else 0


def check_report_path(path: str) -> None:
    """`ConfigError` unless a report can be written to ``path`` (an existing file writable, or a new one in a
    writable directory): said before the run, not after it in place of its verdict."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"--report {path} is a directory: name a file")
    where = target.parent
    if not where.is_dir():
        raise ConfigError(f"--report {path}: there is no directory {where}")
    if not os.access(target if target.exists() else where, os.W_OK):
        raise ConfigError(f"--report {path} cannot be written (permission denied)")


def _last_said(log: Path) -> str | None:
    """The last line a stage command said of its end (``acker: ...``, `acker.cli.main`) in its ``log``, if any."""
    try:
        with log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 8192))
            tail = file.read().decode(errors="replace")
    except OSError:
        return None
    return next((line for line in reversed(tail.splitlines()) if line.startswith("acker: ")), None)


_NO_ANSWER_NAMES = tuple(f": {KafkaError(code).name()}: " for code in NO_ANSWER)


def _no_answer(said: str) -> bool:
    """Whether a stage command's last line says that Kafka did not answer: as `acker.cli.main` says a librdkafka
    error of `NO_ANSWER` or a timeout, or as a `KafkaClientError` of one names it (``reading metadata of T:
    _TRANSPORT: ...``)."""
    return DID_NOT_ANSWER in said or any(name in said for name in _NO_ANSWER_NAMES)


class Demo:
    def __init__(
        self, options: DemoOptions, bootstrap: str, console: Console, *, broker: LocalKafkaBroker | None = None
    ) -> None:
        """``broker``: the local broker the run is on, which ``kill_broker`` kills."""
        self.options, self.console, self.broker = options, console, broker
        self.prefix = f"demo-{uuid.uuid4().hex[:6]}"
        self.topics = Topics(self.prefix)
        self.config = (
            ServiceConfig(
                bootstrap_servers=bootstrap,
                partitions=options.partitions,
                timeout_s=options.timeout_s,
                metrics_port=0,
            )
            .namespaced(self.prefix)
            .failing_over_fast()
        )  # a killed instance's partitions move after seconds, not 45
        self._kills = deque(kill_plan(options))  # to come, in order
        # Each kill may time out every attempt of a tree or so: room for one more good record dead-lettered a kill.
        spare = SPARE_BAD_LUCK + len(self._kills)
        # Traced: the count processes run with --trace, so every count names its sentence.
        self.ledger = Ledger(options.max_attempts, options.fail_rate, options.drop_rate, spare=spare, traced=True)
        self.events: list[str] = []
        self.gave_up = False  # the run ended at --max-wait-s, not with every record resolved
        self.late_count: int | None = None  # the count process that joins at LATE_COUNT_AT, until it has
        self._down: dict[str, float] = {}  # stage process killed → when it is restarted
        self._outages: list[tuple[float, float]] = []  # the broker's: (killed, back, or math.inf while away)
        self._chaos = random.Random(f"chaos-pick-{options.seed}")  # picks the process of a kill that names none
        self.jobs: SparkJobs | None = None  # once started
        self.started = time.monotonic()
        self.workdir = Path(".cache/demo") / self.prefix  # Spark's checkpoints and log, each stage's log
        self.stages = PipelineStages(log=self.event, settings_given_only=True, output_dir=self.workdir)
        console.print(f"topics, groups and processes of this run are named {self.prefix}*")

    def event(self, line: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:6.1f}s  {line}")

    def failures(self) -> list[str]:
        """What the run itself did not do (the ledger's report says what the system did not)."""
        out = []
        if self.gave_up:
            out.append(f"not finished within --max-wait-s ({self.options.max_wait_s:g} s)")
        if self.options.crash_split and not self.stages.crashed("split"):
            out.append("no split process crashed (none read its share of sentences before the end)")
        if self._kills and not self.gave_up:
            out.append(f"{len(self._kills)} kill(s) not dealt (the writing ended before their moment)")
        return out

    # -- the run ----------------------------------------------------------------------------------------------

    def run(self) -> Report:
        prune_runs(self.workdir.parent, RUNS_KEPT - 1)  # this run's is made next
        self._create_topics()
        from spark_jobs.session import stop, stop_queries  # noqa: PLC0415 - pyspark loads when the demo runs

        readers: list[Consumer] = []
        spark = None
        try:
            self._start_stages()
            self.event(f"starting the Spark jobs (the first run fetches the connectors); log: {self.workdir}/spark.log")
            spark, start = self._start_spark()
            self.jobs = SparkJobs(spark, start, self.event)
            self._readers(readers)
            self._watch(readers, self._writer())
        finally:
            self.stages.stop()  # first: with no more outcomes coming, the queries are stopped between micro-batches
            if spark is not None and self.jobs is not None:
                stop_queries(spark, self.jobs.queries)
            stop(spark)  # also a JVM still starting, when interrupted then
            for reader in readers:
                reader.close()
        return self.ledger.report()

    def leave(self, keep: bool) -> None:
        """Delete this run's topics and consumer groups (every one named under its prefix), unless ``keep``; say
        what was done, and what is left behind and why. A group whose last member has just gone may still be refused
        for a moment (``NON_EMPTY_GROUP``, a killed member until its session expires): asked again for a while."""
        if keep:
            self.console.print(f"this run's topics and consumer groups are kept on the cluster: {self.prefix}*")
            return
        client = self.config.client()
        try:  # the run's own outcome (its report, or an interruption) is what the command says, whatever this does
            topics, groups = named_under(client, self.prefix, timeout_s=LEAVE_WAIT_S)
            topics_left = delete_topics(client, topics, timeout_s=LEAVE_WAIT_S)
            groups_left = delete_groups(client, groups, timeout_s=LEAVE_WAIT_S)
            deadline = time.monotonic() + LEAVE_WAIT_S
            while groups_left and time.monotonic() < deadline:
                time.sleep(1.0)
                groups_left = delete_groups(client, groups_left, timeout_s=LEAVE_WAIT_S)
        except Exception as error:  # Kafka not answering, or any failure: said, and the run goes on
            self.console.print(f"[yellow]left behind: this run's topics and groups, {self.prefix}* (could not delete "
                               f"them: {error})[/]")  # fmt: skip
            return
        self.console.print(f"deleted this run's {len(topics) - len(topics_left)} topics and "
                           f"{len(groups) - len(groups_left)} consumer groups from the cluster ({self.prefix}*; "
                           "--keep keeps them)")  # fmt: skip
        for name, why in sorted({**topics_left, **groups_left}.items()):
            self.console.print(f"[yellow]left behind: {name} ({why})[/]")

    @property
    def spark_dlq_topic(self) -> str:
        return f"{self.config.dlq_topic}.out"

    def _create_topics(self) -> None:
        c, n = self.config, self.options.partitions
        create_topics(
            c.client(),
            [
                TopicSpec(c.acker_topic, n),
                TopicSpec(c.outcome_topic(self.topics.spout), n),
                TopicSpec(c.dlq_topic, 1),
                TopicSpec(c.replay_topic(self.topics.spout), n),
                TopicSpec(c.replay_dlq_topic, 1),
                TopicSpec(self.spark_dlq_topic, 1),  # where the Spark jobs put malformed outcome records
                TopicSpec(c.status_topic, 1, config={"cleanup.policy": "compact"}),
                *(TopicSpec(t, n) for t in (self.topics.sentences, self.topics.split, self.topics.words)),
                TopicSpec(self.topics.counts, n, config=COUNTS_TOPIC_CONFIG),
            ],
        )

    def _start_stages(self) -> None:
        o, c, prefix = self.options, self.config, self.prefix
        for i in range(2):
            self.stages.start(f"acker-{i}", stage_command(c, prefix, "acker", "--instance-id", f"acker-{i}"))
        self.stages.start("spout", stage_command(c, prefix, "spout", "--trace", f"--max-pending={o.max_pending}"))
        # Early in a process's share: the first split process to get there crashes (`PipelineStages.crash_flags`).
        crash_after = max(1, o.sentences // (10 * o.split_processes))
        crash = self.stages.crash_flags("split", crash_after) if o.crash_split else []
        for i in range(o.split_processes):
            extra = ["--fail-rate", str(o.fail_rate), "--seed", str(o.seed + i), "--trace", *crash]
            self.stages.start(f"split-{i}", stage_command(c, prefix, "split", *extra))
        self.late_count = o.count_processes - 1 if o.count_processes > 1 else None
        for i in range(o.count_processes):
            if i != self.late_count:
                self._start_count(i)
        late = f"; count-{self.late_count} joins later" if self.late_count is not None else ""
        self.event(f"started 2 acker instances, a spout, {o.split_processes} split and {o.count_processes} count bolts"
                   f"{late} (their output: {self.workdir}/<name>.log)")  # fmt: skip

    def _start_count(self, i: int) -> None:
        extra = ["--drop-rate", str(self.options.drop_rate), "--seed", str(self.options.seed + i), "--trace"]
        self.stages.start(f"count-{i}", stage_command(self.config, self.prefix, "count", *extra))

    def _start_spark(self) -> tuple[Any, Callable[[], list[Any]]]:
        """Spark's session, and what starts the jobs' queries (again: from their checkpoints)."""
        from spark_jobs import commit_job, replay_job  # noqa: PLC0415 - pyspark loads when the demo runs
        from spark_jobs.session import spark_session  # noqa: PLC0415

        c, checkpoint = self.config, self.workdir.resolve()
        source = commit_job.OutcomeSource(c.client(), (c.outcome_topic(self.topics.spout),))
        # Spark's own output goes to a file: Ivy's report of the connectors, its log lines, its warnings of
        # micro-batches slower than the trigger (frequent with a dozen processes on one machine) would cut through the
        # live table.
        # Named under the run's prefix, as its other processes are (on its command line): what a run left running is
        # found by the prefix alone.
        spark = spark_session(f"acker-{self.prefix}", jvm_output=checkpoint / "spark.log")
        groups = {self.topics.spout: self.topics.spout_group}
        commit = commit_job.CommitJobSettings(
            source, f"{checkpoint}/commit", groups=groups, dlq_topic=self.spark_dlq_topic
        )
        replay = replay_job.ReplayJobSettings(
            source,
            f"{checkpoint}/replay",
            name=f"{self.prefix}-replay",
            max_attempts=self.options.max_attempts,
            backoff=Backoff(first_ms=self.options.backoff_ms),
            replay_prefix=c.replay_prefix,
            dead_letter_topic=c.replay_dlq_topic,
            groups=groups,  # the spout's watermark group: late nacks of records past it are not replayed
            progress_topic=f"{self.prefix}.replay.progress",
            dlq_topic=self.spark_dlq_topic,
        )
        return spark, lambda: [*commit_job.start(spark, commit), *replay_job.start(spark, replay)]

    def _readers(self, readers: list[Consumer]) -> None:
        """A reader of each topic the demo watches, put in ``readers`` as soon as it is made: the caller closes
        them, also those made before one whose topic Kafka did not describe in time."""
        c = self.config
        for topic in (
            c.outcome_topic(self.topics.spout),
            c.replay_topic(self.topics.spout),
            c.replay_dlq_topic,
            self.topics.counts,
            c.dlq_topic,  # records the acker could not read: the demo writes none
            self.spark_dlq_topic,  # outcome records the Spark jobs could not read: none either
        ):
            # read_committed, as the spout reads: a copy in an aborted transaction was never replayed
            reader = Consumer(c.client(**{"group.id": f"{self.prefix}-watch-{topic}", "enable.auto.commit": False,
                                          "isolation.level": "read_committed"}))  # fmt: skip
            readers.append(reader)
            partitions = topic_partitions(reader, topic, timeout_s=30)
            reader.assign([TopicPartition(topic, p, 0) for p in partitions])

    def _writer(self) -> Iterator[int]:
        """Writes the sentences at the configured rate, a little at each step; yields how many are written."""
        o = self.options
        lines = list(sentences(o.sentences, seed=o.seed))
        rng = random.Random(o.seed)
        for i in rng.sample(range(len(lines)), min(o.poison, len(lines))):
            lines[i] = b"the " + POISON + b" apple " + lines[i]
        producer = Producer(self.config.producer(**{"enable.idempotence": True}))
        failures: list[str] = []

        def delivered(error: Any, record: Message, line: bytes) -> None:
            if error is not None:
                failures.append(str(error))
                return
            topic, partition, offset = record.topic() or "", record.partition() or 0, record.offset() or 0
            self.ledger.written(topic, partition, offset, line, poison=POISON in line.split())

        self.event(f"writing {len(lines)} sentences ({o.poison} poison) at {o.rate:g}/s to {self.topics.sentences}")
        began, sent = time.monotonic(), 0
        while sent < len(lines):
            due = min(len(lines), int((time.monotonic() - began) * o.rate) + 1)
            for i, line in enumerate(lines[sent:due], start=sent):
                # Keyed, so that the sentences (and the spout's copies, which keep the key) spread over every
                # partition: unkeyed, librdkafka puts each linger's worth in one partition, and a split process
                # could get too few to reach its injected crash.
                produce(
                    producer,
                    self.topics.sentences,
                    line,
                    key=b"sentence-%d" % i,
                    on_delivery=lambda e, r, line=line: delivered(e, r, line),
                )
            sent = due
            producer.poll(0)
            if failures:
                raise SystemExit(f"could not write a sentence: {failures[0]}")
            yield sent
        # Delivered a step at a time, not with one flush: the loop stepping this restarts a broker killed meanwhile
        # (--kill-broker). A sentence not delivered within the producer's message.timeout.ms is a failure said.
        while len(producer) > 0:
            producer.poll(0)
            if failures:
                raise SystemExit(f"could not write every sentence: {failures[0]}")
            yield sent
        self.event("every sentence written")
        while True:
            yield sent

    # -- watching -------------------------------------------------------------------------------------------------

    def _watch(self, readers: list[Consumer], writer: Iterator[int]) -> None:
        outcomes, copies, dead, counts, *unreadable = readers
        watermark_group = SpoutSettings(self.topics.spout, self.topics.sentences, self.topics.split,
                                        group=self.topics.spout_group).watermark_group  # fmt: skip
        deadline = time.monotonic() + self.options.max_wait_s
        with Live(self._progress(), console=self.console, refresh_per_second=4, transient=False) as live:
            while time.monotonic() < deadline:
                written = next(writer)
                self._deal_kills(written)
                marks: dict[tuple[str, int], int] = {}
                if BROKER not in self._down:  # away (--kill-broker), the question would wait for its timeout
                    # The process's lookups, each time: a Spark job started again closed them all (`SparkJobs`).
                    kafka = lookups(self.config.client())
                    try:
                        with kafka.lock:  # shared with the Spark jobs' lookups in this process: it may wait
                            marks = kafka.committed(watermark_group, self._watermark_partitions())
                    except KafkaException:  # the broker not back yet: no sample this time
                        pass
                at_ms = int(time.time() * 1000)  # after: committed by now (before, an ack read meanwhile looked late)
                self.ledger.watermarks(at_ms, {tp: m for tp, m in marks.items() if m >= 0})
                self._read(outcomes, copies, dead, counts, unreadable)
                if self.jobs is not None:
                    self.jobs.check()
                # Down on purpose: not a crash (after its restart, one is); nor is giving up on the broker away.
                self.stages.watch(expected_down=frozenset(self._down), excused=self._gave_up)
                if self.late_count is not None and written >= self.options.sentences * LATE_COUNT_AT:
                    self._start_count(self.late_count)
                    self.event(f"count-{self.late_count} joined (words partitions move to it, whose counts go on "
                               "from the last ones written)")  # fmt: skip
                    self.late_count = None
                live.update(self._progress())
                if self._finished():
                    self.event("every sentence is resolved and every watermark is at its end")
                    live.update(self._progress())
                    return
                time.sleep(0.25)
        self.gave_up = True
        self.event(f"gave up after {self.options.max_wait_s:.0f} s")

    def _deal_kills(self, written: int) -> None:
        """Restart the processes killed whose time down is over, then deal the kills due once ``written`` sentences
        are written (`kill_plan`). A kill of a process down already (killed, or crashed and not restarted yet), or
        with none running, is said and skipped."""
        # The broker first; the stage processes only once it is back: started while it is away, one gives up after
        # about 10 s (an acker instance 30 s; exit 2), as it would on a cluster that is not there.
        for stage, until in sorted(self._down.items(), key=lambda item: item[0] != BROKER):
            if time.monotonic() >= until and (stage == BROKER or BROKER not in self._down):
                took = self._restart(stage)
                del self._down[stage]
                self.event(f"restarted {stage}" + (f" (ready {took:.1f} s later)" if took >= 1 else ""))
        while self._kills and written >= self.options.sentences * self._kills[0].at:
            kill = self._kills.popleft()
            up = [stage for stage in self.stages.up() if stage not in self._down]
            name = kill.stage or (self._chaos.choice(up) if up else None)  # the broker only when named
            broker_up = name == BROKER and self.broker is not None and self.broker.is_running()
            if name is None or not (name in up or broker_up):
                self.event(f"no SIGKILL: {name or 'no stage process'} is not running")
                continue
            self._kill(name)
            self._down[name] = time.monotonic() + kill.down_s  # now: a broker's restart above may have taken long
            self.event(f"killed {name} with SIGKILL ({_AFTER_KILL[name.split('-')[0]]}); restarting it in "
                       f"{kill.down_s:.1f} s")  # fmt: skip

    def _gave_up(self, name: str, code: int) -> bool:
        """Whether stage process ``name``, ended with exit status ``code``, gave up on the broker away (`GIVE_UP_S`):
        status 2 and its last line saying Kafka did not answer. Such a process is started again once the broker is
        back (`_deal_kills`), and counts as a kill in the ledger's room for bad luck."""
        since, now = self.stages.since[name], time.monotonic()
        if code != 2 or not any(since < back and now <= back + GIVE_UP_S for _, back in self._outages):
            return False
        said = _last_said(self.workdir / f"{name}.log")
        if said is None or not _no_answer(said):
            return False
        self._down[name] = now
        self.ledger.spare += 1
        self.event(f"{name} gave up on the broker away ({said}); restarting it once the broker is back")
        return True

    def _kill(self, name: str) -> None:
        if name == BROKER:
            assert self.broker is not None  # running
            self.broker.crash()
            self._outages.append((time.monotonic(), math.inf))
        else:
            self.stages.kill(name)

    def _restart(self, name: str) -> float:
        """Start a process killed again; how long that took (the broker's start waits until it is ready)."""
        began = time.monotonic()
        if name == BROKER:
            assert self.broker is not None  # killed
            self.broker.start()  # on its data and port
            self._outages[-1] = (self._outages[-1][0], time.monotonic())
        else:
            self.stages.restart(name)
        return time.monotonic() - began

    def _watermark_partitions(self) -> list[tuple[str, int]]:
        n, c = self.options.partitions, self.config
        return [(t, p) for t in (self.topics.sentences, c.replay_topic(self.topics.spout)) for p in range(n)]

    def _read(
        self, outcomes: Consumer, copies: Consumer, dead: Consumer, counts: Consumer, unreadable: list[Consumer]
    ) -> None:
        for record in _available(outcomes):
            try:
                decoded = decode_outcomes(record.value() or b"")
            except WireError:
                continue
            at_ms = record.timestamp()[1]
            for outcome, msg_id, latency in zip(decoded.outcomes, decoded.msg_ids, decoded.latency_ms, strict=True):
                self.ledger.outcome(msg_id, outcome, latency, by_acker=decoded.acker_partition >= 0, at_ms=at_ms)
        for record in _available(copies):
            origin = text(read_headers(record), ORIGIN)
            if origin is not None:
                self.ledger.copy(record.topic() or "", record.partition() or 0, record.offset() or 0, origin)
        for record in _available(dead):
            headers = read_headers(record)
            origin = text(headers, ORIGIN)
            if origin is not None:
                self.ledger.dead_letter(origin, text(headers, DETAIL))
        for record in _available(counts):
            value = record.value()
            count = int(value) if value is not None and value.isdigit() else None
            self.ledger.count(record.key() or b"", text(read_headers(record), SENTENCE), count, record.timestamp()[1])
        for reader in unreadable:
            for record in _available(reader):
                self.ledger.unreadable_letter(record.topic() or "")

    def _finished(self) -> bool:
        ledger = self.ledger
        if len(ledger.sources) < self.options.sentences or ledger.unresolved():
            return False
        marks = ledger.latest_watermarks()
        if any(marks.get(tp, -1) < end for tp, end in ledger.ends.items()):
            return False
        return all(marks.get(tp, -1) > offsets[-1] for tp, offsets in ledger.copy_offsets.items() if offsets)

    def _progress(self) -> Group:
        ledger, o = self.ledger, self.options
        events = dict.fromkeys(("ACK", "FAILED", "TIMEOUT", "OVERLOAD", "REPLAYED", "DEAD_LETTERED"), 0)
        for (_, outcome), _n in ledger.outcome_events.items():
            events[outcome] = events.get(outcome, 0) + 1
        resolved = len(ledger.sources) - len(ledger.unresolved())
        table = Table(title=f"acker demo: {o.sentences} sentences, prefix {self.prefix}", expand=False)
        table.add_column("measure")
        table.add_column("value", justify="right")
        for name, value in (
            ("sentences written", len(ledger.sources)),
            ("sentences resolved (acked, or dead-lettered)", resolved),
            ("trees acked (sentences and replayed copies)", events["ACK"]),
            ("nacked: failed / timeout / overload", f"{events['FAILED']} / {events['TIMEOUT']} / {events['OVERLOAD']}"),
            ("replayed copies", len(ledger.copies)),
            ("dead-lettered", len(ledger.dead_letters)),
            ("words counted", sum(ledger.counted.values())),
        ):
            table.add_row(name, str(value))
        marks = ledger.latest_watermarks()
        shown = [f"{marks.get((t, p), '-')}/{end}" for (t, p), end in sorted(ledger.ends.items())]
        table.add_row(f"watermark / end of {self.topics.sentences}[0..]", "  ".join(shown) or "-")
        # The newest events first, above the table: a terminal too short for the whole view has its bottom lines cut,
        # and the newest events, last, were the ones never seen.
        return Group(Panel("\n".join(reversed(self.events[-6:])) or "starting", title="events, newest first"), table)


class SparkJobs:
    """The demo's Spark jobs, in its process, started again from their checkpoints when a query of theirs stops, as
    `acker spark` starts its job again: a Kafka outage longer than a batch waits (--kill-broker) fails the batch,
    and the query with it. After the delays of `spark_jobs.restarts`, at most `SPARK_RESTARTS` in a row."""

    def __init__(self, spark: Any, start: Callable[[], list[Any]], event: Callable[[str], None]) -> None:
        from spark_jobs.restarts import Restarts  # noqa: PLC0415 - with the jobs

        self.spark, self._start, self._event = spark, start, event
        self.queries = start()
        self._restarts = Restarts(SPARK_RESTARTS)
        self._restarts.started(time.monotonic())
        self._due: float | None = None  # when the jobs start again, while stopped

    def check(self) -> None:
        """Stop the jobs when a query has stopped; start them again when their delay is over. `SystemExit` once
        `SPARK_RESTARTS` starts in a row have failed."""
        from spark_jobs.cli import query_said  # noqa: PLC0415
        from spark_jobs.session import stop_job, stop_queries  # noqa: PLC0415

        now = time.monotonic()
        if self._due is None:
            stopped = [query for query in self.queries if not query.isActive]
            if not stopped:
                return
            for query in stopped:
                self._event(f"Spark query {query.name} stopped: {query_said(query.exception())}")
            stop_job(self.spark, self.queries)
            self.queries = []
            self._again(now)
        elif now >= self._due:
            stop_queries(self.spark, self.spark.streams.active)  # a start that failed half-way left some running
            self._restarts.started(now)
            try:
                self.queries = self._start()
            except AckerError as error:  # Spark refused it (Kafka still away, say): a failed restart of the row
                self._event(f"the Spark jobs could not start again: {error}")
                self._again(now)
                return
            self._due = None
            self._event("the Spark jobs started again")

    def _again(self, now: float) -> None:
        delay = self._restarts.after_failure(now)
        if delay is None:
            raise SystemExit(f"the Spark jobs failed {self._restarts.row} times in a row")
        self._due = now + delay
        self._event(f"the Spark jobs start again from their checkpoints in {delay:g} s")


# What follows a SIGKILL, by the kind of process (its name up to the first '-').
_AFTER_KILL = {
    "acker": "its partitions move to another instance, which replays them",
    BROKER: "every process waits for it; the ackers' clocks stop with their ticks, so no tree times out for it",
    "spout": "started again, it reads on from the watermark; its trees in flight are decided without it",
    "split": "its partitions move; the trees of its input in flight time out and are replayed",
    "count": "its partitions move; the trees of its input in flight time out and are replayed",
}


def _available(consumer: Consumer) -> Iterator[Message]:
    for record in consumer.consume(5000, timeout=0.05):
        if record.error() is None:
            yield record


def _details(details: dict[str, str]) -> str:
    """How many dead letters say why their tree failed, and the most common reason."""
    if not details:
        return "0"
    reason, _ = Counter(details.values()).most_common(1)[0]
    return f"{len(details)}, e.g. {reason[:100]}"


def render_report(report: Report) -> Table:
    table = Table(title="acker demo: report")
    table.add_column("measure")
    table.add_column("value", justify="right")
    latency = (
        f"{report.latency_p50_ms:,.0f} / {report.latency_p99_ms:,.0f}" if report.latency_p50_ms is not None else "-"
    )
    rows: list[tuple[str, object]] = [
        ("source records", report.source_records),
        ("acked at the first attempt", report.acked_first_time),
        ("acked after a replay", report.acked_after_replay),
        ("replayed copies", report.replays),
        (f"dead-lettered (poison records: {len(report.poison)})", len(report.dead_lettered)),
        (
            "  of them good records that failed every attempt by chance (expected from the failure rates: "
            f"{report.failed_every_attempt_expected:.1f})",
            len(report.failed_every_attempt),
        ),
        ("  of them saying why (acker.replay.detail)", _details(report.dead_letter_details)),
        ("  of them poison dead-lettered before their replays", len(report.poison_not_replayed)),
        ("dead letters of records nobody could read (acker, Spark jobs)", sum(report.other_dead_letters.values())),
        ("lost", len(report.lost)),
        ("acked before every word was counted", len(report.acked_early)),
        ("committed before fully processed", len(report.committed_early)),
        (
            "nacks failed / timeout / overload",
            " / ".join(str(report.nacks[k]) for k in ("FAILED", "TIMEOUT", "OVERLOAD")),
        ),
        ("duplicate outcomes (acker failover)", report.duplicate_outcomes),
        ("complete latency p50 / p99 ms", latency),
        ("words of good sentences / counted", f"{report.words_expected} / {report.words_counted}"),
        ("words counted again (at-least-once: replays, attempts of dead-lettered sentences)", report.duplicate_words),
        ("words never counted", report.words_lost),
        ("words whose last count is below the times counted", len(report.counts_below)),
    ]
    rows += [(f"watermark {p} / end", f"{m} / {e}") for p, (m, e) in report.watermarks.items()]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def options_from(args: argparse.Namespace) -> DemoOptions:
    names = {f.name for f in fields(DemoOptions)}
    return replace(DemoOptions(), **{k: v for k, v in vars(args).items() if k in names and v is not None})


def _cmd_demo(args: argparse.Namespace) -> int:
    require_spark("acker demo")
    return run(options_from(args), args.bootstrap_servers, args.report, Console(), keep=args.keep)


def add_parser(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="the whole system on a local Kafka broker under failures, and a check that no record is lost",
        description=prose(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = DemoOptions()
    demo.add_argument("--bootstrap-servers", default=None, help="use this Kafka cluster [default: start a local one]")
    for name, kind, help_text in (
        ("sentences", at_least(1), "source records"),
        ("rate", positive, "sentences written per second"),
        ("poison", at_least(0), "sentences that fail at every attempt: they must be dead-lettered"),
        ("fail_rate", share, "share of sentences the split bolts fail"),
        ("drop_rate", share, "share of words the count bolts drop silently (their trees time out)"),
        ("split_processes", at_least(1), "split bolt processes"),
        ("count_processes", at_least(1), "count bolt processes"),
        (
            "partitions",
            at_least(1),
            "partitions of the pipeline's topics and the acker's (dead-letter, status and progress topics have one)",
        ),
        ("timeout_s", positive, "the acker's message timeout"),
        ("max_pending", at_least(1), "the spout's unfinished trees at most (Storm's max.spout.pending)"),
        ("max_attempts", at_least(1), "replays before a record is dead-lettered"),
        ("backoff_ms", at_least(0, below=MAX_HOLD_MS), "delay of the first replay"),
        ("max_wait_s", positive, "give up after this long"),
        (
            "chaos",
            at_least(0),
            "more stage processes to kill with SIGKILL while the sentences are written, each picked at random among "
            "those running then, and restarted a few seconds later",
        ),
        ("seed", int, "of the sentences and the injected failures"),
    ):
        default = getattr(defaults, name)
        demo.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None,
                          help=f"{help_text} [default: {default}]")  # fmt: skip
    demo.add_argument("--no-crash-split", dest="crash_split", action="store_false", default=None,
                      help="do not crash a split process")  # fmt: skip
    demo.add_argument("--no-kill-acker", dest="kill_acker", action="store_false", default=None,
                      help="do not kill an acker instance")  # fmt: skip
    demo.add_argument("--kill-broker", dest="kill_broker", action="store_true", default=None,
                      help="kill the local broker with SIGKILL half-way through the writing, and start it again "
                      f"on its data {BROKER_DOWN_S:g} s later (not with --bootstrap-servers)")  # fmt: skip
    demo.add_argument("--keep", action="store_true",
                      help="on a cluster named by --bootstrap-servers, keep this run's topics and consumer groups "
                      "[default: deleted at the end]")  # fmt: skip
    demo.add_argument("--report", metavar="FILE", default=None, help="also write the report as JSON to FILE")
    demo.set_defaults(run=_cmd_demo)
