"""The service decides the partitions of a batch in parallel threads exactly as it does one after the other: the same
outcome and dead-letter records, in the same order, the same read positions and recovery offsets after every
batch. The Kafka clients are left unused (records are made here, produce is recorded): the broker-backed tests in
tests/integration run the service whole, with either number of threads."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import fields
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import acker.service
from acker.columnar import MessageBlock
from acker.config import ServiceConfig
from acker.core import Ack, Counters, Init, TrackerConfig
from acker.core.ids import partition_of
from acker.kafka.acker_client import PARTITIONS_CHECK_S
from acker.partition import PartitionState
from acker.service import AckerService
from acker.wire import encode_batch
from acker.workload import WorkloadSpec, generate
from tests.records import Consumed

PARTITIONS = 4
OUTCOME_PARTITIONS = 3
SPOUTS = ("s0", "s1")


def _batches() -> list[list[Consumed]]:
    """Every partition's word-count traffic in records of random sizes, a few of them garbage, dealt into batches
    that hold records of several partitions."""
    rng = random.Random(7)
    values: dict[int, list[bytes]] = {}
    for p in range(PARTITIONS):
        spec = WorkloadSpec(trees=1500, fail_rate=0.05, drop_rate=0.02, tick_every=2000, seed=p, spout=SPOUTS[p % 2])
        messages = generate(spec).messages
        values[p] = []
        start = 0
        while start < len(messages):
            end = start + rng.randint(1, 300)
            if rng.random() < 0.03:
                values[p].append(b"not an acker record")
            values[p].append(encode_batch(MessageBlock.from_messages(messages[start:end])))
            start = end
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    batches = []
    while any(values.values()):
        batch = []
        for p in range(PARTITIONS):
            taken = values[p][: rng.randint(0, 40)]
            values[p] = values[p][len(taken) :]
            for value in taken:
                batch.append(Consumed(p, offsets[p], value))
                offsets[p] += 1
        batches.append(batch)
    return batches


def _service(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[AckerService, list[tuple[str, bytes | None, Any, int | None]]]:
    """A service owning every partition, and what it produces (recorded, not sent)."""
    # log_level 0: the unused clients' failed connections to the default bootstrap address stay quiet.
    service = AckerService(ServiceConfig(tracker_threads=threads, metrics_port=0, kafka={"log_level": "0"}))
    sent: list[tuple[str, bytes | None, Any, int | None]] = []

    def produce(topic: str, value: bytes | None, **kw: Any) -> None:
        sent.append((topic, value, kw.get("headers"), kw.get("partition")))

    monkeypatch.setattr(service, "_produce", produce)
    service._known_topics = {service.config.outcome_topic(spout) for spout in SPOUTS}
    service._partition_counts = dict.fromkeys(service._known_topics, OUTCOME_PARTITIONS)  # no lookups
    for p in range(PARTITIONS):
        service._states[p] = PartitionState(p, service.config.tracker_config(), 1000, 0)
    return service, sent


def _serve(threads: int, batches: list[list[Consumed]], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    service, sent = _service(threads, monkeypatch)
    after_each = []
    try:
        for batch in batches:
            service._handle(batch)  # type: ignore[arg-type]
            after_each.append([(p, s.position, s.recovery_offset()) for p, s in sorted(service._states.items())])
        snapshot = service.snapshot()
        return sent, after_each, snapshot.counters, snapshot.pending, dict(service._dead_letters), service._pool
    finally:
        service.close()


def test_partitions_decided_in_parallel_publish_exactly_what_one_thread_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acker.service, "_PARALLEL_BYTES", 0)  # every batch of several partitions in parallel
    batches = _batches()
    one = _serve(1, batches, monkeypatch)
    two = _serve(2, batches, monkeypatch)
    assert one[5] is None and two[5] is not None  # the second really used its threads
    assert one[4] and sum(one[4].values()) > 0  # garbage was dead-lettered, in parallel too
    outcomes = [(headers, partition) for topic, _, headers, partition in one[0] if topic.startswith("acker.outcomes.")]
    assert len(outcomes) >= 8  # outcomes of every partition
    for headers, partition in outcomes:  # each acker partition's in one partition of its topic: p mod n
        decided_by = dict(headers)["acker.decided-by"].decode()
        assert partition == int(decided_by.split("/")[0]) % OUTCOME_PARTITIONS
    assert one[:5] == two[:5]


def test_a_scrapes_latency_histogram_is_not_changed_by_the_trees_decided_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop added each batch's latencies to the histogram a scrape was reading (its counts, then its sum): a
    scrape's ``_sum`` did not go with its ``_count``. A snapshot's histogram is now one no batch changes."""
    service, _ = _service(1, monkeypatch)
    batches = _batches()
    try:
        service._handle(batches[0])  # type: ignore[arg-type]
        taken = service.snapshot().latency
        counts, total_ms = taken.counts.copy(), taken.total_ms
        for batch in batches[1:]:
            service._handle(batch)  # type: ignore[arg-type]
        assert service.snapshot().latency.counts.sum() > counts.sum() > 0
        assert taken.counts.tolist() == counts.tolist() and taken.total_ms == total_ms
    finally:
        service.close()


def test_the_messages_counted_are_those_read_not_the_stand_ins_that_fail_a_rejected_records_trees() -> None:
    """A record with an init and a message of another partition's tree is rejected; its tree is failed by an
    init and a fail applied in its place, which were counted as acker messages read."""
    service = AckerService(ServiceConfig(metrics_port=0, kafka={"log_level": "0"}))
    service._partition_count = PARTITIONS
    mine = next(a for a in range(1, 1000) if partition_of(a, PARTITIONS) == 0)
    other = next(a for a in range(1, 1000) if partition_of(a, PARTITIONS) == 1)
    state = PartitionState(0, TrackerConfig(), 1000, 0)
    good = encode_batch(MessageBlock.from_messages([Init(mine + 1000 * PARTITIONS, "s0", "t/0/1", 3)]))
    bad = encode_batch(MessageBlock.from_messages([Init(mine, "s0", "t/0/2", 3), Ack(other, 5)]))
    decided = service._decide((state, [Consumed(0, 0, good), Consumed(0, 1, bad)]))  # type: ignore[list-item]
    assert [why.reason for _, why in decided.rejected] == ["wrong-partition"]
    assert service._counter_array(state)[[f.name for f in fields(Counters)].index("messages")] == 1
    assert state.tracker.counters.nacked_failed == 1  # the rejected record's tree: failed by the stand-ins
    service.close()


def test_a_scrape_while_stand_ins_are_applied_sees_the_messages_read_never_fewer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stand-ins were subtracted from the messages counted before the kernel had counted them: a scrape in
    between saw acker_messages go down (below 0 here), which Prometheus takes for a counter reset."""
    service = AckerService(ServiceConfig(metrics_port=0, kafka={"log_level": "0"}))
    service._partition_count = PARTITIONS
    mine = next(a for a in range(1, 1000) if partition_of(a, PARTITIONS) == 0)
    other = next(a for a in range(1, 1000) if partition_of(a, PARTITIONS) == 1)
    state = PartitionState(0, TrackerConfig(), 1000, 0)
    service._states[0] = state
    scrapes: list[int] = []
    scraping: list[threading.Thread] = []
    apply = PartitionState.apply_records

    def applying(self: PartitionState, *args: Any) -> Any:  # a scrape comes while the kernel runs
        scrape = threading.Thread(target=lambda: scrapes.append(service.snapshot().counters.messages))
        scrape.start()
        scrape.join(0.2)
        scraping.append(scrape)
        return apply(self, *args)

    monkeypatch.setattr(PartitionState, "apply_records", applying)
    good = encode_batch(MessageBlock.from_messages([Init(mine + 1000 * PARTITIONS, "s0", "t/0/1", 3)]))
    bad = encode_batch(MessageBlock.from_messages([Init(mine, "s0", "t/0/2", 3), Ack(other, 5)]))
    service._decide((state, [Consumed(0, 0, good), Consumed(0, 1, bad)]))  # type: ignore[list-item]
    for scrape in scraping:
        scrape.join(5)
    assert scrapes == [1]  # after the apply: the one message read
    service.close()


def test_an_assignment_takes_no_partition_count_below_the_partitions_it_was_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After partitions were added (8), a broker whose metadata had not caught up answered 4 at the assignment that
    gave this instance partition 5: its rightly placed records were dead-lettered as wrong-partition, its inits
    failed, until the next check. A smaller count that covers what is assigned is taken (a topic made again)."""
    service: Any = AckerService.__new__(AckerService)
    service._partition_count, service._next_count_check = 8, 0.0
    service._reading_consumer = lambda: None
    service.config = ServiceConfig()
    service._refresh_producer = lambda *_: None
    monkeypatch.setattr(acker.service, "topic_partitions", lambda *_a, **_k: list(range(4)))
    for before in (8, 4, 0):  # raised already; still the old count (partitions just added); at start
        service._partition_count = before
        service._look_up_partition_count(30.0, owned=6)  # partition 5 assigned
        assert service._partition_count == 0 and service._next_count_check - time.monotonic() <= 1.0  # unchecked
    service._look_up_partition_count(30.0, owned=4)
    assert service._partition_count == 4


def test_a_lookup_of_the_acker_topics_count_that_goes_unanswered_is_asked_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every 5 s, a lookup that waited its whole timeout (a broker away) was due again as it returned: the loop did
    lookups back to back, a turn every few seconds. The next check counts from the answer, or the time out."""
    service: Any = AckerService.__new__(AckerService)
    service._partition_count, service._next_count_check = 4, 0.0
    service._reading_consumer = lambda: None
    service.config = ServiceConfig()

    def unanswered(*_args: object, **_kwargs: object) -> list[int]:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    monkeypatch.setattr(acker.service, "topic_partitions", unanswered)
    service._look_up_partition_count(2.0, only_up=True, owned=4)
    assert service._partition_count == 4 and service._next_count_check - time.monotonic() > 29

    def slow(*_args: object, **_kwargs: object) -> list[int]:
        time.sleep(0.3)
        return list(range(4))

    monkeypatch.setattr(acker.service, "topic_partitions", slow)
    before = time.monotonic()
    service._look_up_partition_count(2.0, only_up=True, owned=4)
    assert service._next_count_check - before >= PARTITIONS_CHECK_S + 0.3
