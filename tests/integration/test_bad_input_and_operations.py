"""Bad records go to the dead-letter topic and the service goes on; metrics, status and topic commands."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import generate_latest

from acker import cli
from acker import service as service_module
from acker import topics as acker_topics
from acker.columnar import MessageBlock
from acker.config import ServiceConfig
from acker.core import Ack, Init
from acker.core.ids import IdGenerator, partition_of
from acker.dlq import DLQ_KEPT_BYTES, DLQ_KEY_TRUNCATED, DLQ_TRUNCATED
from acker.headers import pairs
from acker.kafka.acker_client import AckerClient, fitted_batch_size
from acker.kafka.clients import KafkaClientError, TopicSpec, create_topics, delete_groups, topic_partitions
from acker.metrics import ServiceCollector, Snapshot, serve
from acker.retries import Backoff
from acker.service import DLQ_DETAIL, DLQ_OFFSET, DLQ_REASON
from acker.wire import MAGIC, decode_batch, decode_outcomes, encode_batch
from tests.integration.helpers import (
    OutcomeReader,
    ServiceThread,
    create_acker_topics,
    produce_with_header_name,
    read_partition,
    send,
)
from tests.integration.test_service import SPOUT, _tree_messages


def _given(dead_letters: dict[str, int]) -> dict[str, int]:
    """The reasons the service gave (a snapshot has every reason, from 0: `AckerService.snapshot`)."""
    return {reason: n for reason, n in dead_letters.items() if n}


def _dead_letters(config: ServiceConfig, expected: int) -> list[dict[str, str]]:
    consumer = Consumer(config.client(**{"group.id": f"dlq-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([config.dlq_topic])
    out: list[dict[str, str]] = []
    for _ in range(100):
        for record in consumer.consume(100, timeout=0.2):
            if record.error() is None:
                headers = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in pairs(record.headers())}
                out.append(headers | {"value": repr(record.value()), "key": repr(record.key())})
        if len(out) >= expected:
            break
    consumer.close()
    return out


def test_bad_records_are_dead_lettered_with_the_reason_and_the_service_goes_on(config: ServiceConfig) -> None:
    config = replace(config, partitions=1)
    create_acker_topics(config)
    good = encode_batch(MessageBlock.from_messages([Ack(5, 1)]))
    zero_anchor = bytearray(encode_batch(MessageBlock.from_messages([Ack(5, 1)])))
    zero_anchor[zero_anchor.index(np.array([5], "<i8").tobytes())] = 0  # the anchor column becomes 0
    bad = [
        (b"not an acker record", "bad-magic"),
        (good[:-4], "undecodable"),
        (b"AKB\x09" + good[4:], "unknown-version"),
        (bytes(zero_anchor), "zero-id"),
        (b"AKB\x01" + b"\x02\x09" + good[6:], "unknown-message-type"),
        (None, "empty"),
        (encode_batch(MessageBlock.from_messages([Init(7, "bad spout!", "t/0/1", 1)])), "bad-spout"),
    ]
    producer = Producer(config.client())
    for value, _ in bad:
        producer.produce(config.acker_topic, value, partition=0, key=b"k", headers=[("trace", b"t-1")])
    producer.flush()
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = IdGenerator(8)
        anchor, head, tail = _tree_messages("src/0/1", ids)
        assert partition_of(anchor, 1) == 0
        send(config, [*head, *tail])
        reader.wait_for(["src/0/1"], timeout_s=60)
        letters = _dead_letters(config, len(bad))
        snapshot = service.service.snapshot()
    finally:
        service.stop()
        reader.close()
    assert reader.seen["src/0/1"] == ["ACK"]  # still serving after the garbage
    assert [(d[DLQ_REASON], d[DLQ_OFFSET]) for d in letters] == [(r, str(i)) for i, (_, r) in enumerate(bad)]
    assert letters[0]["value"] == repr(b"not an acker record")  # the raw record, as it was
    assert all(d["key"] == repr(b"k") and d["trace"] == "t-1" for d in letters)  # its own headers too
    assert all(d["acker.dlq.topic"] == config.acker_topic and d["acker.dlq.detail"] for d in letters)
    assert sum(snapshot.dead_letters.values()) == len(bad)


def test_a_spout_whose_outcome_topic_would_be_one_of_the_services_own_is_refused(config: ServiceConfig) -> None:
    """Under an outcome prefix that is the acker's own (``acker.``), spout ``status``'s outcome topic is the status
    topic: every spout refuses the name, but a client of its own that sent one had its outcome records written among
    the status records. Its record is dead-lettered (``bad-spout``); no outcome goes to the service's topics."""
    prefix = config.status_topic.removesuffix("status")
    config = replace(config, partitions=1, outcome_prefix=prefix)
    assert config.outcome_topic("status") == config.status_topic
    create_acker_topics(config)
    _, head, tail = _tree_messages("src/0/9", IdGenerator(10))
    init = head[0]
    assert isinstance(init, Init)
    send(config, [Init(init.anchor, "status", init.msg_id, init.value), *head[1:], *tail])  # a client of its own
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        _, good_head, good_tail = _tree_messages("src/0/10", IdGenerator(11))
        send(config, [*good_head, *good_tail])
        reader.wait_for(["src/0/10"], timeout_s=60)
        letters = _dead_letters(config, 1)
        time.sleep(2)  # status records published meanwhile
        status = [value for _, _, value in read_partition(config, config.status_topic, 0)]
    finally:
        service.stop()
        reader.close()
    assert [(d[DLQ_REASON], "reserved" in d[DLQ_DETAIL]) for d in letters] == [("bad-spout", True)]
    assert status and not [v for v in status if (v or b"").startswith(MAGIC)]  # statuses only
    assert "src/0/9" not in reader.seen and reader.seen["src/0/10"] == ["ACK"]


def test_records_whose_headers_cannot_be_read_are_decided_or_dead_lettered_without_them(config: ServiceConfig) -> None:
    """A header name that is not UTF-8 (a C or Go producer's): the Python client cannot read the record's headers. A
    valid acker record is decided as any (its headers are not needed); a bad one is dead-lettered without them."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    client, name = config.client(), b"\xff\xfe"
    produce_with_header_name(client, config.acker_topic, 0, name=name, value=b"not an acker record", key=b"k")
    _, head, tail = _tree_messages("src/0/2", IdGenerator(9))
    tree = encode_batch(MessageBlock.from_messages([*head, *tail]))
    produce_with_header_name(client, config.acker_topic, 0, name=name, value=tree)
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        reader.wait_for(["src/0/2"], timeout_s=60)
        letters = _dead_letters(config, 1)
    finally:
        service.stop()
        reader.close()
    assert reader.seen["src/0/2"] == ["ACK"]
    assert [(d[DLQ_REASON], d[DLQ_OFFSET], d["value"], d["key"]) for d in letters] == [
        ("bad-magic", "0", repr(b"not an acker record"), repr(b"k"))
    ]
    assert "its headers could not be read" in letters[0]["acker.dlq.detail"]


def test_a_record_on_the_wrong_partition_is_dead_lettered_and_its_own_trees_failed(config: ServiceConfig) -> None:
    """The record's inits are valid, but one message belongs elsewhere (a client with an old partition count): the
    record is not applied, and the trees it starts are answered FAILED at once, not left pending for good."""
    config = replace(config, partitions=2)
    create_acker_topics(config)
    assert partition_of(2, 2) == 0 and partition_of(-1, 2) == 1
    misrouted = encode_batch(MessageBlock.from_messages([Init(2, SPOUT, "src/0/10", 5), Ack(-1, 3)]))
    producer = Producer(config.client())
    producer.produce(config.acker_topic, misrouted, partition=0)
    producer.produce(config.acker_topic, encode_batch(MessageBlock.from_messages([Ack(2, 5)])), partition=0)
    producer.flush()
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        letters = _dead_letters(config, 1)
        reader.wait_for(["src/0/10"], timeout_s=60)
        reader.poll(2)  # the tree's ack, read after the rejected record, must not decide it again
        snapshot = service.service.snapshot()
    finally:
        service.stop()
        reader.close()
    assert [(d[DLQ_REASON], d["acker.dlq.partition"]) for d in letters] == [("wrong-partition", "0")]
    assert reader.seen["src/0/10"] == ["FAILED"]
    assert snapshot.counters.nacked_failed == 1


def _one_dead_letter_and_still_serving(config: ServiceConfig) -> tuple[list[dict[str, str]], Snapshot]:
    """Run the service until it has dead-lettered one record, then check that it still acks a tree."""
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        letters = _dead_letters(config, 1)
        _, head, tail = _tree_messages("src/0/99", IdGenerator(8))
        send(config, [*head, *tail])
        reader.wait_for(["src/0/99"], timeout_s=60)
        assert reader.seen["src/0/99"] == ["ACK"]
        return letters, service.service.snapshot()
    finally:
        service.stop()
        reader.close()


def test_an_outcome_its_topic_refuses_is_dead_lettered_and_the_service_goes_on(config: ServiceConfig) -> None:
    """A spout name whose outcome topic cannot be created (Kafka takes '.' and '_' in topic names as one: it
    collides with an existing topic's). The service used to stop at its outcome, and again after every restart."""
    config = replace(config, partitions=1, kafka={**config.kafka, "topic.metadata.propagation.max.ms": "2000"})
    create_acker_topics(config, [SPOUT, "orders.v1"])
    send(config, [Init(7, "orders_v1", "src/0/3", 5), Ack(7, 5)])
    letters, snapshot = _one_dead_letter_and_still_serving(config)
    assert [d[DLQ_REASON] for d in letters] == ["outcome-refused"]
    assert config.outcome_topic("orders_v1") in letters[0]["acker.dlq.detail"]
    assert letters[0]["acker.decided-by"] == "0/0-0"
    kept = decode_outcomes(ast.literal_eval(letters[0]["value"]))  # the outcome record, whole
    assert (kept.spout, kept.outcomes, kept.msg_ids) == ("orders_v1", ["ACK"], ["src/0/3"])
    assert _given(snapshot.dead_letters) == {"outcome-refused": 1}


def test_outcome_records_too_large_for_their_topic_are_sent_in_halves(config: ServiceConfig) -> None:
    """An outcome topic that takes records of 20,000 bytes at most, and 5,000 trees timing out at one tick: their
    outcome record (about 95 KB) was refused by the broker, which stopped the service, and again at every restart
    (the replay decides the same trees into the same record). It is now sent in halves until they fit, and an outcome
    too large alone is dead-lettered."""
    config = replace(config, partitions=1, timeout_s=2.0)
    small = TopicSpec(config.outcome_topic(SPOUT), 1, config={"max.message.bytes": "20000"})
    create_topics(config.client(), [TopicSpec(config.acker_topic, 1), TopicSpec(config.dlq_topic, 1), small])
    ids = IdGenerator(3)
    msg_ids = [f"src/0/{i}" for i in range(5000)]
    huge = f"{'s' * 25_000}/0/1"  # a message id no outcome record of this topic can hold: that one is dead-lettered
    send(config, [Init(ids(), SPOUT, m, ids()) for m in [*msg_ids, huge]])  # never acked: they time out together
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        reader.wait_for(msg_ids, timeout_s=90)
        assert service.thread.is_alive()
        assert all(reader.seen[m] == ["TIMEOUT"] for m in msg_ids)
        letters = _dead_letters(config, 1)
        assert [d[DLQ_REASON] for d in letters] == ["outcome-refused"]
        assert decode_outcomes(ast.literal_eval(letters[0]["value"])).msg_ids == [huge]
        assert huge not in reader.seen
    finally:
        service.stop()
        reader.close()


def test_acker_batches_too_large_for_the_acker_topic_are_sent_in_halves(config: ServiceConfig) -> None:
    """An acker topic that takes records of 20,000 bytes at most: a batch of 2,000 inits (about 60 KB) was refused by
    the broker in its delivery report, and every tree in it failed; the spout sent the inits again in batches as
    large, refused again, until every record was dead-lettered. Now it is sent again in halves, and later batches
    are cut smaller; and the stage's producer, as a spout or a bolt makes it, batches no more than the topic takes
    (the halves, batched together by the producer, were refused together again)."""
    small = TopicSpec(config.acker_topic, 1, config={"max.message.bytes": "20000"})
    create_topics(config.client(), [small])
    lost: list[int] = []
    fitted = fitted_batch_size(config.client(), config.acker_topic)
    assert fitted == {"batch.size": 20_000 - 1024}
    producer = Producer(config.stage_producer(**fitted))
    client = AckerClient(producer, config.acker_topic, 1, linger_s=60,
                         on_failure=lambda _p, inits, _e: lost.append(len(inits)))  # fmt: skip
    ids = IdGenerator(5)
    inits = [Init(ids(), SPOUT, f"src/0/{i}", ids()) for i in range(2000)]
    client.send_all(inits)
    assert client.flush(30) == 0
    assert lost == [] and client.max_batch < 2000
    sent = [decode_batch(v or b"") for _, _, v in read_partition(config, config.acker_topic, 0)]
    assert sorted(a for block in sent for a in block.anchors.tolist()) == sorted(i.anchor for i in inits)


def test_the_service_creates_no_more_outcome_topics_an_hour_than_it_is_allowed(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any producer of the acker topic names spouts, and a spout name made per run (a host name, a uuid) had the
    service create one outcome topic for each, without end. It creates ``outcome_topics_per_hour`` at most; the
    outcomes of a spout beyond that go to the dead-letter topic, saying why, until its spout creates its topic. They
    are not written to the topic first: a broker that creates topics on first use (Kafka's default; not the test
    broker) would make it then."""
    config = replace(
        config,
        partitions=1,
        outcome_topics_per_hour=1,
        kafka={**config.kafka, "topic.metadata.propagation.max.ms": "2000"},
    )
    create_acker_topics(config, [])  # no outcome topic: the service creates the first spout's
    made_up = f"spout-{uuid.uuid4().hex[:8]}"
    service = ServiceThread(config)
    written: list[str] = []
    produce_as_before = service.service._produce

    def produce(topic: str, value: bytes | None, **kwargs: Any) -> None:
        written.append(topic)
        produce_as_before(topic, value, **kwargs)

    monkeypatch.setattr(service.service, "_produce", produce)
    reader = OutcomeReader(config, [SPOUT])
    try:
        send(config, [Init(7, SPOUT, "src/0/1", 5), Ack(7, 5)])
        reader.wait_for(["src/0/1"], timeout_s=60)
        send(config, [Init(9, made_up, "src/0/2", 3), Ack(9, 3)])
        [letter] = _dead_letters(config, 1)
        assert letter[DLQ_REASON] == "outcome-refused"
        assert "not created: outcome_topics_per_hour (1) reached" in letter[DLQ_DETAIL]
        assert config.outcome_topic(made_up) not in Producer(config.client()).list_topics(timeout=10).topics
        assert config.outcome_topic(made_up) not in written and config.outcome_topic(SPOUT) in written
        assert reader.seen["src/0/1"] == ["ACK"]
    finally:
        service.stop()
        reader.close()


def test_an_existing_outcome_topic_whose_lookup_failed_is_written_to_not_capped(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no creation left in the hour, one lookup of an existing outcome topic that timed out made it "capped":
    its outcomes were dead-lettered as outcome-refused for up to 10 minutes, and their trees replayed."""
    config = replace(config, partitions=1, outcome_topics_per_hour=0)
    create_acker_topics(config, [SPOUT])  # the outcome topic exists
    asked: list[str] = []

    def timing_out_once(consumer: Any, topic: str, timeout_s: float = 10.0) -> list[int]:
        asked.append(topic)
        if topic == config.outcome_topic(SPOUT) and asked.count(topic) == 1:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "metadata request timed out"))
        return topic_partitions(consumer, topic, timeout_s)

    monkeypatch.setattr(service_module, "topic_partitions", timing_out_once)
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        send(config, [Init(7, SPOUT, "src/0/1", 5), Ack(7, 5)])
        reader.wait_for(["src/0/1"], timeout_s=60)
        assert reader.seen["src/0/1"] == ["ACK"] and asked.count(config.outcome_topic(SPOUT)) >= 1
        assert not service.service._dead_letters and not service.service._capped
    finally:
        service.stop()
        reader.close()


def test_an_outcome_topic_whose_creation_failed_is_created_again_later(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first creation of a spout's outcome topic fails (a request timing out, say). The service marked the topic
    known all the same and never tried again: every outcome of that spout went to the dead-letter topic until a
    restart. It now tries again after a while."""
    config = replace(config, partitions=1, kafka={**config.kafka, "topic.metadata.propagation.max.ms": "2000"})
    create_acker_topics(config, [])  # no outcome topic: the service creates it
    monkeypatch.setattr(service_module, "_ENSURE_AGAIN", Backoff(first_ms=1000))
    refused: list[list[TopicSpec]] = []

    def failing_once(admin: Any, specs: list[TopicSpec], timeout_s: float = 30.0, visible: bool = True) -> list[str]:
        if not refused and any(spec.name == config.outcome_topic(SPOUT) for spec in specs):
            refused.append(specs)
            raise KafkaClientError("creating topics", KafkaError(KafkaError.REQUEST_TIMED_OUT))
        return create_topics(admin, specs, timeout_s, visible=visible)

    monkeypatch.setattr(service_module, "create_topics", failing_once)
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        send(config, [Init(7, SPOUT, "src/0/1", 5), Ack(7, 5)])
        assert [d[DLQ_REASON] for d in _dead_letters(config, 1)] == ["outcome-refused"]  # the topic is missing
        time.sleep(1.5)
        send(config, [Init(9, SPOUT, "src/0/2", 3), Ack(9, 3)])
        reader.wait_for(["src/0/2"], timeout_s=60)
        assert reader.seen["src/0/2"] == ["ACK"] and len(refused) == 1
    finally:
        service.stop()
        reader.close()


def test_a_dead_letter_too_large_for_its_topic_is_cut_and_says_so(config: ServiceConfig) -> None:
    """A record near the size limit: its copy, with the reason headers added, is over it. The service used to stop
    at it, and again after every restart."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    garbage = (bytes(range(256)) * 3907)[:999_950]  # a producer's limit is 1,000,000 bytes, headers included
    producer = Producer(config.client())
    producer.produce(config.acker_topic, garbage, partition=0)
    producer.flush()
    letters, _ = _one_dead_letter_and_still_serving(config)
    assert [(d[DLQ_REASON], d[DLQ_OFFSET], d[DLQ_TRUNCATED]) for d in letters] == [
        ("bad-magic", "0", str(len(garbage)))
    ]
    assert letters[0]["value"] == repr(garbage[:DLQ_KEPT_BYTES])


def test_a_dead_letter_too_large_for_its_topic_even_cut_to_64_kb_is_sent_without_value_and_key(
    config: ServiceConfig,
) -> None:
    """A key near the size limit, and a dead-letter topic that takes less than 64 KB: the copy cut to 64 KB is
    refused as well, then sent with the reason and where the record lies only. It used to stop the service at the
    record, at every restart."""
    config = replace(config, partitions=1)
    create_topics(config.client(), [TopicSpec(config.dlq_topic, 1, config={"max.message.bytes": "20000"})])
    create_acker_topics(config)  # the others
    producer = Producer(config.client())
    key = b"k" * 999_800
    producer.produce(config.acker_topic, b"garbage", key=key, partition=0, headers=[("trace", b"t-1")])
    producer.flush()
    letters, snapshot = _one_dead_letter_and_still_serving(config)
    assert [(d[DLQ_REASON], d[DLQ_KEY_TRUNCATED]) for d in letters] == [("bad-magic", str(len(key)))]
    assert (letters[0]["key"], letters[0]["value"]) == ("b''", "b''")
    assert letters[0][DLQ_TRUNCATED] == str(len(b"garbage")) and "trace" not in letters[0]  # own headers dropped
    assert _given(snapshot.dead_letters) == {"bad-magic": 1}


def test_dead_letters_refused_together_as_too_large_are_sent_one_by_one_whole(config: ServiceConfig) -> None:
    """A dead-letter topic that takes a few KB: a burst of small dead letters, batched, is refused as one. Each
    then goes alone, whole; they used to be cut (and then emptied) though each fits."""
    config = replace(config, partitions=1)
    create_topics(config.client(), [TopicSpec(config.dlq_topic, 1, config={"max.message.bytes": "3000"})])
    create_acker_topics(config)
    producer = Producer(config.client())
    bad = [bytes([65 + i]) * 900 for i in range(5)]
    for value in bad:
        producer.produce(config.acker_topic, value, key=b"k", partition=0, headers=[("trace", b"t-1")])
    producer.flush()
    service = ServiceThread(config)
    try:
        letters = _dead_letters(config, len(bad))
    finally:
        service.stop()
    # In any order: a record batched apart from the refused ones (librdkafka batches as it goes) lands first.
    assert sorted((d["value"], d["trace"], d.get(DLQ_TRUNCATED)) for d in letters) == [
        (repr(v), "t-1", None) for v in bad
    ]


def test_topics_create_says_which_topics_it_made_when_one_is_refused(config: ServiceConfig) -> None:
    """It stopped at the first topic refused, and named neither those made before it nor those made after."""
    outcomes = config.outcome_topic(SPOUT)
    create_topics(config.client(), [TopicSpec(outcomes.replace(".", "_"), 1)])  # Kafka: `.` and `_` collide
    create_topics(config.client(), [TopicSpec(config.status_topic, 1)])  # not compacted: said, left as it is
    run = subprocess.run(
        [sys.executable, "-m", "acker.cli", "topics", "create", "--bootstrap-servers", config.bootstrap_servers,
         "--acker-topic", config.acker_topic, "--outcome-prefix", config.outcome_prefix, "--dlq-topic",
         config.dlq_topic, "--status-topic", config.status_topic, "--replay-prefix", config.replay_prefix,
         "--replay-dlq-topic", config.replay_dlq_topic, "--partitions", "2", "--spout", SPOUT],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert f"{config.acker_topic}\t2 partition(s)\tcreated" in run.stdout
    assert f"{config.dlq_topic}\t1 partition(s)\tcreated" in run.stdout
    assert (
        f"{config.status_topic}\t1 partition(s)\texists (cleanup.policy 'delete', not 'compact', segment.ms "
        in run.stdout
    )
    assert f"{outcomes}\t-\tnot created: " in run.stdout and "collides" in run.stdout
    # Its cause said whole once, in its line (it was said again on stderr, with every other topic's, in one long
    # line); stderr names it short, for a log that keeps stderr only.
    assert run.stderr.splitlines()[-1] == (
        f"acker: not created: {outcomes} (TOPIC_EXCEPTION): each one's line on stdout says why"
    )
    assert create_topics(config.client(), [TopicSpec(config.acker_topic, 2), TopicSpec(config.dlq_topic, 1)]) == []


def test_topics_create_with_a_spout_named_twice_makes_its_topic_once(config: ServiceConfig) -> None:
    """Its outcome topic was asked for twice in one request, and the admin client crashed the process (a segfault,
    nothing said)."""
    run = subprocess.run(
        [sys.executable, "-m", "acker.cli", "topics", "create", "--bootstrap-servers", config.bootstrap_servers,
         "--acker-topic", config.acker_topic, "--outcome-prefix", config.outcome_prefix, "--dlq-topic",
         config.dlq_topic, "--status-topic", config.status_topic, "--replay-prefix", config.replay_prefix,
         "--replay-dlq-topic", config.replay_dlq_topic, "--spout", "twice", "--spout", "twice"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.count(f"{config.outcome_topic('twice')}\t") == 1, run.stdout
    twice = f"{config.acker_topic}.twice"  # and any caller's: asked once (in a process of its own, should it crash)
    code = ("import sys; from acker.kafka.clients import TopicSpec, create_topics; "
            f"print(create_topics({{'bootstrap.servers': sys.argv[1]}}, [TopicSpec({twice!r}, 1)] * 2))")  # fmt: skip
    made = subprocess.run([sys.executable, "-c", code, config.bootstrap_servers], capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert (made.returncode, made.stdout.strip()) == (0, str([twice])), made.stderr


def test_delete_groups_deletes_empty_groups_and_says_why_it_kept_one_with_members(config: ServiceConfig) -> None:
    topic, name = f"{config.acker_topic}.g", uuid.uuid4().hex
    create_topics(config.client(), [TopicSpec(topic, 1)])
    admin = AdminClient(config.client())
    committed = Consumer(config.client(**{"group.id": f"{name}.empty", "enable.auto.commit": False}))
    committed.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    committed.close()
    member = Consumer(config.client(**{"group.id": f"{name}.busy", "auto.offset.reset": "earliest"}))
    member.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        refused = delete_groups(config.client(), [f"{name}.empty", f"{name}.busy", f"{name}.never"])
        assert list(refused) == [f"{name}.busy"] and "NON_EMPTY_GROUP" in refused[f"{name}.busy"]
        left = {g.group_id for g in admin.list_consumer_groups(request_timeout=30).result().valid}
        assert f"{name}.empty" not in left and f"{name}.busy" in left
    finally:
        member.close()


def test_metrics_status_and_topic_commands(config: ServiceConfig) -> None:
    common = [
        "--bootstrap-servers", config.bootstrap_servers,
        "--acker-topic", config.acker_topic,
        "--group", config.group,
        "--status-topic", config.status_topic,
        "--outcome-prefix", config.outcome_prefix,
        "--dlq-topic", config.dlq_topic,
        "--replay-prefix", config.replay_prefix,  # the Spark jobs' topics are made too: the test's own, not defaults
        "--replay-dlq-topic", config.replay_dlq_topic,
        "--partitions", "3",
    ]  # fmt: skip
    source, stage = f"{config.group}.source", f"{config.group}.stage"  # a pipeline's own topics
    created = subprocess.run(
        [sys.executable, "-m", "acker.cli", "topics", "create", *common, "--spout", SPOUT, "--topic", f"{source}:2",
         "--topic", stage],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert (
        f"{source}\t2 partition(s)\tcreated" in created.stdout and f"{stage}\t3 partition(s)\tcreated" in created.stdout
    )
    refused = subprocess.run(
        [sys.executable, "-m", "acker.cli", "topics", "create", *common, "--topic", "bad name:2"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "'bad name' cannot name a Kafka topic" in refused.stderr
    assert f"{config.acker_topic}\t3 partition(s)\tcreated" in created.stdout
    assert f"{config.outcome_topic(SPOUT)}\t3 partition(s)\tcreated" in created.stdout
    assert f"{config.outcome_topic('dlq')}\t1 partition(s)\tcreated" in created.stdout  # the Spark jobs' too
    again = subprocess.run(  # with another partition count and replication factor: the topics' own are shown
        [sys.executable, "-m", "acker.cli", "topics", "create", *common[:-1], "5", "--replication-factor", "2"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert (
        f"{config.acker_topic}\t3 partition(s)\texists (not 5, replication factor 1, not 2: an existing topic is left "
        "as it is)" in again.stdout
    )
    assert acker_topics._default_replication(config) == 1  # the cluster's, as its broker says it
    misspelt = subprocess.run(
        [sys.executable, "-m", "acker.cli", "status", *common, "--acker-topic", f"{config.acker_topic}-typo"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert misspelt.returncode == 2 and f"acker topic {config.acker_topic}-typo not found" in misspelt.stderr
    no_status = subprocess.run(  # a table of dashes, and nothing said
        [sys.executable, "-m", "acker.cli", "status", *common, "--status-topic", f"{config.status_topic}-typo"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert f"status topic {config.status_topic}-typo not found" in no_status.stderr

    config = replace(config, partitions=3)
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = IdGenerator(4)
        trees = {f"src/0/{i}": _tree_messages(f"src/0/{i}", ids) for i in range(200)}
        send(config, [m for _, head, tail in trees.values() for m in (*head, *tail)])
        reader.wait_for(trees, timeout_s=60)
        reader.poll(1.5)  # a status round
        registry = serve(0).registry
        registry.register(ServiceCollector(service.service.snapshot))
        text = generate_latest(registry).decode()
        status = subprocess.run(
            [sys.executable, "-m", "acker.cli", "status", *common, "--json"], capture_output=True, text=True, check=True
        )
        table = subprocess.run(  # piped, with no COLUMNS: whole rows all the same
            [sys.executable, "-m", "acker.cli", "status", *common],
            capture_output=True, text=True, check=True, env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
        )  # fmt: skip
        other_group = subprocess.run(  # another group's statuses are not shown as this one's
            [sys.executable, "-m", "acker.cli", "status", *common, "--group", f"{config.group}-typo", "--json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    finally:
        service.stop()
        reader.close()
    assert all(row["status"] is None and row["standing"] == "none" for row in json.loads(other_group.stdout))
    assert f"published by group {config.group}, not {config.group}-typo" in other_group.stderr
    assert 'acker_outcomes_total{outcome="ack"} 200.0' in text
    assert "acker_complete_latency_seconds_count 200.0" in text
    assert 'acker_pending_trees{partition="0"} 0.0' in text
    assert "acker_consumer_lag" in text
    assert 'acker_dead_letters_total{reason="bad-magic"} 0.0' in text  # from the start: an alert sees the first
    assert "\nacker_reads_held 0.0\n" in text
    rows = json.loads(status.stdout)
    assert [r["partition"] for r in rows] == [0, 1, 2]
    assert all(r["status"]["instance"] == config.instance_id and r["status"]["pending"] == 0 for r in rows)
    assert all(r["standing"] == "current" and 0 <= r["age_s"] < 60 for r in rows)
    assert sum(r["status"]["counters"]["acked"] for r in rows) == 200
    assert all(r["committed"] is not None and r["committed"] <= r["end"] for r in rows)
    assert table.stdout.count(config.instance_id) == 3 and "re-read by a new owner" in table.stdout
    acked_column = [line.split("│")[4].strip() for line in table.stdout.splitlines() if config.instance_id in line]
    assert sum(int(cell) for cell in acked_column) == 200  # the totals, beside the rates
    assert all(r["status"]["rate_window_s"] >= 0 for r in rows) and "rates over the last" in table.stdout
    assert all("released" not in r["status"] for r in rows)
    # Stopped, it says it gave its partitions up: it showed as their owner until its rows went stale.
    stopped = subprocess.run(
        [sys.executable, "-m", "acker.cli", "status", *common], capture_output=True, text=True, check=True,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )  # fmt: skip
    assert stopped.stdout.count(f"- (released by {config.instance_id} ") == 3
    released = subprocess.run(
        [sys.executable, "-m", "acker.cli", "status", *common, "--json"], capture_output=True, text=True, check=True
    )
    assert [r["standing"] for r in json.loads(released.stdout)] == ["released"] * 3


@pytest.mark.parametrize("command", [["topics", "create"], ["status"], ["run", "--metrics-port", "0"]])
def test_a_login_the_broker_refuses_is_said_as_such_not_as_a_broker_that_does_not_answer(
    sasl_client: dict[str, str], command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong password read as "Kafka did not answer: is it running, and reachable?", which sent the operator to
    the network; and the password is never shown."""
    flags = [f"--kafka={k}={v}" for k, v in sasl_client.items() if k not in {"bootstrap.servers", "sasl.password"}]
    args = [*command, "--bootstrap-servers", sasl_client["bootstrap.servers"], *flags, "--kafka=sasl.password=wr0ng"]
    assert cli.main([*args, "--acker-topic", f"refused-{uuid.uuid4().hex[:6]}"]) == 2
    err = capsys.readouterr().err
    assert "refused the login" in err and "Authentication failed" in err and "did not answer" not in err
    assert "wr0ng" not in err


@pytest.mark.parametrize("job", ["commit", "replay"])
def test_a_spark_job_whose_login_the_broker_refuses_stops_before_spark_starts(
    sasl_client: dict[str, str],
    job: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrong password: the job warned twice of a transport failure, said it was running, and a minute later
    stopped with Spark's SaslAuthenticationException (exit 1), or began its restarts: read as an outage."""

    def no_spark(*_: object, **__: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr("spark_jobs.session.spark_session", no_spark)
    flags = [f"--kafka={k}={v}" for k, v in sasl_client.items() if k not in {"bootstrap.servers", "sasl.password"}]
    args = ["spark", job, "--spout", "sp", "--checkpoint", str(tmp_path / "ckpt"), "--bootstrap-servers",
            sasl_client["bootstrap.servers"], *flags, "--kafka=sasl.password=wr0ng"]  # fmt: skip
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "refused the login" in err and "Authentication failed" in err and "wr0ng" not in err


_SASL = ["--kafka=security.protocol=SASL_PLAINTEXT", "--kafka=sasl.mechanism=PLAIN", "--kafka=sasl.username=u",
         "--kafka=sasl.password=s3cret-word"]  # fmt: skip
_TLS = ["--kafka=security.protocol=SSL"]


@pytest.mark.parametrize(
    ("command", "security", "said"),
    [
        *[(command, _SASL, "SASL PLAIN mechanism handshake failed")
          for command in ["status", "run --metrics-port=0", "wordcount spout", "wordcount split", "reach step",
                          "watermarks g", "export 0", "dlq list", "dlq show 0/1", "wordcount produce --sentences=2"]],
        # TLS at a plaintext listener: librdkafka says a transport error, and the commands waited 10 s to 60 s, then
        # said "Kafka did not answer".
        *[(command, _TLS, "SSL handshake failed") for command in ["status", "run --metrics-port=0", "wordcount split"]],
    ],
)  # fmt: skip
def test_a_sasl_or_tls_login_at_a_plaintext_listener_is_said_refused_not_unanswered(
    bootstrap: str, command: str, security: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SASL settings given for a cluster whose listener takes none: `acker run` waited 30 s, then said "Kafka did not
    answer: is it running, and reachable?" (the broker answers the handshake with an error, which librdkafka says to
    a callback alone); a spout 40 s and a bolt 30 s, then "reading metadata of acker: _TRANSPORT"; `watermarks`, `dlq`
    and `export` 10 s, `wordcount produce` 60 s."""
    topic = ["0"] if command == "reach step" else ["--acker-topic", f"plain-{uuid.uuid4().hex[:6]}"]
    args = [*command.split(), "--bootstrap-servers", bootstrap, *security, *topic]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "refused the login" in err and said in err, err
    assert "did not answer" not in err and "s3cret-word" not in err
