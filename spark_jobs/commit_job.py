"""The commit job: outcomes in, fully-processed watermarks out.

readStream over the spouts' outcome topics → one row per outcome (`spark_jobs.outcomes`) → the done offsets
(``ACK``, and ``REPLAYED`` / ``DEAD_LETTERED`` written by the replay job) → per source partition, a
`PartitionMark` kept in Spark's state store (checkpointed) → each micro-batch publishes the marks that moved as the
committed offsets of the consumer group ``<spout group>.acked``, where the spout seeks on assignment
(`acker.spout`) and where ``kafka-consumer-groups --describe`` shows the fully-processed lag.

Guarantees: a published watermark is the end of the contiguous done prefix of the records that exist, never
beyond it; it never goes back (`KafkaLookups.advance` commits only what is ahead); duplicated outcomes change
nothing; a restarted job resumes from its checkpoint (Spark replays an unfinished micro-batch, whose commit is
then a no-op or the same). Records that are not outcome records go to the dead-letter topic, counted by Kafka.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # no stubs in the pinned pandas
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from acker.kafka.lookups import lookups
from spark_jobs.outcomes import COORDINATES, DONE, decoded, malformed, source_partition
from spark_jobs.watermark import PartitionMark

log = logging.getLogger("spark_jobs.commit")

MARK_SCHEMA = "spout string, topic string, partition int, mark long, done_above long"
# The runs travel as packed int64 pairs: array-typed state fields do not survive the state's (pickled) round trip.
STATE_SCHEMA = "mark long, runs binary, verified long"


# Options of Spark's Kafka source (Java client names) that are not librdkafka's. A task's consumer is cached and
# pipelines its next fetch, which waits at the end of the log for up to fetch.max.wait.ms (500 ms by default); the next
# micro-batch's task, which seeks elsewhere, waits for that fetch to return first: half a second added to every batch.
SPARK_KAFKA_DEFAULTS = {"kafka.fetch.max.wait.ms": "20"}


@dataclass(frozen=True)
class OutcomeSource:
    """Where the jobs read outcomes: Kafka client settings and the outcome topics (a list, or a pattern)."""

    client: Mapping[str, Any]  # librdkafka settings, bootstrap.servers included
    topics: tuple[str, ...] = ()
    pattern: str = ""
    starting_offsets: str = "earliest"
    spark_options: Mapping[str, str] = field(default_factory=lambda: dict(SPARK_KAFKA_DEFAULTS))

    def read(self, spark: SparkSession) -> DataFrame:
        if bool(self.topics) == bool(self.pattern):
            raise ValueError("name the outcome topics or a pattern, not both")
        options = {**_spark_kafka_options(self.client), **self.spark_options}
        reader = spark.readStream.format("kafka").options(**options)
        reader = (
            reader.option("subscribe", ",".join(self.topics))
            if self.topics
            else reader.option("subscribePattern", self.pattern)
        )
        return reader.option("startingOffsets", self.starting_offsets).load()


@dataclass(frozen=True)
class CommitJobSettings:
    source: OutcomeSource
    checkpoint: str  # a directory (local, HDFS, S3...): the state and the progress of the job
    trigger_s: float = 1.0
    groups: Mapping[str, str] = field(default_factory=dict)  # spout → its consumer group (default: the spout's name)
    dlq_topic: str = "acker.outcomes.dlq"
    dead_letter_trigger_s: float = 10.0  # malformed outcome records are rare: a slow trigger leaves the cores free
    # Partitions of the state (one mark per source partition; fixed when the checkpoint is created). Each is a task
    # with a round trip to a Python worker at every micro-batch: one is plenty for thousands of source partitions.
    state_partitions: int = 1

    def watermark_group(self, spout: str) -> str:
        return f"{self.groups.get(spout, spout)}.acked"


def done_offsets(raw: DataFrame) -> DataFrame:
    """Per outcome record and source partition, the source offsets that need nothing more (``ACK``, or resolved by
    the replay job): ``spout, topic, partition, offsets`` (an array). One row per record and partition rather than
    per outcome: the state function then gets a few arrays per micro-batch instead of a row per ack."""
    o = F.col("o")
    done = F.filter(
        F.transform(
            o.getField("outcomes"),
            lambda outcome, i: F.struct(
                outcome.alias("outcome"),
                F.element_at(o.getField("source_index"), i + 1).alias("source"),
                F.element_at(o.getField("offsets"), i + 1).alias("offset"),
            ),
        ),
        lambda x: x["outcome"].isin(*DONE) & (x["offset"] >= 0),
    )
    per_source = raw.select(decoded(raw).alias("o")).select(
        o.getField("spout").alias("spout"),
        o.getField("sources").alias("sources"),
        done.alias("done"),
    )
    exploded = per_source.select(  # an invalid record is null: it explodes into nothing
        "spout", "sources", "done", F.explode(F.array_distinct(F.transform("done", lambda x: x["source"]))).alias("s")
    )
    source = F.element_at("sources", F.col("s") + 1)
    topic, partition = source_partition(source)
    offsets = F.transform(F.filter("done", lambda x: x["source"] == F.col("s")), lambda x: x["offset"])
    return exploded.where(source.rlike(COORDINATES)).select(
        "spout", topic.alias("topic"), partition.alias("partition"), offsets.alias("offsets")
    )


def advance_marks(
    start_mark: Callable[[str, str, int], int], next_existing: Callable[[str, int, int], int]
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """The state function of one source partition (``applyInPandasWithState``): add the batch's done offsets to
    its `PartitionMark`, advance it, emit it. ``start_mark(spout, topic, partition)`` gives the mark of a partition
    seen for the first time; ``next_existing(topic, partition, offset)`` is `KafkaLookups.next_existing`."""

    def apply(key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        spout, topic, partition = str(key[0]), str(key[1]), int(key[2])
        if state.exists:
            mark, runs, verified = state.get
            pairs = np.frombuffer(bytes(runs), np.int64).reshape(-1, 2).tolist()
            pm = PartitionMark(int(mark), [(s, e) for s, e in pairs], int(verified))
        else:
            pm = PartitionMark(start_mark(spout, topic, partition))
        arrays = [np.asarray(offsets, np.int64) for batch in batches for offsets in batch["offsets"]]
        if arrays:
            pm.add(np.concatenate(arrays))
        pm.advance(lambda offset: next_existing(topic, partition, offset))
        state.update((int(pm.mark), np.array(pm.runs, np.int64).reshape(-1, 2).tobytes(), int(pm.verified)))
        yield pd.DataFrame(
            {
                "spout": [spout],
                "topic": [topic],
                "partition": [partition],
                "mark": [pm.mark],
                "done_above": [pm.done_above],
            }
        )

    return apply


def marks(done: DataFrame, settings: CommitJobSettings) -> DataFrame:
    """The watermark of every source partition with news in a micro-batch (streaming, stateful)."""
    client = dict(settings.source.client)

    def start_mark(spout: str, topic: str, partition: int) -> int:
        kafka = lookups(client)
        with kafka.lock:
            return kafka.start_mark(settings.watermark_group(spout), topic, partition)

    def next_existing(topic: str, partition: int, offset: int) -> int:
        kafka = lookups(client)
        with kafka.lock:
            return kafka.next_existing(topic, partition, offset)

    state_function: Any = advance_marks(start_mark, next_existing)  # pyspark types it with its own pandas alias
    return done.groupBy("spout", "topic", "partition").applyInPandasWithState(
        state_function, MARK_SCHEMA, STATE_SCHEMA, "update", GroupStateTimeout.NoTimeout
    )


def publish(settings: CommitJobSettings) -> Callable[[DataFrame, int], None]:
    """The foreachBatch sink: commit each spout group's marks (only those ahead of what it has)."""
    client = dict(settings.source.client)

    def sink(batch: DataFrame, batch_id: int) -> None:
        by_group: dict[str, dict[tuple[str, int], int]] = {}
        for row in batch.collect():
            group = by_group.setdefault(settings.watermark_group(row.spout), {})
            key = (row.topic, int(row.partition))
            group[key] = max(group.get(key, -1), int(row.mark))
        kafka = lookups(client)
        for group_name, group_marks in by_group.items():
            with kafka.lock:
                committed = kafka.advance(group_name, group_marks)
            if committed:
                log.info("batch %d: %s advanced to %s", batch_id, group_name, committed)

    return sink


def start(spark: SparkSession, settings: CommitJobSettings) -> list[StreamingQuery]:
    """Start the job's queries: the watermarks, and the dead letters of malformed outcome records."""
    raw = settings.source.read(spark)
    writer = (
        marks(done_offsets(raw), settings)
        .writeStream.queryName("acker-commit")
        .outputMode("update")
        .foreachBatch(publish(settings))
        .option("checkpointLocation", f"{settings.checkpoint}/marks")
        .trigger(processingTime=f"{settings.trigger_s} seconds")
    )
    with _shuffle_partitions(spark, settings.state_partitions):
        main = writer.start()
    letters = start_dead_letters(
        raw, settings.source.client, settings.dlq_topic, settings.checkpoint, settings.dead_letter_trigger_s
    )
    return [main, letters]


@contextlib.contextmanager
def _shuffle_partitions(spark: SparkSession, partitions: int) -> Iterator[None]:
    """The session's shuffle partitions while a query starts (a started query keeps its own copy of the setting)."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(before))


def start_dead_letters(
    raw: DataFrame, client: Mapping[str, Any], topic: str, checkpoint: str, trigger_s: float
) -> StreamingQuery:
    """A query copying malformed outcome records to ``topic`` with the reason (shared by both jobs)."""
    return (
        malformed(raw)
        .writeStream.queryName(f"acker-dead-letters-{checkpoint.rstrip('/').rsplit('/', 1)[-1]}")
        .format("kafka")
        .options(**_spark_kafka_options(client))
        .option("topic", topic)
        .option("checkpointLocation", f"{checkpoint}/dead-letters")
        .trigger(processingTime=f"{trigger_s} seconds")
        .start()
    )


def _spark_kafka_options(client: Mapping[str, Any]) -> dict[str, str]:
    """librdkafka settings as Spark Kafka options (``kafka.`` + the Java client's name, which is the same for the
    common ones: bootstrap.servers, security.protocol, sasl.*, ssl.*)."""
    return {f"kafka.{k}": str(v) for k, v in client.items()}
