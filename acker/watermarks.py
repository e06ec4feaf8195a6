"""`acker watermarks`: each spout's fully-processed watermark per source partition, and how far it is behind.

The watermarks are the committed offsets of the spouts' ``<group>.acked`` groups (`acker.spout`, written by the
Spark commit job): the offset of the first source record not known to be fully processed. Behind = the records
between the watermark and the partition's end: those read or waiting whose trees are not all decided and resolved;
every record of a partition without a watermark (no spout has started it; one with reset latest will start it at
its end, leaving those unread).
Counted where there are at most `COUNTED_UP_TO` offsets between them (a transactional topic, as a replay topic, has
offsets that are no record: its transactions' markers); beyond that, or while a transaction is open there, the
offsets between them, at most that many records.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from acker.config import ServiceConfig, without_consumer_settings
from acker.kafka.clients import NOT_ALLOWED, READ_TO_SETTINGS, KafkaClientError, kafka_error, read_to, topic_partitions
from acker.status import end_offsets

ACKED = ".acked"
COUNTED_UP_TO = 10_000  # offsets between a watermark and the end whose records `read_watermarks` counts


@dataclass(frozen=True)
class Watermark:
    group: str  # the watermark group, <spout group>.acked
    topic: str
    partition: int
    # None: a partition of a topic the group has watermarks of, but not of this one (added to the topic, and no spout
    # has taken it yet; or a spout's reset policy never started it)
    watermark: int | None
    end: int | None  # None when Kafka cannot tell now (no leader)
    counted: int | None = None  # the records between the watermark and the end, where they were counted
    # Without a watermark, or with one beyond the end: the partition's first offset, where `behind` counts from (none
    # of its records is known to be processed: "-" there hid every record of a partition no spout had taken, and 0 a
    # partition whose topic was deleted and made again, which a spout reads again from its first record)
    first: int | None = None
    # Where a transaction still open begins (the partition's last stable offset, below its end), None where none is:
    # a spout reads no record past it until it ends. One the broker never aborts (hanging) holds the watermark there
    # for good, with nothing but this to show why (README, "A transaction that does not end").
    open_from: int | None = None

    @property
    def beyond_end(self) -> bool:
        """Whether the watermark lies beyond the partition's end (its topic deleted and made again, a log truncated):
        a spout seeks there and its consumer's reset reads the partition again from its first record (its source's
        with reset latest: from the end)."""
        return _beyond(self.watermark, self.end)

    @property
    def behind(self) -> int | None:
        """The records between the watermark (or, without one or with one beyond the end, the partition's first
        offset) and the end: counted, or else the offsets between them."""
        if self.counted is not None:
            return self.counted
        start = self.first if self.watermark is None or self.beyond_end else self.watermark
        return None if self.end is None or start is None else max(0, self.end - start)


def _beyond(mark: int | None, end: int | None) -> bool:
    return mark is not None and end is not None and mark > end


def acked_group(consumer_group: str) -> str:
    """The watermark group of a spout whose consumer group is ``consumer_group``: always the group and ``.acked``
    (a spout's own group may end in ``.acked``), where the spout seeks and the Spark jobs commit and look."""
    return consumer_group + ACKED


def watermark_groups(group: str) -> tuple[str, ...]:
    """The watermark groups a spout's group given either way may mean, as an operator names it (`acker watermarks
    orders` or `acker watermarks orders.acked`): a name that ends in ``.acked`` is a watermark group, or the consumer
    group of a spout whose own group is so named (its watermarks in ``orders.acked.acked``: `acked_group`)."""
    return (group, acked_group(group)) if group.endswith(ACKED) else (acked_group(group),)


def watermark_group_names(config: ServiceConfig, timeout_s: float = 10.0) -> list[str]:
    """The cluster's groups named as watermark groups are (``<group>.acked``), sorted: what an operator who named a
    spout (``wc.sentences``) rather than its consumer group (``wc-spout``) may have meant. Empty when the cluster does
    not list them (no right to, no answer): a hint, never the command's end."""
    admin = AdminClient(without_consumer_settings(config.client()))
    try:
        listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    except (KafkaException, TimeoutError):
        return []
    return sorted(group.group_id for group in listed.valid if group.group_id.endswith(ACKED))


def read_watermarks(config: ServiceConfig, groups: list[str], timeout_s: float = 10.0) -> list[Watermark]:
    """The committed watermarks of ``groups`` (spout consumer groups, or their ``.acked`` groups), by group, topic,
    partition, with the other partitions of their topics (watermark None); a group without any is left out."""
    admin = AdminClient(without_consumer_settings(config.client()))
    # Never commits: a group committed by each run, kept by Kafka for 7 days, piled up under a monitor running this.
    reader = {"group.id": f"acker-watermarks-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, **READ_TO_SETTINGS}
    # Counts the records as a spout reads them, whatever the shared settings say: read_committed.
    consumer = Consumer(config.client(**reader, **{"isolation.level": "read_committed"}))
    # The ends as written: read_committed, a consumer is told the last stable offset instead, and a transaction open
    # on the partition hid every record written after it from the count of those behind.
    ends_of = Consumer(config.client(**reader, **{"isolation.level": "read_uncommitted"}))
    out: list[Watermark] = []
    try:
        named = {g: False for name in groups for g in watermark_groups(name)[:1]}  # the watermark groups named
        also = {g: True for name in groups for g in watermark_groups(name)[1:] if g not in named}  # perhaps meant
        for group, perhaps in {**named, **also}.items():
            request = ConsumerGroupTopicPartitions(group)
            try:
                result = admin.list_consumer_group_offsets([request], request_timeout=timeout_s)[group].result()
            except KafkaException as error:
                cause = kafka_error(error)
                if perhaps and cause is not None and cause.code() in NOT_ALLOWED:  # one not named, which the
                    continue  # operator may have no right to describe: not the command's end
                raise
            marks = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
                     if tp.error is None and tp.offset >= 0}  # fmt: skip
            for topic in sorted({topic for topic, _ in marks}):
                try:  # with the partitions that have none: a silent gap in the table would look like all is well
                    partitions = set(topic_partitions(consumer, topic, timeout_s)) | {p for t, p in marks if t == topic}
                except KafkaException:  # those known, then
                    partitions = {p for t, p in marks if t == topic}
                ends = end_offsets(ends_of, topic, sorted(partitions), timeout_s)
                for partition, end in ends.items():
                    mark = marks.get((topic, partition))
                    # None: no leader, or no answer in the time all had (`end_offsets`); asked again, each one waited
                    # its own timeout, minutes for a cluster that lost brokers, when the table is wanted most.
                    first, stable = (None, None) if end is None else _offsets(consumer, topic, partition, timeout_s)
                    beyond = _beyond(mark, end)
                    first = first if mark is None or beyond else None
                    open_from = stable if end is not None and stable is not None and stable < end else None
                    # Past an open transaction, a count would wait out its timeout and give none; beyond the end with
                    # no first offset known, one from the watermark would say 0.
                    counted = None if open_from is not None or (beyond and first is None) else _records(
                        consumer, topic, partition, mark if first is None else first, end)  # fmt: skip
                    out.append(Watermark(group, topic, partition, mark, end, counted, first, open_from))
    finally:
        consumer.close()
        ends_of.close()
    return out


def _offsets(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> tuple[int | None, int | None]:
    """The partition's first offset (its low watermark) and its end as ``consumer`` reads it (read_committed: its last
    stable offset, where the first transaction still open begins); None, None when Kafka cannot tell now."""
    try:
        first, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
    except KafkaException:
        return None, None
    return int(first), int(end)


def _records(consumer: Consumer, topic: str, partition: int, start: int | None, end: int | None) -> int | None:
    """The committed records from ``start`` to ``end``, counted where at most `COUNTED_UP_TO` offsets lie between
    them; None where they are not (more, not known, or a transaction open there: read up to its start only)."""
    if start is None or end is None or end - start > COUNTED_UP_TO:
        return None
    if end <= start:
        return 0
    try:
        return sum(1 for _ in read_to(consumer, TopicPartition(topic, partition, start), end, timeout_s=2.0))
    except KafkaClientError:
        return None
