"""The acker client at its edge: what it does when librdkafka refuses or loses a message (a real Producer that
never connects: these paths are decided locally)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acker.columnar.block import Kind
from acker.core import Message, Tick, Tracker
from acker.core.ids import partition_of
from acker.core.messages import Ack, Fail, Init, ResetTimeout
from acker.core.tuple_tree import UNTRACKED, TupleIds
from acker.kafka.acker_client import AckerClient
from tests.strategies import Scenario, interleave, scenarios


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


def _through_client(producer: Producer, stream: list[Message], cuts: set[int]) -> list[Message]:
    """What one producer's messages become on the acker topic: batched by an `AckerClient` (one partition), with a
    record sent at each index in ``cuts``."""
    client = AckerClient(producer, "acker", 1, linger_s=60)
    sent: list[Message] = []
    for i, message in enumerate(stream):
        assert not isinstance(message, Tick)  # ticks are the service's, never a client's
        if i in cuts and client._batches[0] is not None:
            sent.extend(client._batches[0].block().to_messages())
            client._batches[0] = None
        if isinstance(message, Ack) and i % 2:
            client.send_acks([(message.anchor, message.value)])  # the bolts' path
        else:
            client.send(message)
    if client._batches[0] is not None:
        sent.extend(client._batches[0].block().to_messages())
    return sent


# The producer is never asked to send here (batches are taken from the client), so sharing it between examples is fine.
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(fail_rate=0.1), st.randoms(use_true_random=False))
def test_combined_acks_decide_every_tree_as_the_messages_sent_one_by_one(
    producer: Producer, case: tuple[Scenario, list[tuple[Message, str]]], rng: random.Random
) -> None:
    """Acks of one tree in one batch are one ack (their XOR): on any arrival order of the producers' records, the
    acker decides each tree as it would from the uncombined messages, and it gets fewer messages."""
    scenario, _ = case
    streams = [[message for message, _ in stream] for stream in scenario.streams]
    batched = [
        _through_client(producer, stream, {i for i in range(len(stream)) if rng.random() < 0.2}) for stream in streams
    ]
    assert sum(map(len, batched)) <= sum(map(len, streams))

    def decide(per_producer: list[list[Message]]) -> dict[str, str]:
        tracker = Tracker()
        arrivals = interleave(rng, [[(m, "") for m in stream] for stream in per_producer])
        return {o.msg_id: type(o).__name__ for m, _ in arrivals for o in tracker.handle(m)}

    assert (
        decide(batched)
        == decide(streams)
        == {msg_id: "Nacked" if msg_id in scenario.failed else "Acked" for msg_id in scenario.trees}
    )


def test_acks_of_one_tree_in_one_batch_are_one_message(producer: Producer) -> None:
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send_acks([(5, 1), (6, 2), (5, 4)])
    client.send_all([Fail(6), Ack(5, 8), Ack(6, 16)])
    batch = client._batches[0]
    assert batch is not None
    assert list(zip(batch.kinds, batch.anchors, batch.values, strict=True)) == [
        (Kind.ACK, 5, 1 ^ 4 ^ 8), (Kind.ACK, 6, 2 ^ 16), (Kind.FAIL, 6, 0),
    ]  # fmt: skip
