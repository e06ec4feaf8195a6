"""Kafka calls that may raise are made after a failure's ``except`` block (`acker.kafka.clients`): in it, a
`KafkaException` raised by the client kept the handled exception, and every frame of its traceback, for good."""

from __future__ import annotations

import gc
import weakref

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from acker.kafka.clients import after_failure, produce
from acker.kafka.local_broker import free_ports


class _Rows:
    """What a caller's frame holds (a batch's rows)."""


def test_a_delivery_report_served_while_the_queue_is_full_keeps_nothing_of_the_producers_caller() -> None:
    """`produce` serves reports while librdkafka's queue is full; served in its ``except BufferError`` block, a
    report whose topic lookup failed (the service's outcome reports look a topic up) kept the caller's frame."""
    nowhere = f"127.0.0.1:{free_ports(1)[0]}"
    lookup = Consumer({"bootstrap.servers": nowhere, "group.id": "g", "log_level": 0})
    producer = Producer({"bootstrap.servers": nowhere, "queue.buffering.max.messages": 1, "message.timeout.ms": 200,
                         "log_level": 0})  # fmt: skip
    looked: list[str] = []

    def delivered(error: KafkaError | None, _record: Message | None) -> None:
        try:
            lookup.list_topics("t", timeout=0.1)
        except KafkaException as refused:
            looked.append(str(refused))

    def caller() -> weakref.ref[_Rows]:
        rows = _Rows()
        produce(producer, "t", b"1", on_delivery=delivered)
        produce(producer, "t", b"2", on_delivery=delivered)  # the queue full: the first one's report served
        return weakref.ref(rows)

    try:
        kept = caller()
        gc.collect()
        assert looked and kept() is None
    finally:
        producer.purge()
        producer.flush(0)
        lookup.close()


def test_what_is_raised_after_the_block_has_the_failure_as_its_context() -> None:
    failed = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    with pytest.raises(RuntimeError) as raised, after_failure(failed):
        raise RuntimeError("these Kafka lookups are closed")
    assert raised.value.__context__ is failed
    with pytest.raises(KafkaException) as again, after_failure(failed):
        raise failed
    assert again.value is failed and failed.__context__ is None
