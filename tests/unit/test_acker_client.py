"""The acker client at its edge: what it does when librdkafka refuses or loses a message (a real Producer that
never connects: these paths are decided locally)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer

from acker.columnar.block import Kind
from acker.core.ids import partition_of
from acker.core.messages import Ack, Fail, Init, ResetTimeout
from acker.core.tuple_tree import UNTRACKED, TupleIds
from acker.kafka.acker_client import AckerClient


@pytest.fixture
def producer() -> Iterator[Producer]:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.max.bytes": 10_000})
    yield producer
    producer.purge()


def test_a_message_refused_at_once_fails_its_trees_instead_of_raising(producer: Producer) -> None:
    """Too large for librdkafka: as a failed delivery (its trees failed now, the caller told), never an exception
    that would kill the stage and stall its input on the same record at every restart."""
    client = AckerClient(producer, "acker", 4, linger_s=60)
    failures: list[KafkaError] = []
    client.produce_anchored("out", b"x" * 20_000, None, None, TupleIds(((11, 22), (-5, 7))), on_failure=failures.append)
    assert [f.code() for f in failures] == [KafkaError.MSG_SIZE_TOO_LARGE]
    fails = {
        int(anchor)
        for batch in client._batches
        if batch is not None
        for kind, anchor in zip(batch.kinds, batch.anchors, strict=True)
        if kind == Kind.FAIL
    }
    assert fails == {11, -5}
    assert client._batches[partition_of(11, 4)] is not None
    client.produce_anchored("out", b"x" * 20_000, None, None, UNTRACKED, on_failure=failures.append)
    assert len(failures) == 2  # unanchored: counted, nothing to fail


def test_a_batch_that_cannot_be_delivered_sends_its_fails_again_and_hands_back_its_inits() -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.timeout.ms": 100})
    lost: list[tuple[int, list[Init]]] = []
    client = AckerClient(producer, "acker", 1, linger_s=0, on_failure=lambda p, inits, error: lost.append((p, inits)))
    init = Init(5, "s", "t/0/1", 3)
    client.send_all([init, Ack(5, 3), Fail(6), ResetTimeout(7)])
    client.poll()  # sent: the linger is 0
    deadline = time.monotonic() + 10
    while not lost and time.monotonic() < deadline:
        producer.poll(0.05)
    assert lost == [(0, [init])]
    assert client.failed_messages == 4
    again = client._batches[0]
    assert again is not None and list(zip(again.kinds, again.anchors, strict=True)) == [(Kind.FAIL, 6), (Kind.RESET, 7)]
    producer.purge()
