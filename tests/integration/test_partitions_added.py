"""Partitions added to a topic a long-lived handle already knows, on the real broker: the handle's metadata keeps
the old partition count until its next refresh (5 minutes by default), and what it is asked of a new partition must
not fail for that."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from acker.config import ServiceConfig
from acker.kafka.clients import TopicSpec, create_topics, log_bounds
from tests.integration.helpers import add_partitions


def test_the_bounds_of_a_partition_added_since_the_handle_read_the_topic_are_read(config: ServiceConfig) -> None:
    """A spout given the new partition read its bounds through its watermark handle (`Spout._on_assign`), the
    commit job through its lookups (`KafkaLookups.start_mark`): both failed after 30 s of "unknown partition"."""
    topic = f"added-{uuid.uuid4().hex[:8]}"
    create_topics(config.client(), [TopicSpec(topic, 1)])
    handle = Consumer(config.client(**{"group.id": f"handle-{uuid.uuid4().hex[:8]}"}))
    try:
        assert log_bounds(handle, TopicPartition(topic, 0)) == (0, 0)  # the handle now knows the topic: 1 partition
        add_partitions(config.client(), topic, 2)
        producer = Producer(config.client())
        producer.produce(topic, b"in the new partition", partition=1)
        assert producer.flush(30) == 0
        assert log_bounds(handle, TopicPartition(topic, 1), timeout_s=20) == (0, 1)
    finally:
        handle.close()
