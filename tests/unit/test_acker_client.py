"""The acker client at its edge: what it does when librdkafka refuses or loses a message (a real Producer that
never connects: these paths are decided locally)."""

from __future__ import annotations

import functools
import itertools
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acker import fail_reasons
from acker.columnar.block import Kind
from acker.core import TICK, Message, Tick, Tracker, TrackerConfig
from acker.core.ids import partition_of
from acker.core.messages import Ack, Anchor, Fail, Init, Ok, ResetTimeout
from acker.core.tuple_tree import UNTRACKED, TupleIds
from acker.kafka import acker_client
from acker.kafka.acker_client import RESENDS, AckerClient
from acker.kafka.clients import KafkaClientError
from acker.spout import INIT_ATTEMPTS, Spout
from acker.trouble import TroubleReport
from acker.wire import check_block, parse_batch
from tests.strategies import Scenario, scenarios, tracker_configs


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


def test_a_record_written_out_of_the_pipeline_and_refused_at_once_fails_its_trees(producer: Producer) -> None:
    """``written_by``: nothing downstream acks it, so its trees wait for its delivery; a refusal fails them."""
    client = AckerClient(producer, "acker", 4, linger_s=60)
    failures: list[KafkaError] = []
    ids = TupleIds(((11, 22),))
    client.produce_anchored("out", b"x" * 20_000, None, None, ids, on_failure=failures.append, written_by=producer)
    assert [f.code() for f in failures] == [KafkaError.MSG_SIZE_TOO_LARGE]
    batch = client._batches[partition_of(11, 4)]
    assert batch is not None and list(zip(batch.kinds, batch.anchors, strict=True)) == [(Kind.FAIL, 11)]


def test_a_batch_that_cannot_be_delivered_fails_its_trees_and_hands_back_its_inits() -> None:
    """A tree that lost an ack (or an anchor, an ok) cannot complete: it is failed at once, not left to time out."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.timeout.ms": 100})
    lost: list[tuple[int, list[Init]]] = []
    client = AckerClient(producer, "acker", 1, linger_s=0, on_failure=lambda p, inits, error: lost.append((p, inits)))
    init = Init(5, "s", "t/0/1", 3)
    client.send_all([init, Ack(5, 3), Fail(6), ResetTimeout(7), Anchor(8, 1), Ok(8, 1), Ack(9, 4), Ack(9, 5)])
    client.poll()  # sent: the linger is 0
    deadline = time.monotonic() + 10
    while not lost and time.monotonic() < deadline:
        producer.poll(0.05)
    assert lost == [(0, [init])]
    assert client.failed_messages == 7  # the acks of tree 9 were combined into one
    again = client._batches[0]
    assert again is not None
    assert list(zip(again.kinds, again.anchors, strict=True)) == [
        (Kind.FAIL, 5), (Kind.FAIL, 6), (Kind.RESET, 7), (Kind.FAIL, 8), (Kind.FAIL, 9),
    ]  # fmt: skip
    producer.purge()


def test_flush_sends_a_fail_again_after_each_failed_delivery_then_gives_it_up() -> None:
    """Each failed delivery sends the fail again, in a new batch, `RESENDS` times; then it is given up (its tree
    times out at the acker and is replayed), and nothing is left unsent. Sent again without end, an acker topic that
    refuses for good kept the process sending it for as long as it lived."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.timeout.ms": 100})
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send(Fail(6))
    assert client.flush(30) == 0  # rounds of about a second (librdkafka's scan for timed-out records)
    assert client._batches == [None] and client.failed_messages == 1 + RESENDS
    producer.purge()


def test_an_ack_lost_beside_a_reset_given_up_still_fails_its_tree() -> None:
    """The reset of a tree has been sent again `RESENDS` times; an ack of the same tree is lost in the same batch.
    The reset is given up, the ack's loss still fails the tree at once (a fail of its own count, sent again in its
    turn): counted by tree, the ack took the reset's count and its loss was given up too, the tree left to time out."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.timeout.ms": 100})
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send(ResetTimeout(6), resent=RESENDS)
    client.send_acks([(6, 5)])
    assert client.flush(30) == 0
    assert client.failed_messages == 2 + RESENDS  # the reset and the ack, then the fail at each of its sends
    producer.purge()


def test_flush_counts_what_is_still_unsent_when_its_time_is_up() -> None:
    """A bolt that took 0 for "all delivered" would commit its input past a fail still on its way."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "message.timeout.ms": 60_000})
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send(Fail(6))
    assert client.flush(0.2) == 1
    producer.purge()


class _Losing:
    """A producer on a clock of its own: `flush` waits ``lost_after`` seconds (at most its timeout), then reports
    every record it holds lost, as librdkafka does when ``message.timeout.ms`` passes."""

    def __init__(self, lost_after: float) -> None:
        self.now, self.lost_after = 0.0, lost_after
        self.held: list[Any] = []

    def produce(self, _topic: str, _value: bytes, **kwargs: Any) -> None:
        self.held.append(kwargs["on_delivery"])

    def flush(self, timeout: float) -> int:
        self.now += min(timeout, self.lost_after)
        if timeout < self.lost_after:
            return len(self.held)
        reports, self.held = self.held, []
        for report in reports:
            report(KafkaError(KafkaError._MSG_TIMED_OUT, "lost"), object())
        return len(self.held)


def test_flush_gives_up_when_its_timeout_is_over_however_many_rounds_are_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of its rounds waited the whole timeout again: a bolt closing against a broker that lost every record
    waited five times what it asked for."""
    producer = _Losing(lost_after=4.0)
    monkeypatch.setattr(acker_client, "time", SimpleNamespace(monotonic=lambda: producer.now))
    client = AckerClient(producer, "acker", 1, linger_s=60)  # type: ignore[arg-type]
    client.send(Fail(6))
    assert client.flush(10) == 1  # lost twice (its fail sent again each time), then waited for 2 s
    assert producer.now == 10


def _combined(producer: Producer, record: list[Message], i: int) -> list[Message]:
    """One record's messages as an `AckerClient` sends them (one partition): acks combined. Every other ack takes
    the bolts' path (`send_acks`)."""
    client = AckerClient(producer, "acker", 1, linger_s=60)
    for j, message in enumerate(record):
        assert not isinstance(message, Tick)  # ticks are the service's, never a client's
        if isinstance(message, Ack) and (i + j) % 2:
            client.send_acks([(message.anchor, message.value)])
        else:
            client.send(message)
    batch = client._batches[0]
    assert batch is not None
    block = batch.block()
    check_block(block, 0, 1)  # as the acker checks each record
    return block.to_messages()


def _runs(record: list[Message]) -> int:
    """Messages left once each run of acks of one tree (no other message of that tree between them) is one ack, and
    runs that cancel out (XOR 0) are left out."""
    kept: list[int] = []  # per message left, its combined value (1 for any other message)
    open_runs: dict[int, int] = {}  # anchor -> index in kept of its open run
    for message in record:
        if isinstance(message, Ack):
            if message.anchor in open_runs:
                kept[open_runs[message.anchor]] ^= message.value
                continue
            open_runs[message.anchor] = len(kept)
            kept.append(message.value)
        else:
            open_runs.pop(message.anchor, None)  # type: ignore[union-attr]
            kept.append(1)
    return sum(1 for value in kept if value)


# The producer is never asked to send here (batches are taken from the client), so sharing it between examples is fine.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(fail_rate=0.1), tracker_configs, st.randoms(use_true_random=False))
def test_combined_acks_leave_the_acker_in_the_state_the_messages_sent_one_by_one_do(
    producer: Producer, case: tuple[Scenario, list[tuple[Message, str]]], config: TrackerConfig, rng: random.Random
) -> None:
    """Each producer's stream cut into records at random; the records of all producers in one random order, with
    ticks between them, go to one tracker as sent one by one and to another as the client combines them. After every
    record both trackers hold the same trees with the same words and have decided the same trees the same way."""
    scenario, _ = case
    records: list[list[list[Message]]] = []
    for stream in scenario.streams:
        messages = [message for message, _ in stream]
        cuts = [0, *(i for i in range(1, len(messages)) if rng.random() < 0.25), len(messages)]
        records.append([messages[a:b] for a, b in itertools.pairwise(cuts) if b > a])
    order = [p for p, own in enumerate(records) for _ in own]
    rng.shuffle(order)  # each producer's records keep their order
    one_by_one, combined = Tracker(config), Tracker(config)
    taken = [0] * len(records)
    for i, p in enumerate(order):
        record = records[p][taken[p]]
        taken[p] += 1
        batch = _combined(producer, record, i)
        assert len(batch) == _runs(record)
        ticks = [TICK] if rng.random() < 0.3 else []
        decided = [
            sorted(
                (o.msg_id, type(o).__name__, str(getattr(o, "reason", "")))
                for message in [*messages, *ticks]
                for o in tracker.handle(message)
            )
            for tracker, messages in ((one_by_one, record), (combined, batch))
        ]  # within a record, a combined ack may decide its tree at an earlier place: compared record by record
        assert decided[0] == decided[1]
        assert one_by_one.pending == combined.pending
        assert all(one_by_one.ledger(a) == combined.ledger(a) for a in scenario.trees.values())


def test_acks_of_one_tree_are_combined_until_another_message_of_that_tree(producer: Producer) -> None:
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send_acks([(5, 1), (6, 2), (5, 4)])
    client.send_all([Fail(6), Ack(5, 8), Ack(6, 16), Ack(6, 32)])
    batch = client._batches[0]
    assert batch is not None
    assert list(zip(batch.kinds, batch.anchors, batch.values, strict=True)) == [
        (Kind.ACK, 5, 1 ^ 4 ^ 8), (Kind.ACK, 6, 2), (Kind.FAIL, 6, 0), (Kind.ACK, 6, 16 ^ 32),
    ]  # fmt: skip


def test_acks_that_cancel_out_are_left_out_of_the_record_the_acker_takes(producer: Producer) -> None:
    """A duplicated ack combined with itself gave an ack of value 0, which the acker refuses: the whole record was
    dead-lettered (zero-id), and every other tree with a message in it timed out or failed."""
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send_all([Init(7, "s", "t/0/1", 9), Ack(9, 5), Ack(3, 12), Ack(3, 12)])
    batch = client._batches[0]
    assert batch is not None
    block = batch.block()
    check_block(block, 0, 1)
    assert block.to_messages() == [Init(7, "s", "t/0/1", 9), Ack(9, 5)]
    empty = AckerClient(producer, "acker", 1, linger_s=60)
    empty.send_acks([(4, 6), (4, 6)])
    empty.flush(0)
    assert len(producer) == 0


def test_an_ack_is_never_moved_before_an_anchor_of_its_tree(producer: Producer) -> None:
    """Storm's anchor/ok form: the child's anchor (30) must reach the acker before its parent's ok-like ack, or the
    tree completes while the child is outstanding."""
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send_all([Anchor(1, 20), Ack(1, 10), Anchor(1, 30), Ack(1, 20)])
    batch = client._batches[0]
    assert batch is not None
    tracker = Tracker()
    assert not tracker.handle(Init(1, "s", "t/0/1", 10))
    assert not [o for m in batch.block().to_messages() for o in tracker.handle(m)]
    assert tracker.ledger(1) == 30


def test_a_batch_too_large_for_the_producer_is_sent_in_halves(producer: Producer) -> None:
    """``message.max.bytes`` below a full batch's record: each half is a record it takes, in order, nothing lost."""
    client = AckerClient(producer, "acker", 1, linger_s=60)
    client.send_acks((anchor, anchor) for anchor in range(1, 2001))  # ~35 KB encoded, the limit is 10 KB
    client.flush(0)
    assert len(producer) >= 4 and client.failed_messages == 0 and client._batches == [None]


class _RefusingLarge:
    """A producer whose broker refuses records of more than one message as too large, in their delivery reports
    (served by `serve`, as another user of the stage's producer serves them: a child's produce waiting for room, a
    flush); it keeps the records it takes."""

    def __init__(self) -> None:
        self.reports: list[Any] = []
        self.taken: list[bytes] = []

    def produce(self, _topic: str, value: bytes, **kwargs: Any) -> None:
        if len(parse_batch(value)) > 1:
            self.reports.append(kwargs["on_delivery"])
        else:
            self.taken.append(value)

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def serve(self) -> int:
        reports, self.reports = self.reports, []
        for report in reports:
            report(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), SimpleNamespace())
        return len(reports)


def test_the_halves_of_a_refused_record_go_out_at_the_next_poll_due_whatever_the_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`poll_due` went by the batches' lingers alone: the halves of a record the broker refused, in a report served
    outside the client while a bolt worked through a batch of inputs, waited for a batch's linger."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(acker_client, "time", SimpleNamespace(monotonic=lambda: clock.now))
    producer = _RefusingLarge()
    client = AckerClient(producer, "acker", 1, linger_s=0.02)  # type: ignore[arg-type]
    client.send_acks([(1, 1), (2, 2)])
    clock.now = 0.02
    assert client.poll_due() and producer.taken == []  # sent as one record
    assert producer.serve() == 1  # its report: refused, halved
    client.send_acks([(3, 3)])  # a new batch, lingering until 0.04
    # The halves at once, and the new batch with them: full at the halved size (1 message)
    assert client.poll_due() and [parse_batch(v).anchors.tolist() for v in producer.taken] == [[1], [2], [3]]


class _Refusing:
    """A producer that refuses every record at once, as librdkafka does an unknown partition."""

    code = KafkaError._UNKNOWN_PARTITION

    def produce(self, *_args: object, **_kwargs: object) -> None:
        raise KafkaException(KafkaError(self.code, "refused"))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0


def test_a_batch_refused_at_once_fails_its_trees_instead_of_raising() -> None:
    """Raised out of `send` or `poll`, the refusal would lose the batch without failing its trees (they would time
    out) and stop the stage; as a failed delivery, its trees are failed and its inits handed back."""
    lost: list[list[Init]] = []
    client = AckerClient(
        _Refusing(),  # type: ignore[arg-type]
        "acker",
        1,
        linger_s=0,
        max_batch=3,
        on_failure=lambda _p, inits, _e: lost.append(inits),
    )
    init = Init(5, "s", "t/0/1", 3)
    client.send_all([init, Ack(6, 3), Ack(7, 1)])  # full: sent at once, and refused
    assert lost == [[init]] and client.failed_messages == 3
    again = client._batches[0]
    assert again is not None and list(zip(again.kinds, again.anchors, strict=True)) == [(Kind.FAIL, 6), (Kind.FAIL, 7)]
    client.poll()  # the fails, refused in turn: queued again, not raised, not sent again and again within the call
    assert client.failed_messages == 5


def test_data_messages_not_delivered_are_said_once_per_topic_and_error_not_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker gone with thousands in flight logged a line each; the stage's counters count every one."""
    client = AckerClient(_Refusing(), "acker", 1, linger_s=60)  # type: ignore[arg-type]
    failures: list[KafkaError] = []
    for edge in range(1, 301):
        client.produce_anchored("out-once", b"x", None, None, TupleIds(((11, edge),)), on_failure=failures.append)
    said = [r for r in caplog.records if r.name == "acker.client.undelivered"]
    assert len(failures) == 300 and len(said) == 1 and "out-once" in said[0].getMessage()


def test_a_child_that_is_not_a_message_fails_its_trees_and_raises(producer: Producer) -> None:
    """Its edge is already in its trees and no message carries it: they could never complete."""
    client = AckerClient(producer, "acker", 4, linger_s=60)
    with pytest.raises(TypeError):
        client.produce_anchored("out", 42, None, None, TupleIds(((11, 22),)))  # type: ignore[arg-type]
    batch = client._batches[partition_of(11, 4)]
    assert batch is not None and list(zip(batch.kinds, batch.anchors, strict=True)) == [(Kind.FAIL, 11)]


def test_inits_lost_by_a_client_nobody_told_are_an_error_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """A spout hands them back (``on_failure``); a client made without it can only say so, loudly."""
    client = AckerClient(_Refusing(), "acker", 1, linger_s=0)  # type: ignore[arg-type]
    client.send(Init(5, "s", "t/0/1", 3))
    client.poll()
    assert any(r.levelname == "ERROR" and "1 inits lost" in r.getMessage() for r in caplog.records)


def test_a_producer_that_takes_nothing_any_more_stops_the_stage() -> None:
    """After a fatal error librdkafka refuses every record with _FATAL, which confluent-kafka does not flag fatal():
    taken for a failed delivery, each record's trees were failed, the fails refused in turn and queued again, for ever,
    by a stage that went on reading and never stopped for its supervisor to start it again."""
    refusing = _Refusing()
    refusing.code = KafkaError._FATAL
    client = AckerClient(refusing, "acker", 1, linger_s=0)  # type: ignore[arg-type]
    with pytest.raises(KafkaClientError, match="takes no more records"):
        client.send_all([Ack(6, 3)])
        client.poll()
    with pytest.raises(KafkaClientError, match="takes no more records"):
        client.produce_anchored("out", b"x", None, None, TupleIds(((11, 22),)))


def test_a_batch_a_failed_producer_refused_stays_unsent_for_flush_to_count() -> None:
    """Taken out, and lost when its produce raised: ``flush`` found nothing left, and a bolt stopping on the error
    committed the offsets of inputs whose acks never left the process (an ack's tree then timed out; a fail's
    record waited for its timeout too). So is a half of a refused record."""
    refusing = _Refusing()
    refusing.code = KafkaError._FATAL
    client = AckerClient(refusing, "acker", 1, linger_s=0)  # type: ignore[arg-type]
    client.send(Ack(6, 3))
    with pytest.raises(KafkaClientError, match="takes no more records"):
        client.poll()
    assert client.lingering()
    with pytest.raises(KafkaClientError, match="takes no more records"):
        client.flush(0)
    batch = client._batches[0]
    assert batch is not None and list(zip(batch.kinds, batch.anchors, strict=True)) == [(Kind.ACK, 6)]
    half = client._batches[0]
    client._batches[0], client._halves = None, [(0, half)]  # type: ignore[list-item]
    with pytest.raises(KafkaClientError, match="takes no more records"):
        client.flush(0)
    assert client._halves == [(0, half)]


class _Recording:
    """A producer that takes every record, and keeps the partition of each."""

    def __init__(self) -> None:
        self.partitions: list[int] = []

    def produce(self, *_args: object, partition: int = -1, **_kwargs: object) -> None:
        self.partitions.append(partition)

    def poll(self, _timeout: float = 0) -> int:
        return 0


def test_messages_are_placed_by_the_acker_topics_new_partition_count_once_it_changes() -> None:
    """Partitions added to a live acker topic: what was gathered goes where it was placed, what comes after by the new
    count (the service dead-letters a message on any other partition as ``wrong-partition``)."""
    counts = iter([4, 0, 6, 4])  # 0: the lookup did not answer; 4 after 6: a broker's metadata behind
    producer = _Recording()
    client = AckerClient(producer, "acker", 4, linger_s=60)  # type: ignore[arg-type]
    client.watch_partitions(lambda: next(counts), every_s=0, retry_s=0)
    anchors = range(1, 200)
    client.send_acks((a, 1) for a in anchors)
    client.poll()  # 4: nothing changes
    client.poll()  # no answer: nothing changes
    assert client.partitions == 4 and sum(b is not None for b in client._batches) == 4
    assert producer.partitions == []
    client.poll()  # 6: the batches sent where they were placed, the client now places by 6
    assert client.partitions == 6 and client._batches == [None] * 6 and sorted(producer.partitions) == [0, 1, 2, 3]
    client.poll()  # 4 again: not believed
    client.send_acks((a, 1) for a in anchors)
    placed = {p: {int(a) for a in b.anchors} for p, b in enumerate(client._batches) if b is not None}
    assert placed == {p: {a for a in anchors if partition_of(a, 6) == p} for p in range(6)}


def test_a_lookup_of_the_partition_count_that_goes_unanswered_is_asked_again_later_not_at_the_next_check() -> None:
    """Every 5 s, a lookup that waited its 1 s timeout (a broker away) took a fifth of a stage's time."""
    asked: list[float] = []

    def lookup() -> int:
        asked.append(time.monotonic())
        return 0

    client = AckerClient(_Recording(), "acker", 4, linger_s=60)  # type: ignore[arg-type]
    client.watch_partitions(lookup, every_s=0, retry_s=3600)
    client.poll()
    client.poll()
    assert len(asked) == 1 and client._next_lookup - asked[0] > 3599  # from the poll that asked


class _Keeping:
    """A producer that takes every record and keeps what it was given."""

    def __init__(self) -> None:
        self.records: list[dict[str, object]] = []

    def produce(self, topic: str, value: bytes, **kwargs: object) -> None:
        self.records.append({"topic": topic, "value": value, **kwargs})

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0


def test_a_fail_with_a_reason_says_it_in_its_records_header_by_anchor() -> None:
    """`acker.fail_reasons`: the reason goes beside the fail, in the record of its partition only; a record without
    a reason has no header at all (the common case costs nothing)."""
    producer = _Keeping()
    client = AckerClient(producer, "acker", 2, linger_s=60)  # type: ignore[arg-type]
    anchors = {partition_of(a, 2): a for a in range(1, 50)}  # an anchor of each partition
    client.send(Fail(anchors[0]), "bolt split: ValueError: bad")
    client.send_all([Fail(anchors[1]), Ack(anchors[1], 3)])
    client.flush(0)
    by_partition = {r["partition"]: r for r in producer.records}
    assert by_partition[0]["headers"] == [
        (fail_reasons.HEADER, f'{{"{anchors[0]}": "bolt split: ValueError: bad"}}'.encode())
    ]
    assert "headers" not in by_partition[1]


def test_a_trees_reason_is_that_of_its_first_fail() -> None:
    """The fail the acker decides the tree on: two inputs of one sentence failed in one batch said the second's."""
    producer = _Keeping()
    client = AckerClient(producer, "acker", 1, linger_s=60)  # type: ignore[arg-type]
    client.send(Fail(7), "bolt count: KeyError: 'first'")
    client.send(Fail(7), "bolt count: KeyError: 'second'")
    client.flush(0)
    assert producer.records[0]["headers"] == [(fail_reasons.HEADER, b'{"7": "bolt count: KeyError: \'first\'"}')]


def test_a_batch_that_cannot_be_delivered_fails_its_trees_saying_why() -> None:
    """A fail sent again keeps its own reason; a tree failed because its acks were lost says so."""
    lost: list[list[Init]] = []
    client = AckerClient(
        _Refusing(),  # type: ignore[arg-type]
        "acker",
        1,
        linger_s=60,
        on_failure=lambda _p, inits, _e: lost.append(inits),
    )
    client.send(Fail(6), "bolt b: KeyError: 'x'")
    client.send_acks([(7, 1)])
    client._flush_partition(0)  # refused at once: both trees failed again, queued
    again = client._batches[0]
    assert again is not None
    assert again.reasons == {
        6: "bolt b: KeyError: 'x'",
        7: "acker messages to acker[0] could not be delivered: refused",
    }


def test_the_halves_of_a_batch_keep_the_reasons_of_their_own_fails() -> None:
    client = AckerClient(_Keeping(), "acker", 1, linger_s=60)  # type: ignore[arg-type]
    client.send_all([Fail(1), Fail(2), Fail(3), Fail(4)], "why")
    batch = client._batches[0]
    assert batch is not None
    first, second = batch.halves()
    assert first.reasons == {1: "why", 2: "why"} and second.reasons == {3: "why", 4: "why"}


def test_a_burst_of_fails_goes_in_records_whose_headers_say_every_reason() -> None:
    """A header holds `fail_reasons.PER_RECORD` reasons (and `HEADER_MAX_BYTES`): a batch failing more trees said
    the first ones only, and the others' dead letters said no reason. Cut into records that say each, in order."""
    producer = _Keeping()
    client = AckerClient(producer, "acker", 1, linger_s=60)  # type: ignore[arg-type]
    count = 3 * fail_reasons.PER_RECORD + 7
    for anchor in range(1, count + 1):
        client.send(Fail(anchor), f"bolt b: ValueError: record {anchor} " + "x" * 150)
    client.send_acks([(count + 1, 5)])
    client.flush(0)
    said: dict[int, str] = {}
    for record in producer.records:
        headers = record["headers"]
        assert isinstance(headers, list)
        [(name, raw)] = headers
        assert name == fail_reasons.HEADER and len(raw) <= fail_reasons.HEADER_MAX_BYTES
        said.update(fail_reasons.by_anchor(raw))
    assert len(producer.records) >= 4 and list(said) == list(range(1, count + 1))
    assert all(reason.startswith(f"bolt b: ValueError: record {a} ") for a, reason in said.items())


def test_a_half_holding_a_trees_resets_but_not_its_fail_carries_no_reason() -> None:
    """A reason goes with the half that holds its tree's fail: one holding only the tree's other messages carried
    it too (more records in a burst of fails, and reasons the acker keeps for trees it decided already)."""
    client = AckerClient(_Keeping(), "acker", 1, linger_s=60)  # type: ignore[arg-type]
    client.send_all([Fail(1), Fail(2)], "why")
    client.send_all([ResetTimeout(1), ResetTimeout(2)])
    batch = client._batches[0]
    assert batch is not None
    first, second = batch.halves()
    assert first.reasons == {1: "why", 2: "why"} and second.reasons == {}


def test_a_fail_and_the_init_after_it_are_never_cut_apart() -> None:
    """A spout's record whose emit function raised sends its tree's fail, then its init (`acker.spout`): in two
    records, the first lost and the second written, the acker would have the init before the fail sent again, and
    children acked meanwhile could ack the tree. Neither a full batch nor its halves cut between them."""
    producer = _Keeping()
    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=3)  # type: ignore[arg-type]
    init = Init(2, "s", "src/0/1", 5)
    client.send_all([Fail(1), Ack(3, 4)], "why")  # two of three: not full
    assert producer.records == []
    client.send_all([Fail(2), init], "raised")  # full at the fail: sent after the init, in halves of 2 and 2
    blocks = [parse_batch(record["value"]) for record in producer.records]  # type: ignore[arg-type]
    assert [[Kind(k) for k in block.kinds] for block in blocks] == [[Kind.FAIL, Kind.ACK], [Kind.FAIL, Kind.INIT]]
    assert client._batches == [None]

    batch = acker_client._Batch()
    for message in (Fail(1), Fail(2), init, Ack(3, 4)):
        batch.add(message)
    first, second = batch.halves()  # the middle is the init: cut after it
    assert first.kinds == [Kind.FAIL, Kind.FAIL, Kind.INIT] and first.inits == [init]
    assert second.kinds == [acker_client._ACK] and second.inits == []


class _Reporting:
    """A producer whose delivery reports run in `poll` and `flush`, as librdkafka's do, and which fails the test when
    it is called from inside one (confluent-kafka must not be polled from a delivery report; a produce whose queue is
    full polls). ``refuse``: the error of the report of the next record produced."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, Any]] = []
        self.pending: list[tuple[KafkaError | None, Any]] = []
        self.refuse: KafkaError | None = None
        self.max_bytes: int | None = None  # a record over it is refused in its report, as the broker refuses one
        self.reporting = False

    def _outside(self) -> None:
        assert not self.reporting, "called from inside a delivery report"

    def produce(self, _topic: str, value: bytes, on_delivery: Any = None, **_kwargs: object) -> None:
        self._outside()
        if self.max_bytes is not None and len(value) > self.max_bytes:
            self.refuse = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large")
        self.records.append((value, on_delivery))
        if on_delivery is not None:
            self.pending.append((self.refuse, on_delivery))
        self.refuse = None

    def poll(self, _timeout: float = 0) -> int:
        self._outside()
        served, self.pending = self.pending, []
        self.reporting = True
        try:
            for error, on_delivery in served:
                on_delivery(error, object())  # a report names its record (a refusal at once names none)
        finally:
            self.reporting = False
        return len(served)

    def flush(self, _timeout: float = 0) -> int:
        while self.pending:
            self.poll()
        return 0


def test_a_record_the_broker_refuses_as_too_large_is_sent_in_halves_after_its_delivery_report() -> None:
    """The halves are sent once the report has returned: produced from inside it, a full queue would have polled
    there."""
    producer = _Reporting()
    client = AckerClient(producer, "acker", 1, linger_s=0)  # type: ignore[arg-type]
    client.send_acks([(anchor, anchor) for anchor in range(1, 101)])
    producer.refuse = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large")
    client.poll()  # sent, refused in the report this poll serves, then its halves sent
    assert len(producer.records) == 3 and client.max_batch == 50 and client.failed_messages == 0
    assert client.flush(0) == 0 and not client._halves


def test_what_delivery_reports_send_waits_for_the_next_poll_even_a_full_batch() -> None:
    """A sink's reports ack what was written; a lost batch's report fails its trees and hands its inits back to a
    spout, which sends them again: a batch those fill is sent after the reports, not from inside one."""
    producer = _Reporting()
    resent: list[Init] = []

    def send_again(_partition: int, inits: list[Init], _error: KafkaError) -> None:
        resent.extend(inits)
        client.send_all(inits)

    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=3, on_failure=send_again)  # type: ignore[arg-type]
    for anchor in (11, 12, 13):
        ids = TupleIds(((anchor, anchor),))
        client.produce_anchored("out", b"x", None, None, ids, written_by=producer)  # type: ignore[arg-type]
    producer.poll()  # three records written: their acks fill a batch, held
    held = client._batches[0]
    assert len(producer.records) == 3 and held is not None and len(held.kinds) == 3
    client.poll()
    assert len(producer.records) == 4 and client._batches == [None]
    producer.refuse = KafkaError(KafkaError._MSG_TIMED_OUT, "lost")
    client.send_all([Init(anchor, "s", f"t/0/{anchor}", anchor) for anchor in (21, 22, 23)])  # full: sent
    client.poll()  # lost in the report: the spout sends its inits again, held in a full batch, then sent
    assert [i.anchor for i in resent] == [21, 22, 23]
    assert len(producer.records) == 6 and client._batches == [None]


@pytest.mark.parametrize("one_by_one", [True, False], ids=["send", "send_all"])
def test_a_lost_records_fail_and_init_of_one_tree_are_sent_again_side_by_side(one_by_one: bool) -> None:
    """Two records whose emit function raised, each a fail and its init, lost: the fails were sent again first and
    the inits, handed back to the spout, after them, in a batch that a full batch's cut could split between a fail and
    its init (the init written, the fail lost: the tree acked by children acked meanwhile)."""
    producer = _Reporting()

    def send_again(_partition: int, inits: list[Init], _error: KafkaError) -> None:
        if one_by_one:  # as the spout does (`acker.spout`)
            for init in inits:
                client.send(init)
        else:
            client.send_all(inits)

    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=8, on_failure=send_again)  # type: ignore[arg-type]
    client.send_all([Fail(11), Init(11, "s", "t/0/1", 5)], "emit raised")
    client.send_all([Fail(22), Init(22, "s", "t/0/2", 7)], "emit raised")
    producer.refuse = KafkaError(KafkaError._MSG_TIMED_OUT, "lost")
    client._flush_partition(0)
    client.send_acks([(101, 1), (102, 1), (103, 1)])
    client.poll()  # lost in the report: the fails held, each sent again right before its init
    batch = client._batches[0]
    assert batch is not None
    assert list(zip(batch.kinds, batch.anchors, strict=True))[3:] == [
        (Kind.FAIL, 11), (Kind.INIT, 11), (Kind.FAIL, 22), (Kind.INIT, 22)
    ]  # fmt: skip
    assert batch.reasons == {11: "emit raised", 22: "emit raised"}
    assert batch.resent == {(11, Kind.FAIL): 1, (22, Kind.FAIL): 1}
    client.send_all([Ack(104, 1), Ack(105, 1)])  # full: sent in pieces
    client.flush(0)
    for value, _ in producer.records[1:]:
        block = parse_batch(value)
        fails = {int(a) for k, a in zip(block.kinds, block.anchors, strict=True) if k == Kind.FAIL}
        inits = {int(a) for k, a in zip(block.kinds, block.anchors, strict=True) if k == Kind.INIT}
        assert fails == inits  # each tree's fail and init in one record


def test_a_lost_records_fail_whose_init_the_spout_does_not_send_again_is_sent_alone() -> None:
    """Its tree decided meanwhile, or its init given up: the fail goes again all the same, as it did."""
    producer = _Reporting()
    client = AckerClient(producer, "acker", 1, linger_s=60, on_failure=lambda *_: None)  # type: ignore[arg-type]
    client.send_all([Fail(11), Init(11, "s", "t/0/1", 5)], "emit raised")
    producer.refuse = KafkaError(KafkaError._MSG_TIMED_OUT, "lost")
    client._flush_partition(0)
    client.poll()
    batch = client._batches[0]
    assert batch is not None and list(zip(batch.kinds, batch.anchors, strict=True)) == [(Kind.FAIL, 11)]
    assert client._fails_held == {}


def test_a_record_halved_many_times_is_delivered_by_one_flush() -> None:
    """Each halving took one of flush's five rounds: a record the broker refused down to single messages was left
    unsent, and a bolt closing then did not commit its input."""
    producer = _Reporting()
    producer.max_bytes = 40  # one ack a record
    client = AckerClient(producer, "acker", 1, linger_s=60)  # type: ignore[arg-type]
    client.send_acks([(anchor, anchor) for anchor in range(1, 65)])  # halved 6 times
    assert client.flush(0) == 0 and client.failed_messages == 0
    delivered = [parse_batch(v) for v, _ in producer.records if len(v) <= 40]
    assert sorted(int(b.anchors[0]) for b in delivered) == list(range(1, 65))


class _Small(_Keeping):
    """Refuses at once a record over ``limit`` bytes, as librdkafka does one over its ``message.max.bytes``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def produce(self, topic: str, value: bytes, **kwargs: object) -> None:
        if len(value) > self.limit:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))
        super().produce(topic, value, **kwargs)


def test_the_halves_of_a_record_refused_at_once_keep_its_place_in_the_partition() -> None:
    """Refused by the producer within a send (no report is running), its halves go at once, before what comes after:
    held for the next poll, a later full batch overtook them."""
    producer = _Small(limit=400)
    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=40)  # type: ignore[arg-type]
    client.send_acks([(anchor, anchor) for anchor in range(1, 121)])  # three full batches, each refused whole
    client.flush(0)
    sent = [int(a) for r in producer.records for a in parse_batch(r["value"]).anchors]  # type: ignore[arg-type]
    assert sent == list(range(1, 121)) and len(producer.records) > 3


def test_a_half_refused_at_once_in_turn_keeps_its_place_before_the_other_half() -> None:
    """Halves of unequal size (an anchor and the ok of its child, long message ids): the first half refused at once
    again had its own halves queued after the second, which went first: an ok before the anchor it follows completes
    a tree early."""
    producer = _Small(limit=500)
    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=40)  # type: ignore[arg-type]
    inits = [Init(anchor, "s", f"topic-with-a-long-name/0/{anchor}", anchor) for anchor in range(1, 21)]
    client.send_all([*inits, *(Ack(anchor, anchor) for anchor in range(1, 21))])  # the inits' half is the larger
    client.flush(0)
    sent = [(int(k), int(a)) for r in producer.records for k, a in zip(*_kinds_and_anchors(r["value"]), strict=True)]
    assert sent == [(Kind.INIT, a) for a in range(1, 21)] + [(Kind.ACK, a) for a in range(1, 21)]


def _kinds_and_anchors(value: object) -> tuple[list[int], list[int]]:
    block = parse_batch(value)  # type: ignore[arg-type]
    return block.kinds.tolist(), block.anchors.tolist()


def test_a_batch_delivery_reports_filled_past_its_size_goes_in_records_of_at_most_that_size() -> None:
    """Nothing is sent from inside a report, so the acks of many records written grow one batch past ``max_batch``:
    sent as one record, it relied on being refused as too large to be cut."""
    producer = _Reporting()
    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=10)  # type: ignore[arg-type]
    for anchor in range(1, 26):
        ids = TupleIds(((anchor, anchor),))
        client.produce_anchored("out", b"x", None, None, ids, written_by=producer)  # type: ignore[arg-type]
    producer.poll()  # 25 acks held in one batch
    client.poll()
    acker_records = [parse_batch(v) for v, _ in producer.records[25:]]
    assert all(len(b) <= 10 for b in acker_records) and sum(len(b) for b in acker_records) == 25
    assert [int(a) for b in acker_records for a in b.anchors] == list(range(1, 26))


def test_a_spouts_fail_and_init_lost_at_every_send_never_reach_the_acker_apart() -> None:
    """The spout sends a lost init again until it has sent it `INIT_ATTEMPTS` times, the client a lost fail `RESENDS`
    times more: an init sent again after its fail was given up would reach the acker alone, and a record whose emit
    function raised would be acked by the children it sent. Lost at every send, each record holds the fail with its
    init, until the spout fails the record itself."""
    producer = _Reporting()
    said = TroubleReport(logging.getLogger("t"), "spout s", ["init_delivery_failures"])
    spout = SimpleNamespace(pending={"t/0/1": 11}, _init_attempts={}, counters=Counter(), _direct=[],
                            _direct_reasons={}, settings=SimpleNamespace(name="s"), _init_trouble=said)  # fmt: skip
    on_failure = functools.partial(Spout._acker_delivery_failed, spout)  # type: ignore[arg-type]
    spout.acker = client = AckerClient(producer, "acker", 1, linger_s=60, on_failure=on_failure)  # type: ignore[arg-type]
    client.send_all([Fail(11), Init(11, "s", "t/0/1", 5)], "emit raised")
    for _ in range(INIT_ATTEMPTS + RESENDS + 1):
        if client._batches[0] is None:
            break
        producer.refuse = KafkaError(KafkaError._MSG_TIMED_OUT, "lost")
        client._flush_partition(0)
        client.poll()
    assert client._batches[0] is None
    sent = [parse_batch(v) for v, _ in producer.records]
    inits = [block for block in sent if Kind.INIT in block.kinds.tolist()]
    assert len(inits) == INIT_ATTEMPTS
    assert all(block.kinds.tolist()[:2] == [Kind.FAIL, Kind.INIT] for block in inits)
    assert [row[:3] for row in spout._direct] == [("FAILED", 11, "t/0/1")]


class _Full(_Keeping):
    """A producer whose local queue takes ``room`` more records, then is full (`BufferError`) until given more;
    ``queued`` records wait in it."""

    def __init__(self, room: int, queued: int = 0) -> None:
        super().__init__()
        self.room, self.queued = room, queued

    def produce(self, topic: str, value: bytes, **kwargs: object) -> None:
        if self.room == 0:
            raise BufferError("Local: Queue full")
        self.room -= 1
        super().produce(topic, value, **kwargs)

    def poll(self, timeout: float = 0) -> int:
        time.sleep(timeout)
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return self.queued


def test_a_flush_into_a_full_queue_ends_at_its_timeout_keeping_what_it_could_not_send_in_order_once() -> None:
    """A record waited for room in librdkafka's full queue until librdkafka timed out what filled it (5 minutes by
    default, the broker away): a bolt's or spout's close or commit held that long whatever its flush's timeout. Now
    the flush ends then, and counts what it kept; the next flush sends each piece once, in order (an ack sent twice
    cancels itself)."""
    producer = _Full(room=1, queued=7)
    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=2)  # type: ignore[arg-type]
    client._batches[0] = batch = acker_client._Batch()
    for anchor in range(1, 6):  # 5 acks: pieces of 2, 2 and 1
        batch.ack(anchor, anchor)
    started = time.monotonic()
    assert client.flush(0.3) == 7 + 2  # the producer's 7, and 2 pieces kept
    assert time.monotonic() - started < 2.0 and len(producer.records) == 1
    assert client.lingering() and client._due_at == -math.inf  # sent at the next poll (which waits for room)
    producer.room, producer.queued = 10, 0
    assert client.poll_due() and client.flush(1) == 0 and not client.lingering()
    sent = [a for r in producer.records for a in _kinds_and_anchors(r["value"])[1]]
    assert sent == [1, 2, 3, 4, 5]


class _FullAndSmall(_Full):
    """`_Full`, refusing at once (too large for it) records of more than 2 messages, as librdkafka does above its
    message.max.bytes."""

    def produce(self, topic: str, value: bytes, **kwargs: object) -> None:
        if len(parse_batch(value).kinds) > 2:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        super().produce(topic, value, **kwargs)


def test_a_flush_into_a_full_queue_ends_at_its_timeout_while_a_record_refused_as_too_large_goes_in_halves() -> None:
    """The halves of a record refused at once were sent without the flush's deadline (it waited for room as long
    as librdkafka's timeout); kept, they stand for the record, which is not kept as well (sent twice, its acks
    cancelled)."""
    producer = _FullAndSmall(room=1)
    client = AckerClient(producer, "acker", 1, linger_s=60, max_batch=8)  # type: ignore[arg-type]
    client._batches[0] = batch = acker_client._Batch()
    for anchor in range(1, 9):
        batch.ack(anchor, anchor)
    started = time.monotonic()
    assert client.flush(0.3) == 2  # [3, 4] and [5..8] kept; [1, 2] taken
    assert time.monotonic() - started < 2.0
    producer.room = 10
    assert client.flush(1) == 0 and not client.lingering()
    sent = [_kinds_and_anchors(r["value"])[1] for r in producer.records]
    assert sent == [[1, 2], [3, 4], [5, 6], [7, 8]]
