"""`acker watermarks`: each spout's fully-processed watermark per source partition, and how far it is behind.

The watermarks are the committed offsets of the spouts' ``<group>.acked`` groups (`acker.spout`, written by the
Spark commit job): the offset of the first source record not known to be fully processed. Behind = the partition's
end offset minus the watermark: the records read or waiting whose trees are not all decided and resolved.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from acker.config import ServiceConfig, without_consumer_settings
from acker.status import end_offset

ACKED = ".acked"


@dataclass(frozen=True)
class Watermark:
    group: str  # the watermark group, <spout group>.acked
    topic: str
    partition: int
    watermark: int
    end: int | None  # None when Kafka cannot tell now (no leader)

    @property
    def behind(self) -> int | None:
        return None if self.end is None else max(0, self.end - self.watermark)


def watermark_group(group: str) -> str:
    """The watermark group of a spout's consumer group (given either way)."""
    return group if group.endswith(ACKED) else group + ACKED


def read_watermarks(config: ServiceConfig, groups: list[str], timeout_s: float = 10.0) -> list[Watermark]:
    """The committed watermarks of ``groups`` (spout consumer groups, or their ``.acked`` groups), by group, topic,
    partition; a group without any is left out."""
    admin = AdminClient(without_consumer_settings(config.client()))
    consumer = Consumer(config.client(**{"group.id": f"acker-watermarks-{uuid.uuid4().hex[:8]}"}))
    out: list[Watermark] = []
    try:
        for group in dict.fromkeys(watermark_group(g) for g in groups):
            request = ConsumerGroupTopicPartitions(group)
            result = admin.list_consumer_group_offsets([request], request_timeout=timeout_s)[group].result()
            for tp in sorted(result.topic_partitions, key=lambda tp: (tp.topic, tp.partition)):
                if tp.error is not None or tp.offset < 0:
                    continue
                end = end_offset(consumer, tp.topic, tp.partition, timeout_s)
                out.append(Watermark(group, tp.topic, tp.partition, tp.offset, end))
    finally:
        consumer.close()
    return out
