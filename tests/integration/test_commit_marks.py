"""The watermarks against a real broker, without Spark: the commit job's marks when source topics are deleted, or
deleted and created again, under a running job (the mark store, a file system edge, is kept in memory); and
``acker watermarks``, which shows them."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from acker import cli
from acker.config import ServiceConfig
from acker.kafka.clients import TopicSpec, create_topics
from acker.kafka.lookups import Commits, OpenTransactionError, lookups
from spark_jobs import commit_job
from spark_jobs.commit_job import CommitJobSettings, Marks, OutcomeSource
from spark_jobs.mark_store import Key
from spark_jobs.watermark import PartitionMark
from tests.bitmaps import bitmap_rows
from tests.integration.helpers import read_all


class _Store:
    """`MarkStore` in memory."""

    def __init__(self) -> None:
        self.saved: dict[Key, PartitionMark] = {}
        self.topic_ids: dict[str, str] = {}

    def load(self) -> dict[Key, PartitionMark]:
        return dict(self.saved)

    def save(self, _batch: int, marks: dict[Key, PartitionMark], topic_ids: dict[str, str] | None = None) -> None:
        self.saved, self.topic_ids = dict(marks), dict(topic_ids or {})


def _rows(spout: str, topic: str, offsets: list[int]) -> list[Any]:
    return bitmap_rows(spout, topic, 0, offsets)


def _fill(config: ServiceConfig, topic: str, n: int) -> None:
    create_topics(config.client(), [TopicSpec(topic, 1)])
    producer = Producer(config.client())
    for i in range(n):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0


def _delete(config: ServiceConfig, topic: str) -> None:
    admin = AdminClient(config.client())
    admin.delete_topics([topic])[topic].result()
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)


def test_a_source_topic_deleted_or_created_again_neither_stops_the_job_nor_gets_the_old_watermark(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = uuid.uuid4().hex[:8]
    kept, recreated, deleted = (f"{name}-{run}" for name in ("kept", "recreated", "deleted"))
    for topic in (kept, recreated, deleted):
        _fill(config, topic, 10)
    source = OutcomeSource(client=config.client(), topics=("o",))
    marks = Marks(CommitJobSettings(source, checkpoint="unused"), _Store())  # type: ignore[arg-type]
    kafka = lookups(config.client())

    def committed(spout: str, topic: str) -> int:
        with kafka.lock:
            return kafka.committed(f"{spout}.acked", [(topic, 0)])[(topic, 0)]

    def publish(batch: int, rows: list[Any]) -> None:
        for group, group_marks in marks.apply(rows, batch).items():
            with kafka.lock:
                kafka.advance(group, group_marks)

    publish(0, _rows("a", kept, [0, 1]) + _rows("b", recreated, list(range(10))) + _rows("c", deleted, [0, 5]))
    assert (committed("a", kept), committed("b", recreated), committed("c", deleted)) == (2, 10, 1)

    _delete(config, recreated)
    _delete(config, deleted)  # its mark waits above offset 1: touched at every batch, and never committable again
    _fill(config, recreated, 3)  # offsets 0, 1, 2 again: other records
    with kafka.lock:  # the group's offset read before, renewed as it was: none, where Kafka dropped it since
        assert kafka.advance("b.acked", {(recreated, 0): 10}, Commits.SAME) == {}
    publish(1, _rows("a", kept, [2]) + _rows("b", recreated, [1]))
    assert committed("a", kept) == 3  # the batch went through
    assert committed("b", recreated) <= 0  # not the old topic's 10: record 0 of the new one is not done
    assert ("c", deleted, 0) not in marks.marks  # type: ignore[operator]
    publish(2, _rows("b", recreated, [0]))
    assert committed("b", recreated) == 2
    idle = f"idle-{run}"  # a partition spout a started (its starting commit) and that has had no outcome since
    _fill(config, idle, 0)
    with kafka.lock:
        kafka.advance("a.acked", {(idle, 0): 0})
        assert (deleted, 0) not in kafka.group_offsets("c.acked")  # Kafka dropped it: nothing to bring back
    renewed: list[tuple[str, dict[tuple[str, int], int]]] = []
    advance = kafka.advance

    def recording(group: str, group_marks: dict[tuple[str, int], int], commits: Commits) -> dict[Any, int]:
        done = advance(group, group_marks, commits)
        renewed.append((group, done))
        return done

    monkeypatch.setattr(kafka, "advance", recording)
    marks.recommit()  # every served mark committed again: none of the old topic's; and a's idle partition as it is
    assert committed("b", recreated) == 2
    assert [group for group, done in renewed if done.get((idle, 0)) == 0] == ["a.acked"]  # committed again, as it was
    assert all((deleted, 0) not in done for _, done in renewed)


def test_the_runs_above_a_waiting_mark_that_only_markers_and_aborted_records_part_are_merged(
    config: ServiceConfig,
) -> None:
    """A source written in 80 transactions of two records, one more aborted in the middle: every record done but the
    first (nacked, say, with no replay job running) and one in the middle (in flight). A run per transaction waits
    above the mark; a recheck asks Kafka between them and leaves two, parted by the record in flight alone. Once
    both are done the watermark goes to the end."""
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create_topics(config.client(), [TopicSpec(topic, 1)])
    producer = Producer(config.client(**{"transactional.id": f"t-{uuid.uuid4().hex}"}))
    producer.init_transactions(30)
    for i in range(81):
        producer.begin_transaction()
        for j in range(3 if i == 40 else 2):
            producer.produce(topic, b"%d-%d" % (i, j), partition=0)
        assert producer.flush(30) == 0  # written before an abort (which drops what is not sent yet)
        producer.abort_transaction(30) if i == 40 else producer.commit_transaction(30)
    records = [int(record.offset() or 0) for record in read_all(config.client(), topic)]  # read_committed
    assert len(records) == 160 and records[0] == 0
    kafka = lookups(config.client())
    with kafka.lock:
        kafka.advance("sp.acked", {(topic, 0): 0})  # where the spout started
    source = OutcomeSource(client=config.client(), topics=("o",))
    marks = Marks(CommitJobSettings(source, checkpoint="unused", spouts=frozenset({"sp"})), _Store())  # type: ignore[arg-type]
    in_flight = records[100]
    marks.apply(_rows("sp", topic, [o for o in records if o not in (0, in_flight)]), 0)
    assert marks.marks is not None
    mark = marks.marks[("sp", topic, 0)]
    assert mark.mark == 0 and mark.verified == 0 and len(mark.runs) == 80
    marks.recheck()
    assert (mark.mark, mark.runs) == (0, [(1, in_flight), (in_flight + 1, records[-1] + 1)])
    marks.apply(_rows("sp", topic, [in_flight]), 1)
    assert (mark.mark, mark.runs) == (0, [(1, records[-1] + 1)])
    marks.apply(_rows("sp", topic, [0]), 2)
    assert (mark.mark, mark.runs) == (records[-1] + 1, [])


def test_acker_watermarks_shows_each_partitions_watermark_and_how_far_behind_it_is(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = f"src-{uuid.uuid4().hex[:8]}", f"spout-{uuid.uuid4().hex[:8]}"
    create_topics(config.client(), [TopicSpec(topic, 3)])
    producer = Producer(config.client())
    for i in range(15):
        producer.produce(topic, b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    kafka = lookups(config.client())
    with kafka.lock:
        kafka.advance(f"{group}.acked", {(topic, 0): 5, (topic, 1): 2})  # partition 2: none yet
    args = ["watermarks", group, "--json", "--bootstrap-servers", config.bootstrap_servers]
    assert cli.main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["group"], r["topic"], r["partition"], r["watermark"], r["end"], r["behind"]) for r in rows] == [
        (f"{group}.acked", topic, 0, 5, 5, 0),
        (f"{group}.acked", topic, 1, 2, 5, 3),
        (f"{group}.acked", topic, 2, None, 5, 5),  # no spout started it: every record of it ("-" hid them)
    ]
    assert cli.main(["watermarks", f"{group}.acked", "--bootstrap-servers", config.bootstrap_servers]) == 0
    table = capsys.readouterr().out
    assert "fully-processed watermarks" in table and topic in table and "none yet" in table
    assert "5 (from its first record)" in table
    # Beyond the end (the topic deleted and made again, a truncated log): a spout reads the partition again from its
    # first record, and every record was said behind, not 0.
    beyond = f"spout-{uuid.uuid4().hex[:8]}"
    with kafka.lock:
        kafka.advance(f"{beyond}.acked", {(topic, 0): 50})
    assert cli.main(["watermarks", beyond, "--json", "--bootstrap-servers", config.bootstrap_servers]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["partition"], r["watermark"], r["behind"], r["beyond_end"]) for r in rows] == [
        (0, 50, 5, True),
        (1, None, 5, False),
        (2, None, 5, False),
    ]
    assert cli.main(["watermarks", beyond, "--bootstrap-servers", config.bootstrap_servers]) == 0
    assert "the watermark is beyond the end" in capsys.readouterr().out
    # Named either way, and twice: one group ("nobody.acked.acked, nobody (.acked)" was said).
    # With the groups that have watermarks: a spout's name given for its consumer group, say.
    assert cli.main(["watermarks", "nobody.acked", "nobody", "--bootstrap-servers", config.bootstrap_servers]) == 0
    none = capsys.readouterr().out
    assert none.startswith("no watermarks committed in nobody.acked (a spout's name given? "), none
    assert f"{group}.acked" in none or " more)" in none, none
    # A spout whose own group ends in ".acked" has its watermarks in "<group>.acked" (`acked_group`): named by its
    # group, they are found there ("no watermarks committed in <group>", whose are none: no spout commits there).
    with kafka.lock:
        kafka.advance(f"{beyond}.acked.acked", {(topic, 1): 2})
    assert cli.main(["watermarks", f"{beyond}.acked", "--json", "--bootstrap-servers", config.bootstrap_servers]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["group"], r["partition"], r["watermark"]) for r in rows if r["watermark"] is not None] == [
        (f"{beyond}.acked", 0, 50),
        (f"{beyond}.acked.acked", 1, 2),
    ]
    # A group mistyped beside one that has watermarks: said, not silently left out of the rows.
    assert cli.main(["watermarks", group, "nobody", "--json", "--bootstrap-servers", config.bootstrap_servers]) == 0
    said = capsys.readouterr()
    assert len(json.loads(said.out)) == 3 and "no watermarks committed in nobody.acked" in said.err


def test_acker_watermarks_counts_records_behind_not_the_transaction_markers(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay topic is written in transactions: each leaves a marker, an offset that is no record. A watermark past
    every record showed "behind 1" until the commit job stepped over the marker, a minute later, or never once
    the job stopped."""
    topic, group = f"replay-{uuid.uuid4().hex[:8]}", f"spout-{uuid.uuid4().hex[:8]}"
    create_topics(config.client(), [TopicSpec(topic, 1)])
    producer = Producer(config.client(**{"transactional.id": f"t-{uuid.uuid4().hex}"}))
    producer.init_transactions(30)
    for i in range(3):  # records at 0, 2 and 4, markers at 1, 3 and 5
        producer.begin_transaction()
        producer.produce(topic, b"%d" % i, partition=0)
        producer.commit_transaction(30)
    kafka = lookups(config.client())
    admin = AdminClient(config.client())
    before = _watermark_readers(admin)
    for mark, records in ((2, 2), (5, 0)):
        with kafka.lock:
            kafka.advance(f"{group}.acked", {(topic, 0): mark})
        assert cli.main(["watermarks", group, "--json", "--bootstrap-servers", config.bootstrap_servers]) == 0
        [row] = json.loads(capsys.readouterr().out)
        assert (row["watermark"], row["end"], row["behind"]) == (mark, 6, records)
    # Counting the records behind leaves no consumer group committed: a monitor running the command every minute
    # left a group a run, each kept by Kafka for 7 days.
    for reader in _watermark_readers(admin) - before:
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(reader)])[reader].result(30)
        assert [tp for tp in offsets.topic_partitions if tp.offset >= 0] == [], reader


def _watermark_readers(admin: AdminClient) -> set[str]:
    return {
        g.group_id for g in admin.list_consumer_groups().result(30).valid if g.group_id.startswith("acker-watermarks-")
    }


def test_acker_watermarks_counts_what_lies_past_an_open_transaction(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """The end was asked as a read_committed consumer is told it, the last stable offset: with a transaction open on
    the partition (a replay job's, a producer hung in one), the records written after it were not behind. The open
    transaction is shown too: the spouts read nothing past it, and a hanging one holds the watermark for good."""
    topic, group = f"src-{uuid.uuid4().hex[:8]}", f"spout-{uuid.uuid4().hex[:8]}"
    create_topics(config.client(), [TopicSpec(topic, 1)])
    plain = Producer(config.client())
    for _ in range(5):
        plain.produce(topic, b"before", partition=0)
    assert plain.flush(30) == 0
    open_one = Producer(config.client(**{"transactional.id": f"t-{uuid.uuid4().hex}"}))
    open_one.init_transactions(30)
    open_one.begin_transaction()
    for _ in range(3):
        open_one.produce(topic, b"open", partition=0)
    assert open_one.flush(30) == 0
    for _ in range(4):
        plain.produce(topic, b"after", partition=0)
    assert plain.flush(30) == 0
    kafka = lookups(config.client())
    with kafka.lock:
        kafka.advance(f"{group}.acked", {(topic, 0): 0})
    try:
        assert cli.main(["watermarks", group, "--json", "--bootstrap-servers", config.bootstrap_servers]) == 0
        [row] = json.loads(capsys.readouterr().out)
        assert (row["watermark"], row["end"], row["behind"]) == (0, 12, 12)  # not counted: the offsets between
        assert row["open_from"] == 5  # where the spouts stop until it ends
        assert cli.main(["watermarks", group, "--bootstrap-servers", config.bootstrap_servers]) == 0
        assert "12 (a transaction open from offset 5)" in capsys.readouterr().out
    finally:
        open_one.abort_transaction(30)
    assert cli.main(["watermarks", group, "--json", "--bootstrap-servers", config.bootstrap_servers]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["end"], row["behind"], row["open_from"]) == (13, 9, None)  # the 3 aborted, and their marker, are none


def test_a_record_past_an_open_transaction_is_not_taken_for_none(config: ServiceConfig) -> None:
    """The lookups' consumer, read_committed, is told the last stable offset as the partition's end: a record written
    after a transaction still open was "certainly none", and the replay job dead-lettered its nack ``source-missing``
    without its data. It is unknown for now (`LookupError`, asked again), and read once the transaction ends; an
    offset past the end as written is still none."""
    topic = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(config.client(), [TopicSpec(topic, 1)])
    plain = Producer(config.client())
    plain.produce(topic, b"before", partition=0)
    assert plain.flush(30) == 0
    open_one = Producer(config.client(**{"transactional.id": f"t-{uuid.uuid4().hex}"}))
    open_one.init_transactions(30)
    open_one.begin_transaction()
    open_one.produce(topic, b"open", partition=0)
    assert open_one.flush(30) == 0
    plain.produce(topic, b"after", partition=0)  # offset 2
    assert plain.flush(30) == 0
    kafka = lookups(config.client())
    try:
        with kafka.lock:
            assert kafka.fetch(topic, 0, [3, 99]) == {3: None, 99: None}  # past the end as written
            for offsets in ([2], [0, 2], [1]):
                with pytest.raises(OpenTransactionError, match="lies past a transaction open from offset 1"):
                    kafka.fetch(topic, 0, offsets)
    finally:
        open_one.abort_transaction(30)
    deadline = time.monotonic() + 30
    while True:  # the partition's abort marker is written after the abort returns: asked again, as the job does
        try:
            with kafka.lock:
                found = kafka.fetch(topic, 0, [0, 1, 2])
            break
        except LookupError:
            assert time.monotonic() < deadline, "still past an open transaction 30 s after its abort"
            time.sleep(0.2)
    assert found[1] is None and [found[o].value() for o in (0, 2)] == [b"before", b"after"]  # type: ignore[union-attr]


def _sixty_of_a_hundred_deleted(config: ServiceConfig) -> str:
    """A new topic of one partition, 100 records written, offsets 0-59 deleted since (as retention does)."""
    topic = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(config.client(), [TopicSpec(topic, 1)])
    producer = Producer(config.client())
    for i in range(100):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient(config.client())
    gone = TopicPartition(topic, 0, 60)
    admin.delete_records([gone])[gone].result()
    return topic


def test_acker_watermarks_counts_from_the_first_record_when_retention_deleted_those_at_the_watermark(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A watermark left below the partition's first record (the commit job stopped, retention went on): the count
    read from the watermark went to the partition's end, and found nothing (said "0 behind" on a busy partition) or
    timed out and showed the offsets between them."""
    topic, group = _sixty_of_a_hundred_deleted(config), f"spout-{uuid.uuid4().hex[:8]}"
    kafka = lookups(config.client())
    with kafka.lock:
        kafka.advance(f"{group}.acked", {(topic, 0): 10})
    assert cli.main(["watermarks", group, "--json", "--bootstrap-servers", config.bootstrap_servers]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["watermark"], row["end"], row["behind"]) == (10, 100, 40)


def test_a_watermark_passing_records_deleted_before_they_were_done_says_so(
    config: ServiceConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention deleted offsets 0-59 while the record at the watermark (10) had no outcome: the watermark passed
    them without a word, and a nack of one that came after was skipped as decided before (the replay job's log said
    so): a record lost, with nothing said of it anywhere."""
    topic = _sixty_of_a_hundred_deleted(config)
    kafka = lookups(config.client())
    with caplog.at_level(logging.WARNING, logger="acker.kafka.lookups"), kafka.lock:
        assert kafka.next_existing(topic, 0, 10) == 60
        assert kafka.next_existing(topic, 0, 60) == 60  # a record there: nothing more said
    [said] = [r.getMessage() for r in caplog.records if topic in r.getMessage()]
    assert said.startswith(f"{topic}[0]: offsets 10 to 59 were deleted") and "is lost" in said


def test_a_read_through_gaps_from_deleted_offsets_goes_on_from_the_first_record_left(config: ServiceConfig) -> None:
    """`KafkaLookups.record_offsets`, which the merge of the runs above a waiting watermark reads with: from offset
    10 of a partition whose offsets 0-59 were deleted, the read goes on from 60 (the deleted offsets hold no record),
    keeps only the offsets asked for, and stops just past the first record at or after the last offset asked."""
    topic = _sixty_of_a_hundred_deleted(config)
    kafka = lookups(config.client())
    with kafka.lock:
        assert kafka.record_offsets(topic, 0, 10, 70, range(0, 100, 5)) == ([60, 65, 70], 71)
        assert kafka.record_offsets(topic, 0, 90, 120, range(100)) == (list(range(90, 100)), 100)  # to the end


def test_the_commit_job_reads_the_brokers_offset_retention_to_renew_the_watermarks_in_time(
    config: ServiceConfig,
) -> None:
    """The broker's own word, under its own name: with Kafka's default retention (7 days) and a renewal asked once in
    years, the watermarks are committed again every 42 hours, a quarter of the retention."""
    source = OutcomeSource(config.client(), topics=(config.outcome_topic("a"),))
    settings = CommitJobSettings(source, "/nowhere", refresh_s=1e9)
    assert commit_job._renewal_every(settings, said=False) == 7 * 24 * 3600 / 4
