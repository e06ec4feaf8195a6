"""The acker service against a real Kafka broker: equivalence with offline replay, crash recovery, rebalances."""

from __future__ import annotations

import concurrent.futures
import gc
import io
import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions  # type: ignore[attr-defined]
from prometheus_client import generate_latest

from acker import service as service_module
from acker.columnar import BlockTracker, MessageBlock
from acker.config import ServiceConfig
from acker.core import TICK, Ack, Init, Message, ResetTimeout, Tracker, TrackerConfig
from acker.core.ids import IdGenerator
from acker.core.messages import Fail, Tick, TreeMessage
from acker.core.tuple_tree import InputTuple, SpoutTree, anchored
from acker.export import export_records
from acker.kafka import clients as clients_module
from acker.kafka import decided as decided_module
from acker.kafka.clients import (
    KafkaClientError,
    TopicSpec,
    answering,
    create_topics,
    log_bounds,
    partition_count,
    produce,
)
from acker.kafka.decided import read_decided
from acker.kafka.held_reads import WatchedConsumer
from acker.kafka.provision import Cluster, kafka_cluster
from acker.metrics import ServiceCollector, serve
from acker.replay import replay
from acker.service import AckerService
from acker.status import group_lag, read_status, status_key
from acker.wire import decode_batch, encode_outcome_rows, encode_outcomes
from acker.workload import WorkloadSpec, generate
from tests.integration.helpers import (
    OutcomeReader,
    ServiceProcess,
    ServiceThread,
    acker_client,
    create_acker_topics,
    read_partition,
    send,
)

SPOUT = "sentences"
_NAMES = {"ack": "ACK", "failed": "FAILED", "timeout": "TIMEOUT"}


def _tree_messages(msg_id: str, ids: IdGenerator, words: int = 4) -> tuple[int, list[TreeMessage], list[TreeMessage]]:
    """A word-count tree: (anchor, [init, split ack], [word acks])."""
    tree = SpoutTree(SPOUT, msg_id, ids)
    sentence = InputTuple(tree.emit(), ids)
    children = [InputTuple(anchored([sentence]), ids) for _ in range(words)]
    head: list[TreeMessage] = [tree.init(), *sentence.ack()]
    tail: list[TreeMessage] = [m for child in children for m in child.ack()]
    return tree.anchor, head, tail


def _replayed(config: ServiceConfig) -> dict[str, str]:
    """Outcomes of `acker replay` (the reference tracker) on every partition of the acker topic as it is now."""
    outcomes: dict[str, str] = {}
    for partition in range(config.partitions):
        lines = io.StringIO()
        records = [(offset, value) for offset, _ts, value in read_partition(config, config.acker_topic, partition)]
        export_records(records, lines, io.StringIO())
        out = io.StringIO()
        assert replay(Tracker(TrackerConfig(config.buckets)), lines.getvalue().splitlines(), out, io.StringIO()) == 0
        for line in out.getvalue().splitlines():
            obj = json.loads(line)
            outcomes.setdefault(obj["msg_id"], "ACK" if obj["outcome"] == "ack" else obj["reason"].upper())
    return outcomes


@pytest.mark.parametrize("threads", [1, 2])
def test_outcomes_through_kafka_equal_offline_replay(
    config: ServiceConfig, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tick every second: lost acks time out within 2-3 s. With 2 threads, every batch holding records of several
    # partitions is decided in parallel, however small. The messages are sent before the service starts: read as they
    # came, on a busy machine (CI) every batch held one partition's records, and the threads were never used.
    config = replace(config, timeout_s=2.0, tracker_threads=threads)
    monkeypatch.setattr("acker.service._PARALLEL_BYTES", 0)
    create_acker_topics(config)
    workload = generate(WorkloadSpec(trees=3000, fail_rate=0.02, drop_rate=0.02, tick_every=10**9, spout=SPOUT))
    reader = OutcomeReader(config, [SPOUT])
    send(config, [m for m in workload.messages if not isinstance(m, Tick)])
    service = ServiceThread(config)
    try:
        reader.wait_for(workload.expected, timeout_s=90)
    except AssertionError:
        snapshot = service.service.snapshot()
        raise AssertionError(
            f"service state: {snapshot.counters}, pending {snapshot.pending}; "
            f"reader: {len(reader.seen)} seen, assignment {reader.consumer.assignment()}"
        ) from None
    finally:
        service.stop()
    assert (service.service._pool is not None) == (threads > 1)
    reader.poll(1.0)
    reader.close()
    got = {msg_id: seen[0] for msg_id, seen in reader.seen.items()}
    assert all(len(set(seen)) == 1 for seen in reader.seen.values())  # duplicates, if any, agree
    assert got == {m: _NAMES[e] for m, e in workload.expected.items()}
    assert _replayed(config) == got


def test_acker_run_with_librdkafkas_debug_lines_serves_its_assignment(config: ServiceConfig, tmp_path: Path) -> None:
    """librdkafka's ``debug`` setting with ``--log-level DEBUG`` (how the README says to see its lines): the
    assignment callback looked the acker topic up on the consumer whose callback it was, and the process aborted
    (SIGABRT, confluent-kafka's per-call state cleared under the running consume()) at every assignment."""
    create_acker_topics(config)
    ids = IdGenerator(7)
    anchor, value = ids(), ids()
    reader = OutcomeReader(config, [SPOUT])
    debug = ("--kafka", "debug=cgrp,topic,metadata", "--log-level", "DEBUG")
    service = ServiceProcess(config, str(tmp_path / "acker.log"), *debug)
    try:
        send(config, [Init(anchor, SPOUT, "one", value), Ack(anchor, value)])
        reader.wait_for(["one"], timeout_s=60)
        assert service.process.poll() is None, (tmp_path / "acker.log").read_text()[-2000:]
    finally:
        code = service.stop()
        reader.close()
    assert reader.seen["one"] == ["ACK"]
    assert code == 0


def test_kill_9_with_pending_trees_loses_nothing_and_nacks_nothing_early(config: ServiceConfig, tmp_path: Path) -> None:
    timeout = 30.0  # room for a kill and a second process's start: at 20 s the test was once too slow in CI (20.3 s)
    config = replace(config, timeout_s=timeout, commit_interval_s=0.2)
    create_acker_topics(config)
    ids = IdGenerator(21)
    complete = {f"src/0/{i}": _tree_messages(f"src/0/{i}", ids) for i in range(300)}
    lossy = {f"src/1/{i}": _tree_messages(f"src/1/{i}", ids) for i in range(20)}
    canary = {f"src/2/{i}": _tree_messages(f"src/2/{i}", ids) for i in range(20)}
    reader = OutcomeReader(config, [SPOUT])
    first = ServiceProcess(config, str(tmp_path / "first.log"))
    second: ServiceProcess | None = None
    try:
        started = time.monotonic()
        send(config, [m for _, head, _ in [*complete.values(), *lossy.values()] for m in head])
        send(config, [m for _, head, tail in canary.values() for m in (*head, *tail)])
        reader.wait_for(canary, timeout_s=60)  # the first instance is serving: the pending trees are in its state
        reader.poll(1.0)  # several commit intervals (recovery offsets are committed), reading what was decided
        first.kill()
        assert not {m for m in complete if m in reader.seen}  # nothing completed before its last acks
        second = ServiceProcess(config, str(tmp_path / "second.log"))
        send(config, [m for _, _, tail in complete.values() for m in tail])
        send(config, [m for _, _, tail in lossy.values() for m in tail[1:]])  # one word ack of each is lost
        reader.wait_for(complete, timeout_s=60)
        assert all(set(reader.seen[m]) == {"ACK"} for m in complete), "a pending tree did not survive the crash"
        assert time.monotonic() - started < timeout, "the test was too slow to prove anything about early expiry"
        reader.wait_for(lossy, timeout_s=60)
        expired_after = time.monotonic() - started
        assert all(set(reader.seen[m]) == {"TIMEOUT"} for m in lossy)
        assert expired_after >= timeout * 0.95, f"lossy trees expired after {expired_after:.1f}s < T={timeout}s"
    finally:
        first.kill()
        if second is not None:
            assert second.stop() == 0
        reader.close()


def _committed(config: ServiceConfig, partition: int) -> int:
    lags = group_lag(config)
    assert lags is not None
    committed, _end = lags[partition]
    return -1 if committed is None else committed


def _committed_past(config: ServiceConfig, offset: int, alive: int) -> int:
    """Partition 0's committed offset once it has passed ``offset`` (within 30 s), tree ``alive`` kept alive."""
    deadline = time.monotonic() + 30
    while (committed := _committed(config, 0)) <= offset:
        assert time.monotonic() < deadline, f"the committed offset never passed {offset}"
        send(config, [ResetTimeout(alive)])
        time.sleep(0.3)
    return committed


def _second_canary(config: ServiceConfig, ids: IdGenerator, reader: OutcomeReader, alive: int) -> None:
    """A tree that times out (message id canary-2), sent now, and waited for (within 120 s), tree ``alive`` kept
    alive meanwhile; then the outcomes that follow it for 0.5 s."""
    send(config, [Init(ids(), SPOUT, "canary-2", 1)])
    deadline = time.monotonic() + 120
    while "canary-2" not in reader.seen:
        assert time.monotonic() < deadline, "the new owner never decided the second canary"
        send(config, [ResetTimeout(alive)])
        reader.poll(0.3)
    reader.poll(0.5)


def test_a_tree_cut_in_two_by_the_committed_offset_gets_no_second_outcome_after_kill_9(
    config: ServiceConfig, tmp_path: Path
) -> None:
    """Tree T's ack comes before its init with ticks between them; tree O, opened in between and kept alive by
    resets, holds the committed offset after T's ack once T's tombstone is dropped. A new owner replays T's init
    without its ack: told what was decided (outcomes read back), it must not time T out."""
    config = replace(config, partitions=1, timeout_s=3.0, buckets=6)  # a tick every 0.6 s
    create_acker_topics(config)
    ids = IdGenerator(33)
    t, o, value = ids(), ids(), ids()
    reader = OutcomeReader(config, [SPOUT])
    first = ServiceProcess(config, str(tmp_path / "first.log"))
    second: ServiceProcess | None = None
    try:
        send(config, [Init(ids(), SPOUT, "canary", 1), Ack(ids(), 1)])  # wrong anchor: it times out, in 3-4 s
        reader.wait_for(["canary"], timeout_s=60)  # serving
        send(config, [Ack(t, value)])
        time.sleep(1.5)  # two ticks or more, and T's entry (opened by its ack) still alive
        send(config, [Init(o, SPOUT, "O", ids()), Init(t, SPOUT, "T", value)])
        reader.wait_for(["T"], timeout_s=10)
        ack_offset = next(off for off, _, v in read_partition(config, config.acker_topic, 0)
                          if t in decode_batch(v or b"").anchors.tolist())  # fmt: skip
        _committed_past(config, ack_offset, o)  # T's tombstone dropped, O holds the offset after T's ack
        first.kill()
        second = ServiceProcess(config, str(tmp_path / "second.log"))
        # A second canary, after T's init in the log: once the new owner has timed it out, it has replayed T's init
        # and ticked past the time T's init alone would have expired.
        _second_canary(config, ids, reader, o)
        assert reader.seen["canary-2"] == ["TIMEOUT"]
        assert reader.seen["T"] == ["ACK"], f"T's outcomes: {reader.seen['T']}"
        assert "O" not in reader.seen  # kept alive throughout
    finally:
        first.kill()
        if second is not None:
            assert second.stop() == 0
        reader.close()


def test_a_commit_planned_while_the_first_outcome_record_is_in_flight_still_names_its_topic(
    config: ServiceConfig,
) -> None:
    """The loop plans a commit in the step that produced a topic's first outcome record, before its delivery report
    names the record's partition: the metadata is taken when committing, so the next owner reads it back."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    ids = IdGenerator(7)
    anchor, value = ids(), ids()
    send(config, [Init(anchor, SPOUT, "T", value), Ack(anchor, value)])
    first = AckerService(config)
    acker = TopicPartition(config.acker_topic, 0)
    first._on_assign(first.consumer, [acker])
    feed = Consumer(config.client(**{"group.id": f"feed-{config.group}", "enable.auto.commit": False}))
    try:
        feed.assign([TopicPartition(config.acker_topic, 0, 0)])
        records: list[KafkaMessage] = []
        while not records:
            records = [r for r in feed.consume(10, timeout=1) if r.error() is None]
        first._handle(records)  # the step's order: produce the outcome, plan a commit, then serve delivery reports
        first._plan_commit()
        assert first.producer.flush(10) == 0
        first._commit_passed()
        _wait_committed(config, first)
    finally:
        feed.close()
        first.close()
    assert _next_owner_outcomes(config, [SPOUT], ids)["T"] == ["ACK"]  # read back: not published again


def _wait_committed(config: ServiceConfig, service: AckerService) -> None:
    deadline = time.monotonic() + 10
    while _committed(config, 0) < 0:
        assert time.monotonic() < deadline, "nothing committed"
        service.consumer.poll(0.1)


def _next_owner_outcomes(
    config: ServiceConfig, spouts: list[str], ids: IdGenerator, isolation: str = "read_committed"
) -> dict[str, list[str]]:
    """Every outcome of ``spouts``' topics once a next owner (as after a crash of the first) has decided a tree sent
    after everything else, so has read back and replayed all that came before."""
    reader = OutcomeReader(config, spouts, isolation)
    second = ServiceThread(config)
    try:
        after, after_value = ids(), ids()
        send(config, [Init(after, SPOUT, "after", after_value), Ack(after, after_value)])
        reader.wait_for(["after"], timeout_s=60)
        reader.poll(1.0)
    finally:
        second.stop()
        reader.close()
    return reader.seen


def test_a_topic_first_written_after_the_last_commit_is_read_back_after_a_crash(config: ServiceConfig) -> None:
    """The owner commits (its metadata names the one outcome topic it has written to), then decides a tree of another
    spout, delivers its outcome and crashes before its next commit. The new owner must find that outcome too: it
    reads back the topic named by the commit made before that topic's first record (`AckerService._cover`), and
    does not publish the tree again."""
    config = replace(config, partitions=1)
    create_acker_topics(config, spouts=(SPOUT, "other"))
    ids = IdGenerator(8)
    with _fed_owner(config) as (first, feed):
        _decide_one(config, first, feed, ids, spout=SPOUT, msg_id="T")
        first._plan_commit()
        first._commit_passed()
        _wait_committed(config, first)
        _decide_one(config, first, feed, ids, spout="other", msg_id="U")  # a topic the commit does not name; a crash
    seen = _next_owner_outcomes(config, [SPOUT, "other"], ids)
    assert seen["T"] == ["ACK"] and seen["U"] == ["ACK"]  # read back, both: not published again


@contextmanager
def _fed_owner(config: ServiceConfig) -> Iterator[tuple[AckerService, Consumer]]:
    """The owner of acker partition 0, not subscribed, and a consumer that reads the partition for it; closed after
    (a crash: closing a service that never subscribed commits nothing)."""
    owner = AckerService(config)
    owner._on_assign(owner.consumer, [TopicPartition(config.acker_topic, 0)])
    feed = Consumer(config.client(**{"group.id": f"feed-{config.group}", "enable.auto.commit": False}))
    try:
        feed.assign([TopicPartition(config.acker_topic, 0, 0)])
        yield owner, feed
    finally:
        feed.close()
        owner.close()


def _decide_one(
    config: ServiceConfig, owner: AckerService, feed: Consumer, ids: IdGenerator, *, spout: str, msg_id: str
) -> None:
    """``owner``, fed by ``feed`` (not subscribed), decides a tree of an init and its ack and delivers its outcome."""
    anchor, value = ids(), ids()
    send(config, [Init(anchor, spout, msg_id, value), Ack(anchor, value)])
    records: list[KafkaMessage] = []
    while not records:
        records = [r for r in feed.consume(10, timeout=1) if r.error() is None]
    owner._recover()
    owner._handle(records)
    assert owner.producer.flush(10) == 0


def _decided_then_crashed(config: ServiceConfig, ids: IdGenerator) -> None:
    """An owner decides T and publishes its ack (after a commit naming the outcome topic: `_cover`), then crashes."""
    with _fed_owner(config) as (first, feed):
        _decide_one(config, first, feed, ids, spout=SPOUT, msg_id="T")
        _wait_committed(config, first)


def _failing_reads(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[str]:
    """The first ``failures`` reads of outcome topics back fail (a leader moving, say); returns the topics read."""
    reads: list[str] = []
    real_read_to = clients_module.read_to

    def failing(consumer: Consumer, start: TopicPartition, *args: Any, **kwargs: Any) -> Iterator[KafkaMessage]:
        reads.append(start.topic)
        if len(reads) <= failures:
            raise KafkaClientError("read", KafkaError(KafkaError._TIMED_OUT))
        return real_read_to(consumer, start, *args, **kwargs)

    monkeypatch.setattr(decided_module, "read_to", failing)
    return reads


def test_a_read_back_that_fails_is_tried_again_before_the_partition_is_replayed(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next owner's first read of the outcome topic fails: it replayed the partition without it, and published
    T's outcome again (a tree the committed offset cuts in two could be decided otherwise: a record done replayed).
    The partition waits, paused, and its read-back is tried again."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    ids = IdGenerator(10)
    _decided_then_crashed(config, ids)
    reads = _failing_reads(monkeypatch, 1)
    assert _next_owner_outcomes(config, [SPOUT], ids)["T"] == ["ACK"]  # read back at the second try
    assert reads == [config.outcome_topic(SPOUT)] * 2


def test_a_partition_waiting_for_its_read_back_says_so_in_its_status(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its records wait, paused: without a word, its row in `acker status` read as an idle partition. Its lag, the
    records from its committed offset on, is in its status and its metrics (missing until the read-back was done)."""
    config = replace(config, partitions=1, status_interval_s=0.5)
    create_acker_topics(config)
    _decided_then_crashed(config, IdGenerator(12))
    _failing_reads(monkeypatch, 1_000)
    service = ServiceThread(config)
    try:
        deadline = time.monotonic() + 30
        while not (status := read_status(config, 5.0).get(0, {})).get("reading_back") or status["lag"] is None:
            assert time.monotonic() < deadline, f"no status said the partition is reading back, with its lag: {status}"
            time.sleep(0.5)
        lag = service.service.snapshot().lag
    finally:
        service.stop()
    assert status["lag"] > 0 and lag.get(0, 0) > 0
    assert status["read_at"] is None  # no record of the partition applied yet


def test_the_metrics_never_ask_the_consumer_from_their_thread(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call on the consumer's handle from another thread waits while the loop is inside ``consume``, where it
    nearly always is: a scrape asking it each partition's lag took up to 23 s (Prometheus gives up at 10). The
    metrics read the lags the loop's thread took at its last status interval."""
    callers: set[str] = set()

    class Watched(WatchedConsumer):
        def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> Any:
            callers.add(threading.current_thread().name)
            return super().get_watermark_offsets(*args, **kwargs)

    monkeypatch.setattr(service_module, "WatchedConsumer", Watched)
    config = replace(config, partitions=4, status_interval_s=0.2)
    create_acker_topics(config)
    service = ServiceThread(config)
    try:
        deadline = time.monotonic() + 30
        while len(lag := service.service.snapshot().lag) < 4:  # every partition owned, and a status round since
            assert time.monotonic() < deadline, f"no lag of every partition in the metrics: {lag}"
            time.sleep(0.1)
    finally:
        service.stop()
    assert set(lag) == set(range(4)) and all(n >= 0 for n in lag.values())
    assert callers and threading.current_thread().name not in callers


def test_the_metrics_count_the_acker_partitions_whose_reads_an_open_transaction_holds(config: ServiceConfig) -> None:
    """A transaction left open on the acker topic (a producer that writes acker messages in transactions died)
    holds the service's reads of that partition: the trees after it wait, and time out if it outlives their timeout.
    The service's log said so; its metrics said nothing (the stages' have ``acker_stage_reads_held``)."""
    config = replace(
        config, partitions=1, open_transaction_warn_s=2.0, kafka={**config.kafka, "statistics.interval.ms": "250"}
    )
    create_acker_topics(config)
    stuck = Producer(config.client(**{"transactional.id": f"stuck-{config.group}", "transaction.timeout.ms": 600_000}))
    stuck.init_transactions(30)
    stuck.begin_transaction()
    stuck.produce(config.acker_topic, b"in the open transaction", partition=0)
    assert stuck.flush(30) == 0
    ids = IdGenerator(13)
    _, head, tail = _tree_messages("behind", ids)
    send(config, [*head, *tail])  # after the open transaction: held with it
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    registry = serve(0).registry
    registry.register(ServiceCollector(service.service.snapshot))
    try:
        deadline = time.monotonic() + 60
        while service.service.snapshot().reads_held != 1:
            assert time.monotonic() < deadline, "the reads held were not counted"
            time.sleep(0.1)
        held = generate_latest(registry).decode()
        reader.poll(1.0)
        assert "behind" not in reader.seen
        stuck.abort_transaction(30)
        reader.wait_for(["behind"])
        deadline = time.monotonic() + 60
        while service.service.snapshot().reads_held != 0:
            assert time.monotonic() < deadline, "the reads were still counted held after the transaction ended"
            time.sleep(0.1)
        released = generate_latest(registry).decode()
    finally:
        service.stop()
        reader.close()
    assert "\nacker_reads_held 1.0\n" in held and "\nacker_reads_held 0.0\n" in released
    assert reader.seen["behind"] == ["ACK"]


def test_a_read_back_that_keeps_failing_is_given_up_and_the_partition_replayed(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `READ_BACK_PATIENCE_S` (none here) the partition is replayed without what could not be read, as it
    was at once before: T is decided again, and the partition does not wait for good."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    ids = IdGenerator(11)
    _decided_then_crashed(config, ids)
    reads = _failing_reads(monkeypatch, 1_000)
    monkeypatch.setattr(service_module, "READ_BACK_PATIENCE_S", 0.0)
    assert _next_owner_outcomes(config, [SPOUT], ids)["T"] == ["ACK", "ACK"]
    assert reads == [config.outcome_topic(SPOUT)] * 2  # the first try, and the last


def test_outcomes_published_after_a_transaction_left_open_on_the_outcome_topic_are_read_back(
    config: ServiceConfig,
) -> None:
    """The replay job writes its resolutions to the outcome topics in transactions. With one left open (its driver
    died mid-batch), a read_committed read-back ended where it began: T's ack, published after it, was not found,
    and the next owner decided T and published it again (or otherwise: a tree the committed offset cuts in two)."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    stuck = Producer(config.client(**{"transactional.id": f"stuck-{uuid.uuid4().hex}",
                                      "transaction.timeout.ms": 600_000}))  # fmt: skip
    stuck.init_transactions(30)
    stuck.begin_transaction()
    stuck.produce(config.outcome_topic(SPOUT), encode_outcome_rows(SPOUT, [("REPLAYED", 0, "x/0/0", 0)]), partition=0)
    assert stuck.flush(30) == 0
    ids = IdGenerator(13)
    try:
        _decided_then_crashed(config, ids)
        assert _next_owner_outcomes(config, [SPOUT], ids, "read_uncommitted")["T"] == ["ACK"]
    finally:
        stuck.abort_transaction(30)


def test_a_deleted_outcome_topic_is_passed_over_at_once_and_the_others_still_read_back(config: ServiceConfig) -> None:
    """Records of other acker partitions, and of another acker topic (decided past this partition's end), are passed
    over too: the new owner's log would otherwise start at them for good."""
    create_acker_topics(config)
    tracker = BlockTracker()
    decided = tracker.process(MessageBlock.from_messages([Init(7, SPOUT, "t/0/1", 3), Ack(7, 3)]), record_offset=4)
    producer = Producer(config.client())
    topic = config.outcome_topic(SPOUT)
    producer.produce(topic, encode_outcomes(SPOUT, decided, np.arange(1), acker_partition=2, acker_offset=4),
                     key=b"2", partition=1)  # fmt: skip
    producer.produce(topic, encode_outcomes(SPOUT, decided, np.arange(1), acker_partition=3, acker_offset=9),
                     key=b"3", partition=1)  # another acker partition's: passed over  # fmt: skip
    producer.produce(topic, encode_outcomes(SPOUT, decided, np.arange(1), acker_partition=2, acker_offset=10**6),
                     key=b"2", partition=1)  # decided past the partition's end: another acker topic's  # fmt: skip
    for _ in range(10):  # acker partition 2 ends at 10: its own records were decided before that
        producer.produce(config.acker_topic, b"an acker record", partition=2)
    assert producer.flush(10) == 0
    consumer = Consumer(config.client(**{"group.id": f"read-back-{config.group}", "enable.auto.commit": False}))
    try:
        began = time.monotonic()
        acker = TopicPartition(config.acker_topic, 2)
        gone = set[tuple[str, int | None]]()
        found = read_decided(consumer, acker, {f"{topic}.retired": (0, 5), topic: (1, 0)}, gone)
        assert time.monotonic() - began < 10  # not a wait for the missing topic's leader
        # Confirmed missing once a turn: the read-backs of the other partitions take it as gone without asking
        assert gone == {(f"{topic}.retired", None)}
        assert read_decided(consumer, acker, {f"{topic}.retired": (0, 5)}, gone).anchors.tolist() == []
    finally:
        consumer.close()
    assert (found.anchors.tolist(), found.until) == ([7], 4)
    assert found.log.starts(0) == {topic: (1, 0)}


def test_an_instance_given_no_new_partition_takes_the_grown_count_up_under_the_new_group_protocol(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under KIP-848 an instance whose assignment does not change gets no callback when partitions are added: it
    kept checking by the old count and dead-lettered rightly placed records as ``wrong-partition`` (their inits
    failed, the other trees in them timed out) until its assignment changed."""
    monkeypatch.setattr("acker.service.PARTITIONS_CHECK_S", 1.0)
    config = replace(config, partitions=2, kafka={"group.protocol": "consumer"})
    create_acker_topics(config)
    instances = [ServiceThread(replace(config, instance_id=name)) for name in ("a", "b")]
    reader = OutcomeReader(config, [SPOUT])
    try:
        deadline = time.monotonic() + 60
        while not all(instance.service._states for instance in instances):
            assert time.monotonic() < deadline, "the instances did not share the partitions"
            time.sleep(0.2)
        admin = AdminClient(config.producer())
        outcomes = config.outcome_topic(SPOUT)
        admin.create_partitions([NewPartitions(outcomes, 3)])[outcomes].result(30)
        admin.create_partitions([NewPartitions(config.acker_topic, 3)])[config.acker_topic].result(30)
        deadline = time.monotonic() + 60
        while sum(len(instance.service._states) for instance in instances) < 3:
            assert time.monotonic() < deadline, "the new partition was not taken"
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while [instance.service._partition_count for instance in instances] != [3, 3]:
            assert time.monotonic() < deadline, [instance.service._partition_count for instance in instances]
            time.sleep(0.2)
        ids = IdGenerator(11)
        grown = replace(config, partitions=3)
        trees = {f"src/0/{i}": _tree_messages(f"src/0/{i}", ids) for i in range(30)}
        send(grown, [m for _, head, tail in trees.values() for m in (*head, *tail)])
        reader.wait_for(list(trees))
    finally:
        for instance in instances:
            instance.stop()
        reader.close()
    assert {m: reader.seen[m] for m in trees} == {m: ["ACK"] for m in trees}
    assert not any(instance.service._dead_letters for instance in instances)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_instances_join_and_leave_under_load_without_losing_or_rushing_trees(
    config: ServiceConfig, protocol: str
) -> None:
    """Also with Kafka's new group protocol (KIP-848), where the broker assigns partitions incrementally and the
    session timeout is the broker's (the clients may not set it)."""
    config = replace(config, partitions=6, timeout_s=60.0)
    if protocol == "consumer":
        config = replace(config, kafka={"group.protocol": "consumer"})
    create_acker_topics(config)
    ids = IdGenerator(5)
    reader = OutcomeReader(config, [SPOUT])
    instances = [ServiceThread(replace(config, instance_id="a"))]
    trees: dict[str, tuple[int, list[TreeMessage], list[TreeMessage]]] = {}
    held = {f"held/0/{i}": _tree_messages(f"held/0/{i}", ids) for i in range(50)}
    send(config, [m for _, head, tail in held.values() for m in (*head, *tail[1:])])  # last word ack withheld
    stop_feeding = threading.Event()

    client = acker_client(config)

    def feed() -> None:
        n = 0
        backlog: list[list[TreeMessage]] = []
        while not stop_feeding.is_set():
            batch = {f"src/0/{n + i}": _tree_messages(f"src/0/{n + i}", ids) for i in range(100)}
            n += 100
            trees.update(batch)
            send(config, [m for _, head, _ in batch.values() for m in head], client)
            if backlog:  # the word acks of the previous batch: trees stay pending across the rebalances
                send(config, backlog.pop(), client)
            backlog.append([m for _, _, tail in batch.values() for m in tail])
            time.sleep(0.2)
        for tail in backlog:
            send(config, tail, client)

    def owned(instance: ServiceThread) -> int:
        return len(instance.service._states)

    def until(done: Callable[[], bool], what: str) -> None:  # each step under load, trees pending all along
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)
        time.sleep(1)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        until(lambda: owned(instances[0]) == 6, "a never owned every partition")
        instances.append(ServiceThread(replace(config, instance_id="b")))
        until(lambda: owned(instances[1]) > 0, "b joined but took no partition")
        instances.append(ServiceThread(replace(config, instance_id="c")))
        until(lambda: owned(instances[2]) > 0, "c joined but took no partition")
        instances.pop(0).stop()  # a leaves: its partitions move with their recovery offsets
        until(lambda: owned(instances[0]) + owned(instances[1]) == 6, "a's partitions did not move to b and c")
    finally:
        stop_feeding.set()
        feeder.join()
    try:
        reader.wait_for(trees, timeout_s=90)
        assert not {m for m in held if m in reader.seen}, "a tree was acked before its last ack was sent"
        send(config, [tail[0] for _, _, tail in held.values()])
        reader.wait_for(held, timeout_s=60)
    finally:
        for instance in instances:
            instance.stop()
        reader.close()
    wrong = {m: seen for m, seen in reader.seen.items() if set(seen) != {"ACK"}}
    assert not wrong, f"{len(wrong)} trees with a wrong outcome, e.g. {list(wrong.items())[:3]}"
    assert len(trees) > 1000


def test_init_messages_round_trip_through_the_client(config: ServiceConfig) -> None:
    """Client batching keeps every message: the records of the acker topic decode to exactly what was sent."""
    create_acker_topics(config)
    ids = IdGenerator(3)
    sent: list[Message] = [Init(ids(), SPOUT, f"src/0/{i}", ids()) for i in range(5000)]
    send(config, sent)  # type: ignore[arg-type]
    received = [
        m
        for p in range(config.partitions)
        for _, _, value in read_partition(config, config.acker_topic, p)
        for m in decode_batch(value or b"").to_messages()
    ]
    assert sorted(map(repr, received)) == sorted(map(repr, sent))
    assert TICK not in received


@pytest.fixture
def creating_cluster() -> Iterator[Cluster]:
    """A broker of its own that creates topics on first use (Kafka's default; the session's does not), also when the
    session's cluster is an existing one, as `sasl_client` starts its own."""
    with kafka_cluster(auto_create_topics=True) as running:
        yield running
        gc.collect()  # the clients of the test, before the broker stops under them


def _wait_for_status(config: ServiceConfig, partitions: int, timeout_s: float = 30.0) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while len(statuses := read_status(config, timeout_s=2)) < partitions and time.monotonic() < deadline:
        time.sleep(0.2)
    return statuses


def test_the_rates_a_new_owner_publishes_count_what_it_decided_before_its_first_status(
    config: ServiceConfig, tmp_path: Path
) -> None:
    """The backlog a new owner decides at its takeover was in its counters and not in its rates, when its first
    status with the partition came after it: `acker status` showed hundreds of trees acked at 0.4/s just after a
    failover. Here the owner is frozen (SIGSTOP) with a backlog behind it, and the new owner gets the partition when
    the frozen one's session times out, some time between two of its statuses."""
    config = replace(config, partitions=1, status_interval_s=3.0)
    create_acker_topics(config)
    frozen = ServiceProcess(config, str(tmp_path / "frozen.log"))
    service = None
    try:
        deadline = time.monotonic() + 60
        while not read_status(config, timeout_s=2):
            assert time.monotonic() < deadline, "the first instance did not take the partition"
            time.sleep(0.2)
        frozen.process.send_signal(signal.SIGSTOP)
        ids = IdGenerator(6)
        trees = [_tree_messages(f"src/0/{i}", ids) for i in range(300)]
        send(config, [m for _, head, tail in trees for m in (*head, *tail)])
        service = ServiceThread(replace(config, instance_id="new-owner"))
        deadline, status = time.monotonic() + 90, dict[str, Any]()
        while (
            status.get("instance") != "new-owner" or status["counters"]["acked"] != 300 or status["rate_window_s"] < 2
        ):
            assert time.monotonic() < deadline, status
            status = read_status(config, timeout_s=2).get(0, {})
            time.sleep(0.2)
    finally:
        if service is not None:
            service.stop()
        frozen.kill()
    assert status["rates"]["acked"] * status["rate_window_s"] == pytest.approx(300, rel=0.1)


@pytest.mark.parametrize("auto_create", [False, True])
def test_outcome_topics_are_created_with_the_acker_topics_partitions_unless_they_exist(
    config: ServiceConfig, auto_create: bool, request: pytest.FixtureRequest
) -> None:
    """A spout's outcome topic that does not exist is created before its first outcome, with the acker topic's
    partition count; one that exists is produced to as it is. The status topic, missing here, is created compacted
    at start: where topics are not created on first use, its records could not be delivered, and the flush on stop
    waited 30 s and then skipped the commit. Also on a broker that creates topics on first use, with the service's
    clients allowed to: its lookup must not create the outcome topic there (it would get the broker's default, 1)."""
    service_config = config
    if auto_create:
        creating: Cluster = request.getfixturevalue("creating_cluster")
        config = replace(config, bootstrap_servers=creating.bootstrap_servers)
        service_config = replace(config, kafka={**config.kafka, "allow.auto.create.topics": "true"})
    create_acker_topics(config, spouts=["made"])  # with config.partitions
    create_topics(config.client(), [TopicSpec(config.outcome_topic("kept"), 1)])
    ids = IdGenerator(5)
    trees = {spout: [Init(ids(), spout, f"src/0/{i}", ids()) for i in range(50)] for spout in ("made", "kept", "new")}
    service = ServiceThread(service_config)
    try:
        inits = [i for spout_inits in trees.values() for i in spout_inits]
        send(config, [*inits, *(Ack(i.anchor, i.value) for i in inits)])
        reader = OutcomeReader(config, trees)  # its subscription creates nothing: only the service's lookup is tested
        reader.wait_for([i.msg_id for i in inits])
        reader.close()
        assert len(_wait_for_status(config, config.partitions)) == config.partitions  # every partition's, delivered
    finally:
        service.stop()
    counts = {spout: partition_count(config.client(), config.outcome_topic(spout)) for spout in trees}
    assert counts == {"made": config.partitions, "kept": 1, "new": config.partitions}
    status = ConfigResource(ConfigResource.Type.TOPIC, config.status_topic)
    admin = AdminClient(config.client())  # alive until its answer came
    described = admin.describe_configs([status])[status].result(timeout=30)
    assert described["cleanup.policy"].value == "compact"


def test_asking_whether_kafka_answers_creates_no_topic_where_topics_are_created_on_first_use(
    config: ServiceConfig, creating_cluster: Cluster
) -> None:
    """`answering` asks about one topic, the one its caller needs, which may not exist yet (`acker topics create`
    asks before making it): on a broker that creates topics on first use, even with the settings allowing the
    clients to, asking must not make it (it would get the broker's default partition count)."""
    client = {**config.client(), "bootstrap.servers": creating_cluster.bootstrap_servers,
              "allow.auto.create.topics": "true"}  # fmt: skip
    answering(client, "asked-about-only")
    time.sleep(1.0)  # a topic created on first use shows in the metadata within a moment
    assert "asked-about-only" not in AdminClient(client).list_topics(timeout=10).topics


def _records(config: ServiceConfig, topic: str) -> list[KafkaMessage]:
    """Every record of partition 0 of ``topic`` up to its end now."""
    consumer = Consumer(config.client(**{"group.id": f"read-{time.time_ns()}", "enable.auto.commit": False}))
    try:
        end = log_bounds(consumer, TopicPartition(topic, 0))[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[KafkaMessage] = []
        deadline = time.monotonic() + 30
        while len(records) < end and time.monotonic() < deadline:
            records += [r for r in consumer.consume(500, timeout=0.5) if r.error() is None]
        return records
    finally:
        consumer.close()


def test_a_service_that_cannot_create_a_missing_topic_still_serves(config: ServiceConfig) -> None:
    """Topics the service cannot create (here: a replication factor the single broker cannot give; elsewhere: no
    right to create) do not stop it from starting: the status topic is missing, outcomes still flow, and it stops
    promptly. Once an operator creates the status topic, the service finds it and publishes status there."""
    create_acker_topics(config)
    config = replace(config, replication_factor=3)
    ids = IdGenerator(9)
    inits = [Init(ids(), SPOUT, f"src/0/{i}", ids()) for i in range(20)]
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        send(config, [*inits, *(Ack(i.anchor, i.value) for i in inits)])
        # A child that logs every librdkafka line at DEBUG, its TLS or SASL handshakes and its group's join on two
        # cores shared with three other tests' brokers and Spark: 60 s were once not enough for it in CI.
        reader.wait_for([i.msg_id for i in inits], timeout_s=120)
        assert service.thread.is_alive(), f"the service stopped: {service.error!r}"
        assert read_status(config, timeout_s=2) == {}
        created_ms = int(time.time() * 1000)
        create_topics(config.client(), [TopicSpec(config.status_topic, 1)])
        deadline = time.monotonic() + 30  # looked up again every 10 status intervals (5 s here)
        while not read_status(config, timeout_s=2) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert read_status(config, timeout_s=2), "the status topic was created, and no status came"
        # None was produced while it was missing (librdkafka would have held them, and delivered them now).
        records = _records(config, config.status_topic)
        stamps = [r.timestamp()[1] for r in records]
        assert stamps and min(stamps) >= created_ms
        # Keyed by group too: another group's statuses of the same partitions would not replace these in compaction.
        owned = {status_key(config.group, config.acker_topic, p) for p in range(config.partitions)}
        assert {r.key() for r in records} <= owned
    finally:
        reader.close()
        # While it had no status topic, it published no status: records waiting for a topic that never comes held
        # the flush on stop for its whole 30 s, and the commit was then skipped.
        service.stop(timeout_s=20)


def test_a_status_topic_deleted_under_the_service_stops_the_status_not_the_service(config: ServiceConfig) -> None:
    """Once the producer learnt the topic was gone, the next status record raised out of the loop and stopped every
    instance: the status is a courtesy to `acker status`. It is looked for again, as one missing at start is, and
    published again once an operator creates it."""
    fast = {"topic.metadata.refresh.interval.ms": "500", "topic.metadata.propagation.max.ms": "1000"}
    config = replace(config, kafka={**config.kafka, **fast})
    create_acker_topics(config)
    ids = IdGenerator(21)
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        deadline = time.monotonic() + 30
        while not read_status(config, timeout_s=2) and time.monotonic() < deadline:
            time.sleep(0.2)
        admin = AdminClient(config.client())
        admin.delete_topics([config.status_topic])[config.status_topic].result(30)
        time.sleep(4)  # the producer learns it is gone, and statuses are due meanwhile (every 0.5 s)
        inits = [Init(ids(), SPOUT, f"src/0/{i}", ids()) for i in range(10)]
        send(config, [*inits, *(Ack(i.anchor, i.value) for i in inits)])
        # A child that logs every librdkafka line at DEBUG, its TLS or SASL handshakes and its group's join on two
        # cores shared with three other tests' brokers and Spark: 60 s were once not enough for it in CI.
        reader.wait_for([i.msg_id for i in inits], timeout_s=120)
        assert service.thread.is_alive(), f"the service stopped: {service.error!r}"
        create_topics(config.client(), [TopicSpec(config.status_topic, 1)])
        deadline = time.monotonic() + 30  # looked for again every 10 status intervals
        while not read_status(config, timeout_s=2) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert read_status(config, timeout_s=2), "the status topic was created again, and no status came"
    finally:
        reader.close()
        service.stop(timeout_s=40)


def test_an_outcome_topic_deleted_under_the_service_stops_it_saying_so_and_a_restart_makes_it_again(
    config: ServiceConfig,
) -> None:
    """It stopped on "an outcome could not be delivered: _UNKNOWN_PARTITION", which said nothing of why; on another
    instance, by key, every outcome of the spout was dead-lettered until it was started again."""
    fast = {"topic.metadata.refresh.interval.ms": "500", "topic.metadata.propagation.max.ms": "1000"}
    config = replace(config, partitions=1, kafka={**config.kafka, **fast})
    create_acker_topics(config)
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        send(config, [Init(7, SPOUT, "src/0/1", 5), Ack(7, 5)])
        reader.wait_for(["src/0/1"])
    finally:
        reader.close()
    admin = AdminClient(config.client())
    admin.delete_topics([config.outcome_topic(SPOUT)])[config.outcome_topic(SPOUT)].result(30)
    time.sleep(2)
    send(config, [Init(9, SPOUT, "src/0/2", 3), Ack(9, 3)])
    service.thread.join(60)
    assert not service.thread.is_alive(), "the service went on, its outcomes going nowhere"
    assert "was deleted while the service ran" in str(service.error)
    again = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        reader.wait_for(["src/0/2"])  # decided again, into the topic made again
    finally:
        reader.close()
        again.stop()


def test_status_reads_a_long_status_topic_to_its_end_however_long_that_takes(config: ServiceConfig) -> None:
    """A status topic not compacted (auto-created by an earlier version) holds millions of records: the read stopped
    at its deadline wherever it was, and showed an old status as the newest, without a word."""
    create_topics(config.client(), [TopicSpec(config.status_topic, 1)])
    producer = Producer(config.client(**{"linger.ms": 50}))
    old = json.dumps({"topic": f"{config.acker_topic}.other", "partition": 0, "group": config.group}).encode()
    for _ in range(300_000):  # another acker topic's: read past, not shown
        produce(producer, config.status_topic, old, key=b"other")  # a poll may free no room on a busy machine
    newest = {"topic": config.acker_topic, "partition": 0, "group": config.group, "pending": 7}
    producer.produce(config.status_topic, json.dumps(newest).encode(), key=b"newest")
    assert producer.flush(60) == 0
    # A second without a record gives up; reading it all takes longer than that.
    assert read_status(config, timeout_s=1.0).get(0, {}).get("pending") == 7


def test_status_ends_its_read_at_a_partition_emptied_by_retention_while_another_is_written(
    config: ServiceConfig,
) -> None:
    """Its end reached by no record (retention deleted them all), partition 1 kept the read going for as long as any
    record came, and statuses come every few seconds: `acker status` never returned."""
    create_topics(config.client(), [TopicSpec(config.status_topic, 2)])
    producer = Producer(config.client())
    status = json.dumps({"topic": config.acker_topic, "partition": 0, "group": config.group, "pending": 1}).encode()
    for partition in (0, 1):
        producer.produce(config.status_topic, status, partition=partition)
    assert producer.flush(30) == 0
    admin = AdminClient(config.client())  # kept until its result: a client dropped at once never gives it
    [deleted] = admin.delete_records([TopicPartition(config.status_topic, 1, 1)]).values()
    deleted.result(30)
    stop = threading.Event()

    def publish() -> None:  # another instance's statuses, every 0.2 s
        while not stop.wait(0.2):
            producer.produce(config.status_topic, status, partition=0)
            producer.poll(0)

    writer = threading.Thread(target=publish, daemon=True)
    writer.start()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    read = pool.submit(read_status, config, 1.0)
    try:
        statuses = read.result(timeout=20)  # a read that does not end raises here, and ends once the writer stops
    finally:
        stop.set()
        writer.join()
        pool.shutdown()
        producer.flush(10)
    assert statuses.get(0, {}).get("pending") == 1


def test_a_service_started_before_its_acker_topic_says_so_and_serves_it_once_made(
    config: ServiceConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """It said nothing but the consumer's one error line, and looked idle."""
    ids = IdGenerator(11)
    inits = [Init(ids(), SPOUT, f"src/0/{i}", ids()) for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="acker.service"):
        service = ServiceThread(config)
        reader = OutcomeReader(config, [SPOUT])
        try:
            deadline = time.monotonic() + 30
            while f"acker topic {config.acker_topic} not found" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "`acker topics create` makes it" in caplog.text
            create_acker_topics(config)
            send(config, [*inits, *(Ack(i.anchor, i.value) for i in inits)])
            reader.wait_for([i.msg_id for i in inits], timeout_s=60)
        finally:
            reader.close()
            service.stop(timeout_s=20)
    assert dict(reader.seen) == {i.msg_id: ["ACK"] for i in inits}


@pytest.mark.parametrize(("secured", "secret"), [("sasl_client", "sasl.password"), ("ssl_client", "ssl.key.password")])
def test_acker_run_serves_a_secured_broker_and_never_writes_its_secret(
    config: ServiceConfig, secured: str, secret: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SASL and mutual TLS need no code: the settings pass through (to the child in the environment, not on its
    command line), and the password (SASL's, or the client key's) shows in none of its output, debug logging
    included."""
    client: dict[str, str] = request.getfixturevalue(secured)
    kafka = {k: v for k, v in client.items() if k != "bootstrap.servers"}
    config = replace(config, bootstrap_servers=client["bootstrap.servers"], kafka=kafka)
    create_acker_topics(config)
    ids = IdGenerator(13)
    inits = [Init(ids(), SPOUT, f"src/0/{i}", ids()) for i in range(30)]
    service = ServiceProcess(config, str(tmp_path / "acker.log"), "--log-level", "DEBUG")
    reader = OutcomeReader(config, [SPOUT])
    try:
        send(config, [*inits, *(Ack(i.anchor, i.value) for i in inits)])
        # A child that logs every librdkafka line at DEBUG, its TLS or SASL handshakes and its group's join on two
        # cores shared with three other tests' brokers and Spark: 60 s were once not enough for it in CI.
        reader.wait_for([i.msg_id for i in inits], timeout_s=120)
    finally:
        reader.close()
        assert service.stop() == 0
    assert {outcome for seen in reader.seen.values() for outcome in seen} == {"ACK"}
    output = (tmp_path / "acker.log").read_text()
    assert f"'{secret}': '***'" in output  # the configuration it logs at start, redacted
    assert client[secret] not in output


def test_a_wall_clock_stepped_forward_brings_no_tick_early(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An NTP step, a VM's clock mended: the next tick was due at once, and a tree opened just before the tick then
    timed out one interval after its opening, not `timeout_s` (a spurious replay). The schedule runs on a steady
    clock. Here T = 2 s, B = 3 (a tick a second): a tree opened just before a tick expires 2-3 s later."""
    config = replace(config, timeout_s=2.0, buckets=3, partitions=1)
    create_acker_topics(config)
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])

    def state_of() -> Any:
        return service.service._states.get(0)

    def next_tick(timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        state = state_of()
        seen = state.last_tick_offset if state is not None else None
        while (state := state_of()) is None or state.last_tick_offset == seen:
            assert time.monotonic() < deadline, "no tick"
            time.sleep(0.005)

    client = acker_client(config)
    try:
        send(config, [Init(76, SPOUT, "src/0/76", 5), Ack(76, 5)], client)  # the client connected beforehand
        next_tick()
        time.sleep(0.5)  # the tree opens a moment before the next tick
        sent = time.monotonic()
        send(config, [Init(77, SPOUT, "src/0/77", 5)], client)
        next_tick()
        real = time.time
        monkeypatch.setattr("acker.service.time.time", lambda: real() + 3600)  # an hour forward, now
        reader.wait_for(["src/0/77"], timeout_s=30)
        waited = time.monotonic() - sent
        assert reader.seen["src/0/77"] == ["TIMEOUT"] and waited >= config.timeout_s, f"timed out after {waited:.2f} s"
    finally:
        monkeypatch.undo()
        reader.close()
        service.stop()


def test_a_tick_that_expires_more_trees_than_one_record_holds_splits_its_outcomes(config: ServiceConfig) -> None:
    """150,000 trees of one partition expire on one or two ticks: their outcomes (~19 bytes each) in one record would
    pass the broker's 1 MB limit, and the service would stop on it, again at every restart. They go out in several."""
    config = replace(config, partitions=1, timeout_s=2.0)
    create_acker_topics(config)
    ids = IdGenerator(11)
    inits = [Init(ids(), SPOUT, f"src/0/{i}", ids()) for i in range(150_000)]  # never acked
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT])
    try:
        send(config, inits)
        reader.wait_for([init.msg_id for init in inits], timeout_s=90)
        assert service.thread.is_alive(), f"the service stopped: {service.error!r}"
    finally:
        service.stop()
    reader.close()
    assert {outcome for seen in reader.seen.values() for outcome in seen} == {"TIMEOUT"}
    records = read_partition(config, config.outcome_topic(SPOUT), 0)
    assert len(records) >= 150_000 // (1 << 14)


def test_a_consumer_sent_back_within_its_assignment_does_not_apply_records_twice(config: ServiceConfig) -> None:
    """After an offset reset under it (a log truncated below its position), the consumer hands over records the
    service applied already: applied twice, a tree's split ack would cancel itself and the tree would time out."""
    create_acker_topics(config)
    ids = IdGenerator(21)
    trees = [_tree_messages(f"src/0/{i}", ids) for i in range(200)]
    service = AckerService(config)
    service.consumer.subscribe([config.acker_topic], on_assign=service._on_assign, on_revoke=service._on_revoke)
    reader = OutcomeReader(config, [SPOUT])
    try:
        deadline = time.monotonic() + 60
        while len(service._states) < config.partitions:
            assert time.monotonic() < deadline, "the service did not get its partitions"
            service.step(0.1)
        send(config, [m for _, head, _ in trees for m in head])
        while sum(state.tracker.pending for state in service._states.values()) < len(trees):
            assert time.monotonic() < deadline, "the service did not read the heads of the trees"
            service.step(0.1)
        for partition in service._states:  # as an offset reset to the start of the log would
            service.consumer.seek(TopicPartition(config.acker_topic, partition, 0))
        send(config, [m for _, _, tail in trees for m in tail])
        msg_ids = [f"src/0/{i}" for i in range(200)]
        while not all(m in reader.seen for m in msg_ids):
            assert time.monotonic() < deadline, "not every tree was decided"
            service.step(0.1)
            reader.poll(0.05)
    finally:
        service.close()
    reader.close()
    assert {outcome for seen in reader.seen.values() for outcome in seen} == {"ACK"}
    assert sum(state.tracker.counters.collisions for state in service._states.values()) == 0


def test_status_is_read_from_the_first_record_there_is(config: ServiceConfig) -> None:
    """Retention or a deletion moves a status topic's first offset past 0: reading from 0, `acker status` was reset
    to the end and showed every partition as unknown."""
    create_topics(config.client(), [TopicSpec(config.status_topic, 1)])
    producer = Producer(config.producer())
    for partition in range(3):
        status = {"topic": config.acker_topic, "partition": partition, "pending": partition, "time": time.time()}
        producer.produce(config.status_topic, json.dumps(status).encode(), partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient(config.client())
    for future in admin.delete_records([TopicPartition(config.status_topic, 0, 1)]).values():
        future.result(30)
    assert sorted(read_status(config, timeout_s=10)) == [1, 2]


def test_a_fails_reason_reaches_its_outcome_also_when_the_fail_came_first_and_the_service_was_killed(
    config: ServiceConfig, tmp_path: Path
) -> None:
    """`acker.fail_reasons`: the reason is read beside the fail, kept until its tree is decided (a fail may come
    before the spout's init: other producers), and rebuilt from the log by a new owner after kill -9, as the tree is."""
    config = replace(config, timeout_s=60.0, commit_interval_s=0.2)
    create_acker_topics(config)
    ids = IdGenerator(41)
    early, canary, late = (SpoutTree(SPOUT, f"src/0/{i}", ids) for i in range(3))
    canary_input = InputTuple(canary.emit(), ids)
    early.emit()
    reader = OutcomeReader(config, [SPOUT])
    first = ServiceProcess(config, str(tmp_path / "first.log"))
    second: ServiceProcess | None = None
    try:
        client = acker_client(config)
        client.send(Fail(early.anchor), "bolt split: ValueError: the early one")
        client.send_all([canary.init(), *canary_input.fail()], "bolt split: KeyError: 'canary'")
        assert client.flush() == 0
        reader.wait_for([canary.msg_id], timeout_s=60)  # served: the early fail is in the first instance's state
        reader.poll(1.0)  # several commit intervals
        first.kill()
        second = ServiceProcess(config, str(tmp_path / "second.log"))
        late_fails = InputTuple(late.emit(), ids).fail()
        send(config, [early.init(), late.init(), *late_fails])  # the last one says nothing
        reader.wait_for([early.msg_id, late.msg_id], timeout_s=60)
    finally:
        first.kill()
        if second is not None:
            assert second.stop() == 0
        reader.close()
    assert {m: reader.seen[m] for m in (early.msg_id, late.msg_id)} == {
        early.msg_id: ["FAILED"],
        late.msg_id: ["FAILED"],
    }
    assert reader.reasons == {
        canary.msg_id: ["bolt split: KeyError: 'canary'"],
        early.msg_id: ["bolt split: ValueError: the early one"],
    }


def test_an_init_sent_again_while_its_tombstone_lived_gets_no_second_outcome_after_kill_9(
    config: ServiceConfig, tmp_path: Path
) -> None:
    """Tree T acked, its init sent again (its delivery reported failed) while T's tombstone lived: late. Tree O holds
    the committed offset past T's decision but before the copy once the tombstone is gone; the service is killed. The
    new owner, told only of the trees decided after the committed offset, opened a tree with the copy and timed it
    out (ACK, then TIMEOUT: a record replayed though done). It reads back the outcomes of `buckets` ticks before."""
    config = replace(config, partitions=1, timeout_s=3.0, buckets=6)  # a tick every 0.6 s, tombstones 3.6 s
    create_acker_topics(config)
    ids = IdGenerator(34)
    t, o, value = ids(), ids(), ids()
    reader = OutcomeReader(config, [SPOUT])
    first = ServiceProcess(config, str(tmp_path / "first.log"))
    second: ServiceProcess | None = None
    try:
        send(config, [Init(ids(), SPOUT, "canary", 1), Ack(ids(), 1)])
        reader.wait_for(["canary"], timeout_s=60)  # serving
        send(config, [Init(t, SPOUT, "T", value), Ack(t, value)])
        reader.wait_for(["T"], timeout_s=10)  # ACK
        time.sleep(1.0)  # a tick or more after T's decision
        send(config, [Init(o, SPOUT, "O", ids())])  # O: kept alive by resets, holds the committed offset
        send(config, [Init(t, SPOUT, "T", value)])  # T's init sent again (its delivery reported failed): late here
        records = list(read_partition(config, config.acker_topic, 0))
        t_offsets = [off for off, _, v in records if t in decode_batch(v or b"").anchors.tolist()]
        decided_at, copy_at = t_offsets[0], t_offsets[-1]
        committed = _committed_past(config, decided_at, o)  # T's tombstone dropped; O holds it before the copy
        assert committed <= copy_at
        first.kill()
        second = ServiceProcess(config, str(tmp_path / "second.log"))
        _second_canary(config, ids, reader, o)
        assert reader.seen["T"] == ["ACK"], f"T's outcomes: {reader.seen['T']}"
    finally:
        first.kill()
        if second is not None:
            assert second.stop() == 0
        reader.close()
