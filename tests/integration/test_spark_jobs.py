"""The Spark jobs on local Spark with its real Kafka connector, against the real broker."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from acker import fail_reasons
from acker.bolt import Bolt, BoltInput, Collector
from acker.cli import build_parser, main
from acker.config import ServiceConfig, load
from acker.dlq import DLQ_KEY_TRUNCATED, DLQ_TRUNCATED
from acker.errors import ConfigError
from acker.kafka.clients import TopicSpec, create_topics, partition_count, produce
from acker.kafka.lookups import lookups
from acker.kafka.provision import Cluster
from acker.retries import ATTEMPT, DETAIL, ORIGIN, REASON, Backoff
from acker.spout import Spout, SpoutSettings
from acker.topics import spark_job_topics
from acker.wire import WireError, decode_outcomes, encode_outcome_rows
from spark_jobs import outcomes
from spark_jobs.checkpoint import RUN_ID, run_id
from spark_jobs.commit_job import (
    CommitJobSettings,
    DeadLetterCounter,
    OutcomeSource,
    bitmap_runs,
    done_bitmaps,
    done_offsets,
)
from spark_jobs.commit_job import start as start_commit
from spark_jobs.java_client import check_in_jvm
from spark_jobs.mark_store import KEEP, MarkStore
from spark_jobs.outcomes import OUTCOME_SCHEMA, PREFIX, malformed, outcome_rows
from spark_jobs.replay_job import QUERY, ReplayJobSettings, _Publisher, in_order, nacks
from spark_jobs.replay_job import start as start_replay
from spark_jobs.session import spark_session, stop, stop_queries
from spark_jobs.watermark import PartitionMark
from tests.bitmaps import bitmap_rows
from tests.integration.helpers import Running, ServiceThread, create_acker_topics, produce_with_header_name, read_all
from tests.unit.spark_jobs.starts import started_with
from tests.unit.test_outcome_readers import ints_past_32_bits


@pytest.fixture(scope="session")
def spark(cluster: Cluster) -> Iterator[Any]:
    """The process's Spark session; stopped, with the jobs' Kafka clients (`stop`), before the cluster is: set up
    first by a test without a broker, it was stopped after, and the replay jobs' producers logged the broker's refusals
    at the end of the run."""
    session = spark_session("acker-tests")
    yield session
    stop(session)


@pytest.fixture
def names(tmp_path: Path) -> dict[str, str]:
    uid = uuid.uuid4().hex[:8]
    return {"uid": uid, "source": f"src-{uid}", "outcomes": f"out-{uid}.", "spout": "sp", "ckpt": str(tmp_path)}


def _eventually(check: Callable[[], Any], timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def _source(client: dict[str, str], topic: str, partitions: int, records: int) -> None:
    create_topics(client, [TopicSpec(topic, partitions)])
    producer = Producer(client)
    for p in range(partitions):
        for i in range(records):
            produce(producer, topic, f"{p}-{i}".encode(), key=b"k", partition=p, headers=[("app", b"h")])
    assert producer.flush(30) == 0


def _outcomes(
    client: dict[str, str],
    topic: str,
    rows: list[tuple[str, str]],
    spout: str = "sp",
    reasons: dict[str, str] | None = None,
) -> None:
    """An outcome record of ``rows`` (outcome, message id), with the ``acker.fail-reasons`` header of ``reasons``."""
    producer = Producer(client)
    header = fail_reasons.encode(reasons or {})
    extra: dict[str, Any] = {} if header is None else {"headers": [(fail_reasons.HEADER, header)]}
    produce(producer, topic, encode_outcome_rows(spout, [(o, 1, m, 0) for o, m in rows]), **extra)
    assert producer.flush(30) == 0


def _outcomes_and_ids(value: bytes) -> tuple[list[str], list[str]]:
    decoded = decode_outcomes(value)
    return decoded.outcomes, decoded.msg_ids


def test_the_watermark_is_the_end_of_the_done_prefix_never_beyond(
    spark: Any, bootstrap: str, names: dict[str, str]
) -> None:
    client = {"bootstrap.servers": bootstrap}
    src, out = names["source"], names["outcomes"] + "sp"
    _source(client, src, 2, 8)
    create_topics(client, [TopicSpec(out, 2), TopicSpec(f"dlq-{names['uid']}", 1)])
    settings = CommitJobSettings(
        OutcomeSource(client, topics=(out,)),
        names["ckpt"],
        dlq_topic=f"dlq-{names['uid']}",
        trigger_s=0.5,
        dead_letter_trigger_s=1.0,
    )
    queries = start_commit(spark, settings)
    kafka = lookups(client)
    seen: list[dict[tuple[str, int], int]] = []

    def marks() -> dict[tuple[str, int], int]:
        with kafka.lock:
            current = kafka.committed("sp.acked", [(src, 0), (src, 1)])
        seen.append(current)
        return current

    try:
        # Out of order, across partitions, with duplicates and a record that is not an outcome record.
        _outcomes(client, out, [("ACK", f"{src}/0/{o}") for o in (0, 1, 3, 5)] + [("ACK", f"{src}/1/2")])
        garbage = Producer(client)
        produce(garbage, out, b"not an outcome record")
        assert garbage.flush(30) == 0
        _eventually(lambda: marks() == {(src, 0): 2, (src, 1): 0})
        _outcomes(client, out, [("ACK", f"{src}/0/2"), ("ACK", f"{src}/1/1"), ("ACK", f"{src}/0/1")])
        _eventually(lambda: marks() == {(src, 0): 4, (src, 1): 0})
        _outcomes(
            client,
            out,
            [
                ("REPLAYED", f"{src}/0/4"),
                ("DEAD_LETTERED", f"{src}/1/0"),
                ("FAILED", f"{src}/0/6"),
                ("ACK", f"{src}/0/7"),
            ],
        )
        _eventually(lambda: marks() == {(src, 0): 6, (src, 1): 3})
        time.sleep(2)  # a FAILED outcome does not move it
        assert marks() == {(src, 0): 6, (src, 1): 3}
        assert all(m[(src, 0)] <= 6 and m[(src, 1)] <= 3 for m in seen)
        letters = _eventually(lambda: read_all(client, f"dlq-{names['uid']}"))
        assert dict(letters[0].headers())["acker.dlq.reason"] == b"bad-prefix"
    finally:
        for query in queries:
            query.stop()
    # Kafka deleting the watermarks (offset retention; here the group deleted while the job is down): the restarted
    # job commits them again from its checkpoint, with no outcome coming.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_consumer_groups(["sp.acked"])["sp.acked"].result(30)
    assert all(offset < 0 for offset in marks().values())  # none
    # A restart from the checkpoint keeps the state (7 is done above the mark): offset 6 completes the prefix.
    queries = start_commit(spark, settings)
    try:
        _eventually(lambda: marks() == {(src, 0): 6, (src, 1): 3})
        _outcomes(client, out, [("ACK", f"{src}/0/6")])
        _eventually(lambda: marks() == {(src, 0): 8, (src, 1): 3})
    finally:
        for query in queries:
            query.stop()


def test_an_idle_transactional_partition_done_to_its_last_record_gets_its_watermark_at_its_end(
    spark: Any, bootstrap: str, names: dict[str, str]
) -> None:
    """Records 0-9 in a committed transaction (its marker at 10), then 5 in an aborted one (11-15, its marker at 16):
    the end offset is 17, and no record a consumer reads is left after 9. Once 0-9 are acked and no more outcomes
    come, the job's recheck steps the watermark over the markers and the aborted records, to the end: a spout's
    fully-processed lag reaches 0."""
    client = {"bootstrap.servers": bootstrap}
    src, out = names["source"], names["outcomes"] + "sp"
    create_topics(client, [TopicSpec(src, 1), TopicSpec(out, 1)])
    producer = Producer({**client, "transactional.id": f"tx-{names['uid']}"})
    producer.init_transactions(30)
    for commit, count in ((True, 10), (False, 5)):
        producer.begin_transaction()
        for i in range(count):
            produce(producer, src, f"{i}".encode(), partition=0)
        assert producer.flush(30) == 0  # written before the abort (which drops what is not sent yet)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    kafka = lookups(client)

    def readable_end() -> int:  # the markers are written after the transaction ends: the end shows 17 a bit later
        with kafka.lock:
            ends = kafka._ends(src, 0)
        assert ends is not None
        return ends[1]

    end = _eventually(lambda: readable_end() == 17 and 17, timeout_s=30)
    settings = CommitJobSettings(OutcomeSource(client, topics=(out,)), names["ckpt"], trigger_s=0.5, recheck_s=1.0)
    queries = start_commit(spark, settings)

    def mark() -> int:
        with kafka.lock:
            return kafka.committed("sp.acked", [(src, 0)])[(src, 0)]

    try:
        _outcomes(client, out, [("ACK", f"{src}/0/{o}") for o in range(10)])
        assert _eventually(lambda: mark() == end, timeout_s=60)
    finally:
        for query in queries:
            query.stop()


def test_a_pattern_never_reads_the_jobs_dead_letters_and_a_watermark_moved_ahead_is_followed(
    spark: Any, bootstrap: str, names: dict[str, str]
) -> None:
    """The outcome dead-letter topic under the outcome prefix, read with a pattern that matches it: its letters are
    not read back (each would be dead-lettered again, for ever). And a watermark an operator moves ahead of the
    job's mark is where the job goes on from: the records below it will never be done."""
    client = {"bootstrap.servers": bootstrap}
    src, prefix = names["source"], names["outcomes"]
    out, dlq = f"{prefix}sp", f"{prefix}dlq"
    _source(client, src, 1, 10)
    create_topics(client, [TopicSpec(out, 1), TopicSpec(dlq, 1)])
    settings = CommitJobSettings(
        OutcomeSource(client, pattern=re.escape(prefix) + ".*"),
        names["ckpt"],
        dlq_topic=dlq,
        trigger_s=0.5,
        dead_letter_trigger_s=0.5,
    )
    queries = start_commit(spark, settings)
    kafka = lookups(client)

    def mark() -> int:
        with kafka.lock:
            return kafka.committed("sp.acked", [(src, 0)])[(src, 0)]

    try:
        _outcomes(client, out, [("ACK", f"{src}/0/{o}") for o in (0, 1, 5)])
        garbage = Producer({**client, "message.max.bytes": 2_000_000})
        produce(garbage, out, b"not an outcome record")
        # As large as the topic takes: with the dead letter's headers, more than Spark's producer takes (1 MB), which
        # refused it, and the job stopped at every restart on it. It is cut.
        produce(garbage, out, b"x" * 1_048_400)
        assert garbage.flush(30) == 0
        _eventually(lambda: mark() == 2 and len(read_all(client, dlq)) == 2)
        with kafka.lock:
            kafka.advance("sp.acked", {(src, 0): 4})  # an operator gives up offsets 2 and 3
        _outcomes(client, out, [("ACK", f"{src}/0/4")])
        _eventually(lambda: mark() == 6)  # 4, then 5, done before
        time.sleep(3)  # six dead-letter triggers
        small, cut = read_all(client, dlq)
        assert small.value() == b"not an outcome record" and len(cut.value() or b"") == 64 * 1024
        assert dict(cut.headers() or [])[DLQ_TRUNCATED] == b"1048400"
        assert all(query.isActive for query in queries)
        query = f"acker-dead-letters-{Path(names['ckpt']).name}"
        assert _eventually(lambda: DeadLetterCounter.of(spark).counts.get(query) == 2)  # said in the log too
    finally:
        stop_queries(spark, queries)


@pytest.mark.parametrize("secured", ["sasl_client", "ssl_client"])
def test_the_commit_job_reads_and_writes_through_a_secured_listener_with_the_services_settings(
    spark: Any, secured: str, names: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """The same librdkafka settings as the service's reach Spark's Java Kafka client translated: a user name and
    password as its login module line (SASL/PLAIN), a private CA file and one PEM file of key and certificate chain
    as its PEM trust store and key store (mutual TLS). On each broker the job reads outcomes, dead-letters garbage
    and commits the watermark, which the driver does with librdkafka and the same settings."""
    client: dict[str, str] = request.getfixturevalue(secured)
    src, out, dlq = names["source"], names["outcomes"] + "sp", f"dlq-{names['uid']}"
    _source(client, src, 1, 4)
    create_topics(client, [TopicSpec(out, 1), TopicSpec(dlq, 1)])
    settings = CommitJobSettings(
        OutcomeSource(client, topics=(out,)), names["ckpt"], dlq_topic=dlq, trigger_s=0.5, dead_letter_trigger_s=1.0
    )
    queries = start_commit(spark, settings)
    try:
        _outcomes(client, out, [("ACK", f"{src}/0/{o}") for o in (0, 1, 2)])
        garbage = Producer(client)
        produce(garbage, out, b"not an outcome record")
        assert garbage.flush(30) == 0
        kafka = lookups(client)

        def mark() -> int:
            with kafka.lock:
                return kafka.committed("sp.acked", [(src, 0)]).get((src, 0), -1)

        _eventually(lambda: mark() == 3)
        letters = _eventually(lambda: read_all(client, dlq))
        assert dict(letters[0].headers())["acker.dlq.reason"] == b"bad-prefix"
    finally:
        for query in queries:
            query.stop()


def test_nacked_records_are_replayed_with_context_then_dead_lettered(
    spark: Any, bootstrap: str, names: dict[str, str]
) -> None:
    client = {"bootstrap.servers": bootstrap}
    uid, src, out = names["uid"], names["source"], names["outcomes"] + "sp"
    _source(client, src, 1, 4)
    create_topics(client, [TopicSpec(out, 1), TopicSpec(f"dlq-{uid}", 1), TopicSpec(f"rp-{uid}.sp", 1)])  # as a spout
    settings = ReplayJobSettings(
        OutcomeSource(client, topics=(out,)),
        names["ckpt"],
        name=f"replay-{uid}",
        trigger_s=0.5,
        max_attempts=2,
        replay_prefix=f"rp-{uid}.",
        dead_letter_topic=f"dead-{uid}",
        progress_topic=f"progress-{uid}",
        dlq_topic=f"dlq-{uid}",
        dead_letter_trigger_s=0.5,
    )
    replay_topic = f"rp-{uid}.sp"
    queries = start_replay(spark, settings)
    try:
        # A nack seen twice (an acker replay re-emits it) is replayed once. Its reason goes with it.
        why = {f"{src}/0/1": "bolt split: ValueError: first"}
        _outcomes(client, out, [("FAILED", f"{src}/0/1"), ("TIMEOUT", f"{src}/0/1")], reasons=why)
        garbage = Producer(client)  # the commit job's to dead-letter, unless this job is told to
        produce(garbage, out, b"not an outcome record")
        assert garbage.flush(30) == 0
        first = _eventually(lambda: read_all(client, replay_topic))
        _outcomes(client, out, [("TIMEOUT", f"{src}/0/1")])  # and again in a later micro-batch (a failover's)
        time.sleep(3)
        assert len(read_all(client, replay_topic)) == 1
        headers = dict(first[0].headers())
        assert (first[0].value(), first[0].key(), headers["app"]) == (b"0-1", b"k", b"h")
        assert (headers[ATTEMPT], headers[ORIGIN], headers[REASON]) == (b"1", f"{src}/0/1".encode(), b"FAILED")
        assert headers[DETAIL] == b"bolt split: ValueError: first"
        # The copy fails again: attempt 2; then again: dead-lettered with its context.
        copy = f"{replay_topic}/0/{first[0].offset()}"
        _outcomes(client, out, [("TIMEOUT", copy)])
        second = _eventually(lambda: read_all(client, replay_topic)[1:])
        assert dict(second[0].headers())[ATTEMPT] == b"2"
        assert dict(second[0].headers())[ORIGIN] == f"{src}/0/1".encode()
        assert DETAIL not in dict(second[0].headers())  # a TIMEOUT says nothing more: the first one's is not kept
        second_copy = f"{replay_topic}/0/{second[0].offset()}"  # transaction markers take offsets too
        _outcomes(client, out, [("FAILED", second_copy)], reasons={second_copy: "bolt count: KeyError: 'é'"})
        dead = _eventually(lambda: read_all(client, f"dead-{uid}"))
        context = dict(dead[0].headers())
        assert (dead[0].value(), context[ATTEMPT], context[ORIGIN]) == (b"0-1", b"2", f"{src}/0/1".encode())
        assert context[DETAIL].decode() == "bolt count: KeyError: 'é'"
        # Each nacked offset was resolved for the commit job.
        resolved = [
            (o, m)
            for r in read_all(client, out)
            if r.key() == b"replay"
            for o, m in zip(*_outcomes_and_ids(r.value() or b""), strict=True)
        ]
        assert resolved == [
            ("REPLAYED", f"{src}/0/1"),
            ("REPLAYED", copy),
            ("DEAD_LETTERED", second_copy),
        ]
        assert read_all(client, f"dlq-{uid}") == []  # after many dead-letter triggers (0.5 s)
    finally:
        for query in queries:
            query.stop()
    # Restarted from its checkpoint: nothing is replayed twice; a new nack is still replayed. Told to dead-letter
    # malformed outcome records, it does, from the first.
    queries = start_replay(spark, replace(settings, dead_letter_malformed=True))
    try:
        _outcomes(client, out, [("OVERLOAD", f"{src}/0/3")])
        _eventually(lambda: len(read_all(client, replay_topic)) == 3)
        time.sleep(3)
        assert len(read_all(client, replay_topic)) == 3
        assert len(read_all(client, f"dead-{uid}")) == 1
        # A record whose headers the client cannot read (a header name that is not UTF-8): a copy would lose them,
        # so it is dead-lettered with its key and value, saying why; the batch goes through.
        unreadable = produce_with_header_name(client, src, 0, name=b"\xff\xfe", value=b"0-4", key=b"k")
        _outcomes(client, out, [("FAILED", unreadable), ("FAILED", f"{src}/0/2")])
        letter = _eventually(lambda: read_all(client, f"dead-{uid}")[1:])[0]
        context = dict(letter.headers())
        assert (letter.value(), letter.key(), context[REASON], context[ORIGIN]) == (
            b"0-4", b"k", b"unreadable-headers", unreadable.encode()
        )  # fmt: skip
        _eventually(lambda: len(read_all(client, replay_topic)) == 4)  # and the other nack of the batch is replayed
        [letter] = _eventually(lambda: read_all(client, f"dlq-{uid}"))
        assert dict(letter.headers())["acker.dlq.reason"] == b"bad-prefix"
    finally:
        for query in queries:
            query.stop()


def test_a_batch_of_many_parts_comes_to_the_driver_in_key_order_a_range_at_a_time(spark: Any) -> None:
    """The replay job's nacks in key order, as `publish` reads them: collected whole when they fit in one part, else
    sorted by the executors in ranges of about a part, brought in one range at a time (Spark jobs run one per range
    as the driver reads on: not all of them before the first rows come)."""
    rows = [(f"sp{i % 3}", f"src/{i % 4}/{i}") for i in range(200)]
    batch = spark.createDataFrame(rows, "spout string, msg_id string").repartition(5).persist()
    try:
        expected = sorted(rows)
        assert [(r.spout, r.msg_id) for r in in_order(batch, 500)] == expected  # one part: collected
        tracker = spark.sparkContext.statusTracker()
        jobs_before = len(tracker.getJobIdsForGroup())
        ranged = in_order(batch, 30)
        first = next(ranged)
        jobs_at_first = len(tracker.getJobIdsForGroup()) - jobs_before
        assert [(first.spout, first.msg_id), *((r.spout, r.msg_id) for r in ranged)] == expected
        assert jobs_at_first < len(tracker.getJobIdsForGroup()) - jobs_before  # more ranges read after the first
    finally:
        batch.unpersist()


def test_outcome_rows_and_malformed_records_on_a_static_dataframe(spark: Any) -> None:
    """The pure transforms, without a stream: outcome records in, one row per outcome (or a reason) out."""
    # "files/2024/06/1/7": a user's id, not coordinates (a topic name has no "/"); taken as topic "files/2024/06",
    # Kafka refused every question about it, and both jobs failed the micro-batch at every restart.
    # Nor are "t/0\n/5" (Java's $ matches before a line break) and "./0/5" (a name Kafka refuses).
    good = encode_outcome_rows("sp", [("ACK", 5, "t/1/7", 12), ("TIMEOUT", -6, "t/0/3", 30000), ("ACK", 7, "x", 1),
                                      ("ACK", 8, "files/2024/06/1/7", 1), ("ACK", 9, "t/0\n/5", 1),
                                      ("ACK", 10, "./0/5", 1)])  # fmt: skip
    columns = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    stamp = datetime(2026, 1, 1)
    raw = spark.createDataFrame(
        [
            (None, good, "out", 0, 10, stamp),
            (None, b"AKO\x09" + good[4:], "out", 0, 11, stamp),  # an unknown version
            (None, good[:-3], "out", 0, 12, stamp),  # truncated
            (None, b"AKO", "out", 0, 40, stamp),  # the prefix cut: not an unknown version
            # Claims of 2 billion outcomes, of a spout name of 2 GB, in 12 bytes: Avro's reader allocated them and
            # Spark's JVM ran out of memory, killed, at every restart on the record.
            (None, b"AKO\x01\x04sp\x00\x00\x80\xd0\xac\xf3\x0e", "out", 0, 13, stamp),
            (None, b"AKO\x01\x80\xd0\xac\xf3\x0esp", "out", 0, 14, stamp),
            # Spouts no topic can be named after: the replay job asked Kafka about their replay topics, refused, and
            # stopped at every run; the commit job took them in.
            *(
                (None, encode_outcome_rows(spout, [("TIMEOUT", 4, "t/0/9", 1)]), "out", 0, 15 + i, stamp)
                for i, spout in enumerate(("a/b", "x" * 201, "new\nline", ""))
            ),
            # What the spouts' reader refuses, and the jobs took:
            # an offset below -1, a source or spout name that is not UTF-8 (Avro's Java reader does not check), a
            # source index past the sources.
            *((None, value, "out", 0, 19 + i, stamp) for i, value in enumerate(_refused_by_spouts())),
        ],
        columns,
    )
    spouts_said = []  # by the spouts' reader
    for value in _refused_by_spouts():
        with pytest.raises(WireError) as refused:
            decode_outcomes(value)
        spouts_said.append(refused.value.reason.encode())
    rows = [r.asDict() for r in outcome_rows(raw).orderBy("anchor").collect()]
    assert [(r["outcome"], r["anchor"], r["msg_id"]) for r in rows] == [
        ("TIMEOUT", -6, "t/0/3"),
        ("ACK", 5, "t/1/7"),
        ("ACK", 7, "x"),
        ("ACK", 8, "files/2024/06/1/7"),
        ("ACK", 9, "t/0\n/5"),
        ("ACK", 10, "./0/5"),
    ]
    assert [(r["source_topic"], r["source_partition"], r["source_offset"]) for r in rows] == [
        ("t", 0, 3),
        ("t", 1, 7),
        *[(None, None, None)] * 4,
    ]
    assert [tuple(r) for r in done_offsets(raw).collect()] == [("sp", "t/1", 7)]  # coordinates alone
    assert [
        (r.spout, r.topic, r.partition, r.bucket, bytes(r.bits)) for r in done_bitmaps(done_offsets(raw)).collect()
    ] == [(r.spout, r.topic, r.partition, r.bucket, r.bits) for r in bitmap_rows("sp", "t", 1, [7])]
    mixed = encode_outcome_rows(
        "sp",
        [
            ("ACK", 1, "t/0/1", 0),
            ("ACK", 2, "t/1/2", 0),
            ("REPLAYED", 0, "t/0/4", 0),
            ("FAILED", 3, "t/0/5", 0),
            *(("ACK", 10 + o, f"t/0/{o}", 0) for o in (9, 7, 6, 7, 2)),  # out of order, and a duplicate
        ],
    )
    per_offset = done_offsets(spark.createDataFrame([(None, mixed, "out", 0, 13, stamp)], columns)).collect()
    assert [tuple(r) for r in per_offset] == [
        ("sp", "t/0", 1),
        ("sp", "t/1", 2),
        ("sp", "t/0", 4),
        *(("sp", "t/0", o) for o in (9, 7, 6, 7, 2)),  # as they come: gathered in bitmaps (`done_bitmaps`)
    ]
    # The driver's view of a micro-batch: per partition, bitmaps of 32,768 offsets, read as runs.
    offsets = [1, 2, 3, 32_767, 32_768, 2**40 + 5, 2]  # across a bucket's end; far past a double's integers
    done = spark.createDataFrame([("sp", "t/0", o) for o in offsets], "spout string, source string, offset long")
    bitmaps = sorted(done_bitmaps(done).collect(), key=lambda r: r.bucket)
    mark = PartitionMark(0)
    for row in bitmaps:
        mark.add_runs(*bitmap_runs(row.bucket, row.bits))
    assert mark.runs == [(1, 4), (32_767, 32_769), (2**40 + 5, 2**40 + 6)]  # one run across two buckets
    assert [(r.bucket, bytes(r.bits)) for r in bitmaps] == [
        (r.bucket, r.bits) for r in bitmap_rows("sp", "t", 0, offsets)
    ]  # the unit tests' rows are Spark's
    assert [(r.msg_id, r.reason) for r in nacks(outcome_rows(raw)).collect()] == [("t/0/3", "TIMEOUT")]
    # With headers: the reasons of the FAILED outcomes, by message id; a header that is not JSON says nothing.
    failing = encode_outcome_rows("sp", [("FAILED", 1, "t/0/1", 0), ("FAILED", 2, "t/0/2", 0), ("ACK", 3, "t/0/3", 0)])
    why = fail_reasons.encode({"t/0/1": "bolt b: E: x", "t/0/3": "not a failure"})
    with_headers = spark.createDataFrame(
        [
            (None, failing, "out", 0, 14, stamp, [(fail_reasons.HEADER, why), ("other", b"1")]),
            (None, failing, "out", 0, 15, stamp, [(fail_reasons.HEADER, b"{not json"), ("x", b"[" * 5000)]),
            (None, failing, "out", 0, 16, stamp, [(fail_reasons.HEADER, b"[" * 5000)]),  # nested past Jackson's depth
            (None, failing, "out", 0, 17, stamp, [(fail_reasons.HEADER, b'{"t/0/1": "' + b"z" * 900 + b'\xff"}')]),
            (None, failing, "out", 0, 18, stamp, None),
        ],
        f"{columns}, headers array<struct<key string, value binary>>",
    )
    assert [(r.msg_id, r.detail) for r in nacks(outcome_rows(with_headers)).collect()] == [
        ("t/0/1", "bolt b: E: x"), ("t/0/2", None), ("t/0/1", None), ("t/0/2", None), ("t/0/1", None), ("t/0/2", None),
        ("t/0/1", "z" * 500), ("t/0/2", None), ("t/0/1", None), ("t/0/2", None),
    ]  # fmt: skip
    assert [r.detail for r in outcome_rows(raw).collect()] == [None] * 6  # read without headers
    # Read alike by both: ints written in 5 bytes past 32 bits (their low 32 bits), bytes after the record.
    wrapped, trailing = ints_past_32_bits()[0], encode_outcome_rows("sp", [("ACK", 9, "t/0/3", 4)]) + b"\x00\x07"
    alike = spark.createDataFrame([(None, v, "out", 0, i, stamp) for i, v in enumerate((wrapped, trailing))], columns)
    jobs_read = [(r.acker_partition, r.outcome, r.anchor, r.msg_id, r.latency_ms)
                 for r in outcome_rows(alike).orderBy("anchor").collect()]  # fmt: skip
    spouts_read = [(d.acker_partition, *outcome) for d in map(decode_outcomes, (wrapped, trailing))
                   for outcome in zip(d.outcomes, d.anchors, d.msg_ids, d.latency_ms, strict=True)]  # fmt: skip
    assert (
        jobs_read
        == spouts_read
        == [(3, "FAILED", 5, "t/1/7", 1), (3, "ACK", 6, "t/0/8", 2), (-1, "ACK", 9, "t/0/3", 4)]
    )
    letters = malformed(raw, whole_max=10**6).collect()
    reasons = sorted({h.key: h.value for h in r.headers}["acker.dlq.reason"] for r in letters)
    assert reasons == [b"bad-column"] + [b"bad-prefix"] + [b"bad-spout"] * 4 + [b"inconsistent-columns"] * 2 + [
        b"undecodable"
    ] * 8 + [b"unknown-version"]
    headers = [{h.key: h.value for h in r.headers} for r in letters]
    jobs_said = {int(h["acker.dlq.offset"]): h["acker.dlq.reason"] for h in headers}
    expected = [b"bad-column", b"undecodable", b"undecodable", *[b"inconsistent-columns"] * 2, *[b"undecodable"] * 3]
    assert [jobs_said[19 + i] for i in range(len(spouts_said))] == spouts_said == expected
    assert all(DLQ_TRUNCATED not in {h.key for h in r.headers} for r in letters)
    # Over what the sink's producer takes, cut (a copy refused stopped the job at every restart on it).
    keyed = spark.createDataFrame([(b"k" * 30, b"v" * 40, "out", 0, 20, stamp), (b"k", b"v" * 5, "out", 0, 21, stamp)],
                                  columns)  # fmt: skip
    small, cut = sorted(malformed(keyed, whole_max=20, kept=8).collect(), key=lambda r: len(r.key))
    said = {h.key: h.value for h in cut.headers}
    assert (cut.key, cut.value) == (b"k" * 8, b"v" * 8)
    assert (said[DLQ_TRUNCATED], said[DLQ_KEY_TRUNCATED], said["acker.dlq.offset"]) == (b"40", b"30", b"20")
    assert (small.key, small.value) == (b"k", b"v" * 5) and DLQ_TRUNCATED not in {h.key for h in small.headers}


def _refused_by_spouts() -> list[bytes]:
    """Outcome records Avro's Java reader reads whole that `decode_outcomes` refuses: an offset of -2; a source,
    then a spout name, with a byte that is not UTF-8; a source index past the sources, and one of -1 (written past 32
    bits); and records Java's reader refuses with another fault too, which both say undecodable."""
    record = {"spout": "sp", "acker_partition": 0, "acker_offset": 0, "outcomes": ["ACK"], "anchors": [4],
              "sources": ["tZ/0"], "source_index": [0], "offsets": [-2], "latency_ms": [1]}  # fmt: skip
    below = PREFIX + fastavro_write(record)
    bad_source = PREFIX + fastavro_write({**record, "offsets": [9]}).replace(b"tZ/0", b"t\xff/0")
    bad_spout = PREFIX + fastavro_write({**record, "spout": "sZ", "offsets": [9]}).replace(b"sZ", b"s\xff", 1)
    elsewhere = PREFIX + fastavro_write({**record, "source_index": [1], "offsets": [9]})  # no source 1
    # Undecodable by Java's reader, with a fault in the columns as fastavro reads them (it reads more than Java's).
    valid = fastavro_write({**record, "offsets": [9]})
    head, outcomes, anchors = b"\x04sp\x00\x00", b"\x02\x00\x00", b"\x02\x08\x00"  # [ACK], [4]
    assert valid.startswith(head + outcomes + anchors)
    smallest_block = valid.replace(head + outcomes, head + b"\xff" * 9 + b"\x01\x00\x00")  # -2⁶³ items, 0 bytes
    six_bytes = fastavro_write(record).replace(head[:3], head[:3] + b"\x80" * 5, 1)  # partition 0 in 6 bytes, offset -2
    past_enum = valid.replace(head + outcomes + anchors, head + b"\x02\x0c\x00" + b"\x04\x08\x0a\x00")  # 6; 2 anchors
    return [below, bad_source, bad_spout, elsewhere, ints_past_32_bits()[1],
            *(PREFIX + v for v in (smallest_block, six_bytes, past_enum))]  # fmt: skip


def fastavro_write(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(OUTCOME_SCHEMA)), record)
    return out.getvalue()


def test_a_spout_restarted_after_the_jobs_resumes_at_their_watermark(
    spark: Any, config: ServiceConfig, names: dict[str, str]
) -> None:
    """The whole loop on one source partition: the spout, a bolt, the acker, and both jobs. One record is dropped
    once (it times out and is replayed), one always fails (replayed once, then dead-lettered). Once the jobs have
    published the watermark, a new spout of the same group reads only records written after it."""
    uid, src, mid = names["uid"], names["source"], f"mid-{names['uid']}"
    config = replace(config, timeout_s=6.0, replay_prefix=f"rp-{uid}.")
    client = config.client()
    create_acker_topics(config, ["sp"])
    create_topics(client, [TopicSpec(src, 1), TopicSpec(mid, 1)])
    _write(client, src, [f"r{i}".encode() for i in range(20)])
    settings = SpoutSettings("sp", src, mid, group=f"sg-{uid}")

    def process(message: BoltInput, collector: Collector) -> None:
        replayed = any(key == ATTEMPT for key, _ in message.headers)
        if message.value == b"r13":
            collector.fail(message)  # a poison record
        elif message.value != b"r10" or replayed:  # r10 is dropped the first time: it times out
            collector.ack(message)

    source = OutcomeSource(client, topics=(config.outcome_topic("sp"),))
    commit = CommitJobSettings(source, f"{names['ckpt']}/commit", trigger_s=0.5, groups={"sp": settings.group},
                               dlq_topic=f"dlq-{uid}")  # fmt: skip
    replay = ReplayJobSettings(source, f"{names['ckpt']}/replay", name=f"replay-{uid}", trigger_s=0.5,
                               max_attempts=1, backoff=Backoff(first_ms=200), replay_prefix=config.replay_prefix,
                               dead_letter_topic=f"dead-{uid}",
                               progress_topic=f"progress-{uid}", dlq_topic=f"dlq-{uid}")  # fmt: skip
    replay_topic = config.replay_topic("sp")
    kafka = lookups(client)

    def watermarks() -> dict[tuple[str, int], int]:
        with kafka.lock:
            return kafka.committed(settings.watermark_group, [(src, 0), (replay_topic, 0)])

    # The queries are stopped whatever happens to the stages: left running, their names (one per job in a session)
    # would fail every later test that starts a job.
    queries = start_commit(spark, commit)
    stages: list[Running] = []
    try:
        queries += start_replay(spark, replay)
        spout = Spout(config, settings)
        stages.append(ServiceThread(config))
        stages.append(Running(Bolt(config, mid, f"b-{uid}", process, basic=False)))
        stages.append(Running(spout))
        # r10's copy is acked; r13's copy fails and is dead-lettered: every offset of both topics is resolved.
        dead = _eventually(lambda: read_all(client, f"dead-{uid}"), timeout_s=150)
        assert [(r.value(), dict(r.headers())[ORIGIN]) for r in dead] == [(b"r13", f"{src}/0/13".encode())]
        # r13 fails at once, r10 after its 6 s timeout (not less: on a busy machine no other tree may time out): r13 may
        # be dead-lettered before r10's copy is written.
        copies = _eventually(lambda: len(found := read_all(client, replay_topic)) >= 2 and found)
        assert sorted(c.value() or b"" for c in copies) == [b"r10", b"r13"]
        end = (copies[-1].offset() or 0) + 1  # past the last copy (a transaction marker follows: no record to wait for)
        _eventually(lambda: watermarks() == {(src, 0): 20, (replay_topic, 0): end}, timeout_s=60)
        assert spout.counters["read"] == 22  # the 20 records and the two copies
        stages.pop().stop()  # the spout
        _write(client, src, [b"r20", b"r21", b"r22"])
        again = Spout(config, settings)
        stages.append(Running(again))
        _eventually(lambda: again.counters["acked"] == 3)  # its outcome reader starts before its first tree
        time.sleep(2)  # nothing else comes: not the done records, not the copies
        assert (again.counters["read"], again.counters["acked"]) == (3, 3)
        _eventually(lambda: watermarks()[(src, 0)] == 23)
    finally:
        try:
            for stage in reversed(stages):
                stage.stop()
        finally:
            stop_queries(spark, queries)  # each, whatever the others do


def _write(client: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer(client)
    for value in values:
        produce(producer, topic, value, partition=0)
    assert producer.flush(30) == 0


def test_the_mark_store_saves_each_batch_and_loads_the_newest(spark: Any, tmp_path: Path) -> None:
    store = MarkStore(spark, str(tmp_path))
    assert store.load() == {}
    for batch in range(KEEP + 3):
        store.save(batch, {("sp", "t/x", 3): PartitionMark(batch, [(batch + 2, batch + 5)], batch + 1)})
    store.save(KEEP + 2, {("sp", "t/x", 3): PartitionMark(99, [], -1)})  # a batch that Spark runs again
    assert MarkStore(spark, str(tmp_path)).load() == {("sp", "t/x", 3): PartitionMark(99, [], -1)}
    assert sorted(p.name for p in (tmp_path / "marks-state").glob("*.json")) == sorted(
        f"{b}.json" for b in range(3, KEEP + 3)
    )
    # The query's checkpoint removed and the job started again: its batch ids start at 0 again.
    store.save(0, {("sp", "t/x", 3): PartitionMark(100, [], -1)})
    assert MarkStore(spark, str(tmp_path)).load() == {("sp", "t/x", 3): PartitionMark(100, [], -1)}
    assert [p.name for p in (tmp_path / "marks-state").glob("*.json")] == ["0.json"]


def test_a_marks_file_cut_short_under_its_checksum_file_is_passed_over(spark: Any, tmp_path: Path) -> None:
    """Hadoop's local file system checks a file against its ``.<name>.crc``: the newest marks file cut short (a power
    loss) failed that check inside the JVM, an error the store did not take for an unreadable file, and the job
    failed at every start."""
    store = MarkStore(spark, str(tmp_path))
    for batch in (1, 2):
        store.save(batch, {("sp", "t/x", 3): PartitionMark(batch * 10, [], -1)})
    newest = tmp_path / "marks-state" / "2.json"
    assert (tmp_path / "marks-state" / ".2.json.crc").exists()  # what makes the check
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    assert MarkStore(spark, str(tmp_path)).load() == {("sp", "t/x", 3): PartitionMark(10, [], -1)}


def test_a_restarted_replay_job_finds_its_progress_and_a_wiped_checkpoint_starts_afresh(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    """Its last published batch is found however many other jobs wrote to the shared progress topic since; the
    checkpoint's run id is the same at every start, and new when the checkpoint is wiped (batch ids restart at 0:
    with the old identity, every batch up to the old last one would be skipped, and its nacks lost)."""
    uid = uuid.uuid4().hex[:8]
    client = {"bootstrap.servers": bootstrap}
    settings = ReplayJobSettings(
        OutcomeSource(client, topics=(f"out-{uid}",)), str(tmp_path / "ckpt"), name=f"replay-{uid}",
        progress_topic=f"progress-{uid}", dead_letter_topic=f"dead-{uid}",
    )  # fmt: skip
    run = run_id(spark, settings.checkpoint, QUERY)
    assert run_id(spark, settings.checkpoint, QUERY) == run
    first = _Publisher(settings, settings.identity(run))
    assert first.last == -1
    for batch in range(3):
        first.publish(batch, [], lambda topic, partition, offsets: {})
    assert first.last == 2
    producer = Producer(client)
    for batch in range(1500):  # other jobs' progress
        produce(producer, settings.progress_topic, str(batch).encode(), key=b"another-job")
    assert producer.flush(30) == 0
    assert _Publisher(settings, settings.identity(run)).last == 2  # fences the first one, and finds batch 2
    shutil.rmtree(tmp_path / "ckpt" / QUERY)  # the query's checkpoint alone
    again = run_id(spark, settings.checkpoint, QUERY)
    assert again != run and _Publisher(settings, settings.identity(again)).last == -1
    shutil.rmtree(tmp_path / "ckpt")
    assert run_id(spark, settings.checkpoint, QUERY) not in (run, again)
    # A checkpoint of an earlier version (its id beside the query's checkpoint, not in it): its id is taken over
    # where the query ran batches, once.
    earlier = tmp_path / "ckpt" / "run-id"
    shutil.move(tmp_path / "ckpt" / QUERY / RUN_ID, earlier)
    old = earlier.read_text()
    (tmp_path / "ckpt" / QUERY / "commits").mkdir()
    (tmp_path / "ckpt" / QUERY / "commits" / "7").write_text("v1")
    assert run_id(spark, settings.checkpoint, QUERY) == old and not earlier.exists()
    shutil.rmtree(tmp_path / "ckpt" / QUERY)  # wiped after the migration: a new id, not the earlier one again
    assert run_id(spark, settings.checkpoint, QUERY) != old
    earlier.write_text(old)  # an earlier version's id, where Spark has only started the query (no batch yet)
    shutil.rmtree(tmp_path / "ckpt" / QUERY)
    (tmp_path / "ckpt" / QUERY).mkdir()
    (tmp_path / "ckpt" / QUERY / "metadata").write_text("{}")
    assert run_id(spark, settings.checkpoint, QUERY) != old and not earlier.exists()


def test_a_spark_job_for_a_spout_whose_outcome_topic_does_not_exist_says_so_before_spark_starts(
    bootstrap: str, names: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("spark_jobs.session.spark_session", lambda *_, **__: pytest.fail("Spark started"))
    argv = ["spark", "replay", "--spout", "nosuch", "--bootstrap-servers", bootstrap, "--checkpoint", names["ckpt"],
            "--outcome-prefix", names["outcomes"]]  # fmt: skip
    assert main(argv) == 2
    assert f"outcome topic {names['outcomes']}nosuch does not exist" in capsys.readouterr().err


def test_a_spark_job_makes_its_own_topics_before_spark_starts(
    bootstrap: str, names: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its dead-letter topics and the replay job's progress, where a cluster does not create topics on first use: the
    first malformed outcome record stopped the job (no topic for its dead letter), and every start after."""

    class SparkStartedError(Exception):
        pass

    def spark_started(*_args: object, **_kwargs: object) -> None:
        raise SparkStartedError

    monkeypatch.setattr("spark_jobs.session.spark_session", spark_started)
    # Its stop after a failed start ends every Spark JVM this process started: the tests' session, for the tests after.
    monkeypatch.setattr("spark_jobs.session.stop", lambda _: None)
    uid = names["uid"]
    flags = ["--bootstrap-servers", bootstrap, "--outcome-prefix", names["outcomes"], "--replay-prefix", f"rp-{uid}.",
             "--replay-dlq-topic", f"dead-{uid}"]  # fmt: skip
    config = load(build_parser().parse_args(["spark", "replay", *flags, "--spout", "sp", "--checkpoint", "x"]))
    create_topics(config.client(), [TopicSpec(config.outcome_topic("sp"), 1)])
    argv = ["spark", "replay", *flags, "--spout", "sp", "--checkpoint", names["ckpt"]]
    with pytest.raises(SparkStartedError):
        main(argv)
    own = spark_job_topics(config)
    assert {spec.name for spec in own} == {f"{names['outcomes']}dlq", f"dead-{uid}", f"rp-{uid}.progress"}
    assert [partition_count(config.client(), spec.name) for spec in own] == [1, 1, 1]
    # And the replay job is given what its flags say: malformed outcome records are the commit job's unless told.
    given = [started_with(monkeypatch, argv + extra) for extra in ([], ["--dead-letter-malformed"])]
    assert [s.dead_letter_malformed for s in given] == [False, True]


def test_a_job_spark_cannot_start_says_why_in_one_line(config: ServiceConfig, tmp_path: Path) -> None:
    """A checkpoint Spark cannot make gave a traceback ending in "Py4JJavaError: <exception str() failed>": the JVM
    was stopped before the error was printed, and its text with it. The outcome topic is the test's own and exists
    (a missing one is refused before Spark starts: this test passed only after another had made the default one)."""
    create_topics(config.client(), [TopicSpec(config.outcome_topic("sentences"), 1)])
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    run = subprocess.run(
        [sys.executable, "-m", "acker.cli", "spark", "commit", "--bootstrap-servers", config.bootstrap_servers,
         "--outcome-prefix", config.outcome_prefix, "--replay-prefix", config.replay_prefix, "--replay-dlq-topic",
         config.replay_dlq_topic, "--spout", "sentences", "--checkpoint", str(blocked / "ck"), "--spark-log",
         str(tmp_path / "spark.log")],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    [said] = [line for line in run.stderr.splitlines() if line.startswith("acker: ")]
    assert said.startswith("acker: Spark could not start the commit job: ") and str(blocked) in said
    assert "Traceback" not in run.stderr


def test_a_job_failing_before_its_first_micro_batch_is_not_started_again(config: ServiceConfig, tmp_path: Path) -> None:
    """Kafka answered as the job started, so a query that fails before any micro-batch has ended met a setting that
    no restart mends (here a SASL login Spark's Java admin client cannot make: no JAAS line, none in the JVM): the
    job says so and stops, rather than try again ten times over a quarter of an hour."""
    create_topics(config.client(), [TopicSpec(config.outcome_topic("sp"), 1)])
    run = subprocess.run(
        [sys.executable, "-m", "acker.cli", "spark", "commit", "--bootstrap-servers", config.bootstrap_servers,
         "--outcome-prefix", config.outcome_prefix, "--replay-prefix", config.replay_prefix, "--replay-dlq-topic",
         config.replay_dlq_topic, "--spout", "sp", "--checkpoint", str(tmp_path / "ckpt"), "--spark-log",
         str(tmp_path / "spark.log"), "--java-kafka", "security.protocol=SASL_PLAINTEXT", "--java-kafka",
         "sasl.mechanism=PLAIN"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr[-3000:]
    said = [line for line in run.stderr.splitlines() if line.startswith("acker: ")]
    assert said == [
        "acker: query acker-commit stopped: Failed to create new KafkaAdminClient",
        "acker: the job failed before its first micro-batch ended, with Kafka answering: not started again",
    ], run.stderr[-3000:]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"linger.ms": "0.5"}, "Invalid value 0.5 for configuration linger.ms: Not a number of type LONG"),
        ({"acks": "1", "enable.idempotence": "true"}, "Must set acks to all in order to use the idempotent producer"),
        ({"default.api.timeout.ms": "5000"}, "default.api.timeout.ms=5000 below request.timeout.ms=30000"),
        ({"delivery.timeout.ms": "10000"}, "delivery.timeout.ms=10000 below linger.ms + request.timeout.ms (30000)"),
        ({"request.timeout.ms": "4000", "default.api.timeout.ms": "5000", "acks": "1"}, None),
        ({"linger.ms": str(2**31 - 1), "delivery.timeout.ms": str(2**31 - 1)}, None),  # their sum capped, as Java's
    ],
)
def test_what_sparks_java_client_refuses_is_found_before_the_queries_start(
    spark: Any, given: dict[str, str], said: str | None
) -> None:
    """Settings librdkafka takes and the Java client refuses, some of them only as Spark makes its producer, at the
    first malformed outcome record: the job stopped then, and at every restart after."""
    settings = {"bootstrap.servers": "127.0.0.1:1", **given}
    if said is None:
        check_in_jvm(spark, settings, producer=True)
        return
    with pytest.raises(ConfigError, match=re.escape(said)):
        check_in_jvm(spark, settings, producer=True)
    if {"acks", "delivery.timeout.ms", "linger.ms"} & set(given):  # the producer's alone: a replay job makes none
        check_in_jvm(spark, settings, producer=False)


def test_a_job_with_settings_sparks_java_client_refuses_stops_before_its_queries_start(
    spark: Any,
    config: ServiceConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A librdkafka setting of the service's table that Java's client reads otherwise (its producer's delivery timeout
    below its request timeout): a one-line error, exit 2, no query started (the tests' session stands for the
    job's). Not for a replay job that dead-letters nothing, which makes no producer; nor for a setting Spark's
    readers get a value of their own for (an isolation level Java would refuse in capitals)."""

    class StartedError(Exception):
        pass

    def started(*_: object) -> None:
        raise StartedError

    create_topics(config.client(), [TopicSpec(config.outcome_topic("sp"), 1)])
    monkeypatch.setattr("spark_jobs.session.spark_session", lambda *_, **__: spark)
    monkeypatch.setattr("spark_jobs.session.stop", lambda _: None)  # the tests' session goes on
    monkeypatch.setattr("spark_jobs.commit_job.start", started)
    monkeypatch.setattr("spark_jobs.replay_job.start", started)
    flags = ["--bootstrap-servers", config.bootstrap_servers, "--outcome-prefix", config.outcome_prefix,
             "--replay-prefix", config.replay_prefix, "--replay-dlq-topic", config.replay_dlq_topic, "--spout", "sp",
             "--checkpoint", str(tmp_path / "ckpt")]  # fmt: skip
    assert main(["spark", "commit", "--kafka", "delivery.timeout.ms=10000", *flags]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("acker: ")]
    assert line.startswith("acker: Spark's Java Kafka client refuses delivery.timeout.ms=10000 "), line
    with pytest.raises(StartedError):
        main(["spark", "replay", "--kafka", "delivery.timeout.ms=10000", *flags])
    with pytest.raises(StartedError):
        main(["spark", "commit", "--kafka", "isolation.level=READ_COMMITTED", *flags])


_STOPPED_MID_BATCH = """
import sys, time
from pathlib import Path
from spark_jobs.session import QUERIES_LOGGER, SHELL_LOGGER, _log_level, spark_session, stop, stop_queries
from spark_jobs.stopping import batch_function
spark = spark_session("stopped-mid-batch", jvm_output=Path(sys.argv[1]))
def slow(batch, _):  # a Spark job of its own, running when the query is stopped
    batch.rdd.map(lambda _: time.sleep(5) or 1).count()
rate = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
query = rate.writeStream.foreachBatch(batch_function(slow)).trigger(processingTime="0.1 seconds").start()
while not query.status["isTriggerActive"] or not query.recentProgress:
    time.sleep(0.1)
time.sleep(1)
before = {logger: _log_level(spark, logger) for logger in (QUERIES_LOGGER, SHELL_LOGGER)}
stop_queries(spark, [query], between_batches_s=0)
after = {logger: _log_level(spark, logger) for logger in before}
assert after == before, f"the quieted loggers' levels are not put back: {before} -> {after}"
spark.sparkContext.setLogLevel("ERROR")  # the root's: loggers without a level of their own follow it
followed = {logger: _log_level(spark, logger) for logger in before}
assert followed == dict.fromkeys(before, "ERROR"), f"a quieted logger keeps a level of its own: {followed}"
stop(spark)
"""


def test_a_query_stopped_mid_batch_is_not_logged_as_terminated_with_error(tmp_path: Path) -> None:
    """The batch it interrupts fails (`spark_jobs.stopping`), and Spark logged the query's "terminated with error"
    with the Java trace: 40 lines and more after a Ctrl-C, when a trigger (one every ``trigger_s``, data or not)
    came between the wait for the end of a batch and the stop. And the JVM leaves nothing where the command ran
    (Spark 4.0.0 left an ``artifacts`` directory there, SPARK-52396)."""
    output = tmp_path / "spark.log"
    subprocess.run([sys.executable, "-c", _STOPPED_MID_BATCH, str(output)], check=True, timeout=240, cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark.log"]
    said = output.read_text()
    assert "log4j" in said  # the JVM's output is here
    # An executor's heartbeat the driver was too loaded to answer in time logs its trace (seen in CI): not the stop's.
    said = re.sub(r"^.*WARN Executor: Issue communicating with driver in heartbeater\n(?:(?!\d\d/\d\d/\d\d ).*\n)*",
                  "", said, flags=re.MULTILINE)  # fmt: skip
    assert "terminated with error" not in said and not re.search(r"^\s+at ", said, re.MULTILINE), said[-3000:]


_STUCK_IN_A_BATCH = """
import logging, sys, threading, time
from pathlib import Path
from spark_jobs.session import STOP_TIMEOUT, STOP_TIMEOUT_DEFAULT, spark_session, stop, stop_queries
logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
spark = spark_session("stuck-in-a-batch", jvm_output=Path(sys.argv[1]))
assert spark.conf.get(STOP_TIMEOUT) == STOP_TIMEOUT_DEFAULT
spark.conf.set(STOP_TIMEOUT, "2s")
started, ended = threading.Semaphore(0), threading.Event()
def stuck(batch, _):  # Python code, which Spark's interruption does not stop (a Kafka flush, a broker away)
    started.release()
    time.sleep(600)
    ended.set()
rate = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
queries = [rate.writeStream.foreachBatch(stuck).start() for _ in range(2)]  # a job of two queries, as the commit job
assert started.acquire(timeout=120) and started.acquire(timeout=120)
began = time.monotonic()
stop_queries(spark, queries, between_batches_s=0)
print("stopped in", round(time.monotonic() - began), "s; a batch ended:", ended.is_set(), flush=True)
stop(spark)
"""


def test_a_job_whose_batch_does_not_end_stops_all_the_same(tmp_path: Path) -> None:
    """A micro-batch stuck in Python code held `stop_queries` until it ended (Spark waits for ever by default):
    a job told to stop hung as long, past a supervisor's patience. Now the stop gives up after
    ``spark.sql.streaming.stopTimeout`` and says so; the batch runs again when the job starts again."""
    run = subprocess.run([sys.executable, "-c", _STUCK_IN_A_BATCH, str(tmp_path / "spark.log")],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "a batch ended: False" in run.stdout
    assert run.stdout.count("WARNING a query's micro-batch did not end within 2s of its stop") == 2


def test_the_jobs_jvm_keeps_no_avro_reader_per_micro_batch(spark: Any) -> None:
    """Avro's fast reader cached a reader and a copy of the outcome schema for every decode of every micro-batch, and
    never let them go (AVRO-3524): a 45-minute soak grew the commit job's live heap by 450 MB an hour. The jobs turn
    it off; Avro's other reader decodes the same."""
    jvm = spark.sparkContext._jvm
    assert not jvm.org.apache.avro.generic.GenericData.get().isFastReaderEnabled()
    record = encode_outcome_rows("s", [("ACK", 5, "src/0/1", 3)])
    frame = spark.createDataFrame([(bytearray(record),)], "value binary")
    for _ in range(20):  # a job each, as a micro-batch's tasks: each parses the schema again
        [row] = frame.select(outcomes.decoded(frame).alias("o")).collect()
        assert list(row.o.anchors) == [5]
    jcmd = shutil.which("jcmd")
    if jcmd is not None:  # the JDK's: how many readers the driver holds
        pid = str(jvm.java.lang.ProcessHandle.current().pid())
        histogram = subprocess.run([jcmd, pid, "GC.class_histogram"], capture_output=True, text=True, timeout=60,
                                   check=True)  # fmt: skip
        readers = re.search(r"\s(\d+)\s+\d+\s+org\.apache\.avro\.io\.FastReaderBuilder\$RecordReader\s*$",
                            histogram.stdout, re.MULTILINE)  # fmt: skip
        assert readers is None or int(readers[1]) < 20, readers
