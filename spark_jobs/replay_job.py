"""The replay job: nacks in, records re-published for their spout (or dead-lettered) out.

readStream over the spouts' outcome topics → the nacks (``FAILED``, ``TIMEOUT``, ``OVERLOAD``) whose message id is
a record's coordinates → duplicates dropped (an acker replay re-emits outcomes; Spark keeps the keys seen within
``dedupe_window`` in its checkpointed state) → each micro-batch, on the driver, in one Kafka transaction:

- fetches each nacked record by its coordinates and re-publishes it to the spout's replay topic
  (``<replay_prefix><spout>``, which the spout reads besides its source topic) with the headers
  ``acker.replay.attempt`` (1, 2, ...), ``acker.replay.origin`` (the first record's coordinates),
  ``acker.replay.reason`` (the last nack's reason) and ``acker.replay.not-before`` (epoch ms: the spout holds the
  record until then: the backoff), keeping the record's key, value and other headers;
- after ``max_attempts`` attempts, writes it to the dead-letter topic with the same headers instead (and a record
  that no longer exists, with an empty value and reason ``source-missing``);
- writes ``REPLAYED`` / ``DEAD_LETTERED`` outcomes for the nacked message ids to the spout's outcome topic: the
  commit job then counts those offsets as done (the replayed copy has its own offset and its own tree);
- writes the micro-batch id to the job's progress topic.

A micro-batch that Spark runs again after a crash finds its id in the progress topic and publishes nothing: a nack
is replayed once, and none is lost (Spark's checkpoint holds the read position; the transaction holds the output).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from acker.kafka.clients import TopicSpec, create_topics, partition_count
from acker.kafka.lookups import lookups
from acker.spout import NOT_BEFORE
from acker.wire import encode_outcome_rows
from spark_jobs.commit_job import OutcomeSource, start_dead_letters
from spark_jobs.outcomes import DEAD_LETTERED, NACKS, REPLAYED, outcome_rows

log = logging.getLogger("spark_jobs.replay")

ATTEMPT = "acker.replay.attempt"
ORIGIN = "acker.replay.origin"
REASON = "acker.replay.reason"

Headers = list[tuple[str, str | bytes | None]]


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt ``n`` (1-based): ``first_ms * factor ** (n - 1)``, at most ``max_ms``."""

    first_ms: int = 1_000
    factor: float = 2.0
    max_ms: int = 60_000

    def delay_ms(self, attempt: int) -> int:
        return int(min(self.max_ms, self.first_ms * self.factor ** max(0, attempt - 1)))


@dataclass(frozen=True)
class ReplayJobSettings:
    source: OutcomeSource
    checkpoint: str
    name: str = "acker-replay"  # names the transactional producer and the progress records: one per job
    trigger_s: float = 1.0
    max_attempts: int = 5
    backoff: Backoff = Backoff()
    replay_prefix: str = "acker.replay."
    outcome_prefix: str = "acker.outcomes."
    dead_letter_topic: str = "acker.replay.dlq"
    progress_topic: str = "acker.replay.progress"
    dlq_topic: str = "acker.outcomes.dlq"  # malformed outcome records
    dedupe_window: str = "1 hour"


def nacks(outcomes: DataFrame) -> DataFrame:
    """The nacks of records: ``spout, msg_id, reason, topic, partition, offset, timestamp``."""
    return outcomes.where(F.col("outcome").isin(*NACKS) & F.col("source_topic").isNotNull()).select(
        "spout",
        "msg_id",
        F.col("outcome").alias("reason"),
        F.col("source_topic").alias("topic"),
        F.col("source_partition").alias("partition"),
        F.col("source_offset").alias("offset"),
        "timestamp",
    )


@dataclass(frozen=True)
class Decision:
    """What to do with one nacked record: publish ``headers`` (with its key and value) to ``topic``."""

    topic: str
    headers: Headers
    resolution: str  # REPLAYED or DEAD_LETTERED


def decide(settings: ReplayJobSettings, nack: Any, record: Message | None, now_ms: int) -> Decision:
    """Pure: where a nacked record goes next, and with which headers. ``nack`` has ``spout, msg_id, reason``."""
    spout, msg_id, reason = nack.spout, nack.msg_id, nack.reason
    if record is None:
        return Decision(settings.dead_letter_topic, _context(msg_id, 0, "source-missing"), DEAD_LETTERED)
    own = dict(record.headers() or [])
    previous, first = own.get(ATTEMPT), own.get(ORIGIN)
    attempt = int(previous) + 1 if isinstance(previous, bytes) and previous.isdigit() else 1
    origin = first.decode() if isinstance(first, bytes) else msg_id
    kept: Headers = [(k, v) for k, v in (record.headers() or []) if not k.startswith("acker.")]  # type: ignore[str-unpack]  # a header is a pair
    if attempt > settings.max_attempts:
        return Decision(
            settings.dead_letter_topic, kept + _context(origin, attempt - 1, reason, last=msg_id), DEAD_LETTERED
        )
    not_before = now_ms + settings.backoff.delay_ms(attempt)
    headers = [*kept, *_context(origin, attempt, reason), (NOT_BEFORE, str(not_before).encode())]
    return Decision(settings.replay_prefix + spout, headers, REPLAYED)


def _context(origin: str, attempt: int, reason: str, last: str | None = None) -> Headers:
    out: Headers = [(ATTEMPT, str(attempt).encode()), (ORIGIN, origin.encode()), (REASON, reason.encode())]
    if last is not None:
        out.append(("acker.replay.last", last.encode()))
    return out


class _Publisher:
    """The driver's transactional producer and its progress marker (one per job name)."""

    def __init__(self, settings: ReplayJobSettings) -> None:
        self.settings = settings
        client = dict(settings.source.client)
        create_topics(client, [TopicSpec(settings.progress_topic, 1), TopicSpec(settings.dead_letter_topic, 1)])
        self.producer = Producer({**client, "transactional.id": settings.name, "linger.ms": 5})
        self.producer.init_transactions(30)  # fences a previous instance of the same job
        self._partitions: dict[str, int] = {}

    def last_batch(self) -> int:
        """The id of the last micro-batch published (committed), -1 if none."""
        client = dict(self.settings.source.client)
        consumer = Consumer({**client, "group.id": f"{self.settings.name}-{uuid.uuid4().hex[:8]}",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "enable.partition.eof": True})  # fmt: skip
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.settings.progress_topic, 0), timeout=10)
            consumer.assign([TopicPartition(self.settings.progress_topic, 0, max(low, high - 1000))])
            last = -1
            while True:
                records = consumer.consume(500, timeout=5)
                if not records:
                    return last
                for record in records:
                    if record.error() is not None:
                        if record.error().code() != KafkaError._PARTITION_EOF:  # type: ignore[union-attr]
                            raise KafkaException(record.error())
                        return last  # read to the end
                    if record.key() == self.settings.name.encode():
                        last = max(last, int(record.value() or b"-1"))
        finally:
            consumer.close()

    def partitions(self, topic: str) -> int:
        if topic not in self._partitions:
            client = dict(self.settings.source.client)
            create_topics(client, [TopicSpec(topic, 1)])
            self._partitions[topic] = partition_count(client, topic)
        return self._partitions[topic]

    def publish(self, batch_id: int, rows: list[Any], fetch: Callable[[str, int, int], Message | None]) -> int:
        if batch_id <= self.last_batch():
            log.info("batch %d was published before a restart: skipped", batch_id)
            return 0
        now_ms = int(time.time() * 1000)
        resolutions: dict[str, list[tuple[str, int, str, int]]] = defaultdict(list)
        self.producer.begin_transaction()
        try:
            for row in rows:
                record = fetch(row.topic, int(row.partition), int(row.offset))
                decision = decide(self.settings, row, record, now_ms)
                key = record.key() if record is not None else None
                value = record.value() if record is not None else None
                self.producer.produce(
                    decision.topic,
                    value,
                    key,
                    partition=int(row.partition) % self.partitions(decision.topic),
                    headers=decision.headers,
                )
                resolutions[row.spout].append((decision.resolution, 0, row.msg_id, 0))
            for spout, outcome_rows_ in resolutions.items():
                topic = self.settings.outcome_prefix + spout
                self.producer.produce(topic, encode_outcome_rows(spout, outcome_rows_), b"replay")
            self.producer.produce(self.settings.progress_topic, str(batch_id).encode(), self.settings.name.encode())
            self.producer.commit_transaction(60)
        except BaseException:
            self.producer.abort_transaction(30)
            raise
        return len(rows)


def start(spark: SparkSession, settings: ReplayJobSettings) -> list[StreamingQuery]:
    """Start the job's queries: the replays, and the dead letters of malformed outcome records."""
    raw = settings.source.read(spark)
    trigger = f"{settings.trigger_s} seconds"
    deduplicated = (
        nacks(outcome_rows(raw))
        .withWatermark("timestamp", settings.dedupe_window)
        .dropDuplicatesWithinWatermark(["spout", "msg_id"])
    )
    publisher: list[_Publisher] = []  # created on the first batch, on the driver

    def sink(batch: DataFrame, batch_id: int) -> None:
        if not publisher:
            publisher.append(_Publisher(settings))
        client = dict(settings.source.client)
        kafka = lookups(client)

        def fetch(topic: str, partition: int, offset: int) -> Message | None:
            with kafka.lock:
                return kafka.fetch(topic, partition, offset)

        rows = batch.collect()
        if rows:
            count = publisher[0].publish(batch_id, rows, fetch)
            log.info("batch %d: %d nack(s) handled", batch_id, count)

    main = (
        deduplicated.writeStream.queryName("acker-replay")
        .outputMode("append")
        .foreachBatch(sink)
        .option("checkpointLocation", f"{settings.checkpoint}/replays")
        .trigger(processingTime=trigger)
        .start()
    )
    return [main, start_dead_letters(raw, settings.source.client, settings.dlq_topic, settings.checkpoint, trigger)]
