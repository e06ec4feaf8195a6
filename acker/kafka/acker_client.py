"""Sending protocol messages to the acker topic: batched per partition, one columnar record per batch.

Every message of a tree goes to partition ``partition_of(anchor, partitions)`` (`acker.core.ids`), set
explicitly: librdkafka's default partitioner would hash differently. Messages of one partition are collected and
sent as one record of up to ``max_batch`` messages, or after ``linger_s`` (call `poll` regularly). Order within a
partition is the order of `send` calls. Not thread-safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka import Message as KafkaMessage

from acker.columnar.block import MessageBlock
from acker.core.ids import partition_of
from acker.core.messages import TreeMessage
from acker.wire import encode_batch

DeliveryFailure = Callable[[int, list[TreeMessage], KafkaError], None]


class AckerClient:
    __slots__ = ("_buffers", "_first_at", "_on_failure", "linger_s", "max_batch", "partitions", "producer", "topic")

    def __init__(
        self,
        producer: Producer,
        topic: str,
        partitions: int,
        *,
        linger_s: float = 0.005,
        max_batch: int = 8192,
        on_failure: DeliveryFailure | None = None,
    ) -> None:
        self.producer, self.topic, self.partitions = producer, topic, partitions
        self.linger_s, self.max_batch = linger_s, max_batch
        self._buffers: list[list[TreeMessage]] = [[] for _ in range(partitions)]
        self._first_at = [0.0] * partitions
        self._on_failure = on_failure

    def send(self, message: TreeMessage) -> None:
        partition = partition_of(message.anchor, self.partitions)
        buffer = self._buffers[partition]
        if not buffer:
            self._first_at[partition] = time.monotonic()
        buffer.append(message)
        if len(buffer) >= self.max_batch:
            self._flush_partition(partition)

    def send_all(self, messages: Iterable[TreeMessage]) -> None:
        for message in messages:
            self.send(message)

    def poll(self) -> None:
        """Send the batches whose linger has passed, and serve delivery reports."""
        now = time.monotonic()
        for partition, buffer in enumerate(self._buffers):
            if buffer and now - self._first_at[partition] >= self.linger_s:
                self._flush_partition(partition)
        self.producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Send every batch and wait for delivery; returns the number of records still undelivered."""
        for partition, buffer in enumerate(self._buffers):
            if buffer:
                self._flush_partition(partition)
        return int(self.producer.flush(timeout_s))

    def _flush_partition(self, partition: int) -> None:
        messages = self._buffers[partition]
        self._buffers[partition] = []
        self._produce(partition, encode_batch(MessageBlock.from_messages(list(messages))), messages)

    def _produce(self, partition: int, value: bytes, messages: list[TreeMessage], on_delivery: Any = None) -> None:
        def delivered(error: KafkaError | None, record: KafkaMessage) -> None:
            if error is not None and self._on_failure is not None:
                self._on_failure(partition, messages, error)
            if on_delivery is not None:
                on_delivery(error, record)

        while True:
            try:
                self.producer.produce(self.topic, value, partition=partition, on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: serve delivery reports until there is room
                self.producer.poll(0.05)
