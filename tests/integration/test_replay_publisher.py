"""The replay job's publisher (`spark_jobs.replay_job._Publisher`) on the real broker, without Spark: `publish` takes
a micro-batch's collected nacks and the fetch function the job's sink gives it. Nacks that used to fail a batch at
every run (so that no nack of any spout was replayed again), and a restart that used to miss its last batch."""

from __future__ import annotations

import gc
import logging
import threading
import time
import uuid
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from acker.errors import AckerError
from acker.headers import pairs, text
from acker.kafka.clients import KafkaClientError, TopicSpec, create_topics, partition_count, produce
from acker.kafka.lookups import CONFIRM_S, close_all, lookups
from acker.retries import (
    ATTEMPT,
    DETAIL,
    HEADER_KEPT_BYTES,
    NACK_REASON,
    NO_REPLAY_TOPIC,
    ORIGIN,
    REASON,
    SPOUT,
    TOO_LARGE,
    TRUNCATED,
    UNREADABLE_HEADERS,
)
from acker.wire import decode_outcomes
from spark_jobs import replay_job
from spark_jobs.commit_job import OutcomeSource
from spark_jobs.replay_job import Committed, ReplayJobSettings, _Publisher, close_publishers, handled_said
from tests.integration.helpers import add_partitions, produce_with_header_name, read_all

Fetch = Callable[[str, int, list[int]], dict[int, Message | None]]


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    """Each test's publishers and lookup clients closed after it, not left logging at a broker gone."""
    yield
    close_publishers()
    close_all()


def _settings(client: dict[str, Any]) -> ReplayJobSettings:
    uid = uuid.uuid4().hex[:8]
    create_topics(client, [TopicSpec(f"out-{uid}.sp", 1)])
    return ReplayJobSettings(
        OutcomeSource(client, topics=(f"out-{uid}.sp",)), f"/tmp/unused-{uid}", name=f"replay-{uid}",
        replay_prefix=f"rp-{uid}.", dead_letter_topic=f"dead-{uid}",
        progress_topic=f"progress-{uid}", dlq_topic=f"dlq-{uid}",
    )  # fmt: skip


def _filled_source(client: dict[str, Any], settings: ReplayJobSettings, records: int) -> str:
    """A source topic of one partition holding ``records`` records ``record <i>``, and spout sp's replay topic (as
    its spout makes it)."""
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(source, 1), TopicSpec(settings.replay_prefix + "sp", 1)])
    producer = Producer(client)
    for i in range(records):
        produce(producer, source, b"record %d" % i)
    assert producer.flush(30) == 0
    return source


def _fetch(client: dict[str, Any]) -> Fetch:
    kafka = lookups(client)

    def fetch(topic: str, partition: int, offsets: list[int]) -> dict[int, Message | None]:
        with kafka.lock:
            return kafka.fetch(topic, partition, offsets)

    return fetch


def _with_a_small_replay_topic(bootstrap: str) -> tuple[dict[str, Any], ReplayJobSettings, str]:
    """The client, the job's settings and a source topic, whose spout's replay topic takes records of 20 KB at most."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(source, 1), TopicSpec(settings.replay_prefix + "sp", 1,
                                                           config={"max.message.bytes": "20000"})])  # fmt: skip
    return client, settings, source


def _nack(
    settings: ReplayJobSettings,
    topic: str,
    partition: int,
    offset: int,
    *,
    detail: str | None = None,
    read_from: int = 0,
) -> Any:
    """A nack as the job's rows carry it, read from partition ``read_from`` of the job's outcome topic."""
    msg_id = f"{topic}/{partition}/{offset}"
    return SimpleNamespace(spout="sp", msg_id=msg_id, reason="FAILED", topic=topic, partition=partition, offset=offset,
                           outcome_topic=settings.source.topics[0], outcome_partition=read_from,
                           detail=detail)  # fmt: skip


def _resolutions(client: dict[str, Any], settings: ReplayJobSettings, partition: int = 0) -> list[tuple[str, str]]:
    """(outcome, message id) of each row in ``partition`` of the job's outcome topic, in order: its resolutions."""
    decoded = [decode_outcomes(r.value() or b"") for r in read_all(client, settings.source.topics[0], partition)]
    return [(o, m) for d in decoded for o, m in zip(d.outcomes, d.msg_ids, strict=True)]


def test_a_nack_of_a_topic_or_partition_that_does_not_exist_is_dead_lettered_as_source_missing(bootstrap: str) -> None:
    """A source topic deleted since (or never there: an outcome record can name anything), a partition it does not
    have: the records certainly no longer exist. `fetch` used to raise, every run of the batch failed."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(source, 1)])
    publisher = _Publisher(settings, f"{settings.name}-id")
    nacks = [_nack(settings, f"gone-{uuid.uuid4().hex[:8]}", 0, 7), _nack(settings, source, 5, 0)]
    assert publisher.publish(0, nacks, _fetch(client)) == 2
    assert _resolutions(client, settings) == [("DEAD_LETTERED", nacks[0].msg_id), ("DEAD_LETTERED", nacks[1].msg_id)]
    letters = read_all(client, settings.dead_letter_topic)
    assert [text(pairs(r.headers()), REASON) for r in letters] == ["source-missing", "source-missing"]


def _sp_passed_two_of_three(client: dict[str, Any], settings: ReplayJobSettings, *spouts: str) -> tuple[str, Committed]:
    """A source topic of three records, a, b and c, whose first two spout sp's watermark has passed; the replay topics
    of sp and ``spouts``; and how the job asks for watermarks."""
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(t, 1) for t in (source, *(settings.replay_prefix + s for s in ("sp", *spouts)))])
    producer = Producer(client)
    for value in (b"a", b"b", b"c"):
        produce(producer, source, value)
    assert producer.flush(30) == 0
    kafka = lookups(client)
    with kafka.lock:
        kafka.advance(settings.watermark_group("sp"), {(source, 0): 2})  # offsets 0 and 1 decided

    def committed(group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        with kafka.lock:
            return kafka.committed(group, partitions)

    return source, committed


def test_a_nack_of_a_record_its_watermark_has_passed_is_a_late_copy_and_skipped(bootstrap: str) -> None:
    """An acker back after a long outage nacks the trees its spout timed out itself meanwhile: those records were
    replayed then (their watermark has passed them since), and the deduplication window had forgotten the first
    nack, so each was replayed a second time. Nacks above the watermark are replayed as ever."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source, committed = _sp_passed_two_of_three(client, settings)
    publisher = _Publisher(settings, f"{settings.name}-id")
    nacks = [_nack(settings, source, 0, offset) for offset in range(3)]
    assert publisher.publish(0, nacks, _fetch(client), committed) == 1
    assert _resolutions(client, settings) == [("REPLAYED", f"{source}/0/2")]
    assert [copy.value() for copy in read_all(client, settings.replay_prefix + "sp")] == [b"c"]


def test_a_nack_is_skipped_by_its_own_spouts_watermark_only(bootstrap: str) -> None:
    """Two spouts read one source, each with its own group. A late copy of one's nack and the other's first nack of
    the same record, in one part: the first spout's watermark is past the record, the other's is not. Skipped too,
    the other's nack would be neither replayed nor dead-lettered, and hold its watermark for good."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source, committed = _sp_passed_two_of_three(client, settings, "other")
    other = _nack(settings, source, 0, 1)
    other.spout = "other"
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 0, 1), other], _fetch(client), committed) == 1
    assert [copy.value() for copy in read_all(client, settings.replay_prefix + "other")] == [b"b"]
    assert read_all(client, settings.replay_prefix + "sp") == []


def test_a_nacked_record_too_large_to_replay_is_dead_lettered_cut_and_the_others_replayed(bootstrap: str) -> None:
    """A replay topic that takes less than the source (here 20 KB), or a record larger than the producer's limit:
    publishing it would abort the transaction at every run of the batch, and no nack would be replayed again. The
    limit is of a batch of records: five that fit one by one, but not together, are replayed all the same."""
    client, settings, source = _with_a_small_replay_topic(bootstrap)
    producer = Producer(client)
    produce(producer, source, b"x" * 100_000, key=b"k", headers=[("trace", b"t-1")])
    smaller = [bytes([i]) * 6_000 for i in range(5)]
    for value in smaller:
        produce(producer, source, value, key=b"k")
    assert producer.flush(30) == 0
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 0, offset) for offset in range(6)], _fetch(client)) == 6
    assert _resolutions(client, settings) == [
        ("DEAD_LETTERED", f"{source}/0/0"), *(("REPLAYED", f"{source}/0/{offset}") for offset in range(1, 6))
    ]  # fmt: skip
    [letter] = read_all(client, settings.dead_letter_topic)
    headers = pairs(letter.headers())
    assert (text(headers, REASON), text(headers, NACK_REASON)) == (TOO_LARGE, "FAILED")
    assert int(text(headers, TRUNCATED) or 0) > 100_000 and text(headers, "trace") is None
    assert letter.value() == b"x" * 65_536 and letter.key() == b"k"
    assert [copy.value() for copy in read_all(client, settings.replay_prefix + "sp")] == smaller


def test_a_record_only_its_detail_makes_too_large_is_replayed_without_it(bootstrap: str) -> None:
    """`acker.replay.detail` is a diagnosis: it must not turn a replay into a ``too-large`` dead letter."""
    client, settings, source = _with_a_small_replay_topic(bootstrap)
    producer = Producer(client)
    for value in (b"x" * 18_500, b"y" * 100):  # the first fits, without 500 more bytes of detail
        produce(producer, source, value, key=b"k")
    assert producer.flush(30) == 0
    publisher = _Publisher(settings, f"{settings.name}-id")
    rows = [_nack(settings, source, 0, offset, detail="d" * 500) for offset in range(2)]
    assert publisher.publish(0, rows, _fetch(client)) == 2
    assert _resolutions(client, settings) == [("REPLAYED", f"{source}/0/0"), ("REPLAYED", f"{source}/0/1")]
    first, second = read_all(client, settings.replay_prefix + "sp")
    assert text(pairs(first.headers()), DETAIL) is None and first.value() == b"x" * 18_500
    assert text(pairs(second.headers()), DETAIL) == "d" * 500


def test_a_record_too_large_even_without_its_detail_is_dead_lettered_with_the_detail(bootstrap: str) -> None:
    """The detail was taken off before the record was found too large all the same: its dead letter, which holds a
    cut of the record and has room for the detail, lost why its tree failed."""
    client, settings, source = _with_a_small_replay_topic(bootstrap)
    producer = Producer(client)
    produce(producer, source, b"x" * 100_000, key=b"k")
    assert producer.flush(30) == 0
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 0, 0, detail="bolt split: ValueError: boom")], _fetch(client))
    [letter] = read_all(client, settings.dead_letter_topic)
    headers = pairs(letter.headers())
    assert (text(headers, REASON), text(headers, DETAIL)) == (TOO_LARGE, "bolt split: ValueError: boom")


def test_a_copy_whose_own_replay_header_is_too_large_is_dead_lettered_with_it_cut(bootstrap: str) -> None:
    """Its dead letter kept the origin header that made it too large, was refused too, and aborted the batch at
    every run: no nack of any spout was replayed again. (A copy of the replay topic: a source record's replay
    headers are not its context, and are not kept.)"""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source, replays = f"src-{uuid.uuid4().hex[:8]}", settings.replay_prefix + "sp"
    small = {"max.message.bytes": "20000"}
    create_topics(client, [TopicSpec(source, 1), TopicSpec(replays, 1),
                           TopicSpec(settings.dead_letter_topic, 1, config=small)])  # fmt: skip
    producer = Producer(client)
    produce(producer, replays, b"v", key=b"k", headers=[(ORIGIN, b"o" * 30_000), (ATTEMPT, b"1"), (SPOUT, b"sp")])
    produce(producer, source, b"w", key=b"k")
    assert producer.flush(30) == 0
    admin = AdminClient({**client})  # the replay topic takes no more such copies from now on
    resource = ConfigResource("topic", replays, incremental_configs=[
        ConfigEntry("max.message.bytes", "20000", incremental_operation=AlterConfigOpType.SET)
    ])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(30)
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, replays, 0, 0), _nack(settings, source, 0, 0)], _fetch(client)) == 2
    assert _resolutions(client, settings) == [("DEAD_LETTERED", f"{replays}/0/0"), ("REPLAYED", f"{source}/0/0")]
    [letter] = read_all(client, settings.dead_letter_topic)
    headers = pairs(letter.headers())
    assert text(headers, REASON) == TOO_LARGE and text(headers, ORIGIN) == "o" * HEADER_KEPT_BYTES
    assert (letter.value(), letter.key()) == (b"v", b"k")


def test_a_nack_whose_replay_topic_does_not_exist_is_dead_lettered_whole(bootstrap: str) -> None:
    """A job whose replay prefix is not the spouts' created the topic it named and replayed there: no spout read the
    copies, and the commit job took their originals as done, lost. Now the job creates no replay topic (a spout
    creates its own), and dead-letters the record whole (`no-replay-topic`), for `acker dlq redrive`."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(source, 1)])
    producer = Producer(client)
    produce(producer, source, b"v", key=b"k", headers=[("trace", b"t-1")])
    assert producer.flush(30) == 0
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 0, 0)], _fetch(client)) == 1
    assert _resolutions(client, settings) == [("DEAD_LETTERED", f"{source}/0/0")]
    [letter] = read_all(client, settings.dead_letter_topic)
    headers = pairs(letter.headers())
    assert (text(headers, REASON), text(headers, NACK_REASON), text(headers, "trace")) == (
        NO_REPLAY_TOPIC,
        "FAILED",
        "t-1",
    )
    assert (letter.value(), letter.key(), text(headers, ATTEMPT)) == (b"v", b"k", "0")
    with pytest.raises(KafkaClientError):  # and it is still not there
        partition_count(client, settings.replay_prefix + "sp")


def test_a_replay_topic_missing_from_one_metadata_answer_is_asked_again_before_its_nacks_are_dead_lettered(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One answer "unknown topic" (a broker just restarted, its metadata behind) had every nack of the spout
    dead-lettered `no-replay-topic` for a minute, their remaining attempts unused."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(source, 1), TopicSpec(settings.replay_prefix + "sp", 1)])
    producer = Producer(client)
    produce(producer, source, b"v", key=b"k")
    assert producer.flush(30) == 0
    answers: list[str] = []
    sleeps: list[float] = []

    def lagging(config: dict[str, Any], topic: str, timeout_s: float = 10.0) -> int:
        answers.append(topic)
        if topic == settings.replay_prefix + "sp" and answers.count(topic) == 1:
            raise KafkaClientError(f"topic {topic} is not available", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        return partition_count(config, topic, timeout_s)

    monkeypatch.setattr(replay_job, "partition_count", lagging)
    asking, sleep = threading.current_thread(), time.sleep

    def sleeping(seconds: float) -> None:  # the time module's: other threads of the process (Spark's) sleep on
        if threading.current_thread() is asking:
            sleeps.append(seconds)
        else:
            sleep(seconds)

    monkeypatch.setattr("spark_jobs.replay_job.time.sleep", sleeping)
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 0, 0)], _fetch(client)) == 1
    assert _resolutions(client, settings) == [("REPLAYED", f"{source}/0/0")]
    assert [(r.value(), r.key()) for r in read_all(client, settings.replay_prefix + "sp")] == [(b"v", b"k")]
    assert sleeps == [CONFIRM_S] and answers.count(settings.replay_prefix + "sp") == 2


def test_partitions_added_to_a_replay_topic_take_replays_once_its_count_is_looked_up_again(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay goes to the partition of its source record's partition modulo the replay topic's count. The count was
    looked up once, so partitions added later stayed empty (their spout instances idle) until the job restarted.
    It is looked up again before a transaction, not within one; a lookup that fails, or that finds the topic missing
    (a broker's metadata behind), keeps the count known."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source, replays = f"src-{uuid.uuid4().hex[:8]}", settings.replay_prefix + "sp"
    create_topics(client, [TopicSpec(source, 2), TopicSpec(replays, 1)])
    producer = Producer(client)
    for partition in (0, 1, 1):
        produce(producer, source, f"p{partition}".encode(), partition=partition)
    assert producer.flush(30) == 0
    now = [time.monotonic()]
    clock = SimpleNamespace(monotonic=lambda: now[0], sleep=time.sleep, time=time.time)  # the job's clock alone
    monkeypatch.setattr(replay_job, "time", clock)
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 1, 0)], _fetch(client)) == 1
    add_partitions(client, replays, 2)
    assert publisher.partitions(replays, recheck=True) == 1  # known, until it is looked up again
    now[0] += replay_job._COUNT_RECHECK_S
    assert publisher.partitions(replays) == 1  # within a transaction: never looked up
    for error in (KafkaError._TRANSPORT, KafkaError.UNKNOWN_TOPIC_OR_PART):
        with monkeypatch.context() as lookup:
            lookup.setattr(replay_job, "partition_count", _unanswered(error))
            assert publisher.partitions(replays, recheck=True) == 1  # the count known stands
        now[0] += replay_job._COUNT_RECHECK_S
    assert publisher.publish(1, [_nack(settings, source, 1, 1)], _fetch(client)) == 1
    assert [[r.value() for r in read_all(client, replays, p)] for p in (0, 1)] == [[b"p1"], [b"p1"]]


def _unanswered(code: int) -> Callable[..., int]:
    def lookup(_config: Any, topic: str, _timeout_s: float = 10.0) -> int:
        raise KafkaClientError(f"partitions of {topic} not known", KafkaError(code))

    return lookup


def test_the_dead_letter_topic_deleted_while_the_job_runs_is_made_again(bootstrap: str) -> None:
    """Its partitions were looked up as 0, and a dead letter's partition divided by them: every run of the batch
    failed with a ZeroDivisionError."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    publisher = _Publisher(settings, f"{settings.name}-id")
    admin = AdminClient(dict(client))
    admin.delete_topics([settings.dead_letter_topic], operation_timeout=30)[settings.dead_letter_topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # gone from the metadata
        try:
            partition_count(client, settings.dead_letter_topic, timeout_s=5)
            time.sleep(0.2)
        except KafkaClientError:
            break
    nack = _nack(settings, f"gone-{uuid.uuid4().hex[:8]}", 0, 7)  # source-missing: a dead letter
    assert publisher.publish(0, [nack], _fetch(client)) == 1
    assert len(read_all(client, settings.dead_letter_topic)) == 1


class _Held:
    """An object of a caller's frame, to tell whether anything keeps that frame."""


def _refused(publisher: _Publisher, batch: int, nacks: list[Any], fetch: Fetch, said: str) -> None:
    """``publisher.publish`` refused, saying ``said``, and nothing of its caller kept: a Kafka call that raised while
    the refusal was being handled (the abort) kept it alive for good, and with it every frame of its traceback (the
    caller's and its clients, which called a broker gone at the session's end): `acker.kafka.clients`."""

    def caller() -> weakref.ref[_Held]:
        held = _Held()
        with pytest.raises(AckerError, match=said):
            publisher.publish(batch, nacks, fetch)
        return weakref.ref(held)

    logging.disable(logging.WARNING)  # pytest's log capture keeps each record's arguments (an error logged, its frames)
    try:
        kept = caller()
    finally:
        logging.disable(logging.NOTSET)
    gc.collect()
    assert kept() is None


def test_a_replay_topic_deleted_while_the_job_runs_fails_its_batch_saying_which_losing_nothing(bootstrap: str) -> None:
    """The transaction was refused ("unknown topic or partition", the topic unnamed), and the abort that followed
    failed too and raised in its place: the job stopped saying only "Failed to end transaction: ... invalid state"."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source, replays = f"src-{uuid.uuid4().hex[:8]}", settings.replay_prefix + "sp"
    create_topics(client, [TopicSpec(source, 1), TopicSpec(replays, 1)])
    producer = Producer(client)
    for value in (b"v0", b"v1"):
        produce(producer, source, value)
    assert producer.flush(30) == 0
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 0, 0)], _fetch(client)) == 1
    assert handled_said(publisher.handled) == "1 replayed, 0 dead-lettered"
    admin = AdminClient(dict(client))
    admin.delete_topics([replays], operation_timeout=30)[replays].result(30)
    _refused(publisher, 1, [_nack(settings, source, 0, 1)], _fetch(client), f"topic {replays} was deleted while the")
    assert _resolutions(client, settings) == [("REPLAYED", f"{source}/0/0")]  # the second nack's: aborted
    close_publishers()
    # Restarted before its spout makes the topic again: the nack is dead-lettered whole, for `acker dlq redrive`.
    again = _Publisher(settings, f"{settings.name}-id")
    assert again.last == 0
    assert again.publish(1, [_nack(settings, source, 0, 1)], _fetch(client)) == 1
    assert handled_said(again.handled) == f"0 replayed, 1 dead-lettered ({NO_REPLAY_TOPIC} 1)"
    assert _resolutions(client, settings)[1:] == [("DEAD_LETTERED", f"{source}/0/1")]
    [letter] = read_all(client, settings.dead_letter_topic)
    assert (text(pairs(letter.headers()), REASON), letter.value()) == (NO_REPLAY_TOPIC, b"v1")


def test_an_outcome_topic_deleted_while_the_job_runs_fails_its_batch_saying_which(bootstrap: str) -> None:
    """Its resolutions' topic is written without a lookup of its partitions: it was never named."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source, outcomes = f"src-{uuid.uuid4().hex[:8]}", settings.source.topics[0]
    create_topics(client, [TopicSpec(source, 1), TopicSpec(settings.replay_prefix + "sp", 1)])
    producer = Producer(client)
    produce(producer, source, b"v0")
    assert producer.flush(30) == 0
    publisher = _Publisher(settings, f"{settings.name}-id")
    admin = AdminClient(dict(client))
    admin.delete_topics([outcomes], operation_timeout=30)[outcomes].result(30)
    _refused(publisher, 0, [_nack(settings, source, 0, 0)], _fetch(client), f"topic {outcomes} was deleted .*started "
             "again goes on once it is back")  # fmt: skip


def test_a_restart_finds_its_last_batch_while_another_job_holds_a_transaction_open(bootstrap: str) -> None:
    """Two replay jobs share the progress topic. The other's driver died in a transaction after writing its progress
    record; this job publishes batch 3 and restarts before Spark logs the batch done. A read_committed read stopped
    at the other job's open transaction, found batch 2, and the re-run of batch 3 replayed its nacks again."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    job = _Publisher(settings, "job-a")
    for batch in range(3):
        job.publish(batch, [], _fetch(client))
    other = Producer({**client, "transactional.id": f"job-b-{uuid.uuid4().hex[:8]}"})
    other.init_transactions(30)
    other.begin_transaction()
    produce(other, settings.progress_topic, b"41", key=b"job-b")
    assert other.flush(30) == 0  # written, its transaction open
    job.publish(3, [], _fetch(client))
    restarted: list[_Publisher] = []

    def restart() -> None:
        restarted.append(_Publisher(settings, "job-a"))

    thread = threading.Thread(target=restart)
    thread.start()
    thread.join(3)
    assert thread.is_alive()  # waiting for the other job's transaction
    other.abort_transaction(30)
    thread.join(60)
    assert restarted and restarted[0].last == 3


def test_a_batch_of_many_nacks_is_published_in_parts_and_a_restart_goes_on_after_the_last_part(bootstrap: str) -> None:
    """A burst of nacks in one micro-batch needs no transaction longer than its timeout: parts of
    ``nacks_per_transaction``, each recorded with the number of nacks published so far. A batch that failed in its
    third part is run again by a restarted job (with another part size), which publishes the nacks after the first
    four: each nack replayed once."""
    client = {"bootstrap.servers": bootstrap}
    settings = replace(_settings(client), nacks_per_transaction=2)
    source = _filled_source(client, settings, 7)
    nacks = [_nack(settings, source, 0, offset) for offset in (6, 0, 5, 1, 4, 2, 3)]  # in any order
    fetch = _fetch(client)

    def failing_third(topic: str, partition: int, offsets: list[int]) -> dict[int, Message | None]:
        if 4 in offsets:  # the third part's records (parts by message id: 0-1, 2-3, 4-5, 6)
            raise LookupError("no answer")
        return fetch(topic, partition, offsets)

    first = _Publisher(settings, f"{settings.name}-id")
    with pytest.raises(LookupError, match="no answer"):
        first.publish(0, nacks, failing_third)
    restarted = _Publisher(replace(settings, nacks_per_transaction=3), f"{settings.name}-id")  # other parts now
    assert (restarted.last, restarted.last_done) == (0, 4)
    assert restarted.publish(0, list(reversed(nacks)), fetch) == 3  # the nacks after the first 4, in any order
    assert (restarted.last, restarted.last_done) == (0, None)
    assert restarted.publish(0, nacks, fetch) == 0  # the whole batch is published
    copies = sorted(copy.value() or b"" for copy in read_all(client, settings.replay_prefix + "sp"))
    assert copies == [b"record %d" % i for i in range(7)]
    assert sorted(m for _, m in _resolutions(client, settings)) == sorted(n.msg_id for n in nacks)
    parts = [b"0/2/sp/%s/0/1" % source.encode(), b"0/4/sp/%s/0/3" % source.encode(), b"0"]
    assert [r.value() for r in read_all(client, settings.progress_topic)] == parts


def test_a_restart_goes_on_after_its_batchs_latest_progress_record_not_the_one_of_most_nacks(bootstrap: str) -> None:
    """A run after a crash records fewer nacks published than the run before it when rows were deleted meanwhile:
    the record with the larger count, older, sent a third run back to nacks the second had published."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    create_topics(client, [TopicSpec(settings.progress_topic, 1)])  # as the job makes it (brokers may not)
    producer = Producer(client)
    for value in (b"4", b"5/6/sp/src/0/5", b"5/5/sp/src/0/9"):
        produce(producer, settings.progress_topic, value, key=f"{settings.name}-id".encode())
    assert producer.flush(30) == 0
    restarted = _Publisher(settings, f"{settings.name}-id")
    assert (restarted.last, restarted.last_done, restarted.last_key) == (5, 5, ("sp", "src/0/9"))


def test_a_batch_run_again_with_fewer_rows_goes_on_after_the_last_nack_published_not_its_count(bootstrap: str) -> None:
    """A run of a batch after a crash may have fewer rows than the first: outcome records retention deleted meanwhile
    (the source skips them). The nacks after the last one published are published, not those after the first ``n``
    of the rows left, which would pass over two nacks never published."""
    client = {"bootstrap.servers": bootstrap}
    settings = replace(_settings(client), nacks_per_transaction=2)
    source = _filled_source(client, settings, 7)
    nacks = [_nack(settings, source, 0, offset) for offset in range(7)]
    fetch = _fetch(client)

    def failing_third(topic: str, partition: int, offsets: list[int]) -> dict[int, Message | None]:
        if 4 in offsets:
            raise LookupError("no answer")
        return fetch(topic, partition, offsets)

    with pytest.raises(LookupError, match="no answer"):
        _Publisher(settings, f"{settings.name}-id").publish(0, nacks, failing_third)
    restarted = _Publisher(settings, f"{settings.name}-id")
    fewer = [nack for nack in nacks if nack.offset not in (0, 2)]  # their outcome records deleted
    assert restarted.publish(0, fewer, fetch) == 3
    copies = sorted(copy.value() or b"" for copy in read_all(client, settings.replay_prefix + "sp"))
    assert copies == [b"record %d" % i for i in range(7)]


def test_the_resolutions_of_a_burst_of_nacks_fit_an_outcome_topic_of_small_records(bootstrap: str) -> None:
    """Resolutions were written 16,384 rows a record (115 KB) whatever the outcome topic takes: on one that takes
    40 KB (as the acker's own records, which it halves to fit), a burst of nacks aborted the transaction at every run
    of the batch, and nothing was replayed again."""
    client = {"bootstrap.servers": bootstrap}
    settings = replace(_settings(client), nacks_per_transaction=20_000)
    limit = ConfigEntry("max.message.bytes", "40000", incremental_operation=AlterConfigOpType.SET)
    small = ConfigResource("topic", settings.source.topics[0], incremental_configs=[limit])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([small])[small].result(30)
    source = _filled_source(client, settings, 10_000)
    nacks = [_nack(settings, source, 0, offset) for offset in range(10_000)]
    assert _Publisher(settings, f"{settings.name}-id").publish(0, nacks, _fetch(client)) == 10_000
    resolved = _resolutions(client, settings)
    assert sorted(m for _, m in resolved) == sorted(n.msg_id for n in nacks) and len(resolved) == 10_000
    assert all(len(r.value() or b"") <= 40_000 for r in read_all(client, settings.source.topics[0]))


def test_each_nack_is_resolved_in_the_outcome_partition_it_was_read_from(bootstrap: str) -> None:
    """Resolutions were all written to partition 0 of the outcome topic. A spout reads its outcome partitions each at
    its own pace: one that read partition 0 ahead of the partition of a nack read the resolution first, passed it
    over (no nack told yet), and never told ``on_outcome`` that the record was dead-lettered. In the nack's own
    partition, after it, the spout reads the nack first."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    outcome_topic = settings.source.topics[0]
    add_partitions(client, outcome_topic, 3)
    source = _filled_source(client, settings, 6)
    gone = _nack(settings, source, 0, 99, read_from=1)  # no such record: dead-lettered
    nacks = [*(_nack(settings, source, 0, offset, read_from=offset % 3) for offset in range(6)), gone]
    assert _Publisher(settings, f"{settings.name}-id").publish(0, nacks, _fetch(client)) == len(nacks)
    for partition in range(3):
        expected = [("REPLAYED", f"{source}/0/{offset}") for offset in range(partition, 6, 3)]
        expected += [("DEAD_LETTERED", gone.msg_id)] if partition == 1 else []
        assert sorted(_resolutions(client, settings, partition)) == sorted(expected)
        assert {r.key() for r in read_all(client, outcome_topic, partition)} == {b"replay"}


def test_a_nack_read_from_an_outcome_partition_added_while_the_job_runs_is_resolved_there(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's producer, which had written to the outcome topic, knew its partitions as they were (librdkafka looks
    again every 5 minutes) and refused a resolution for a partition added since, which Spark reads at once: the
    transaction failed at every run of the batch, and the job stopped. Its partitions are looked up again first; were
    the new one still unknown to the producer, its resolutions would go to partition 0."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    outcome_topic = settings.source.topics[0]
    source = _filled_source(client, settings, 3)
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [_nack(settings, source, 0, 0)], _fetch(client)) == 1
    add_partitions(client, outcome_topic, 3)
    monkeypatch.setattr(publisher, "_grown", lambda _topic, count: count)  # the producer sees no more
    assert publisher.publish(1, [_nack(settings, source, 0, 1, read_from=2)], _fetch(client)) == 1
    monkeypatch.undo()
    assert publisher.publish(2, [_nack(settings, source, 0, 2, read_from=2)], _fetch(client)) == 1
    assert _resolutions(client, settings, 0) == [("REPLAYED", f"{source}/0/0"), ("REPLAYED", f"{source}/0/1")]
    assert _resolutions(client, settings, 2) == [("REPLAYED", f"{source}/0/2")]


def test_a_restart_finds_its_last_batch_in_a_progress_topic_made_with_several_partitions(bootstrap: str) -> None:
    """Progress was written by key, and read from partition 0 alone: in a progress topic made beforehand with a
    cluster's default of 3 partitions, a restart most often missed its last batch and published it again (each nack
    replayed twice)."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(source, 1), TopicSpec(settings.replay_prefix + "sp", 1),
                           TopicSpec(settings.progress_topic, 3)])  # fmt: skip
    producer = Producer(client)
    produce(producer, source, b"v")
    assert producer.flush(30) == 0
    # A job whose key librdkafka's default partitioner (CRC32 of the key) places past partition 0.
    identity = next(i for n in range(100) if zlib.crc32((i := f"{settings.name}-id-{n}").encode()) % 3)
    nack = _nack(settings, source, 0, 0)
    assert _Publisher(settings, identity).publish(7, [nack], _fetch(client)) == 1
    close_publishers()
    assert _Publisher(settings, identity).publish(7, [nack], _fetch(client)) == 0, "batch 7 published twice"


def test_a_record_whose_headers_cannot_be_read_nacked_by_two_spouts_is_dead_lettered_for_both(bootstrap: str) -> None:
    """Two spouts read one source: their nacks of one record share the record fetched. The second read of headers
    that could not be read found none, and the second spout's nack was replayed without them."""
    client = {"bootstrap.servers": bootstrap}
    settings = _settings(client)
    source = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(
        client, [TopicSpec(t, 1) for t in (source, settings.replay_prefix + "sp", settings.replay_prefix + "sp2")]
    )
    produce_with_header_name(client, source, 0, name=b"\xff\xfe", value=b"v")
    first = _nack(settings, source, 0, 0)
    second = SimpleNamespace(**{**vars(first), "spout": "sp2"})
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [first, second], _fetch(client)) == 2
    assert [o for o, _ in _resolutions(client, settings)] == ["DEAD_LETTERED", "DEAD_LETTERED"]
    letters = read_all(client, settings.dead_letter_topic)
    assert [text(pairs(r.headers()), REASON) for r in letters] == [UNREADABLE_HEADERS] * 2
    assert read_all(client, settings.replay_prefix + "sp2") == []


@pytest.mark.parametrize("spout", ["progress", "dlq", "s" * 200])
def test_a_nack_of_a_spout_that_cannot_have_a_replay_topic_is_dead_lettered_whole(bootstrap: str, spout: str) -> None:
    """An outcome record may name any spout. Its replay topic was the job's progress topic (a copy refused there,
    without a key: the batch failed at every run), its dead-letter topic (taken as a replay), or a name past Kafka's
    249 characters (the lookup failed the batch at every run). Dead-lettered whole, for `acker dlq redrive`."""
    client = {"bootstrap.servers": bootstrap}
    uid = uuid.uuid4().hex[:8]
    settings = replace(_settings(client), replay_prefix=f"rp-{uid}-" + "p" * 40 + ".",
                       progress_topic=f"rp-{uid}-" + "p" * 40 + ".progress",
                       dead_letter_topic=f"rp-{uid}-" + "p" * 40 + ".dlq")  # fmt: skip
    source = f"src-{uid}"
    create_topics(client, [TopicSpec(source, 1), TopicSpec(settings.progress_topic, 1),
                           TopicSpec(settings.dead_letter_topic, 1)])  # fmt: skip
    producer = Producer(client)
    produce(producer, source, b"v")  # no key
    assert producer.flush(30) == 0
    row = SimpleNamespace(**{**vars(_nack(settings, source, 0, 0)), "spout": spout})
    publisher = _Publisher(settings, f"{settings.name}-id")
    assert publisher.publish(0, [row], _fetch(client)) == 1
    assert _resolutions(client, settings) == [("DEAD_LETTERED", f"{source}/0/0")]
    [letter] = read_all(client, settings.dead_letter_topic)
    assert (text(pairs(letter.headers()), REASON), letter.value()) == (NO_REPLAY_TOPIC, b"v")
