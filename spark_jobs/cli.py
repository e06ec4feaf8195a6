"""``acker spark commit`` and ``acker spark replay``: the jobs on local Spark (or any master), until stopped.

The Kafka settings (bootstrap servers, ``--kafka`` pass-through, prefixes) are the acker's own (`acker.config`).
On a cluster, run this module with spark-submit and the connectors as packages, e.g.::

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0,org.apache.spark:spark-avro_2.13:4.2.0 \\
        spark_jobs/cli.py commit --bootstrap-servers broker:9092 --spout words --checkpoint s3a://bucket/acker/commit
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acker.argtypes import at_least, non_negative, positive
from acker.config import TIMEOUT_MAX_S, ServiceConfig, add_arguments, env_settings, flag_setting, load
from acker.errors import AckerError, ConfigError
from acker.retries import MAX_HOLD_MS
from spark_jobs import require_spark
from spark_jobs.jvm_errors import java_said
from spark_jobs.restarts import BACKOFF, HEALTHY_S

if TYPE_CHECKING:  # they import pyspark: only when a job runs
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from spark_jobs.commit_job import CommitJobSettings, OutcomeSource
    from spark_jobs.replay_job import ReplayJobSettings

JAVA_KAFKA_ENV_PREFIX = "ACKER_JAVA_KAFKA_"

log = logging.getLogger("spark_jobs.cli")


def _partition_offsets(partitions: object) -> bool:
    """``{"0": 23, "1": -2}``: partition numbers (ASCII decimal: ``isdigit`` takes "²") to offsets (-2 earliest,
    -1 latest; below 2**63, a Java long)."""
    if not isinstance(partitions, dict):
        return False
    return all(
        p.isascii() and p.isdigit() and type(o) is int and -2 <= o < 2**63 for p, o in partitions.items()
    )  # fmt: skip


def starting_offsets(text: str) -> str:
    """Spark's ``startingOffsets``: ``earliest``, ``latest``, or JSON of offsets per topic and partition
    (``{"acker.outcomes.s": {"0": 23, "1": -2}}``, -2 for earliest, -1 for latest), checked before Spark starts."""
    if text.strip().lower() in ("earliest", "latest"):  # as Spark reads it
        return text.strip().lower()
    try:
        offsets = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
        offsets = None
    if isinstance(offsets, dict) and offsets and all(_partition_offsets(p) for p in offsets.values()):
        return text
    raise argparse.ArgumentTypeError(
        f'earliest, latest, or JSON of offsets per topic and partition ({{"topic": {{"0": 23}}}}), got {text!r}'
    )


def add_parser(sub: Any) -> None:
    spark = sub.add_parser("spark", help="run the Spark jobs: commit watermarks, replay nacks")
    jobs = spark.add_subparsers(dest="spark_job", required=True, metavar="JOB")
    for name, help_text in (
        ("commit", "advance the fully-processed watermark of each source partition from the acks"),
        ("replay", "re-publish nacked records for their spout (retries with backoff, then a dead-letter topic)"),
    ):
        job = jobs.add_parser(name, help=help_text, description=help_text)
        # Where, which outcome and replay topics, and the factor of the topics they make; the commit job, the acker's
        # timeout and buckets (when a watermark waiting at one offset is said stuck: `commit_job.stuck_after_s`).
        # The acker's own topics' names too: a spout name whose topics would meet them is refused (`check_spout_name`).
        shown = ("bootstrap_servers", "outcome_prefix", "replay_prefix", "replay_dlq_topic", "replication_factor",
                 "acker_topic", "dlq_topic", "status_topic")  # fmt: skip
        add_arguments(job, (*shown, "timeout_s", "buckets") if name == "commit" else shown)
        job.add_argument("--spout", action="append", default=[], help="read this spout's outcome topic (repeatable)")
        job.add_argument(
            "--spout-group",
            action="append",
            default=[],
            metavar="SPOUT=GROUP",
            help="the consumer group of a spout whose group is not its name: its watermark is GROUP.acked (repeatable)",
        )
        job.add_argument("--pattern", default="", help="or: read every outcome topic matching this regex")
        job.add_argument(
            "--java-kafka",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a setting of Spark's Java Kafka client as it is, over those translated from the librdkafka settings "
            "(repeatable): what they cannot say, e.g. sasl.jaas.config for a Kerberos or OAuth login; or "
            f"{JAVA_KAFKA_ENV_PREFIX}<KEY> in the environment ('_' for '.'), which keeps a secret off the command line",
        )
        job.add_argument("--checkpoint", required=True, help="checkpoint directory (state and progress)")
        job.add_argument(
            "--master", default=None, help="Spark master [default: spark-submit's under spark-submit, else local[2]]"
        )
        job.add_argument(
            "--trigger-s", type=non_negative, default=1.0, help="micro-batch interval (0: back to back) [default: 1]"
        )
        job.add_argument(
            "--starting-offsets",
            type=starting_offsets,
            default="earliest",
            help="where a new checkpoint starts reading outcomes [default: earliest]; latest skips those already "
            "written: the watermarks then wait at their offsets (and their nacks are not replayed) until the spouts "
            'are started again and decide them again; or JSON of offsets ({"TOPIC": {"0": 23, "1": -2}}, -2 '
            "earliest, -1 latest) naming every partition of every topic read",
        )
        default_records = 100_000 if name == "commit" else 1_000
        job.add_argument(
            "--max-records",
            type=at_least(1),
            default=default_records,
            help="outcome records per micro-batch, at most (Spark's maxOffsetsPerTrigger): a backlog is read in "
            f"micro-batches of this size [default: {default_records}]",
        )
        if name == "commit":
            job.add_argument(
                "--stuck-after-s",
                type=positive,
                default=None,
                help="warn of a watermark that has waited this long at one offset with offsets done above it "
                "[default: 900, or longer than a spout waits for an outcome with the acker's --timeout-s and "
                "--buckets; give it for spouts with a pending_timeout_s of their own]",
            )
        if name == "replay":
            job.add_argument(
                "--max-attempts", type=at_least(0), default=5, help="replays before dead-lettering [default: 5]"
            )
            job.add_argument(
                "--backoff-ms",
                type=at_least(0, below=MAX_HOLD_MS),
                default=1000,
                help="delay of the first replay [default: 1000]",
            )
            # A window past the acker's longest timeout would be Spark state kept for nothing.
            job.add_argument(
                "--dedupe-window-s",
                type=at_least(1, below=TIMEOUT_MAX_S + 1),
                default=3600,
                help="a nack seen again within this many seconds of the first is dropped (as a rule up to twice "
                "that, as long as Spark's state holds it: Spark forgets a nack once it has seen one this much newer "
                "than its expiry); one later is replayed again unless its spout's watermark has passed its record (a "
                "commit job stopped that long keeps it back); at most 30 days; may be changed at a restart "
                "[default: 3600]",
            )
            job.add_argument(
                "--nacks-per-transaction",
                type=at_least(1),
                default=20_000,
                help="a micro-batch's nacks are published in transactions of at most this many (each must end within "
                "transaction.timeout.ms: lower it for large records) [default: 20000]",
            )
            job.add_argument(
                "--dead-letter-malformed",
                action="store_true",
                help="copy outcome records that are not valid to the outcome dead-letter topic, as the commit job "
                "does: for a replay job run without one, or reading spouts it does not read [default: the commit job's "
                "task alone, or each would be dead-lettered twice]",
            )
        job.add_argument(
            "--restarts",
            type=at_least(0),
            default=10,
            help="start the job again when a query fails (a Kafka outage past Spark's timeouts, say), from its "
            f"checkpoint, after {BACKOFF.first_ms / 1000:g} s, doubling to {BACKOFF.max_ms / 60_000:g} min, at most "
            f"this many times in a row ({HEALTHY_S / 60:g} minutes without a failure begin a new row; not a job "
            "that failed before its first micro-batch ended with Kafka answering); 0 stops at the first failure, for "
            "a supervisor that restarts it [default: 10]",
        )
        job.add_argument("--log-level", default="INFO", help="logging level [default: INFO]")
        job.add_argument(
            "--spark-log",
            type=Path,
            metavar="FILE",
            help="append what Spark's JVM prints (Ivy's report of the connectors, Spark's log lines) to FILE, "
            "not to the terminal, which then shows the job's own lines only",
        )
        job.set_defaults(run=_run)


def _checked(args: argparse.Namespace) -> tuple[ServiceConfig, OutcomeSource, dict[str, str], bool]:
    """The settings, the outcome source and the spouts' groups, checked before Spark starts (a JVM, seconds): a
    mistake here is a one-line error, not a stack trace. The jobs' own topics are made if missing; whether Kafka
    answered that (it is not waited for: Spark's queries meet a Kafka away as they do in an outage)."""
    from confluent_kafka import Producer

    from acker.config import without_consumer_settings
    from acker.topics import check_spout_name
    from spark_jobs.commit_job import OutcomeSource

    config = load(args)
    for spout in args.spout:  # as the spouts themselves do: a name they refuse has no topics to read
        check_spout_name(config, spout)
    groups = dict(flag_setting(item, "--spout-group", "SPOUT=GROUP", empty=False) for item in args.spout_group)
    unread = sorted(set(groups) - set(args.spout)) if args.spout else []
    if unread:  # its group would never get a watermark, and the spout's would go to the group named after it
        raise ConfigError(f"--spout-group names {', '.join(unread)}, which no --spout names")
    topics = tuple(config.outcome_topic(s) for s in args.spout)
    java = env_settings(JAVA_KAFKA_ENV_PREFIX, os.environ)
    java.update(flag_setting(item, "--java-kafka") for item in args.java_kafka)
    # Made before Spark starts: it refuses the settings Spark's Java Kafka client cannot be given.
    source = OutcomeSource(config.client(), topics, args.pattern, args.starting_offsets, java_kafka=java)
    if source.check_login():  # not answered: the topics are left for Spark to meet, as in an outage
        source.check_topics()
    if args.spark_job == "replay":  # a setting its transactional producer refuses: here, not at its first micro-batch
        Producer({**without_consumer_settings(config.client()), "transactional.id": "acker-check"})  # made, dropped
    return config, source, groups, _own_topics_made(config)


def _own_topics_made(config: ServiceConfig) -> bool:
    """Make the jobs' own topics where missing; whether Kafka answered that (a job started while it is away tries
    again when it starts again)."""
    from confluent_kafka import KafkaException

    from acker.kafka.clients import KafkaClientError, ensure_topics
    from acker.topics import spark_job_topics

    own = spark_job_topics(config)
    try:
        ensure_topics(config.client(), own, timeout_s=10.0)  # a Kafka that does not answer: 10 s, not 3 x 30
    except (KafkaClientError, KafkaException) as error:  # no right to create them, say: left for Spark to meet
        log.warning("could not make sure the jobs' topics exist (%s): %s", ", ".join(s.name for s in own), error)
        return False
    return True


def _spark_said(error: Exception) -> str:
    """The first line of what Spark said, from its JVM's exception where there is one (a `Py4JJavaError`'s own text
    is lost once the JVM stops, and was printed then as "<exception str() failed>")."""
    lines = [line.strip() for line in java_said(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def query_said(error: object) -> str:
    """What stopped a query, in a line: the error its batch function raised, where it raised one (the last line of
    the Python traceback Spark's error carries; one of the project's own, its text alone), else the first line of
    Spark's error. Printed whole, it was the traceback, then the query's plans and the outcome schema: pages."""
    said = str(error).split("=== Streaming Query ===")[0]
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if "Traceback (most recent call last):" not in said:
        return lines[0]
    last = lines[-1]  # e.g. "acker.errors.AckerError: topic ... was deleted", said as the project's own errors are
    return last.split(": ", 1)[1] if last.startswith("acker.") and ": " in last else last


def _settings(
    args: argparse.Namespace, config: ServiceConfig, source: OutcomeSource, groups: dict[str, str]
) -> CommitJobSettings | ReplayJobSettings:
    from acker.retries import Backoff
    from spark_jobs.commit_job import CommitJobSettings, stuck_after_s
    from spark_jobs.replay_job import ReplayJobSettings

    dlq_topic = config.outcome_topic("dlq")  # the outcome prefix's, as `spark_job_topics`
    if args.spark_job == "commit":
        return CommitJobSettings(
            source,
            args.checkpoint,
            trigger_s=args.trigger_s,
            groups=groups,
            spouts=frozenset(args.spout) if args.spout else None,  # None with a pattern: every spout it reads
            max_records=args.max_records,
            dlq_topic=dlq_topic,
            stuck_s=args.stuck_after_s or stuck_after_s(config),
        )
    return ReplayJobSettings(
        source,
        args.checkpoint,
        trigger_s=args.trigger_s,
        max_attempts=args.max_attempts,
        backoff=Backoff(first_ms=args.backoff_ms),
        replay_prefix=config.replay_prefix,
        dead_letter_topic=config.replay_dlq_topic,
        max_records=args.max_records,
        nacks_per_transaction=args.nacks_per_transaction,
        dedupe_window=f"{args.dedupe_window_s} seconds",
        groups=groups,
        dlq_topic=dlq_topic,
        dead_letter_malformed=args.dead_letter_malformed,
        progress_topic=config.replay_topic("progress"),
        replication_factor=config.replication_factor,
    )


@contextmanager
def _starting(job: str, jvm_output: Path | None = None) -> Iterator[None]:
    """What Spark says when it cannot start the session or the job's queries, as the job's one-line error; where its
    JVM printed what it said (``jvm_output``), named: a JVM that exits at its start (a connector's download failed,
    a setting it refuses) tells why there alone."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        yield
    except (Py4JJavaError, PySparkException) as error:  # what Spark said, read before its JVM stops
        printed = f" (what its JVM printed: {jvm_output})" if jvm_output is not None else ""
        raise AckerError(f"Spark could not start the {job} job: {_spark_said(error)}{printed}") from None


def _run(args: argparse.Namespace) -> int:
    require_spark("acker spark")
    from spark_jobs import commit_job, replay_job
    from spark_jobs.java_client import check_in_jvm
    from spark_jobs.session import spark_session, stop, stop_queries, under_spark_submit

    config, source, groups, answered = _checked(args)
    settings = _settings(args, config, source, groups)
    made = answered  # the jobs' own topics, made (or there) as the job started or since

    def kafka_answers() -> bool:
        """Whether Kafka answered as the job started, and answers now."""
        from confluent_kafka import KafkaException

        from acker.kafka.clients import answering

        if not answered:
            return False
        try:
            answering(config.client(), config.acker_topic, timeout_s=10.0)
        except KafkaException:
            return False
        return True

    def start(spark: SparkSession, again: bool = False) -> list[StreamingQuery]:
        nonlocal made
        if again and not made:  # Kafka was away as the job started: a query that needs them fails, and so here
            made = _own_topics_made(config)
        with _starting(args.spark_job):
            if isinstance(settings, commit_job.CommitJobSettings):
                return commit_job.start(spark, settings)
            return replay_job.start(spark, settings)

    spark = None
    try:
        master = args.master or (None if under_spark_submit() else "local[2]")
        with _starting(args.spark_job, args.spark_log):
            spark = spark_session(f"acker-{args.spark_job}", master, jvm_output=args.spark_log)
        # What Spark would meet later, some of it only at a dead letter.
        dead_letters = not isinstance(settings, replay_job.ReplayJobSettings) or settings.dead_letter_malformed
        check_in_jvm(spark, source.java_settings(), producer=dead_letters)
        queries = start(spark)
        stopping = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stopping.set())
        reads = ", ".join(source.topics) if source.topics else f"the topics matching {args.pattern!r}"
        log.info("%s job running: reads %s, checkpoint %s, Kafka %s; Ctrl-C or SIGTERM stops it between micro-batches",
                 args.spark_job, reads, args.checkpoint, config.bootstrap_servers)  # fmt: skip
        queries, failed = _supervise(
            spark, queries, lambda: start(spark, again=True), stopping, args, kafka_answers=kafka_answers
        )
        stop_queries(spark, queries)
        log.info("%s job stopped", args.spark_job)
        return 1 if failed else 0
    finally:
        stop(spark)


def _supervise(
    spark: SparkSession,
    queries: list[StreamingQuery],
    start: Callable[[], list[StreamingQuery]],
    stopping: threading.Event,
    args: argparse.Namespace,
    *,
    kafka_answers: Callable[[], bool],
) -> tuple[list[StreamingQuery], bool]:
    """Watch the job's queries until ``stopping``; when one fails, start the job again from its checkpoint as
    `Restarts` allows, else stop. The queries running at the end, and whether the job failed.

    Not started again: a job whose queries failed before any micro-batch ended while Kafka answered, as the job
    started and after the failure (`kafka_answers`): a setting Spark's Kafka client refuses, say, which no restart
    mends. One started while Kafka was away, or failing while it is, is (an outage, as later)."""
    from py4j.protocol import Py4JError

    from spark_jobs.restarts import Restarts
    from spark_jobs.session import stop_job, stop_queries

    restarts = Restarts(args.restarts)
    restarts.started(time.monotonic())
    first_run = True
    while not stopping.wait(1.0):
        try:
            stopped = [query for query in queries if not query.isActive]
        except Exception as error:  # Spark's JVM has gone: stopped with this process's group, or crashed
            return queries, _jvm_gone(error, stopping)
        if not stopped:
            continue
        for query in stopped:
            why = query.exception()
            print(f"acker: query {query.name} stopped" + (f": {query_said(why)}" if why else ""), file=sys.stderr)
        if first_run and not any(query.lastProgress for query in queries) and kafka_answers():
            print("acker: the job failed before its first micro-batch ended, with Kafka answering: not started again",
                  file=sys.stderr)  # fmt: skip
            return queries, True
        first_run = False
        # Its other queries too, and the Kafka clients of the batches (made again on first use): started again, the
        # job is as a new process would be.
        stop_job(spark, queries)
        queries = []
        while not queries:
            delay = restarts.after_failure(time.monotonic())
            if delay is None:
                if args.restarts:
                    print(f"acker: {restarts.row} restarts in a row have failed: the job stops", file=sys.stderr)
                return [], True
            print(f"acker: the {args.spark_job} job starts again from its checkpoint in {delay:g} s (restart "
                  f"{restarts.row} of {args.restarts} in a row)", file=sys.stderr)  # fmt: skip
            if stopping.wait(delay):
                return [], False
            try:
                # Every query of the session, not only those known: a start that failed half-way left its first
                # ones running, whose names the next start could not take.
                stop_queries(spark, spark.streams.active)
                queries = start()
            except AckerError as error:  # Spark refused it (its checkpoint unreadable, say): a failure of the row
                print(f"acker: {error}", file=sys.stderr)
            except Py4JError as error:  # Spark's JVM has gone
                return [], _jvm_gone(error, stopping)
            restarts.started(time.monotonic())
    return queries, False


def _jvm_gone(error: Exception, stopping: threading.Event) -> bool:
    """Whether the job failed, Spark's JVM having gone (said, unless the job was being stopped: then it went with
    this process's group)."""
    if stopping.is_set():
        return False
    print(f"acker: Spark's JVM has gone ({type(error).__name__})", file=sys.stderr)
    return True


if __name__ == "__main__":
    from acker.cli import main

    raise SystemExit(main(["spark", *sys.argv[1:]]))
