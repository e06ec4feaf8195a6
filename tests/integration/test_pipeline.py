"""Spouts and bolts on the real broker: Storm's word count, failure injection, and a multi-anchoring join."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)
from prometheus_client.parser import text_string_to_metric_families

from acker import retries
from acker.bolt import Bolt, BoltInput, Collector
from acker.config import ServiceConfig, to_argv
from acker.errors import ProtocolError
from acker.examples import join as join_example
from acker.examples.wordcount import Topics, count_bolt, count_function, sentences, split_function
from acker.headers import HEADER, HeaderList
from acker.kafka.acker_client import RESENDS, partition_lookup
from acker.kafka.clients import KafkaClientError, TopicSpec, create_topics, partition_count, topic_max_bytes
from acker.kafka.held_reads import WatchedConsumer
from acker.kafka.local_broker import free_ports
from acker.kafka.lookups import lookups
from acker.retries import DEAD_LETTERED, NOT_BEFORE, ORIGIN, REDRIVEN, REPLAYED, RetryPolicy
from acker.spout import INIT_ATTEMPTS, REPLAY_HEADERS_ROOM, Emitter, Spout, SpoutSettings, make_replay_topic
from acker.stage_metrics import BOLT_EVENTS, SPOUT_EVENTS, serve_stages
from acker.wire import encode_outcome_rows
from tests.integration.helpers import (
    OutcomeReader,
    Running,
    ServiceThread,
    add_partitions,
    create_acker_topics,
    produce_with_header_name,
    read_all,
    service_config,
)

SPOUT = "sentences"  # the spouts these tests make themselves (the word count's own: Topics.spout)


@pytest.fixture
def topics(config: ServiceConfig) -> Topics:
    topics = Topics(prefix=f"wc-{uuid.uuid4().hex[:8]}")
    create_acker_topics(config, [SPOUT])
    create_topics(
        config.client(),
        [TopicSpec(t, 2) for t in (topics.sentences, topics.split, topics.words, topics.counts)],
    )
    return topics


def _produce(config: ServiceConfig, topic: str, values: list[bytes]) -> list[str]:
    """Produce ``values``; return their message ids (coordinates) in the order of their delivery reports: the order
    produced within a partition, not across partitions."""
    producer = Producer(config.client())
    ids: list[str] = []
    lock = threading.Lock()

    def delivered(error: object, record: object) -> None:
        assert error is None, error
        with lock:
            ids.append(f"{record.topic()}/{record.partition()}/{record.offset()}")  # type: ignore[attr-defined]

    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(ids) == len(values)
    return ids


def _pipeline(
    config: ServiceConfig,
    topics: Topics,
    *,
    fail_rate: float = 0.0,
    drop_rate: float = 0.0,
    split_bolts: int = 2,
    max_pending: int = SpoutSettings.max_pending,
) -> tuple[list[Running], Counter[bytes]]:
    counts: Counter[bytes] = Counter()
    settings = SpoutSettings(
        SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", max_pending=max_pending
    )
    spout = Spout(config, settings)
    stages = [
        ServiceThread(config),
        Running(spout),
        *(
            Running(Bolt(config, topics.split, f"split-{topics.prefix}", split_function(topics, fail_rate, seed=i)))
            for i in range(split_bolts)
        ),
        Running(
            Bolt(config, topics.words, f"count-{topics.prefix}", count_function(topics, counts, drop_rate), basic=False)
        ),
    ]
    return stages, counts


def _stop(stages: list[Running]) -> None:
    for stage in reversed(stages):
        stage.stop()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_word_count_every_sentence_acked_and_counted(config: ServiceConfig, topics: Topics, protocol: str) -> None:
    """Also with Kafka's new group protocol (KIP-848) for every stage's group: the service's, the spout's and the
    bolts' (two split bolts share one group, so the second one's joining moves a partition)."""
    if protocol == "consumer":
        config = replace(config, kafka={"group.protocol": "consumer"})
    stages, counts = _pipeline(config, topics)
    reader = OutcomeReader(config, [SPOUT])
    try:
        lines = list(sentences(300, seed=3))
        msg_ids = _produce(config, topics.sentences, lines)
        reader.wait_for(msg_ids, timeout_s=90)
    finally:
        _stop(stages)
        reader.close()
    assert reader.not_just_acked(msg_ids) == {}
    assert counts == Counter(word for line in lines for word in line.split())


def test_stopped_stages_free_their_producers_and_a_second_close_does_nothing(
    config: ServiceConfig, topics: Topics
) -> None:
    """A process that stops and starts stages in it does not keep the old ones' producers (their threads and
    connections, retrying a broker that went away): a stage's stop closes a producer that delivered everything."""
    stages, _ = _pipeline(config, topics, split_bolts=1)
    reader = OutcomeReader(config, [SPOUT])
    try:
        msg_ids = _produce(config, topics.sentences, list(sentences(20, seed=5)))
        reader.wait_for(msg_ids, timeout_s=90)
    finally:
        _stop(stages)
        reader.close()
    assert reader.not_just_acked(msg_ids) == {}
    stopped = [stage.runnable for stage in stages]
    sinks = [bolt._sink for bolt in stopped if isinstance(bolt, Bolt) and bolt._sink is not None]
    assert len(sinks) == 1  # the count bolt's, which writes the counts out of the pipeline
    for producer in [*(stage.producer for stage in stopped), *sinks]:  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError, match="closed"):
            producer.produce(topics.counts, b"after the stop")
    for stage in stopped:
        stage.close()  # type: ignore[attr-defined] # again: no flush of a closed producer


def test_injected_fails_nack_failed_and_drops_nack_timeout(config: ServiceConfig, topics: Topics) -> None:
    config = replace(config, timeout_s=2.0)
    stages, _ = _pipeline(config, topics, split_bolts=1)
    reader = OutcomeReader(config, [SPOUT])
    try:
        good, poison, lost = list(sentences(50, seed=4)), [b"a poison pill", b"poison"], [b"the lost word"]
        good_ids = _produce(config, topics.sentences, good)
        poison_ids = _produce(config, topics.sentences, poison)
        lost_ids = _produce(config, topics.sentences, lost)
        reader.wait_for([*good_ids, *poison_ids, *lost_ids], timeout_s=90)
    finally:
        _stop(stages)
        reader.close()
    first = {m: seen[0] for m, seen in reader.seen.items()}
    assert {first[m] for m in good_ids} == {"ACK"}
    assert {first[m] for m in poison_ids} == {"FAILED"}
    assert {first[m] for m in lost_ids} == {"TIMEOUT"}


def test_a_join_multi_anchors_and_acks_or_fails_all_its_roots(config: ServiceConfig, topics: Topics) -> None:
    """A join bolt pairs messages by key and emits one child anchored to both: the child's fate is both roots'. A
    message the join raises on is failed, and the bolt goes on."""
    joined = f"{topics.prefix}.joined"
    create_topics(config.client(), [TopicSpec(joined, 1)])
    waiting: dict[bytes, BoltInput] = {}

    def join(message: BoltInput, collector: Collector) -> None:
        if b"boom" in (message.value or b""):
            raise ValueError("the join cannot read this message")
        other = waiting.pop(message.key or b"", None)
        if other is None:
            waiting[message.key or b""] = message
            return
        collector.emit(joined, (other.value or b"") + b"+" + (message.value or b""), anchors=[other, message])
        collector.ack(other)
        collector.ack(message)

    def sink(message: BoltInput, collector: object) -> None:
        if b"bad" in (message.value or b""):
            raise ValueError("the joined message fails downstream")

    def keyed(record, emitter) -> None:  # type: ignore[no-untyped-def]
        emitter.emit(topics.split, record.value(), key=record.value().split(b":")[0])

    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"), keyed)
    stages = [
        ServiceThread(config),
        Running(spout),
        Running(Bolt(config, topics.split, f"join-{topics.prefix}", join, basic=False)),
        Running(Bolt(config, joined, f"sink-{topics.prefix}", sink)),
    ]
    reader = OutcomeReader(config, [SPOUT])
    producer = Producer(config.client())
    ids: dict[bytes, str] = {}
    try:
        for value in (b"k1:left", b"k1:right", b"k3:boom", b"k2:left", b"k2:bad"):

            def delivered(error: object, r: Any, v: bytes = value) -> None:
                ids[v] = f"{r.topic()}/{r.partition()}/{r.offset()}"

            producer.produce(topics.sentences, value, key=value.split(b":")[0], partition=0, on_delivery=delivered)
        producer.flush(30)
        reader.wait_for(ids.values(), timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    outcome = {v: reader.seen[m][0] for v, m in ids.items()}
    assert outcome == {
        b"k1:left": "ACK", b"k1:right": "ACK", b"k3:boom": "FAILED", b"k2:left": "FAILED", b"k2:bad": "FAILED"
    }  # fmt: skip


def _watermarks_inside(ids: list[str], mark: int) -> dict[int, int]:
    """Per partition (two), ``mark`` or the partition's end if it holds fewer records: a watermark past the end would
    be out of range, and the spout would start at the beginning."""
    offsets = [(int(m.split("/")[1]), int(m.rsplit("/", 1)[1])) for m in ids]
    return {p: min(mark, 1 + max((o for q, o in offsets if q == p), default=-1)) for p in (0, 1)}


def test_spout_resumes_at_the_watermark_and_honours_max_pending(config: ServiceConfig, topics: Topics) -> None:
    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", max_pending=5)
    ids = _produce(config, topics.sentences, list(sentences(40, seed=9)))
    # The watermark of partition p is where a (restarted) spout starts: 10 here, or the partition's end when the
    # producer put fewer records there.
    marks = _watermarks_inside(ids, 10)
    watermark = Consumer(config.client(**{"group.id": settings.watermark_group}))
    watermark.commit(offsets=[TopicPartition(topics.sentences, p, m) for p, m in marks.items()], asynchronous=False)
    watermark.close()
    spout = Spout(config, settings)  # no acker runs: nothing completes, so the spout stops at max_pending
    deadline = time.monotonic() + 60
    while len(spout.pending) < 5 and time.monotonic() < deadline:  # joining the group, seeking, reading
        spout.step(0.1)
    for _ in range(10):  # then it reads no more
        spout.step(0.1)
    assert len(spout.pending) == 5 and spout.counters["read"] == 5 and spout.counters["pauses"] == 1
    started: dict[int, int] = {}  # partition -> the first offset read there
    for m in spout.pending:
        partition, offset = int(m.split("/")[1]), int(m.rsplit("/", 1)[1])
        started[partition] = min(offset, started.get(partition, offset))
    assert started and all(offset == marks[p] for p, offset in started.items())  # at the watermark, not past it
    spout.close()


def test_a_spout_reads_the_ackers_outcomes_past_a_transaction_left_open_on_its_outcome_topic(
    config: ServiceConfig, topics: Topics
) -> None:
    """The replay job writes its resolutions to the outcome topics in transactions. One left open (its driver died
    mid-batch) hid every later outcome from a read_committed spout until the broker aborted it (a minute by
    default, more if the job asks): no room freed, the spout stopped at max_pending. The acker's outcomes are not
    transactional, and the spout ignores the job's rows: it reads what is written."""
    outcome_topic = config.outcome_topic(SPOUT)
    stuck = Producer(
        config.client(**{"transactional.id": f"stuck-{uuid.uuid4().hex}", "transaction.timeout.ms": 600_000})
    )
    stuck.init_transactions(30)
    stuck.begin_transaction()
    for partition in range(partition_count(config.client(), outcome_topic)):
        stuck.produce(outcome_topic, encode_outcome_rows(SPOUT, [("REPLAYED", 0, "x/0/0", 0)]), partition=partition)
    assert stuck.flush(30) == 0  # written, in a transaction that stays open
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}",
                                        max_pending=10))  # fmt: skip
    stages = [ServiceThread(config), Running(spout),
              Running(Bolt(config, topics.split, f"split-{topics.prefix}", lambda _m, _c: None))]  # fmt: skip
    try:
        _produce(config, topics.sentences, list(sentences(30, seed=4)))
        deadline = time.monotonic() + 60
        while spout.counters["acked"] < 30:
            assert time.monotonic() < deadline, f"acked {spout.counters['acked']} of 30: outcomes hidden"
            time.sleep(0.2)
    finally:
        _stop(stages)
        stuck.abort_transaction(30)


def test_a_spout_whose_position_retention_deleted_reads_on_from_the_first_record_left_whatever_its_reset(
    config: ServiceConfig,
) -> None:
    """``reset="latest"`` is where a partition without a watermark starts. A position that falls out of range as the
    spout goes (retention deleted the records it was to read: here while it waits at ``max_pending``) took the
    consumer's reset policy too, to the end: the records between, still there, were never read."""
    source = f"gone-{uuid.uuid4().hex[:8]}"
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(source, 1), TopicSpec(f"{source}.out", 1)])
    settings = SpoutSettings(SPOUT, source, f"{source}.out", group=f"spout-{source}", max_pending=1, reset="latest")
    spout = Spout(config, settings)
    reader = OutcomeReader(config, [SPOUT])
    stages: list[Running] = []
    closed = False
    try:
        deadline = time.monotonic() + 60
        while not spout.consumer.assignment() and time.monotonic() < deadline:  # at the end: no watermark, latest
            spout.step(0.1)
        ids = _produce(config, source, [b"record %d" % i for i in range(10)])
        while not spout.pending and time.monotonic() < deadline:
            spout.step(0.1)
        for _ in range(5):  # no acker runs yet: it stops at one pending tree, its position at offset 1
            spout.step(0.1)
        assert list(spout.pending) == [ids[0]] and spout.counters["pauses"] == 1
        admin = AdminClient(config.client())
        for future in admin.delete_records([TopicPartition(source, 0, 5)]).values():
            future.result(30)
        stages += [ServiceThread(config), Running(Bolt(config, f"{source}.out", f"bolt-{source}", _ignore))]
        while len(reader.seen) < 6 and time.monotonic() < deadline:
            spout.step(0.1)
            reader.poll(0.1)
        spout.close()
        closed = True
        # Its watermark (0: no commit job runs) is below the first record now: a spout started again reads from there.
        again = Spout(config, replace(settings, max_pending=100))
        while again.counters["read"] < 5 and time.monotonic() < deadline:
            again.step(0.1)
        for _ in range(5):
            again.step(0.1)
        read_again = again.counters["read"]
        again.close()
    finally:
        if not closed:
            spout.close()
        _stop(stages)
        reader.close()
    assert {m: reader.seen.get(m) for m in [ids[0], *ids[5:]]} == {m: ["ACK"] for m in [ids[0], *ids[5:]]}
    assert read_again == 5


@pytest.mark.parametrize(("reset", "read"), [("latest", 2 + 3), ("earliest", 22 + 3)])
def test_a_watermark_beyond_the_end_starts_where_the_reset_policy_says(
    config: ServiceConfig, reset: str, read: int
) -> None:
    """A log truncated below its watermark (an unclean leader election, an operator's reset): ``latest`` starts at
    the end, and reads only what comes after; ``earliest`` reads the partition again (at-least-once). The replay
    topic, whatever the policy, is read from its first record (there, deleted and made again under its watermark):
    its 3 copies are read either way (``latest`` had skipped them, each a record lost)."""
    source = f"beyond-{uuid.uuid4().hex[:8]}"
    replays = config.replay_topic(SPOUT)
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(source, 1), TopicSpec(f"{source}.out", 1), TopicSpec(replays, 1)])
    _produce(config, source, [b"before %d" % i for i in range(20)])
    _produce(config, replays, [b"copy %d" % i for i in range(3)])
    settings = SpoutSettings(SPOUT, source, f"{source}.out", group=f"spout-{source}", reset=reset)
    kafka = lookups(config.client())
    with kafka.lock:
        kafka.advance(settings.watermark_group, {(source, 0): 1000, (replays, 0): 1000})
    spout = Spout(config, settings)
    try:
        deadline = time.monotonic() + 60
        while not (spout.consumer.assignment() and spout.replays.assignment()) and time.monotonic() < deadline:
            spout.step(0.1)
        _produce(config, source, [b"after 0", b"after 1"])
        while spout.counters["read"] < read and time.monotonic() < deadline:
            spout.step(0.1)
        for _ in range(10):
            spout.step(0.1)
    finally:
        spout.close()
    assert spout.counters["read"] == read


def test_a_spout_reads_outcome_partitions_added_later_and_waits_for_an_acker_that_decides_nothing(
    config: ServiceConfig, topics: Topics
) -> None:
    """Outcome records keyed to a partition added to the outcome topic after the spout started still free their
    trees' room. Trees without an outcome after the pending timeout, whose acker partitions decided no tree started
    after them (no acker runs here: as in an acker's outage), keep their room and are not timed out: the spout waits
    at max_pending (the timing out, where the acker has decided trees started a tree's life later:
    tests/unit/test_spout_outcomes.py)."""
    # A pending timeout of 20 s rather than minutes, and time enough to add partitions and read from them.
    settings = SpoutSettings(
        SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", max_pending=4, pending_timeout_s=20
    )
    _produce(config, topics.sentences, list(sentences(20, seed=3)))
    spout = Spout(config, settings)  # no acker runs: only the outcomes written here decide anything

    def step_until(done: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, what
            spout._next_outcome_check = 0.0  # look for new outcome partitions at every step, not every 30 s
            spout.step(0.1)

    try:
        step_until(lambda: len(spout.pending) == 4, "the spout never reached max_pending")
        outcomes = config.outcome_topic(SPOUT)
        add_partitions(config.client(), outcomes, config.partitions + 2)
        msg_id, anchor = next(iter(spout.pending.items()))
        producer, delivered = Producer(config.producer()), []
        producer.produce(
            outcomes, encode_outcome_rows(SPOUT, [("ACK", anchor, msg_id, 0)]), partition=config.partitions + 1,
            on_delivery=lambda error, _record: delivered.append(error),
        )  # fmt: skip
        assert producer.flush(30) == 0 and delivered == [None], delivered
        step_until(lambda: msg_id not in spout.pending, "the outcome in the new partition was never read")
        assert spout.counters["acked"] == 1 and spout.counters["pending_given_up"] == 0
        step_until(lambda: len(spout.pending) == 4, "the room given back was not taken")
        waiting = set(spout.pending)
        step_until(lambda: spout.counters["pending_waiting_on_acker"] >= 3, "the pending timeout never came")
        assert spout.counters["pending_given_up"] == 0 and set(spout.pending) == waiting
        assert spout.counters["read"] == 5  # the 4, then 1 in the room the acked one gave back
    finally:
        spout.close()


def test_an_acker_outage_does_not_time_out_a_tree_that_a_younger_tree_overtook(bootstrap: str) -> None:
    """Trees finish out of order: a younger tree decided before the acker went down says nothing of an older one still
    being processed. The spout timed out every tree so overtaken at its pending timeout while the acker was away, and
    replayed its record (processed meanwhile: acked once the acker was back). Only a tree started a tree's life after
    it is evidence that the acker expired it (the timing out then: tests/unit/test_spout_outcomes.py)."""
    config = replace(service_config(bootstrap, partitions=1), timeout_s=4.0)  # every tree in one partition; lives 6 s
    run = uuid.uuid4().hex[:8]
    source, out = f"outage-src-{run}", f"outage-out-{run}"
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(source, 1), TopicSpec(out, 1)])
    held: list[BoltInput] = []
    release = threading.Event()

    def process(message: BoltInput, collector: Collector) -> None:
        if message.value == b"slow":
            held.append(message)
        else:
            collector.ack(message)

    def tick(collector: Collector) -> None:
        while release.is_set() and held:
            collector.ack(held.pop())

    bolt = Running(Bolt(config, out, f"outage-bolt-{run}", process, basic=False, on_tick=tick, tick_s=0.1))
    spout = Spout(config, SpoutSettings(SPOUT, source, out, group=f"outage-spout-{run}", pending_timeout_s=7))
    acker = ServiceThread(config)

    def step_until(done: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, what
            spout.step(0.1)

    try:
        _produce(config, source, [b"slow"])
        step_until(lambda: len(spout.pending) == 1, "the slow record was never read")
        _produce(config, source, [b"fast"])  # a younger tree, started at a later step
        step_until(lambda: spout.counters["acked"] == 1, "the fast tree was never acked")
        assert len(spout.pending) == 1 and len(held) == 1
        acker.stop()  # the slow tree pending there: rebuilt from the acker topic when it is back
        release.set()  # its ack written while the acker is away
        looked = ("pending_waiting_on_acker", "pending_given_up")  # at the pending timeout: waits, or gives it up
        step_until(lambda: any(spout.counters[name] for name in looked), "the pending timeout never came", 30)
        assert spout.counters["pending_given_up"] == 0 and len(spout.pending) == 1
        acker = ServiceThread(config)
        step_until(lambda: spout.counters["acked"] == 2, "the slow tree's ACK never came")
        assert spout.counters["pending_given_up"] == 0 and not spout.pending
    finally:
        spout.close()
        bolt.stop()
        acker.stop()


def test_a_spout_creates_its_missing_outcome_topic_and_takes_librdkafkas_names_of_its_reset_policy(
    config: ServiceConfig,
) -> None:
    """A fresh deployment without `acker topics create`: the spout could not start without its outcome topic, which
    the service creates only for an outcome, which needs a spout. And a reset policy of "smallest" started the
    partitions at their ends, the records already there never read, and counted as done."""
    source = f"{config.acker_topic}.source"
    create_topics(config.client(), [TopicSpec(config.acker_topic, config.partitions), TopicSpec(source, 2)])
    written = _produce(config, source, [b"a", b"b", b"c"])
    settings = SpoutSettings("fresh", source, f"{source}.out", tracked=False, reset="smallest")
    spout = Spout(config, settings)
    reader = OutcomeReader(config, ["fresh"])
    try:
        assert partition_count(config.client(), config.outcome_topic("fresh")) == config.partitions
        deadline = time.monotonic() + 60
        while spout.counters["read"] < 3 and time.monotonic() < deadline:
            spout.step(0.1)
        spout.step(0.1)
        reader.wait_for(written)
        assert all(reader.seen[m] == ["ACK"] for m in written)
    finally:
        reader.close()
        spout.close()


def test_a_spout_whose_source_is_missing_makes_no_topic(config: ServiceConfig) -> None:
    """A source misnamed (``acker wordcount spout --prefix`` with a typo) was found missing only once the spout had
    made its outcome topic, of 8 partitions, under the misnamed spout's name."""
    create_topics(config.client(), [TopicSpec(config.acker_topic, config.partitions)])
    source = f"{config.acker_topic}.no-such-source"
    settings = SpoutSettings("misnamed", source, f"{source}.out")
    with pytest.raises(KafkaClientError, match=f"topic {source} is not available"):
        Spout(config, settings)
    topics = AdminClient(config.client()).list_topics(timeout=10).topics
    assert config.acker_topic in topics  # the listing is whole
    assert {config.outcome_topic("misnamed"), config.replay_topic("misnamed")}.isdisjoint(topics)


@pytest.mark.parametrize("rebalancing", ["cooperative-sticky", "group.protocol=consumer"])
def test_a_spout_told_to_rebalance_cooperatively_still_starts_at_the_watermark(
    config: ServiceConfig, topics: Topics, rebalancing: str
) -> None:
    """A user may set partition.assignment.strategy for every client (the service and the bolts use
    cooperative-sticky), or Kafka's new group protocol (KIP-848, where the broker assigns partitions incrementally):
    the spout's own assignment then goes through incremental_assign, and a second spout joining takes partitions
    from the first without either losing its place: of the source and of the replay topic each (in one group the
    assignor balanced the two topics' partitions together, and the second spout took the replay topic's alone)."""
    if rebalancing == "cooperative-sticky":
        config = replace(config, kafka={**config.kafka, "partition.assignment.strategy": "cooperative-sticky"})
    else:  # the session timeout is the broker's then: the clients may not set it
        config = replace(config, kafka={"group.protocol": "consumer"})
    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", max_pending=1000)
    ids = _produce(config, topics.sentences, list(sentences(40, seed=9)))
    marks = _watermarks_inside(ids, 10)  # the producer may have put few records in one partition
    watermark = Consumer(config.client(**{"group.id": settings.watermark_group}))
    watermark.commit(offsets=[TopicPartition(topics.sentences, p, m) for p, m in marks.items()], asynchronous=False)
    watermark.close()
    first = Spout(config, settings)
    for _ in range(30):
        first.step(0.1)
    second = Spout(config, settings)
    for _ in range(60):
        first.step(0.1)
        second.step(0.1)
    started = {m for spout in (first, second) for m in spout.pending}
    from_marks = {m for m in ids if int(m.rsplit("/", 1)[1]) >= marks[int(m.split("/")[1])]}
    assert started == from_marks  # every record from the watermarks on
    for spout in (first, second):  # each took its share of each topic
        assert {tp.topic for tp in spout.consumer.assignment()} == {topics.sentences}
        assert len(spout.consumer.assignment()) == 1 and len(spout.replays.assignment()) == 1
    first.close()
    second.close()


def _write_copies(config: ServiceConfig, source: str, count: int) -> str:
    """``count`` copies on spout `SPOUT`'s replay topic, as the replay job writes them, of the records at offsets 0,
    1, ... of ``source``'s partition 0; returns the replay topic."""
    replays = config.replay_topic(SPOUT)
    producer = Producer(config.client())
    for i in range(count):
        producer.produce(replays, b"copy", partition=0, headers=[(ORIGIN, f"{source}/0/{i}".encode())])
    assert producer.flush(30) == 0
    return replays


def test_a_backlog_of_replays_leaves_the_source_read_at_every_step(config: ServiceConfig, topics: Topics) -> None:
    """The replay topic has a consumer of its own: a backlog there that filled every step's room kept the source's
    consumer from being called until it was gone (no source record read for minutes after an outage, and past
    max.poll.interval.ms the consumer left its group and read its pending records again)."""
    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", max_pending=100_000)
    read: list[str] = []

    def emit(record: Any, emitter: Any) -> None:
        read.append(record.topic())
        time.sleep(0.002)  # 4 s for the backlog
        emitter.emit(topics.split, record.value())

    spout = Spout(config, settings, emit)  # which creates its replay topic
    replays = _write_copies(config, topics.sentences, 2000)
    try:
        deadline = time.monotonic() + 60
        while replays not in read:  # the backlog is being read
            assert time.monotonic() < deadline, "no replay read"
            spout.step(0.1)
        _produce(config, topics.sentences, [b"a", b"b", b"c"])
        while read.count(topics.sentences) < 3:
            assert time.monotonic() < deadline, "the source records were never read"
            spout.step(0.1)
    finally:
        spout.close()
    last_source = max(i for i, topic in enumerate(read) if topic == topics.sentences)
    assert read[:last_source].count(replays) < 1500  # read beside the backlog, not after it


def test_a_spout_with_room_for_one_tree_reads_its_replays_beside_a_busy_source(
    config: ServiceConfig, topics: Topics
) -> None:
    """The replays' share of a step's room was half of it rounded down: none at a room of 1 (``max_pending`` 1, a
    setting Storm's users pick for order), so a copy was never read while the spout ran, and its record, whose
    watermark had moved on (``REPLAYED``), was lost. Records that start no tree here (nothing emitted: acked at
    once), so the room stays whole and the source has records at every step."""
    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", max_pending=1)
    read: list[str | None] = []
    spout = Spout(config, settings, lambda record, _emitter: read.append(record.topic()))  # its replay topic made
    _produce(config, topics.sentences, [b"source %d" % i for i in range(200)])
    replays = _write_copies(config, topics.sentences, 3)
    try:
        deadline = time.monotonic() + 60
        while (read.count(replays) < 3 or read.count(topics.sentences) < 200) and time.monotonic() < deadline:
            spout.step(0.1)
    finally:
        spout.close()
    assert read.count(replays) == 3, f"{read.count(replays)} of 3 copies read beside {len(read)} source records"
    assert read.count(topics.sentences) == 200  # the source is read beside the replays, not after them
    assert spout.counters["read"] == spout.counters["done_at_once"] == 203 and not spout.pending


def test_a_spout_makes_its_replay_topic_take_the_records_its_source_takes(config: ServiceConfig) -> None:
    """Made with the broker's default limit (1 MB), a replay topic refused the copy of a record of nearly 3 MB its
    source had taken: dead-lettered at its first nack (``too-large``, cut to 64 KB) instead of replayed."""
    source = f"large-{uuid.uuid4().hex[:8]}"
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(source, 2, config={"max.message.bytes": "3000000"}),
                                    TopicSpec(f"{source}.out", 2)])  # fmt: skip
    # As a spout makes it when it starts (`Spout.__init__`), without a spout's consumers: one closed while it still
    # joined its group waited for ever in librdkafka's close (its revoke's assign never answered), once in CI.
    make_replay_topic(config, SpoutSettings(SPOUT, source, f"{source}.out"), 2)
    assert topic_max_bytes(config.client(), config.replay_topic(SPOUT)) == 3000000 + REPLAY_HEADERS_ROOM
    # A copy of a record the source just takes (its record batch's framing aside), with the longest detail.
    policy = RetryPolicy(replay_prefix=config.replay_prefix)
    copy = retries.decide(policy, SPOUT, f"{source}/0/0", "FAILED", headers=[], now_ms=0, detail="\U0001d11e" * 500)
    assert copy.topic == config.replay_topic(SPOUT)
    refused: list[Any] = []
    large = Producer(config.client(**{"message.max.bytes": 4_000_000}))
    large.produce(
        copy.topic, b"v" * (3_000_000 - 200), headers=copy.headers, on_delivery=lambda e, _: refused.append(e)
    )
    assert large.flush(30) == 0 and refused == [None]


def test_a_replay_topic_beside_a_source_without_a_limit_takes_the_largest_limit_kafka_allows(
    config: ServiceConfig,
) -> None:
    """A source at max.message.bytes 2**31 - 1 (no limit): that plus the headers' room is past what the setting, an
    int, takes, and the spout did not start (the creation refused)."""
    source = f"unlimited-{uuid.uuid4().hex[:8]}"
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(source, 1, config={"max.message.bytes": str(2**31 - 1)}),
                                    TopicSpec(f"{source}.out", 1)])  # fmt: skip
    make_replay_topic(config, SpoutSettings(SPOUT, source, f"{source}.out"), 1)  # as a spout makes it
    assert topic_max_bytes(config.client(), config.replay_topic(SPOUT)) == 2**31 - 1


def test_a_spout_reset_to_latest_reads_its_replay_topic_from_its_first_record(
    config: ServiceConfig, topics: Topics
) -> None:
    """``reset="latest"`` starts a source partition without a watermark at its end (records written before are not
    read), never the replay topic: each copy there stands for a record whose outcome is already ``REPLAYED``, past
    which the watermark has moved, so a copy skipped is a record lost."""
    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", reset="latest")
    [before] = _produce(config, topics.sentences, [b"written before the spout started"])
    spout = Spout(config, settings)  # which creates its replay topic
    producer = Producer(config.client())
    producer.produce(config.replay_topic(SPOUT), b"copy", partition=0, headers=[(ORIGIN, before.encode())])
    assert producer.flush(30) == 0
    copy = f"{config.replay_topic(SPOUT)}/0/0"
    try:
        deadline = time.monotonic() + 60
        while copy not in spout.pending and time.monotonic() < deadline:
            spout.step(0.1)
        for _ in range(10):
            spout.step(0.1)
    finally:
        spout.close()
    assert list(spout.pending) == [copy] and spout.counters["read"] == 1  # the copy, not the source's old record


def test_on_outcome_is_told_dead_lettered_when_the_replay_job_resolves_a_nack_it_was_told_so(
    config: ServiceConfig, topics: Topics
) -> None:
    """A record failed downstream and a replay's copy failed: the spout tells each ``FAILED`` (the copy under its
    origin's id), then, when the replay job writes its resolution to the outcome topic as it does (anchor 0, key
    ``replay``; here all to partition 0, once the nacks were read), ``DEAD_LETTERED`` for the dead-lettered one (under
    the copy's origin) and nothing for the replayed one, whose copy is told when its own outcome comes."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: a FAILED cannot be one
    told: list[tuple[str, str]] = []
    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}")
    spout = Spout(config, settings, on_outcome=lambda msg_id, outcome: told.append((msg_id, outcome)))

    def fail_all(message: BoltInput, _collector: Any) -> None:
        raise ValueError("poison")

    stages = [
        ServiceThread(config),
        Running(spout),
        Running(Bolt(config, topics.split, f"b-{topics.prefix}", fail_all)),
    ]
    reader = OutcomeReader(config, [SPOUT])
    producer = Producer(config.client())
    try:
        [replayed] = _produce(config, topics.sentences, [b"replayed"])
        origin = f"{topics.sentences}/0/999"  # dead-lettered after this copy's nack
        producer.produce(config.replay_topic(SPOUT), b"copy", partition=0, headers=[(ORIGIN, origin.encode())])
        assert producer.flush(30) == 0
        copy = f"{config.replay_topic(SPOUT)}/0/0"
        reader.wait_for([replayed, copy], timeout_s=60)
        deadline = time.monotonic() + 30  # the spout reads the outcomes too, maybe after the test's reader
        while len(told) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(told) == sorted([(replayed, "FAILED"), (origin, "FAILED")])
        rows = [(REPLAYED, 0, replayed, 0), (DEAD_LETTERED, 0, copy, 0)]
        producer.produce(config.outcome_topic(SPOUT), encode_outcome_rows(SPOUT, rows), key=b"replay", partition=0)
        assert producer.flush(30) == 0
        while len(told) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # nothing more comes
    finally:
        _stop(stages)
        reader.close()
    assert told[2:] == [(origin, DEAD_LETTERED)]


@pytest.mark.parametrize("rebalancing", ["cooperative-sticky", "group.protocol=consumer"])
def test_a_partition_taken_away_while_the_spout_is_paused_is_read_when_it_comes_back(
    config: ServiceConfig, topics: Topics, rebalancing: str
) -> None:
    """librdkafka keeps a partition's pause across a revoke and a later assignment. A spout paused at max_pending
    loses a partition to a second member, its trees finish (it resumes what it still owns), and the partition comes
    back when the member leaves: it must be read again, not stay paused for good."""
    if rebalancing == "cooperative-sticky":
        config = replace(config, kafka={**config.kafka, "partition.assignment.strategy": "cooperative-sticky"})
    else:
        config = replace(config, kafka={"group.protocol": "consumer"})
    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", max_pending=4)
    ids = _produce(config, topics.sentences, list(sentences(40, seed=9)))
    outcomes = Producer(config.client())
    started: set[str] = set()

    def step(spout: Spout, times: int, *, ack: bool) -> None:
        """Step the spout; with ``ack``, decide every pending tree at once (an acker stands in for the bolts)."""
        for _ in range(times):
            spout.step(0.1)
            started.update(spout.pending)
            if ack and spout.pending:
                rows = [("ACK", anchor, msg_id, 1) for msg_id, anchor in spout.pending.items()]
                outcomes.produce(config.outcome_topic(SPOUT), encode_outcome_rows(SPOUT, rows))
                outcomes.flush(10)

    def owned(spout: Spout) -> int:  # partitions of the source topic (the spout reads its replay topic's too)
        return sum(tp.topic == topics.sentences for tp in spout.consumer.assignment())

    spout = Spout(config, settings)  # nothing acks yet: it stops at max_pending, both partitions paused
    step(spout, 30, ack=False)
    assert len(spout.pending) == 4 and spout.counters["pauses"] == 1
    other = Consumer(config.stream_consumer(**{"group.id": settings.consumer_group}))
    other.subscribe([topics.sentences])
    for _ in range(100):  # the other member takes a source partition; the spout keeps the rest, paused
        step(spout, 1, ack=False)
        other.poll(0.1)
        if other.assignment() and owned(spout) < 2:
            break
    # The other member may take both (a sticky assignor balances the spout's replay partitions against them).
    assert other.assignment() and owned(spout) < 2
    step(spout, 20, ack=True)  # its trees finish: it resumes, and reads its remaining partition to the end
    assert spout.counters["resumes"] >= 1  # (and maybe paused again, at max_pending, and resumed)
    other.close()  # the partition comes back to the spout
    step(spout, 150, ack=True)
    assert owned(spout) == 2
    assert started == set(ids)  # every record read, those of the partition that went away and came back too
    spout.close()


def test_invalid_or_unreadable_anchor_headers_are_processed_as_unanchored(
    config: ServiceConfig, topics: Topics
) -> None:
    seen: list[bytes] = []
    bolt = Bolt(config, topics.split, f"bolt-{topics.prefix}", lambda m, c: seen.append(m.value or b""))
    producer = Producer(config.client())
    producer.produce(topics.split, b"garbage header", headers=[(HEADER, b"\x01\x02\x03")])
    producer.produce(topics.split, b"zero anchor", headers=[(HEADER, bytes(16))])
    producer.produce(topics.split, b"no header")
    producer.flush(30)
    # A header name that is not UTF-8 (a C or Go producer's): the Python client cannot read any of its headers.
    produce_with_header_name(config.client(), topics.split, 0, name=b"\xff\xfe", value=b"unreadable headers")
    for _ in range(100):
        bolt.step(0.1)
        if len(seen) == 4:
            break
    bolt.close()
    assert sorted(seen) == [b"garbage header", b"no header", b"unreadable headers", b"zero anchor"]
    assert bolt.counters["invalid_anchor_headers"] == 3 and bolt.counters["unanchored_inputs"] == 4
    assert bolt.counters["unreadable_headers"] == 1


def test_a_bolt_held_behind_a_transaction_left_open_says_where_and_reads_on_once_it_ends(
    config: ServiceConfig, topics: Topics, caplog: pytest.LogCaptureFixture
) -> None:
    """A transaction left open on a bolt's input holds its reads at the offset where it begins: the records after
    it wait, and the bolt's lag, counted to that offset, says nothing. The bolt's consumer now says so from
    librdkafka's statistics, naming the partition and the offset, once it is held longer than
    ``open_transaction_warn_s``; and says when its reads move on, once the transaction is aborted."""
    config = replace(config, open_transaction_warn_s=2.0, kafka={**config.kafka, "statistics.interval.ms": "250"})
    seen: list[bytes] = []
    bolt = Bolt(config, topics.split, f"held-{topics.prefix}", lambda m, c: seen.append(m.value or b""))
    producer = Producer(config.client())
    producer.produce(topics.split, b"before", partition=1)
    assert producer.flush(30) == 0
    stuck = Producer(config.client(**{"transactional.id": f"stuck-{topics.prefix}", "transaction.timeout.ms": 600_000}))
    stuck.init_transactions(30)
    stuck.begin_transaction()
    stuck.produce(topics.split, b"in the open transaction", partition=1)  # offset 1
    assert stuck.flush(30) == 0
    producer.produce(topics.split, b"after", partition=1)  # offset 2: committed, and behind the open transaction
    assert producer.flush(30) == 0
    caplog.set_level(logging.INFO, "acker.kafka.held_reads")

    def said(text: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "acker.kafka.held_reads" and text in r.getMessage()]

    try:
        deadline = time.monotonic() + 60
        while not said("have stood at offset") and time.monotonic() < deadline:
            bolt.step(0.1)
        assert seen == [b"before"]
        [held] = said("have stood at offset")
        assert held.startswith(f"held-{topics.prefix}: its reads of {topics.split} [1] have stood at offset 1 for ")
        assert "the log goes on to offset 3" in held
        assert isinstance(bolt.consumer, WatchedConsumer) and bolt.consumer.reads_held == 1  # its stage metric's
        stuck.abort_transaction(30)
        deadline = time.monotonic() + 60
        while not (said("move on") and b"after" in seen) and time.monotonic() < deadline:
            bolt.step(0.1)
        [moved] = said("move on")
        assert re.fullmatch(rf"held-{topics.prefix}: its reads of {re.escape(topics.split)} \[1\] move on past "
                            r"offset 1, where a transaction held them about \d+ s", moved)  # fmt: skip
        assert seen == [b"before", b"after"] and bolt.consumer.reads_held == 0
    finally:
        bolt.close()


def test_the_join_example_runs_and_gives_each_record_its_fate(bootstrap: str) -> None:
    # The join fails o3 at 80 % of the timeout, 1 s before its tree may expire: room for a loaded machine.
    outcomes = join_example.run(bootstrap, timeout_s=5.0)
    by_row = {msg_id.split(".", 1)[1]: outcome for msg_id, outcome in outcomes.items()}
    assert by_row == {
        "orders/0/0": "ACK",  # o1, paid in full
        "orders/0/1": "FAILED",  # o2, underpaid: the check bolt fails the joined message, hence both trees
        "orders/0/2": "FAILED",  # o3, never paid: failed by the join's tick once held hold_s, before its timeout
        "payments/0/0": "ACK",
        "payments/0/1": "FAILED",
    }


def test_a_join_fails_the_sides_it_holds_from_a_partition_a_rebalance_takes_away(config: ServiceConfig) -> None:
    """A second join process takes one of the two input partitions, then the first stops: the sides the first held
    are nacked ``failed`` at once, those of the moved partition at the rebalance and the others as it stops, where
    they waited for partners that go to the new owner until their trees timed out."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: none can come within the test
    topics = Topics(prefix=f"move-{uuid.uuid4().hex[:8]}")
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(topics.sentences, 1), TopicSpec(topics.split, 2)])

    def order_side(record: Any, emitter: Any) -> None:
        order = json.loads(record.value())["order"].encode()
        emitter.emit(topics.split, record.value(), key=order, headers=[(join_example.SIDE, b"order")])

    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"),
                  order_side)  # fmt: skip
    group, hold_s = f"join-{topics.prefix}", 0.8 * config.timeout_s
    first_join, second_join = join_example.join_bolt("paid", hold_s), join_example.join_bolt("paid", hold_s)
    first = Running(Bolt(config, topics.split, group, first_join, basic=False, on_revoke=first_join.revoked))
    stages: list[Running] = [ServiceThread(config), Running(spout), first]
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = _produce(config, topics.sentences, [json.dumps({"order": f"o{i}"}).encode() for i in range(12)])
        deadline = time.monotonic() + 60
        while sum(map(len, first_join.waiting.values())) < 12 and time.monotonic() < deadline:
            time.sleep(0.1)
        held = {m.partition for copies in first_join.waiting.values() for m in copies}
        assert sum(map(len, first_join.waiting.values())) == 12 and held == {0, 1}
        stages.append(
            Running(Bolt(config, topics.split, group, second_join, basic=False, on_revoke=second_join.revoked))
        )
        deadline = time.monotonic() + 60
        while not reader.seen and time.monotonic() < deadline:  # one partition's sides, failed at the rebalance
            reader.poll(0.2)
        reader.poll(2)
        moved = set(reader.seen)
        assert 0 < len(moved) < 12 and sum(map(len, first_join.waiting.values())) == 12 - len(moved)
        first.stop()
        stages.remove(first)
        reader.wait_for(ids, timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in ids} == {m: ["FAILED"] for m in ids}
    assert {reader.reasons[m][0] for m in ids} == {"join: its input partition went to another join process"}
    assert not second_join.waiting  # every side was read once, by the first: it committed them as it let them go


class BulkWriter:
    """docs/write-your-own-bolt.md's bulk writer (section 2), writing to a list: rows held until ``size`` of them or
    until the oldest has waited ``wait_s``, then written at once and their inputs acked."""

    def __init__(self, table: list[bytes | None], size: int = 100, wait_s: float = 0.5) -> None:
        self.table, self.size, self.wait_s = table, size, wait_s
        self.held: list[BoltInput] = []
        self.since = 0.0

    def __call__(self, message: BoltInput, collector: Collector) -> None:
        if not self.held:
            self.since = time.monotonic()
        self.held.append(message)
        if len(self.held) >= self.size:
            self.flush(collector)

    def tick(self, collector: Collector) -> None:
        if self.held and time.monotonic() - self.since >= self.wait_s:
            self.flush(collector)

    def revoked(self, _partitions: set[tuple[str, int]], collector: Collector) -> None:
        self.flush(collector)

    def flush(self, collector: Collector) -> None:
        held, self.held = self.held, []
        self.table.extend(m.value for m in held)
        for message in held:
            collector.ack(message)


def test_an_explicit_bolt_settles_what_it_holds_at_its_ticks_while_no_input_comes(
    config: ServiceConfig, topics: Topics
) -> None:
    """Three rows, and a bulk writer that writes 100 at once: without a tick they would wait for 97 more, until
    their trees timed out (minutes here). Ticked, they are written within ``wait_s`` of the first, and acked."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: none can come within the test
    table: list[bytes | None] = []
    writer = BulkWriter(table)
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))
    bolt = Bolt(config, topics.split, f"writer-{topics.prefix}", writer, basic=False, on_tick=writer.tick,
                on_revoke=writer.revoked, tick_s=0.1)  # fmt: skip
    stages = [ServiceThread(config), Running(spout), Running(bolt)]
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = _produce(config, topics.sentences, [b"row 1", b"row 2", b"row 3"])
        reader.wait_for(ids, timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in ids} == {m: ["ACK"] for m in ids}
    assert len(table) == 3 and set(table) == {b"row 1", b"row 2", b"row 3"} and bolt.counters["acked"] == 3
    assert bolt.process_count == 3 and bolt.process_s >= writer.wait_s  # held until the tick's write, the first 0.5 s


def test_a_data_message_the_broker_refuses_fails_its_tree_at_once(config: ServiceConfig, topics: Topics) -> None:
    """The topic ``small`` takes messages of at most 1 KB: the broker refuses a larger one for good, whether the
    spout emits it or a bolt (as a child). Its tree is failed (a `Fail` to the acker, nacked ``FAILED``) long
    before its timeout, and both go on."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: a FAILED cannot be one
    small = f"{topics.prefix}.small"
    create_topics(config.client(), [TopicSpec(small, 1, config={"max.message.bytes": "1024"})])

    def spout_emit(record: Any, emitter: Any) -> None:  # "direct…" to `small` at once, the rest through the relay
        emitter.emit(small if record.value().startswith(b"direct") else topics.split, record.value())

    def relay(message: BoltInput, collector: Collector) -> None:
        collector.emit(small, message.value)

    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, small, group=f"spout-{topics.prefix}"), spout_emit)
    relay_bolt = Bolt(config, topics.split, f"relay-{topics.prefix}", relay)
    stages = _relaying(config, spout, relay_bolt, small, topics.prefix)
    reader = OutcomeReader(config, [SPOUT])
    try:
        # One at a time: the broker refuses a whole batch, and small messages batched with a large one would fail too.
        [direct] = _produce(config, topics.sentences, [b"direct" + b"x" * 4096])
        reader.wait_for([direct], timeout_s=60)
        [relayed] = _produce(config, topics.sentences, [b"relayed" + b"x" * 4096])
        reader.wait_for([relayed], timeout_s=60)
        fine = _produce(config, topics.sentences, [b"direct and small", b"relayed and small"])
        reader.wait_for(fine, timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in (direct, relayed)} == {direct: ["FAILED"], relayed: ["FAILED"]}
    assert {m: reader.seen[m] for m in fine} == {m: ["ACK"] for m in fine}
    for failed in (direct, relayed):  # the reason travels with the fail, through the acker, to the outcome
        [reason] = reader.reasons[failed]
        assert reason.startswith(f"a message to {small} could not be delivered: ") and "too large" in reason.lower()
    assert spout.counters["data_delivery_failures"] == 1 and relay_bolt.counters["child_delivery_failures"] == 1


def test_spouts_and_bolts_fit_their_batches_to_the_topics_they_write(
    config: ServiceConfig, topics: Topics, caplog: pytest.LogCaptureFixture
) -> None:
    """Topics that take record batches of 20 KB, and many records of 500 bytes written to them: batched by the
    producers up to their 1 MB, they were refused whole (`MSG_SIZE_TOO_LARGE`), every tree in a batch failed, at
    every replay. The spout fits its output topic; a bolt the topics named in ``output_topics``; a topic written
    and not named is said in an error line, once."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: a FAILED cannot be one
    small_in, small_out = f"{topics.prefix}.small-in", f"{topics.prefix}.small-out"
    create_topics(
        config.client(), [TopicSpec(t, 1, config={"max.message.bytes": "20000"}) for t in (small_in, small_out)]
    )

    def fan_out(message: BoltInput, collector: Collector) -> None:
        for i in range(5):
            collector.emit(small_out, (message.value or b"") + bytes([i]))

    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, small_in, group=f"spout-{topics.prefix}"))
    relay = Bolt(config, small_in, f"relay-{topics.prefix}", fan_out, output_topics=[small_out])
    stages = _relaying(config, spout, relay, small_out, topics.prefix)
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = _produce(config, topics.sentences, [b"%03d" % i + b"x" * 500 for i in range(300)])
        reader.wait_for(ids, timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in ids} == {m: ["ACK"] for m in ids}
    assert spout.counters["data_delivery_failures"] == 0 and relay.counters["child_delivery_failures"] == 0
    assert relay.counters["unfitted_output_topics"] == 0

    unnamed = Bolt(config, topics.words, f"unnamed-{topics.prefix}", _ignore)
    other = Spout(config, SpoutSettings(f"{SPOUT}-other", topics.sentences, topics.split, group=f"o-{topics.prefix}"))
    try:
        with caplog.at_level(logging.ERROR, logger="acker.client"):
            for _ in range(2):
                unnamed._collector.emit(small_out, b"unanchored")
                Emitter(other, None, "src/0/0").emit(small_out, b"untracked")
    finally:
        unnamed.close()
        other.close()
    assert unnamed.counters["unfitted_output_topics"] == other.counters["unfitted_output_topics"] == 1
    said = [r.getMessage() for r in caplog.records if "output_topics" in r.getMessage()]
    assert len(said) == 2 and all(f"{small_out}, which takes record batches of 20000 bytes at most" in s for s in said)


def test_a_count_the_sink_cannot_write_fails_its_sentence(config: ServiceConfig) -> None:
    """The count bolt wrote its counts unanchored and acked the word at once: a count the broker refused was lost
    with its sentence acked (and its source offset committed past). Written with `Collector.write`, the word's tree
    waits for the count's delivery report, and a refused count fails it."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: a FAILED cannot be one
    topics = Topics(prefix=f"wc-{uuid.uuid4().hex[:8]}")
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(t, 2) for t in (topics.sentences, topics.split, topics.words)])
    create_topics(config.client(), [TopicSpec(topics.counts, 1, config={"max.message.bytes": "1024"})])
    counts: Counter[bytes] = Counter()
    count_bolt = Bolt(config, topics.words, f"count-{topics.prefix}", count_function(topics, counts), basic=False)
    stages = [
        ServiceThread(config),
        Running(Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))),
        Running(Bolt(config, topics.split, f"split-{topics.prefix}", split_function(topics))),
        Running(count_bolt),
    ]
    reader = OutcomeReader(config, [SPOUT])
    long_word = b"w" * 2048  # its count's key: a record the counts topic refuses
    try:
        [refused] = _produce(config, topics.sentences, [b"a " + long_word])
        reader.wait_for([refused], timeout_s=60)
        written = _produce(config, topics.sentences, [b"a short one", b"and another"])
        reader.wait_for(written, timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    assert reader.seen[refused] == ["FAILED"]
    assert {m: reader.seen[m] for m in written} == {m: ["ACK"] for m in written}
    # The count of "a" may share the refused batch (the broker refuses a batch whole): 1 or 2 failures.
    assert count_bolt.counters["child_delivery_failures"] in {1, 2} and count_bolt.counters["written"] == 7
    assert counts[long_word] == 1  # counted, not written: the sentence is replayed (at-least-once)


def test_counts_held_when_the_count_bolts_partitions_are_lost_are_dropped_and_fail_their_sentence(
    config: ServiceConfig,
) -> None:
    """Held through a broker's outage, a count process's counts landed after its words partitions had gone to another
    process (its session expired), which had read the last counts and gone on from them: a word's last count went
    below the times it was counted. Dropped when the partitions are lost, they fail their sentence's tree (replayed,
    counted again); the next counts go through a new producer, written and acked."""
    # Records wait 2 s in each producer before they go, 8 s in the count bolt's: the counts are still held when the
    # partitions are lost (with 2 s there too, a host starved for the seconds between the two counts' steps had sent
    # the first).
    config = replace(config, timeout_s=120.0, kafka={**config.kafka, "linger.ms": "2000"})
    topics = Topics(prefix=f"wc-{uuid.uuid4().hex[:8]}")
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(t, 1) for t in (topics.sentences, topics.split, topics.words,
                                                               topics.counts)])  # fmt: skip
    counts: Counter[bytes] = Counter()
    holding = replace(config, kafka={**config.kafka, "linger.ms": "8000"})
    counting = count_bolt(holding, count_function(topics, counts), f"count-{topics.prefix}")
    stages = [
        ServiceThread(config),
        Running(Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))),
        Running(Bolt(config, topics.split, f"split-{topics.prefix}", split_function(topics))),
    ]
    reader = OutcomeReader(config, [SPOUT])
    try:
        [dropped] = _produce(config, topics.sentences, [b"a b"])
        deadline = time.monotonic() + 60
        while counting.counters["written"] < 2:  # the counts handed to the sink producer, which holds them
            assert time.monotonic() < deadline, "the count bolt wrote nothing"
            counting.step(0.05)
        held = counting._sink
        # As librdkafka calls it when the session expired:
        counting._on_lost(counting.consumer, counting.consumer.assignment())
        assert counting.counters["unwritten_dropped"] == 2 and counting._sink is None
        [written] = _produce(config, topics.sentences, [b"c"])
        deadline = time.monotonic() + 60
        while not {dropped, written} <= reader.seen.keys():
            assert time.monotonic() < deadline, f"outcomes: {reader.seen}"
            counting.step(0.05)
            reader.poll(0.05)
    finally:
        counting.close()
        _stop(stages)
        reader.close()
    assert reader.seen[dropped] == ["FAILED"] and reader.seen[written] == ["ACK"]
    assert counting._sink is not held
    assert [m.value() for m in read_all(config.client(), topics.counts)] == [b"1"]  # c's: a's and b's never landed


def test_a_spout_or_bolt_function_that_raises_fails_the_tree_and_the_stage_goes_on(
    config: ServiceConfig, topics: Topics
) -> None:
    """A spout's emit function raising before or after it emitted, and a basic bolt's child the client does not take
    (a value that is not bytes): each record's tree is nacked ``FAILED`` at once, and both stages read on. The spout's
    ``on_outcome`` (Storm's ack and fail) is told each record's outcome, whoever decided it."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: a FAILED cannot be one
    told: dict[str, list[str]] = {}

    def spout_emit(record: Any, emitter: Any) -> None:
        if record.value() == b"raise before":
            raise ValueError("cannot parse this record")
        emitter.emit(topics.split, record.value())
        if record.value() == b"raise after":
            raise ValueError("cannot parse the rest of this record")

    def bolt(message: BoltInput, collector: Any) -> None:
        if message.value == b"wrong child":
            collector.emit(topics.words, 42)  # a number where bytes belong: refused at the emit

    spout = Spout(
        config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"), spout_emit,
        on_outcome=lambda msg_id, outcome: told.setdefault(msg_id, []).append(outcome),
    )  # fmt: skip
    basic = Bolt(config, topics.split, f"bolt-{topics.prefix}", bolt)
    stages = [ServiceThread(config), Running(spout), Running(basic)]
    reader = OutcomeReader(config, [SPOUT])
    try:
        values = [b"raise before", b"raise after", b"wrong child", b"fine", b"also"]
        ids = [_produce(config, topics.sentences, [value])[0] for value in values]  # each value's own id
        # A record whose header name is not UTF-8: it could only be forwarded without its headers.
        name = b"\xff\xfe"
        ids.append(produce_with_header_name(config.client(), topics.sentences, 0, name=name, value=b"unreadable"))
        ids += _produce(config, topics.sentences, [b"after it"])
        reader.wait_for(ids, timeout_s=60)
        deadline = time.monotonic() + 30  # the spout reads the outcomes too, maybe after the test's reader
        while spout.pending and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        _stop(stages)
        reader.close()
    assert [reader.seen[m] for m in ids] == [["FAILED"], ["FAILED"], ["FAILED"], ["ACK"], ["ACK"], ["FAILED"], ["ACK"]]
    assert told == {m: reader.seen[m] for m in ids}
    assert spout.counters["emit_errors"] == 3 and basic.counters["errors"] == 1
    # Each FAILED says why (`acker.fail_reasons`): the stage and its exception, for the record's dead letter.
    assert [reader.reasons.get(m) for m in ids] == [
        [f"spout {SPOUT}: ValueError: cannot parse this record"],
        [f"spout {SPOUT}: ValueError: cannot parse the rest of this record"],
        [f"bolt bolt-{topics.prefix}: TypeError: a child's value must be bytes, str or None, not int"],
        None,
        None,
        [f"spout {SPOUT}: UnreadableHeadersError: a header name is not UTF-8: its headers cannot be read"],
        None,
    ]
    assert spout.counters["unreadable_headers"] == 1


def test_a_pipelines_stages_serve_their_counts_for_prometheus(config: ServiceConfig, topics: Topics) -> None:
    """A spout and two threads of one bolt group in one process, scraped over HTTP: what each counted (the bolt
    group's threads summed), the trouble counts at 0 from the start, and the spout's pending trees and pause."""
    [port] = free_ports(1)

    def split(message: BoltInput, collector: Any) -> None:
        if message.value == b"raise":
            raise ValueError("not a sentence")
        for word in (message.value or b"").split():
            collector.write(topics.words, word)

    metrics = serve_stages(port)
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))
    bolts = [Bolt(config, topics.split, f"split-{topics.prefix}", split) for _ in range(2)]
    metrics.add(spout, *bolts)
    scrape = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(scrape, timeout=10) as before:
        assert (
            f'acker_stage_events_total{{event="emit_errors",kind="spout",stage="{SPOUT}"}} 0.0'
            in before.read().decode()
        )
    stages = [ServiceThread(config), Running(spout), *map(Running, bolts)]
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = _produce(config, topics.sentences, [b"a b c", b"raise", b"d e"])
        reader.wait_for(ids, timeout_s=60)
        deadline = time.monotonic() + 30  # the spout reads the outcomes too, maybe after the test's reader
        while spout.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        with urllib.request.urlopen(scrape, timeout=10) as response:
            families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    finally:
        _stop(stages)
        reader.close()
        metrics.close()  # else its server thread serves on, holding the stages, to the end of the session
    events = {(s.labels["kind"], s.labels["stage"], s.labels["event"]): s.value
              for s in families["acker_stage_events"].samples if s.name.endswith("_total")}  # fmt: skip
    spout_events = {e: v for (kind, _, e), v in events.items() if kind == "spout"}
    bolt_events = {
        e: v for (kind, stage, e), v in events.items() if kind == "bolt" and stage == f"split-{topics.prefix}"
    }
    assert {e: spout_events[e] for e in ("read", "emitted", "acked", "nacked_failed", "emit_errors")} == {
        "read": 3, "emitted": 3, "acked": 2, "nacked_failed": 1, "emit_errors": 0}  # fmt: skip
    assert {e: bolt_events[e] for e in ("processed", "written", "acked", "failed", "errors", "emitted")} == {
        "processed": 3, "written": 5, "acked": 2, "failed": 1, "errors": 1, "emitted": 0}  # fmt: skip
    assert {e for (kind, _, e) in events if kind == "spout"} >= set(SPOUT_EVENTS)
    assert {e for (kind, _, e) in events if kind == "bolt"} >= set(BOLT_EVENTS)
    gauges = {f: {s.labels["stage"]: s.value for s in families[f].samples}
              for f in ("acker_spout_pending_trees", "acker_spout_paused")}  # fmt: skip
    assert gauges == {"acker_spout_pending_trees": {SPOUT: 0}, "acker_spout_paused": {SPOUT: 0}}
    latency = {
        s.name: s.value for s in families["acker_spout_complete_latency_seconds"].samples if "le" not in s.labels
    }
    assert latency["acker_spout_complete_latency_seconds_count"] == 2  # the trees it saw acked
    assert 0 < latency["acker_spout_complete_latency_seconds_sum"] < 60
    executed = {(s.name.rsplit("_", 1)[1], s.labels["stage"], s.labels["thread"]): s.value
                for s in families["acker_bolt_execute_seconds"].samples}  # fmt: skip
    split_group = f"split-{topics.prefix}"
    assert {thread for (_, stage, thread) in executed if stage == split_group} == {"0", "1"}  # each bolt its own
    assert executed[("count", split_group, "0")] + executed[("count", split_group, "1")] == 3  # the inputs processed
    assert 0 < executed[("sum", split_group, "0")] + executed[("sum", split_group, "1")] < 60
    processed = {(s.name.rsplit("_", 1)[1], s.labels["stage"], s.labels["thread"]): s.value
                 for s in families["acker_bolt_process_seconds"].samples}  # fmt: skip
    assert processed[("count", split_group, "0")] + processed[("count", split_group, "1")] == 2  # the inputs acked
    assert 0 < processed[("sum", split_group, "0")] + processed[("sum", split_group, "1")] < 60


def test_an_untracked_spout_fails_a_record_it_cannot_take_rather_than_drop_it(
    config: ServiceConfig, topics: Topics
) -> None:
    """Untracked mode is at-most-once downstream, but a record the emit function raises on, or whose headers cannot
    be read, is bad input: the spout publishes its ``FAILED`` itself (no acker runs), so that the replay job replays
    it and then dead-letters it, where it was dropped with an ``ACK``."""

    def spout_emit(record: Any, emitter: Any) -> None:
        if record.value() == b"raise":
            raise ValueError("cannot parse this record")
        emitter.emit(topics.split, record.value())

    settings = SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}", tracked=False)
    spout = Spout(config, settings, spout_emit)
    stages = [Running(spout)]
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = [_produce(config, topics.sentences, [value])[0] for value in (b"fine", b"raise")]
        ids.append(produce_with_header_name(config.client(), topics.sentences, 0, name=b"\xff", value=b"unreadable"))
        ids += _produce(config, topics.sentences, [b"after it"])
        reader.wait_for(ids, timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    assert [reader.seen[m] for m in ids] == [["ACK"], ["FAILED"], ["FAILED"], ["ACK"]]
    assert spout.counters["emit_errors"] == 2 and spout.counters["unreadable_headers"] == 1
    assert reader.reasons[ids[1]] == [f"spout {SPOUT}: ValueError: cannot parse this record"]  # said by the spout
    assert len(reader.reasons[ids[2]]) == 1 and set(reader.reasons) == {ids[1], ids[2]}


def test_a_replay_is_held_until_its_not_before_unless_that_is_implausibly_far(
    config: ServiceConfig, topics: Topics
) -> None:
    """Copies in the spout's replay topic: one due in 8 s is held until then (its partition paused); one whose
    not-before is 10 days away (no backoff is that long: a corrupt header) is read at once and counted. Both replay
    records of another source topic (another pipeline's spout of the same name): each counted once, the held one
    when it is processed, not also when it was held. A third, of another source too, was re-driven here (``acker
    dlq redrive --spout``): counted apart, not taken for their kind."""
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))
    replays = config.replay_topic(SPOUT)
    read_at: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 60
        while not any(tp.topic == replays for tp in spout.replays.assignment()):  # joined: the hold starts now
            assert time.monotonic() < deadline, "the spout was never assigned its replay topic"
            spout.step(0.1)
        now_ms = int(time.time() * 1000)
        producer = Producer(config.client())
        for partition, not_before, origin, redriven in (
            (0, now_ms + 8_000, "other.sentences/0/2", []),
            (1, now_ms + 10 * 86_400_000, "other.sentences/0/3", []),
            (1, now_ms, "other.sentences/0/4", [(REDRIVEN, b"other.replay.dlq/0/7")]),
        ):
            headers: HeaderList = [(NOT_BEFORE, str(not_before).encode()), (ORIGIN, origin.encode()), *redriven]
            producer.produce(replays, b"copy", partition=partition, headers=headers)
        assert producer.flush(30) == 0
        while len(read_at) < 3 and time.monotonic() < deadline:
            spout.step(0.1)
            read_at.update({m: time.time() for m in spout.pending if m not in read_at})
    finally:
        spout.close()
    assert read_at.keys() == {f"{replays}/0/0", f"{replays}/1/0", f"{replays}/1/1"}
    assert read_at[f"{replays}/0/0"] * 1000 >= now_ms + 8_000 > read_at[f"{replays}/1/0"] * 1000
    assert spout.counters["held"] == 1 and spout.counters["implausible_not_before"] == 1
    assert spout.counters["foreign_replays"] == 2 and spout.counters["redriven_from_other_sources"] == 1


def test_an_init_the_broker_refuses_is_tried_again_then_its_tree_failed_by_the_spout(
    config: ServiceConfig, topics: Topics
) -> None:
    """The acker topic takes no record of this size: each init is sent `INIT_ATTEMPTS` times, then the spout
    publishes the tree's ``FAILED`` outcome itself (no acker ever saw it). Nothing is dropped silently."""
    admin = AdminClient(config.client())
    resource = ConfigResource("topic", config.acker_topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "16", incremental_operation=AlterConfigOpType.SET)
    ])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(30)
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))
    stages = [Running(spout)]
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = _produce(config, topics.sentences, [b"one", b"two", b"three"])
        reader.wait_for(ids, timeout_s=60)
        deadline = time.monotonic() + 30
        while spout.pending and time.monotonic() < deadline:  # the spout reads its own outcomes too
            time.sleep(0.1)
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in ids} == {m: ["FAILED"] for m in ids}
    assert spout.counters["init_delivery_failures"] == 3 and not spout.pending
    assert spout.acker.failed_messages == 3 * INIT_ATTEMPTS  # each init refused that many times


def test_a_fail_the_broker_refuses_for_good_is_sent_again_a_few_times_then_given_up(
    config: ServiceConfig, topics: Topics
) -> None:
    """The acker topic takes no record at all, and the spout's emit function emits a tuple and raises: the tree's
    init and its fail are refused. The init is tried `INIT_ATTEMPTS` times, then the spout fails the tree itself; the
    fail is sent again `RESENDS` times, then given up, instead of for as long as the process lives (a few times a
    second, a warning each)."""
    admin = AdminClient(config.client())
    resource = ConfigResource("topic", config.acker_topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "16", incremental_operation=AlterConfigOpType.SET)
    ])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(30)

    def emit_then_raise(record: Message, emitter: Emitter) -> None:
        emitter.emit(topics.split, record.value())
        raise ValueError("a bad record")

    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"),
                  emit_then_raise)  # fmt: skip
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = _produce(config, topics.sentences, [b"one"])
        deadline = time.monotonic() + 60
        while not all(m in reader.seen for m in ids):
            assert time.monotonic() < deadline, "the tree was never failed"
            spout.step(0.1)
            reader.poll(0.1)
        settled = time.monotonic() + 5  # every send again is made within a few polls of the last refusal
        while time.monotonic() < settled:
            spout.step(0.1)
        refused = spout.acker.failed_messages
        settled = time.monotonic() + 3
        while time.monotonic() < settled:
            spout.step(0.1)
    finally:
        spout.close()
        reader.close()
    assert reader.seen[ids[0]] == ["FAILED"] and not spout.pending
    assert spout.acker.failed_messages == refused <= INIT_ATTEMPTS + 1 + RESENDS  # then nothing more was sent


def _ignore(_message: BoltInput, _collector: Collector) -> None:
    """A bolt that processes its input by doing nothing (basic mode: acked when it returns)."""


def _relaying(config: ServiceConfig, spout: Spout, relay: Bolt, out: str, prefix: str) -> list[Running]:
    """An acker service, ``spout``, ``relay`` and a bolt that takes what ``relay`` writes to ``out``, running."""
    sink = Bolt(config, out, f"sink-{prefix}", _ignore)
    return [ServiceThread(config), Running(spout), Running(relay), Running(sink)]


def test_stages_and_the_service_follow_partitions_added_to_the_acker_topic(
    config: ServiceConfig, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partitions added to the live acker topic move anchors. The spouts and bolts kept the count they started with,
    and once the service had taken the new partitions, every tree was nacked (its messages dead-lettered as
    ``wrong-partition``) until they were restarted. Now each looks the count up (every 5 s; every second here).
    Partitions added to the outcome topic too are written to."""
    # Every second rather than every 5 s; the producers keep librdkafka's 5 minutes (each lookup updates theirs).
    monkeypatch.setattr("acker.service.PARTITIONS_CHECK_S", 1.0)
    service = ServiceThread(config)
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))
    bolt = Bolt(config, topics.split, f"sink-{topics.prefix}", _ignore)
    spout.acker.watch_partitions(partition_lookup(spout.producer, config.acker_topic), every_s=1.0)
    bolt.acker.watch_partitions(partition_lookup(bolt.producer, config.acker_topic), every_s=1.0)
    stages = [service, Running(spout), Running(bolt)]
    reader = OutcomeReader(config, [SPOUT])
    try:
        before = _produce(config, topics.sentences, [f"before {i}".encode() for i in range(10)])
        reader.wait_for(before)
        grown = config.partitions + 3
        admin = AdminClient(config.producer())
        # The outcome topic first: the service took the new acker partitions' outcomes to new partitions its
        # producer did not know yet, which refused them at once, and the service stopped.
        outcomes = config.outcome_topic(SPOUT)
        admin.create_partitions([NewPartitions(outcomes, grown)])[outcomes].result(30)
        admin.create_partitions([NewPartitions(config.acker_topic, grown)])[config.acker_topic].result(30)
        deadline = time.monotonic() + 60
        while (spout.acker.partitions, bolt.acker.partitions, service.service._partition_count) != (grown,) * 3:
            assert time.monotonic() < deadline, "the new partition count was not taken up"
            time.sleep(0.2)
        after = _produce(config, topics.sentences, [f"after {i}".encode() for i in range(40)])
        reader.wait_for(after)
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in before + after} == {m: ["ACK"] for m in before + after}


def test_inits_above_the_high_water_mark_are_nacked_overload_and_stay_decided(config: ServiceConfig) -> None:
    """One acker partition with a high-water mark of 3 and nothing acking yet: of 10 trees, 3 are tracked and 7
    nacked ``OVERLOAD`` at once. When a bolt then acks every message, the 3 are acked and the acks of the 7 find
    tombstones (``late``): no tree gets a second outcome."""
    config = replace(config, partitions=1, high_water=3)
    topics = Topics(prefix=f"hw-{uuid.uuid4().hex[:8]}")
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(t, 2) for t in (topics.sentences, topics.split)])
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))
    service = ServiceThread(config)
    stages: list[Running] = [service, Running(spout)]
    reader = OutcomeReader(config, [SPOUT])
    try:
        ids = _produce(config, topics.sentences, [b"record %d" % i for i in range(10)])
        deadline = time.monotonic() + 60
        while len(reader.seen) < 7 and time.monotonic() < deadline:
            reader.poll(0.2)
        overloaded = set(reader.seen)
        assert len(overloaded) == 7 and service.service.snapshot().pending == {0: 3}
        stages.append(Running(Bolt(config, topics.split, f"sink-{topics.prefix}", _ignore)))
        reader.wait_for(ids, timeout_s=60)
        deadline = time.monotonic() + 30
        while service.service.snapshot().counters.late < 7 and time.monotonic() < deadline:
            time.sleep(0.1)
        reader.poll(1.0)  # anything the late acks might still have decided
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in ids} == {m: ["OVERLOAD" if m in overloaded else "ACK"] for m in ids}
    counters = service.service.snapshot().counters
    assert (counters.nacked_overload, counters.acked, counters.late) == (7, 3, 7)
    assert (spout.counters["nacked_overload"], spout.counters["acked"]) == (7, 3) and not spout.pending


def test_a_bolt_that_stops_commits_only_what_it_processed(config: ServiceConfig) -> None:
    """A bolt's function acks an input twice (a `ProtocolError`: the bolt stops) in the middle of a batch. The bolt
    commits, as it closes, the offset after that input, not its position after the whole batch: its successor
    processes the rest, and every tree is acked, none left to time out."""
    config = replace(config, timeout_s=120.0)  # a TIMEOUT would take minutes: an ACK cannot be one
    topics = Topics(prefix=f"stop-{uuid.uuid4().hex[:8]}")
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(topics.sentences, 1), TopicSpec(topics.split, 1)])
    spout = Spout(config, SpoutSettings(SPOUT, topics.sentences, topics.split, group=f"spout-{topics.prefix}"))
    stages: list[Running] = [ServiceThread(config), Running(spout)]
    reader = OutcomeReader(config, [SPOUT])
    group = f"bolt-{topics.prefix}"
    try:
        ids = _produce(config, topics.sentences, [b"record %d" % i for i in range(20)])
        deadline = time.monotonic() + 60
        while spout.counters["emitted"] < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert spout.counters["emitted"] == 20

        def acks_offset_2_twice(message: BoltInput, collector: Collector) -> None:
            collector.ack(message)
            if message.offset == 2:
                collector.ack(message)

        first = Running(Bolt(config, topics.split, group, acks_offset_2_twice, basic=False))
        first.thread.join(60)
        assert isinstance(first.error, ProtocolError) and not first.thread.is_alive()
        consumer = Consumer(config.client(**{"group.id": group}))
        try:
            assert consumer.committed([TopicPartition(topics.split, 0)], timeout=10)[0].offset == 3
        finally:
            consumer.close()
        stages.append(Running(Bolt(config, topics.split, group, _ignore)))
        reader.wait_for(ids, timeout_s=60)
    finally:
        _stop(stages)
        reader.close()
    assert {m: reader.seen[m] for m in ids} == {m: ["ACK"] for m in ids}


def test_wordcount_run_reads_only_the_sentences_it_writes(config: ServiceConfig) -> None:
    """No commit job moves the spout's watermark in `acker wordcount run`: a second run under the same prefix read
    again every sentence of the first, counted its words again, and waited behind a backlog that grew each run. Each
    run's spout now has a group of its own, whose watermark starts at the end of what the source holds."""
    prefix = f"wc-{uuid.uuid4().hex[:6]}"
    flags, env = to_argv(replace(config, metrics_port=0))
    argv = [sys.executable, "-m", "acker.cli", "wordcount", "run", "--prefix", prefix, *flags,
            "--split-processes", "1", "--count-processes", "1", "--max-wait-s", "90"]  # fmt: skip
    options: dict[str, Any] = {"env": {**os.environ, **env}, "capture_output": True, "text": True, "timeout": 240}
    runs = [subprocess.run([*argv, "--sentences", "30"], check=False, **options)]
    # A copy left in the replay topic by an earlier run's replay job (the prefix's pipeline may run one): a new group
    # read it from the start, and counted it with this run's sentences.
    producer = Producer(config.client())
    producer.produce(config.replay_topic(Topics(prefix).spout), b"an old sentence", partition=0)
    assert producer.flush(30) == 0
    runs.append(subprocess.run([*argv, "--sentences", "20"], check=False, **options))
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-2000:]
    assert runs[0].stdout.startswith("sentences 30: acked 30, failed 0, timed out 0")
    assert runs[1].stdout.startswith("sentences 20: acked 20, failed 0, timed out 0")
    reader = OutcomeReader(config, [Topics(prefix).spout])
    reader.poll(3.0)
    reader.close()
    assert len(reader.seen) == 50 and all(len(seen) == 1 for seen in reader.seen.values())  # none read twice
    assert f"30 records written to {Topics(prefix).sentences} before this run are not read" in runs[1].stderr
    assert (
        f"1 records written to {config.replay_topic(Topics(prefix).spout)} before this run are not read"
        in runs[1].stderr
    )
    # The prefix's own spout group is not touched: a pipeline of that prefix may be running, its watermark behind.
    shared = Topics(prefix).spout_group + ".acked"
    marks = lookups(config.client()).committed(shared, [(Topics(prefix).sentences, p) for p in range(4)])
    assert all(mark < 0 for mark in marks.values())  # none


def test_a_spout_fenced_while_it_waits_at_max_pending_stops(config: ServiceConfig) -> None:
    """A static member (`group.instance.id`) fenced by its successor is told so once, by one fatal event. A spout
    paused at max_pending threw that event away: it went on stepping, reading nothing, for good, and its supervisor
    never started it again."""
    config = replace(config, kafka={**config.kafka, "group.instance.id": f"sp-{uuid.uuid4().hex[:6]}"})
    source = f"fenced-{uuid.uuid4().hex[:8]}"
    create_acker_topics(config, ["s"])
    create_topics(config.client(), [TopicSpec(source, 1), TopicSpec(f"{source}.out", 1)])
    producer = Producer(config.client())
    for i in range(10):
        producer.produce(source, b"record %d" % i)
    assert producer.flush(30) == 0
    settings = SpoutSettings("s", source, f"{source}.out", group=f"g-{source}", max_pending=1)
    spout = Spout(config, settings)  # no acker runs: one tree pending, and it waits
    successor: Consumer | None = None
    try:
        deadline = time.monotonic() + 60
        while not spout._paused:
            assert time.monotonic() < deadline, "the spout never reached max_pending"
            spout.step(0.1)
        successor = Consumer(config.stream_consumer({"partition.assignment.strategy": "cooperative-sticky"},
                                                    **{"group.id": settings.consumer_group}))  # fmt: skip
        successor.subscribe([source, config.replay_topic("s")])
        deadline = time.monotonic() + 60
        while not successor.assignment():
            assert time.monotonic() < deadline, "the successor was never given the partitions"
            successor.poll(0.1)
        with pytest.raises(KafkaClientError, match="fenced"):
            for _ in range(300):
                spout.step(0.1)
    finally:
        if successor is not None:
            successor.close()
        with contextlib.suppress(Exception):  # its consumer is fenced: closing it may complain
            spout.close()
