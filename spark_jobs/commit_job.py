"""The commit job: outcomes in, fully-processed watermarks out.

readStream over the spouts' outcome topics → the done source offsets, a row each (``ACK``, and ``REPLAYED`` /
``DEAD_LETTERED`` written by the replay job; `done_offsets`) → each micro-batch gathers them per source partition
in bitmaps of 32,768 offsets (`done_bitmaps`, on the executors) → on the driver, adds them as runs to the
`PartitionMark` of their source partition, saves the marks in the checkpoint directory (`spark_jobs.mark_store`),
and publishes the marks that moved as the committed offsets of the consumer group
``<spout group>.acked``, where the spout seeks on assignment (`acker.spout`) and where
``kafka-consumer-groups --describe`` shows the fully-processed lag.

Guarantees: a published watermark is the end of the contiguous done prefix of the records that exist, never
beyond it; it never goes back (`KafkaLookups.advance` commits only what is ahead); duplicated outcomes change
nothing; a restarted job resumes from its checkpoint (Spark replays an unfinished micro-batch, whose commit is
then a no-op or the same). Records that are not outcome records go to the dead-letter topic, counted by Kafka.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Container, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar, TypeVar

import numpy as np
from confluent_kafka import KafkaError, KafkaException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.streaming.query import StreamingQuery

from acker.config import ServiceConfig
from acker.dlq import DLQ_KEPT_BYTES
from acker.errors import ConfigError
from acker.kafka.clients import (
    REFUSED_LOGIN,
    KafkaClientError,
    answering,
    broker_config,
    kafka_error,
    partition_count,
    topic_max_bytes,
)
from acker.kafka.lookups import CONFIRM_S, Commits, KafkaLookups, WatermarkCommitError, lookups
from acker.spout import WAIT_TIMEOUTS, pending_timeout_s
from acker.watermarks import acked_group
from spark_jobs.java_client import java_client_settings, same_login
from spark_jobs.mark_store import Key, MarkStore
from spark_jobs.outcomes import COORDINATES, DONE, decoded, malformed, source_partition
from spark_jobs.stopping import batch_function
from spark_jobs.watermark import NONE, RECHECK_S, PartitionMark, RecordsRead

T = TypeVar("T")
log = logging.getLogger("spark_jobs.commit")


# Options of Spark's Kafka source (Java client names), besides the librdkafka settings passed through:
# - read_committed: the replay job writes its REPLAYED / DEAD_LETTERED outcomes in a transaction with the replayed
#   records; outcomes of an aborted transaction must not count (Spark reads uncommitted records by default).
# - fetch.max.wait.ms: a task's consumer is cached and pipelines its next fetch, which waits at the end of the log
#   for up to 500 ms by default; the next micro-batch's task, which seeks elsewhere, waits for that fetch first.
# - failOnDataLoss false: outcome records deleted by retention while a job was stopped made every start fail, for
#   good, with no option to change it. Nothing is lost by reading on: a watermark moves only over offsets known
#   done, so an outcome never read holds it at that offset (Spark warns), and a spout started again re-reads from
#   there, which decides the record again.
SPARK_KAFKA_DEFAULTS = {
    "kafka.isolation.level": "read_committed",
    "kafka.fetch.max.wait.ms": "20",
    "failOnDataLoss": "false",
}
# Outcome records per micro-batch, at most (Spark's maxOffsetsPerTrigger; each job sets its own). Without a limit a
# backlog (a job started on a new checkpoint over days of outcomes, a long outage) is one micro-batch, which Spark
# runs again, whole, at every restart. The commit job's is far above what the services write in a second, so that a
# stream is never held back by it. Its driver gets a micro-batch's done offsets as bitmaps (`done_bitmaps`): 4 KB per
# 32,768 offsets of a source partition, an eighth of a byte per offset where they are dense (a backlog of full
# records, 16,384 outcomes each, is 1.6 billion offsets, 200 MB), at most 4 KB per offset where they are sparse.
COMMIT_MAX_RECORDS = 100_000
BUCKET_BITS = 32_768  # offsets per bitmap: Spark's bitmap_construct_agg makes bitmaps of 4,096 bytes
LOGIN_CHECK_S = 5.0  # how long a job's start waits for Kafka to answer (or refuse its login) before Spark starts
STUCK_S = 900.0  # a mark waiting at one offset this long, with offsets done above it, is said (`_say_stuck`)


def stuck_after_s(config: ServiceConfig) -> float:
    """How long a mark waits at one offset, with offsets done above it, before it is said, for an acker configured as
    ``config``: `STUCK_S`, or longer than a spout may wait for an outcome where that is longer: `WAIT_TIMEOUTS`
    times its wait (`acker.spout.pending_timeout_s`) while the tree's acker partition decides nothing (an acker
    timeout of hours, an acker down), then a wait more for the replay. A spout given a wait of its own
    (`SpoutSettings.pending_timeout_s`) is not known here: `acker spark commit --stuck-after-s` says it."""
    return max(STUCK_S, (WAIT_TIMEOUTS + 1) * pending_timeout_s(config))


@dataclass(frozen=True)
class OutcomeSource:
    """Where the jobs read outcomes: Kafka client settings and the outcome topics (a list, or a pattern)."""

    # librdkafka settings, bootstrap.servers included; like the Java client's, secrets: never in the repr
    client: Mapping[str, Any] = field(repr=False)
    topics: tuple[str, ...] = ()
    pattern: str = ""
    starting_offsets: str = "earliest"
    spark_options: Mapping[str, str] = field(default_factory=lambda: dict(SPARK_KAFKA_DEFAULTS))
    java_kafka: Mapping[str, str] = field(default_factory=dict, repr=False)  # Java client settings as they are
    _kafka_options: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if bool(self.topics) == bool(self.pattern):
            raise ConfigError("name the outcome topics (--spout, repeatable) or a pattern (--pattern): one of them")
        if self.pattern:  # Java's syntax, which Python's shares for anything a topic name needs
            try:
                re.compile(self.pattern)
            except re.error as error:  # else every query stops at once, with a Java trace each
                raise ConfigError(f"--pattern {self.pattern!r} is not a regular expression: {error}") from None
        # Translated once, when the source is made: what Spark's Java client cannot be given fails here, before any
        # query (and before Spark, in `acker spark`), and a warning of the translation is given once.
        java = java_client_settings(self.client, self.java_kafka)
        object.__setattr__(self, "_kafka_options", {f"kafka.{k}": v for k, v in java.items()})

    def check_login(self) -> bool:
        """Whether Kafka answered the Python client, logged in as Spark's Java client will be. `KafkaException` of a
        login the brokers refuse, where Spark's Java client logs in as librdkafka does (`same_login`): refused at
        every attempt, the job failed a minute later, said as Spark's trace, and its restarts began. Anything else
        (Kafka not answering yet, a login only Spark's Java client can make, e.g. Kerberos) is said once and left for
        Spark to meet."""
        try:
            answering(self.client, self.topics[0] if self.topics else "acker.login-check", LOGIN_CHECK_S)
        except KafkaException as error:
            cause = kafka_error(error)
            refused = cause is not None and cause.code() in REFUSED_LOGIN
            if refused and same_login(self.client, self.java_kafka):
                raise
            said = "refused the Python client's login" if refused else "did not answer"
            log.warning("the outcome topics are not checked: Kafka %s (%s)", said, cause.str() if cause else error)
            return False
        return True

    def check_topics(self) -> None:
        """`ConfigError` naming a named outcome topic that does not exist, or starting offsets (JSON) that do not name
        every partition of the topics read, or name other topics or partitions: Spark's query would fail on any with
        pages of Java traces. A topic whose partitions cannot be counted (Kafka away) is said and left for Spark."""
        given = None if self.starting_offsets in ("earliest", "latest") else json.loads(self.starting_offsets)
        if given is not None and self.topics and (others := sorted(set(given) - set(self.topics))):
            raise ConfigError(f"--starting-offsets names {', '.join(others)}, which the job does not read")
        for topic in self.topics:
            try:
                count = partition_count(self.client, topic)
            except (KafkaClientError, KafkaException) as error:
                if not isinstance(error, KafkaClientError) or error.code != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    log.warning("could not check that outcome topic %s exists: %s", topic, error)
                    continue
                raise ConfigError(
                    f"outcome topic {topic} does not exist: create it (acker topics create --spout S) or start its "
                    "spout first"
                ) from None
            unnamed = [p for p in range(count) if given is not None and str(p) not in given.get(topic, {})]
            if unnamed:
                raise ConfigError(
                    f"--starting-offsets names no offset for {topic} partition(s) {', '.join(map(str, unnamed))}: "
                    "Spark needs one for every partition of every topic read (-2: the earliest, -1: the latest)"
                )
            named = {str(p) for p in range(count)}
            extra = sorted(p for p in (given or {}).get(topic, {}) if p not in named)
            if extra:  # Spark refuses offsets of partitions it is not assigned, at its first batch
                raise ConfigError(f"--starting-offsets names {topic} partition(s) {', '.join(extra)}, which it does "
                                  f"not have ({count} partition(s))")  # fmt: skip

    def kafka_options(self) -> dict[str, str]:
        """The Kafka client settings of Spark's readers and writers: ``kafka.`` + the Java client's setting."""
        return dict(self._kafka_options)

    def java_settings(self) -> dict[str, str]:
        """The Java client's settings of Spark's readers, by their own names (`_reader_options`; the writers get the
        translated ones alone, and the readers' own are none of a producer's)."""
        options = self._reader_options()
        return {key.removeprefix("kafka."): value for key, value in options.items() if key.startswith("kafka.")}

    def _reader_options(self, limits: Mapping[str, str] | None = None) -> dict[str, str]:
        """The options of Spark's Kafka source: the translated settings, then ``limits``, then ``spark_options`` over
        both."""
        return {**self._kafka_options, **(limits or {}), **self.spark_options}

    def read(
        self,
        spark: SparkSession,
        exclude: Iterable[str] = (),
        max_records: int | None = None,
        *,
        headers: bool = False,
    ) -> DataFrame:
        """The outcome records, without those of the topics in ``exclude``: a job's own dead-letter topic, which a
        pattern may match (``acker\\.outcomes\\..*`` matches ``acker.outcomes.dlq``). Read back, every malformed
        record there would be dead-lettered again, copies of copies, for ever. ``max_records``: per micro-batch, at
        most (unless ``spark_options`` say otherwise). ``headers``: with their headers (column ``headers``)."""
        limit = {"maxOffsetsPerTrigger": str(max_records)} if max_records else {}
        if headers:
            limit["includeHeaders"] = "true"
        reader = spark.readStream.format("kafka").options(**self._reader_options(limit))
        reader = (
            reader.option("subscribe", ",".join(self.topics))
            if self.topics
            else reader.option("subscribePattern", self.pattern)
        )
        raw = reader.option("startingOffsets", self.starting_offsets).load()
        excluded = sorted(set(exclude))
        return raw.where(~F.col("topic").isin(*excluded)) if excluded else raw


@dataclass(frozen=True)
class CommitJobSettings:
    source: OutcomeSource
    checkpoint: str  # a directory (local, HDFS, S3...): the state and the progress of the job
    trigger_s: float = 1.0
    groups: Mapping[str, str] = field(default_factory=dict)  # spout → its consumer group (default: the spout's name)
    dlq_topic: str = "acker.outcomes.dlq"
    dead_letter_trigger_s: float = 10.0  # malformed outcome records are rare: a slow trigger leaves the cores free
    # Every watermark is committed again this often, moved or not: Kafka deletes a committed offset of a group without
    # members `offsets.retention.minutes` after its last commit, and a source partition idle that long would lose it.
    # Shorter where the brokers' retention asks (`renewal_s`).
    refresh_s: float = 3600.0
    # The marks no micro-batch moved since the last look are looked at this often (`Marks.recheck`): an idle
    # partition's mark gets past the marker of its last transaction, or past what Kafka could not answer for, within
    # twice this time.
    recheck_s: float = RECHECK_S
    # The spouts the job serves (None: every spout whose outcomes it reads, as with a pattern). Only their marks are
    # committed again: a spout left out stays out, and its watermark group, once deleted, is not recreated.
    spouts: frozenset[str] | None = None
    max_records: int = COMMIT_MAX_RECORDS  # outcome records per micro-batch, at most
    # A mark waiting at one offset this long, with offsets done above it, is said (`_say_stuck`): at least `STUCK_S`,
    # or longer for an acker's long timeout (`stuck_after_s`, which `acker spark commit` gives).
    stuck_s: float = STUCK_S

    def watermark_group(self, spout: str) -> str:
        return acked_group(self.groups.get(spout, spout))

    def serves(self, spout: str) -> bool:
        return self.spouts is None or spout in self.spouts


def done_offsets(raw: DataFrame) -> DataFrame:
    """One row per source offset that needs nothing more (``ACK``, or resolved by the replay job): ``spout, source,
    offset``, the message id's source (``<topic>/<partition>``: ids that are not a record's coordinates are left out)
    and its offset; the streaming part of the job. Each micro-batch gathers them per partition in
    bitmaps (`done_bitmaps`) for the driver.

    A generator over the zipped columns, no lambda over the outcomes: Spark evaluates a higher-order function's
    lambda without code generation, and the per-source arrays of offsets this made with ``filter`` and ``transform``
    (one pass over a record's outcomes for each of its sources, then exploded for the bitmaps anyway) took about 3.4
    times as long, with `done_bitmaps`, on Spark 4.2 (docs/benchmarks.md, "Spark commit job: done offsets without
    lambdas")."""
    o = F.col("o")
    columns = raw.select(decoded(raw).alias("o")).select(  # an invalid record is null: it generates nothing
        o.getField("spout").alias("spout"),
        o.getField("sources").alias("sources"),
        F.inline(
            F.arrays_zip(
                o.getField("outcomes").alias("outcome"),
                o.getField("source_index").alias("index"),  # in range: `outcomes.refusal`
                o.getField("offsets").alias("offset"),
            )
        ),
    )
    # A source that is not coordinates (a message id a spout made up) is left out here, before any aggregation:
    # aggregated, each such source would cost a bitmap of 4 KB per bucket.
    source = F.element_at("sources", F.col("index") + 1)
    done = F.col("outcome").isin(*DONE) & (F.col("offset") >= 0) & source.rlike(COORDINATES)
    return columns.where(done).select("spout", source.alias("source"), "offset")


def done_bitmaps(done: DataFrame) -> DataFrame:
    """A micro-batch's done offsets (`done_offsets`, a static DataFrame: this aggregates) gathered per source
    partition and bucket of `BUCKET_BITS` offsets: ``spout, topic, partition, bucket, bits``, the bitmap of the offsets
    ``bucket * BUCKET_BITS + i`` done (bit ``i``, least significant first). Collected as arrays of offsets, the
    driver held ~40 bytes per offset (Python integers), and a backlog's micro-batch outgrew it at every restart;
    a bitmap is an eighth of a byte per offset where they are dense, as they are once every record's are together
    (each record's are not: the trees of a partition are spread over the acker partitions).

    Sources are parsed once gathered, a row per bitmap rather than per offset (`done_offsets` kept coordinates
    alone; a partition number past an int is left out here). Two spellings of one partition, ``t/1`` and ``t/01``,
    give two rows; the driver adds both."""
    bucket = F.expr(f"offset div {BUCKET_BITS}")  # integral: a double quotient would round offsets past 2^53
    bitmaps = done.groupBy("spout", "source", bucket.alias("bucket")).agg(
        F.bitmap_construct_agg(F.pmod("offset", F.lit(BUCKET_BITS))).alias("bits")
    )
    source = F.col("source")
    topic, partition = source_partition(source)
    # No second `rlike`: a source that is not coordinates extracts no partition number (null), as does one past an int.
    return bitmaps.where(partition.isNotNull()).select(
        "spout", topic.alias("topic"), partition.alias("partition"), "bucket", "bits"
    )


def bitmap_runs(bucket: int, bits: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The runs ``[start, end)`` of the offsets a `done_bitmaps` row says are done."""
    set_bits = np.unpackbits(np.frombuffer(bits, np.uint8), bitorder="little").astype(np.int8)
    edges = np.diff(np.r_[np.int8(0), set_bits, np.int8(0)])
    base = np.int64(bucket) * BUCKET_BITS
    return base + np.flatnonzero(edges == 1), base + np.flatnonzero(edges == -1)


class Marks:
    """The driver's view of every source partition's `PartitionMark`, and how a micro-batch moves them."""

    def __init__(self, settings: CommitJobSettings, store: MarkStore) -> None:
        self.settings, self._store = settings, store
        self._kafka = lookups(dict(settings.source.client))
        self.marks: dict[Key, PartitionMark] | None = None  # loaded when first needed (`_load`)
        self._lock = threading.Lock()  # micro-batches, and `recommit` and `recheck` (on the refresher's thread)
        self._unchanged: dict[Key, PartitionMark] = {}  # the marks as the last recheck left them
        # Each source topic's Kafka id when its marks were made. A topic deleted and created again under its name is
        # another log: its records start again at offset 0, and a mark of the old one, committed, would skip them.
        self._topic_ids: dict[str, str] = {}
        self._unstarted: set[str] = set()  # watermark groups found without a spout's starting commit (said once)
        self._stuck: dict[Key, tuple[int, float, bool]] = {}  # mark → (where it waits, since when, whether said)
        self._merged_to: dict[Key, int] = {}  # where `_merge_runs` last walked a mark to, to go on from there
        self._merge_turn = 0  # which of the marks to walk goes first (`_merge_runs`)
        self._missing_until: dict[str, float] = {}  # topics confirmed missing, until when that is trusted

    def apply(self, rows: Iterable[Any], batch_id: int) -> dict[str, dict[tuple[str, int], int]]:
        """Add the done offsets of a micro-batch, advance the marks it touched, save them; return the touched marks
        by watermark group. ``rows`` have ``spout, topic, partition, bucket, bits`` (`done_bitmaps`)."""
        return self.apply_batch(rows, batch_id)[0]

    def apply_batch(
        self, rows: Iterable[Any], batch_id: int
    ) -> tuple[dict[str, dict[tuple[str, int], int]], dict[str, str]]:
        """`apply`, with the topic ids its marks were checked against, taken at once (a recheck meanwhile may learn a
        topic's new id): `commit_group` commits none to a topic created again since."""
        with self._lock:
            return self._apply(rows, batch_id), dict(self._topic_ids)

    def _apply(self, rows: Iterable[Any], batch_id: int) -> dict[str, dict[tuple[str, int], int]]:
        marks = self._load()
        kafka = self._kafka
        now_s = time.time()
        done: dict[Key, list[tuple[np.ndarray, np.ndarray]]] = {}
        for row in rows:
            done.setdefault((row.spout, row.topic, int(row.partition)), []).append(bitmap_runs(row.bucket, row.bits))
        checked = done.keys() | marks.keys()
        gone: set[Key] | None
        try:
            gone, unanswered = self._check_topics(checked), None
        except KafkaException as error:
            gone, unanswered = None, error
        # Asked again out of the except block (`acker.kafka.clients`: a failure there kept this frame and the rows).
        if unanswered is not None and done.keys() - marks.keys():
            # A mark to start: Kafka is asked where it starts, which it cannot say of a deleted topic's partition (the
            # batch failed, and the job after its restarts): whether its topic is there is waited for as that answer is.
            gone = _answered(partial(self._check_topics, checked), nullcontext(), "the source topics")
        elif unanswered is not None:  # Kafka not answering now: the batch is kept, and committed by a later one
            log.warning("batch %d: the source topics could not be looked at (%s): nothing committed now", batch_id,
                        unanswered)  # fmt: skip
        for key in [key for key in done if gone and key in gone]:  # outcomes of a deleted partition: nothing to mark
            del done[key]
        touched: dict[str, dict[tuple[str, int], int]] = {}
        for (spout, topic, partition), runs in done.items():
            mark = marks.get((spout, topic, partition))
            if mark is None:
                group = self.settings.watermark_group(spout)
                start, found = _answered(partial(kafka.start_mark, group, topic, partition), kafka.lock,
                                         f"where the watermark of {topic}[{partition}] starts")  # fmt: skip
                if not found and group not in self._unstarted:
                    # A spout commits where it starts a partition there before it reads it: its outcomes without that
                    # commit are most likely of a spout whose group is not the one taken (its watermark would go
                    # where the spout never reads it, and each start of the spout would read everything again).
                    self._unstarted.add(group)
                    log.warning("%s has no watermark for %s[%d], of which spout %s has outcomes: is %s the spout's "
                                "group? (--spout-group %s=GROUP names it) The watermark starts at the first offset",
                                group, topic, partition, spout, group.removesuffix(".acked"), spout)  # fmt: skip
                mark = marks[(spout, topic, partition)] = PartitionMark(start)
            mark.add_runs(np.concatenate([s for s, _ in runs]), np.concatenate([e for _, e in runs]))
        # The touched marks, those that Kafka could not answer for at an earlier batch, and those waiting on a record
        # found long enough ago that it may have been deleted since (asked again now).
        # Of the spouts served only: a retired spout's mark must not recreate its deleted group either.
        unsure = {
            key for key, mark in marks.items() if mark.runs and not mark.waiting(now_s) and self.settings.serves(key[0])
        }
        keys = done.keys() | unsure
        if gone is not None:
            self._skip_to_committed(keys)
        for spout, topic, partition in keys:
            mark = marks[(spout, topic, partition)]
            group = self.settings.watermark_group(spout)
            touched.setdefault(group, {})[(topic, partition)] = mark.advance(self._lookup(topic, partition), now_s)
        if touched or gone:
            self._store.save(batch_id, marks, self._topic_ids)
        # Unchecked topics are not committed to: one might have been created again, and have a mark of the old one.
        return touched if gone is not None else {}

    def _check_topics(self, keys: Iterable[Key]) -> set[Key]:
        """Drop the marks of source partitions that no longer exist (their topic deleted, or created again with fewer
        partitions), and of topics deleted and created again since their marks were made (their marks start again,
        from the group's committed offset, which Kafka deleted with the old topic, or from the first offset); return
        those of ``keys`` that no longer exist: outcomes of theirs have nothing to mark (asked where they start, Kafka
        would refuse at every run of the batch). Outcomes of a record of the old topic that come after the new one
        was made cannot be told from the new one's: delete a source topic only once its spout is stopped and its
        trees decided."""
        keys = set(keys)
        marks = self._load()
        topics = sorted({topic for _, topic, _ in keys})
        with self._kafka.lock:
            found = self._kafka.topic_ids(topics)
        counts = {topic: 0 if described is None else described[1] for topic, described in found.items()}
        ids = {topic: described[0] for topic, described in found.items() if described is not None}
        again = {t for t, topic_id in ids.items() if self._topic_ids.get(t, topic_id) != topic_id}
        gone = {key for key in keys | marks.keys() if key[1] in counts and key[2] >= counts[key[1]]}
        # Asked again a moment later: a broker's metadata may lag behind partitions just added, or not know a topic
        # for a moment (a broker just restarted, a stale replica): the marks dropped on one answer, and the offsets
        # done in this batch with them, which no later batch brings again.
        # A topic confirmed missing a little while ago is not confirmed again at every batch, while outcomes of it
        # still come (the replay job's resolutions of its nacks), each waiting CONFIRM_S.
        now = time.monotonic()
        unsure = sorted({t for _, t, _ in gone if counts[t] or self._missing_until.get(t, 0.0) <= now})
        if unsure:
            time.sleep(CONFIRM_S)
            with self._kafka.lock:
                confirmed = self._kafka.topic_ids(unsure)
            for topic, described in confirmed.items():
                if described is not None and described[1] > counts[topic]:
                    counts[topic] = described[1]
                    ids.setdefault(topic, described[0])
                    if self._topic_ids.get(topic, described[0]) != described[0]:
                        again.add(topic)
                elif described is None and not counts[topic]:
                    self._missing_until[topic] = time.monotonic() + MISSING_TRUSTED_S
            gone = {key for key in gone if key[2] >= counts[key[1]]}
        for key in [key for key in marks if key in gone or key[1] in again]:
            mark = marks.pop(key)
            self._unchanged.pop(key, None)
            self._merged_to.pop(key, None)
            log.warning(
                "%s[%d] %s: its watermark (%d) is dropped",
                key[1], key[2], "no longer exists" if key in gone else "was deleted and created again", mark.mark,
            )  # fmt: skip
        for topic in counts:
            if topic in ids:
                self._topic_ids[topic] = ids[topic]
            else:
                self._topic_ids.pop(topic, None)
        return gone & keys

    def _lookup(self, topic: str, partition: int) -> Callable[[int], int | None]:
        """`PartitionMark.advance`'s question about one partition, asked of Kafka."""
        kafka = self._kafka

        def next_existing(offset: int) -> int | None:
            with kafka.lock:
                return kafka.next_existing(topic, partition, offset)

        return next_existing

    def recheck(self) -> dict[str, dict[tuple[str, int], int]]:
        """Move the marks that no micro-batch moves, and commit them where they are ahead; return what was committed.

        Spark runs a micro-batch only when outcomes come. Between bursts, or once a pipeline is idle, a mark can
        still have somewhere to go: past the marker that ends a transactional partition (`PartitionMark.advance`'s
        ``to_end``), past a gap Kafka could not answer for at the last batch, past a record it waits on that
        retention has deleted since. The marks looked at: those of a spout served, unchanged since the last recheck
        (a partition the stream still moves needs none of this, and asking Kafka about each would cost a read a
        minute), unless they wait on a record found recently. Kafka is asked outside the lock, so that micro-batches
        go on meanwhile; a mark a micro-batch moved in between is left to it. Not saved: the next micro-batch saves the
        marks, and a restart follows the commits (`_skip_to_committed`). Before, once the topics are checked, the runs
        above marks that wait on a record are merged where no record parts them (`_merge_runs`)."""
        with self._lock:
            self._check_topics([key for key in self._load() if self.settings.serves(key[0])])
        self._merge_runs()
        with self._lock:
            marks = self._load()
            now_s = time.time()
            idle = {
                key: _copy(mark)
                for key, mark in marks.items()
                if self._unchanged.get(key) == mark and self.settings.serves(key[0]) and not mark.waiting(now_s)
            }
        looked_at: dict[Key, PartitionMark] = {}
        failed: list[str] = []
        for key, mark in idle.items():
            looked = _copy(mark)
            try:
                looked.advance(self._lookup(key[1], key[2]), now_s, to_end=True)
                looked_at[key] = looked
            except KafkaException as error:  # one partition's (a deleted topic's): the others are looked at
                cause = kafka_error(error)
                failed.append(f"{key[1]}[{key[2]}]: {cause.str() if cause is not None else error}")
        if failed:
            log.warning("could not look at %d watermark(s), e.g. %s", len(failed), failed[0])
        with self._lock:
            for key, looked in looked_at.items():
                if marks.get(key) == idle[key]:  # no micro-batch moved it meanwhile
                    marks[key] = looked
            self._unchanged = {key: _copy(mark) for key, mark in marks.items()}
            # Every mark looked at, moved or not: one whose commit failed at the last recheck is committed now.
            looked_marks = {key: marks[key].mark for key in looked_at if key in marks}
            self._say_stuck(marks, time.monotonic())
            topic_ids = dict(self._topic_ids)  # those the marks were checked against, before Kafka was asked
        return self._commit(looked_marks, topic_ids)

    def _merge_runs(self) -> None:
        """Merge the runs above a mark that waits on a record, where no record lies between them
        (`PartitionMark.record_free`): of a mark with more than `MERGE_ABOVE` runs above where its last walk ended
        (`_merged_to`: the runs below it are parted by records not done, and walking them again at every recheck
        would find nothing), for `MERGE_BUDGET_S` of Kafka's answers at most (a third of ``recheck_s`` if less),
        shared by the marks, which take turns at going first; a walk cut short goes on from there at the next recheck.
        Kafka is asked outside the lock; what it says is added to the mark as it is then, unless its topic was created
        again meanwhile. A mark idle before is idle still (`recheck` looks at it as it would have)."""
        with self._lock:
            marks = self._load()
            walks = {
                key: (_copy(mark), self._topic_ids.get(key[1]))
                for key, mark in marks.items()
                if mark.verified == mark.mark
                and self.settings.serves(key[0])
                and _runs_above(mark, self._merged_to.get(key, NONE)) > MERGE_ABOVE
            }
        for key in self._merged_to.keys() - marks.keys():  # marks dropped
            del self._merged_to[key]
        if not walks:
            return
        deadline = time.monotonic() + min(MERGE_BUDGET_S, self.settings.recheck_s / 3)
        order = sorted(walks)
        self._merge_turn = (self._merge_turn + 1) % len(order)
        order = order[self._merge_turn :] + order[: self._merge_turn]  # one slow to answer does not go first always
        found: dict[Key, list[tuple[int, int]]] = {}
        for left, key in enumerate(order):
            mark = walks[key][0]
            # An even share of what is left of the budget (what a walk leaves goes to the next): a source's partitions
            # usually wait together (its nacks not replayed).
            share = time.monotonic() + (deadline - time.monotonic()) / (len(order) - left)

            def go_on(until: float = share) -> bool:
                return time.monotonic() < until

            found[key], stopped = mark.record_free(self._records(key[1], key[2]), self._merged_to.get(key, 0), go_on)
            # Walked through: from the last run's end on, next time (what lies below is parted by records not done).
            self._merged_to[key] = mark.runs[-1][1] if stopped is None else stopped
        with self._lock:
            for key, free in found.items():
                if self._topic_ids.get(key[1]) != walks[key][1]:  # created again: its new mark is walked from its start
                    self._merged_to.pop(key, None)
                    continue
                if not free or key not in marks:
                    continue
                mark, before = marks[key], len(marks[key].runs)
                idle = self._unchanged.get(key) == mark
                mark.add_spans(free)
                if idle:
                    self._unchanged[key] = _copy(mark)
                log.info("%s[%d]: %d stretches without records between the offsets done above its watermark (%d) "
                         "merged: %d runs of done offsets, from %d", key[1], key[2], len(free), mark.mark,
                         len(mark.runs), before)  # fmt: skip

    def _records(self, topic: str, partition: int) -> RecordsRead:
        """`PartitionMark.record_free`'s reads of one partition, of Kafka."""
        kafka = self._kafka

        def records(first: int, last: int, keep: Container[int]) -> tuple[list[int], int] | None:
            with kafka.lock:
                return kafka.record_offsets(topic, partition, first, last, keep)

        return records

    def _say_stuck(self, marks: Mapping[Key, PartitionMark], now: float) -> None:
        """Warn, once per mark and offset, of a mark that has waited at one offset for ``stuck_s`` with offsets done
        above it: the record there was nacked and not replayed (no replay job running), or its outcome may be lost (an
        outcome record nobody could read, outcomes deleted by retention while the job was stopped). Its spout times
        out a tree it still counts as pending and decides it again; a spout that has forgotten it (it saw an outcome,
        or restarted) reads it again only when started again. Nothing else said where a watermark stood still, or
        why."""
        stuck = self._stuck
        for key in [key for key in stuck if key not in marks or marks[key].mark != stuck[key][0]]:
            del stuck[key]
        for key, mark in marks.items():
            if not mark.runs or not self.settings.serves(key[0]):
                continue
            at, since, said = stuck.setdefault(key, (mark.mark, now, False))
            if not said and now - since >= self.settings.stuck_s:
                stuck[key] = (at, since, True)
                above = mark.done_above
                log.warning("%s[%d]: the watermark of spout %s has waited at offset %d for %.0f min, with %d offsets "
                            "done (or without records) above it: that record was nacked and not replayed (is the "
                            "replay job running?), or its outcome may be lost (its spout decides it again when started "
                            "again)", key[1], key[2], key[0], at, (now - since) / 60, above)  # fmt: skip

    def recommit(self) -> None:
        """Commit every mark of a spout served again, moved or not: the marks saved but perhaps not committed before a
        crash, and the commits Kafka would delete after its offset retention (`CommitJobSettings.refresh_s`). Then
        the other watermarks of the spouts' groups, as they are (`_renew_others`)."""
        with self._lock:
            self._check_topics([key for key in self._load() if self.settings.serves(key[0])])
            served = {key: mark.mark for key, mark in self._load().items() if self.settings.serves(key[0])}
            committed = self._commit(served, dict(self._topic_ids), Commits.AHEAD_OR_SAME)
        # Outside the lock (micro-batches wait for it): a renewal commits an offset only while it is the group's.
        self._renew_others(served, committed)

    def _renew_others(self, served: Mapping[Key, int], committed: Mapping[str, Mapping[tuple[str, int], int]]) -> None:
        """Commit again, as they are, the other offsets of served spouts' groups: where a spout started a partition
        (`acker.spout`) that has had no outcome since (no mark here), and where the group is ahead of its mark (an
        operator moved it on, on a partition idle since). Left alone, Kafka deletes them after its offset
        retention, and the spout, started again, takes its reset policy there: with ``latest``, past the records
        written meanwhile. The groups are those of the spouts named (``spouts``) and of the marks: with a pattern, a
        spout none of whose records has had an outcome yet is not known. One group that cannot be renewed now (Kafka
        not answering, a member consuming with it) does not keep the others from it."""
        groups = set(self._by_group(served)) | {self.settings.watermark_group(s) for s in self.settings.spouts or ()}
        for group in sorted(groups):
            try:
                with self._kafka.lock:
                    offsets = self._kafka.group_offsets(group)
            except KafkaException as error:
                log.warning("could not read the watermarks of group %r to renew them now: %s", group, error)
                continue
            others = {tp: offset for tp, offset in offsets.items() if tp not in committed.get(group, {})}
            try:
                if others:
                    commit_group(self._kafka, group, others, Commits.SAME)
            except WatermarkCommitError as error:  # members: said here, and raised by the next commit of the group
                log.warning("%s", error)

    def _load(self) -> dict[Key, PartitionMark]:
        """The marks, loaded from the store by the first call (a micro-batch's, `recommit`'s or `recheck`'s)."""
        if self.marks is None:
            self.marks = self._store.load()
            self._topic_ids = dict(self._store.topic_ids)  # saved with them
        return self.marks

    def _commit(
        self, marks: Mapping[Key, int], topic_ids: Mapping[str, str], commits: Commits = Commits.AHEAD
    ) -> dict[str, dict[tuple[str, int], int]]:
        """Commit ``marks`` to their watermark groups where ``commits`` wants them (`KafkaLookups.advance`), and their
        topics still have the ids they were checked against; return what was committed, by group."""
        committed = {}
        for group, keys in self._by_group(marks).items():
            group_marks = {(topic, partition): marks[(spout, topic, partition)] for spout, topic, partition in keys}
            committed[group] = commit_group(self._kafka, group, group_marks, commits, topic_ids=topic_ids)
        return committed

    def _by_group(self, keys: Iterable[Key]) -> dict[str, list[Key]]:
        """``keys`` by the watermark group they are committed to."""
        groups: dict[str, list[Key]] = {}
        for key in keys:
            groups.setdefault(self.settings.watermark_group(key[0]), []).append(key)
        return groups

    def _skip_to_committed(self, keys: Iterable[Key]) -> None:
        """Marks behind their group's committed offset follow it: the watermark was moved ahead outside the job (an
        operator's reset of ``<group>.acked``; a spout starting a partition at its end when its watermark had
        expired and its reset policy is ``latest``). The spout reads from there: records below it will never be
        done, and would hold the mark for good."""
        for group, group_keys in self._by_group(keys).items():
            partitions = [(t, p) for _, t, p in group_keys]
            committed = _answered(partial(self._kafka.committed, group, partitions), self._kafka.lock,
                                  f"the committed offsets of {group}")  # fmt: skip
            for spout, topic, partition in group_keys:
                self._load()[(spout, topic, partition)].skip_to(committed.get((topic, partition), -1))


# A mark waiting on a record with more runs than this above it has the stretches between them looked at
# (`Marks._merge_runs`): a partition's run per record in flight is the usual case. For this long at most per recheck
# (the gaps read through, about 1.3 µs an offset, or a read from each gap's start where they lie far apart): 20 s
# covered some 15,000 transactions of 1,000 records (docs/benchmarks.md), the rest going on at the next recheck.
MERGE_ABOVE = 64
MERGE_BUDGET_S = 20.0
MISSING_TRUSTED_S = 60.0  # a topic found missing twice is taken as missing, without a second look, for this long
ANSWER_WAIT_S = 30.0  # how long a micro-batch asks Kafka again about a group or a partition before it fails


def _answered(
    ask: Callable[[], T], lock: AbstractContextManager[object], what: str, wait_s: float = ANSWER_WAIT_S
) -> T:
    """``ask()`` (under ``lock``), asked again for up to ``wait_s`` while Kafka does not answer: a group coordinator
    loading, a partition without a leader for a moment. Raised at once, a micro-batch failed, and its query stopped
    the job, on what the next second would have answered. Still no answer: the last error is raised (the batch
    fails, and runs again when the job is started again)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with lock:
                return ask()
        except (KafkaException, KafkaClientError) as error:
            if time.monotonic() >= deadline:
                raise
            log.warning("%s: no answer now (%s): asked again", what, error)
            time.sleep(1.0)


def _runs_above(mark: PartitionMark, offset: int) -> int:
    """How many of the mark's runs start above ``offset``."""
    return len(mark.runs) - bisect.bisect_right(mark.runs, (offset, sys.maxsize))


def _copy(mark: PartitionMark) -> PartitionMark:
    return replace(mark, runs=list(mark.runs))


def commit_group(
    kafka: KafkaLookups,
    group: str,
    marks: dict[tuple[str, int], int],
    commits: Commits = Commits.AHEAD,
    *,
    topic_ids: Mapping[str, str] | None = None,
) -> dict[tuple[str, int], int]:
    """`KafkaLookups.advance` for one watermark group; a failure is logged and left to the next commit of the group
    (a later batch's, the recheck's, the hourly refresh's), so that one group (or partition) Kafka refuses now does
    not stop the watermarks of every other. But a group with live members raises: something consumes with it, and
    every commit would be refused, for good.

    With ``topic_ids`` (those the marks were checked against), a mark is committed only while its topic still has
    that id, asked just before: a topic deleted and created again after the check (its commit's name is the new
    topic's) must not get the old topic's watermark, from which its spout would start, past records never read."""
    try:
        with kafka.lock:
            if topic_ids is not None:
                marks = _same_topics(kafka, marks, topic_ids)
            return kafka.advance(group, marks, commits) if marks else {}
    except WatermarkCommitError as error:
        if error.members:
            raise
        log.warning("%s", error)
    except KafkaException as error:  # no answer about the group's offsets now
        log.warning("could not commit the watermarks of group %r now: %s", group, error)
    return {}


def _same_topics(
    kafka: KafkaLookups, marks: dict[tuple[str, int], int], topic_ids: Mapping[str, str]
) -> dict[tuple[str, int], int]:
    """The ``marks`` whose topics have, now, the ids they were checked against (`commit_group`); the others said."""
    found = kafka.topic_ids(sorted({topic for topic, _ in marks}))
    same = {t for t, described in found.items() if described is not None and described[0] == topic_ids.get(t)}
    for topic in sorted(found.keys() - same):
        log.warning("%s was deleted or created again since its watermarks were checked: they are not committed",
                    topic)  # fmt: skip
    return {tp: mark for tp, mark in marks.items() if tp[0] in same}


def publish(settings: CommitJobSettings, marks: Marks) -> Callable[[DataFrame, int], None]:
    """The foreachBatch sink: move the marks, save them, then commit each spout group's (only where ahead)."""
    kafka = lookups(dict(settings.source.client))

    def sink(batch: DataFrame, batch_id: int) -> None:
        touched, topic_ids = marks.apply_batch(done_bitmaps(batch).collect(), batch_id)
        for group, group_marks in touched.items():
            committed = commit_group(kafka, group, group_marks, topic_ids=topic_ids)
            if committed:
                log.info("batch %d: %s advanced to %s", batch_id, group, committed)

    return sink


def start(spark: SparkSession, settings: CommitJobSettings) -> list[StreamingQuery]:
    """Start the job's queries: the watermarks, and the dead letters of malformed outcome records."""
    raw = settings.source.read(spark, exclude=(settings.dlq_topic,), max_records=settings.max_records)
    marks = Marks(settings, MarkStore(spark, settings.checkpoint))
    main = (
        done_offsets(raw)
        .writeStream.queryName("acker-commit")
        .outputMode("append")
        .foreachBatch(batch_function(publish(settings, marks)))
        .option("checkpointLocation", f"{settings.checkpoint}/marks")
        .trigger(processingTime=f"{settings.trigger_s} seconds")
        .start()
    )
    letters = start_dead_letters(
        raw, settings.source, settings.dlq_topic, settings.checkpoint, settings.dead_letter_trigger_s
    )
    threading.Thread(target=_refresh, args=(marks, main, settings), name="acker-commit-refresh", daemon=True).start()
    return [main, letters]


def renewal_s(refresh_s: float, retention_minutes: str | None) -> float:
    """How often the watermarks are committed again (`CommitJobSettings.refresh_s`): at ``refresh_s``, or at a quarter
    of the brokers' ``offsets.retention.minutes`` where that is shorter. Kafka deletes a group's committed offset that
    long after its last commit while the group has no members, as the watermark groups never have: renewed hourly
    under a retention of minutes, a watermark was gone for most of each hour while the job ran, and a spout started
    then read its partition from its reset policy (``earliest``: every record again; ``latest``: those written
    meanwhile skipped, and taken for done). A quarter leaves room for renewals that fail (Kafka away) and are asked
    again a minute later. The brokers' value unknown, or not a number: ``refresh_s``."""
    try:
        retention_s = float(retention_minutes) * 60.0 if retention_minutes is not None else float("inf")
    except ValueError:
        return refresh_s
    return refresh_s if not retention_s > 0 else min(refresh_s, retention_s / 4)


# While the brokers' offset retention is not known, the watermarks are committed again this often (at most
# ``refresh_s``), and the brokers asked again: a job started with its brokers, before they answer, kept the hour.
RETENTION_UNKNOWN_S = 300.0


def _renewal_every(settings: CommitJobSettings, said: bool) -> float | None:
    """`renewal_s` with the retention of one broker of the cluster (the lowest id: the brokers of a cluster share it),
    said when it shortens the renewal; None when the cluster does not tell (not answering yet, or a login without the
    right to describe its brokers: keep the retention above `RETENTION_UNKNOWN_S` × 4 then), said unless ``said``."""
    try:
        retention = broker_config(settings.source.client).get("offsets.retention.minutes")
    except Exception as error:  # KafkaClientError, or anything else: the refresher's thread must go on
        if not said:
            every_s = min(settings.refresh_s, RETENTION_UNKNOWN_S)
            log.warning("the brokers' offsets.retention.minutes is not known (%s): the watermarks are committed "
                        "again every %.0f s meanwhile", error, every_s)  # fmt: skip
        return None
    every_s = renewal_s(settings.refresh_s, retention)
    if every_s < settings.refresh_s:
        log.info("the brokers delete a group's offsets %s min after its last commit (offsets.retention.minutes): the "
                 "watermarks are committed again every %.0f s", retention, every_s)  # fmt: skip
    return every_s


def _refresh(marks: Marks, main: StreamingQuery, settings: CommitJobSettings) -> None:
    """While the job's query runs: commit every mark at once (a mark saved but not committed before a crash), then
    every ``refresh_s``, or sooner where the brokers' offset retention asks (`_renewal_every`, asked after the first
    commit, and again at each renewal until they tell), whether outcomes come or not (Spark runs no micro-batch without
    new records); and every ``recheck_s``, move the marks no micro-batch moves (`Marks.recheck`)."""
    due, recheck_due = 0.0, time.monotonic() + settings.recheck_s
    known: float | None = None  # the renewal's interval, once the brokers told their retention
    asked = False
    while _active(main):
        now = time.monotonic()
        if now >= due:
            try:
                marks.recommit()
                failed = False
            except Exception as error:  # Kafka or the checkpoint's storage: asked again a little later
                log.warning("committing the watermarks again failed: %s", error)
                failed = True
            if known is None:
                known, asked = _renewal_every(settings, said=asked), True
            every_s = known if known is not None else min(settings.refresh_s, RETENTION_UNKNOWN_S)
            due = time.monotonic() + (min(every_s, 60.0) if failed else every_s)
        if now >= recheck_due:
            recheck_due = now + settings.recheck_s
            try:
                for group, committed in marks.recheck().items():
                    if committed:
                        log.info("%s advanced to %s (no micro-batch came)", group, committed)
            except Exception as error:  # asked again at the next recheck
                log.warning("rechecking the watermarks failed: %s", error)
        time.sleep(min(5.0, settings.refresh_s, settings.recheck_s))


class DeadLetterCounter(StreamingQueryListener):
    """Counts the malformed outcome records each dead-letter query of a session copies (its sink's rows, per
    micro-batch) and says so in the log, a line per micro-batch that had any, with the count since the job started:
    the dead-letter topic alone did not tell an operator that one came."""

    _of_session: ClassVar[dict[int, DeadLetterCounter]] = {}

    def __init__(self) -> None:
        self.topics: dict[str, str] = {}  # query name: its dead-letter topic
        self.counts: dict[str, int] = {}

    @classmethod
    def of(cls, spark: SparkSession) -> DeadLetterCounter:
        """The session's counter, listening from its first call."""
        if id(spark) not in cls._of_session:
            cls._of_session[id(spark)] = counter = cls()
            spark.streams.addListener(counter)
        return cls._of_session[id(spark)]

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (pyspark's names)
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        progress = event.progress
        topic, written = self.topics.get(progress.name), progress.sink.numOutputRows
        if topic is None or written <= 0:
            return
        self.counts[progress.name] = total = self.counts.get(progress.name, 0) + written
        log.warning("%d malformed outcome records dead-lettered to %s (%d since the job started)", written, topic,
                    total)  # fmt: skip

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass


# Java's producer takes records of 1 MB at most (max.request.size), a broker's topic 1 MB and 12 bytes
# (max.message.bytes); a dead letter's headers and its framing take less than the margin.
_JAVA_MAX_REQUEST = 1_048_576
_TOPIC_MAX_DEFAULT = 1_048_588
_DEAD_LETTER_MARGIN = 1024


def dead_letter_max_bytes(source: OutcomeSource, topic: str) -> int:
    """The most bytes a malformed record's value and key may hold together for its copy to go to ``topic`` whole:
    below Spark's producer's ``max.request.size`` and the topic's ``max.message.bytes``, headers and framing left
    room."""
    producer = int(source.kafka_options().get("kafka.max.request.size", _JAVA_MAX_REQUEST))
    return min(producer, known_topic_max_bytes(source.client, topic) or _TOPIC_MAX_DEFAULT) - _DEAD_LETTER_MARGIN


def known_topic_max_bytes(client: Mapping[str, Any], topic: str) -> int | None:
    """The topic's ``max.message.bytes``; None if the broker does not say."""
    try:
        return topic_max_bytes(client, topic)
    except KafkaClientError as error:
        log.warning("could not read max.message.bytes of %s (%s): the producer's limit alone is used", topic, error)
        return None


def _active(query: StreamingQuery) -> bool:
    try:
        return bool(query.isActive)
    except Exception:  # the session stopped, its JVM gone
        return False


def start_dead_letters(
    raw: DataFrame, source: OutcomeSource, topic: str, checkpoint: str, trigger_s: float
) -> StreamingQuery:
    """A query copying malformed outcome records to ``topic`` with the reason (shared by both jobs), whole when they fit
    what Spark's producer and the topic take (`dead_letter_max_bytes`), else cut; counted in the log
    (`DeadLetterCounter`)."""
    name = f"acker-dead-letters-{checkpoint.rstrip('/').rsplit('/', 1)[-1]}"
    DeadLetterCounter.of(raw.sparkSession).topics[name] = topic
    whole_max = dead_letter_max_bytes(source, topic)
    kept = max(0, min(DLQ_KEPT_BYTES, whole_max // 2))  # a value and a key cut fit together
    return (
        malformed(raw, whole_max, kept)
        .writeStream.queryName(name)
        .format("kafka")
        .options(**source.kafka_options())
        .option("topic", topic)
        .option("checkpointLocation", f"{checkpoint}/dead-letters")
        .trigger(processingTime=f"{trigger_s} seconds")
        .start()
    )
