"""The process's cache of lookup clients (real clients that never connect: nothing here needs a broker)."""

from __future__ import annotations

import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from acker.kafka import lookups
from acker.kafka.clients import kafka_error
from spark_jobs import replay_job
from spark_jobs.watermark import PartitionMark


def test_closing_all_lookups_closes_the_cached_clients_and_the_next_call_makes_new_ones() -> None:
    client = {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}
    first = lookups.lookups(client)
    assert lookups.lookups(dict(client)) is first  # one per configuration
    lookups.close_all()
    again = lookups.lookups(client)
    assert again is not first
    lookups.close_all()
    with pytest.raises(RuntimeError, match="closed"):  # a closed client refuses every call
        first._consumer.assignment()


class _Record:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None


class _SlowConsumer:
    """A consumer at the edge: each `consume` gives the next 100 records and takes 4 s of the (patched) clock."""

    def __init__(self, clock: list[float], end: int) -> None:
        self.clock, self.end, self.position = clock, end, 0

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.position = partitions[0].offset

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[_Record]:
        self.clock[0] += 4.0
        batch = [_Record(o) for o in range(self.position, min(self.end, self.position + 100))]
        self.position += len(batch)
        return batch


def test_a_long_read_goes_on_while_records_come_and_keeps_only_the_offsets_wanted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sparse nacks over a long stretch of a partition: one pass from the first to the last, longer than the lookup
    timeout in all. It used to give up at the timeout however fast records came, and every run of the batch failed."""
    clock = [0.0]
    # The module's clock alone (patching time.monotonic itself would stop every clock of the process).
    monkeypatch.setattr(lookups, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    real = kafka._consumer
    try:
        kafka._consumer = _SlowConsumer(clock, 1_000)  # type: ignore[assignment]
        found = kafka._read("t", 0, 0, 990, keep={0, 500, 990})
        assert clock[0] > 3 * lookups._LOOKUP_TIMEOUT_S  # 10 consumes of 4 s each
        assert found is not None
        records, end = found
        assert [r.offset() for r in records] == [0, 500, 990] and end == 991
        kafka._consumer = _SlowConsumer(clock, 0)  # type: ignore[assignment]  # nothing comes: gives up
        assert kafka._read("t", 0, 0, 10) is None
    finally:
        kafka._consumer = real
        kafka.close()


class _TransactionalPartition:
    """A consumer at the edge over a partition written in transactions of 9 records: offsets 9, 19, 29, ... are
    the commit markers, which a consumer never reads; `consume` hands over up to 100 records at a time."""

    def __init__(self, end: int) -> None:
        self.end, self.position, self.reads = end, 0, 0

    def get_watermark_offsets(self, _tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, self.end

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.position, self.reads = partitions[0].offset, self.reads + 1

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[_Record]:
        offsets = [o for o in range(self.position, self.end) if o % 10 != 9][: min(100, num_messages)]
        self.position = offsets[-1] + 1 if offsets else self.end
        return [_Record(o) for o in offsets]


def test_a_mark_crossing_transaction_markers_reads_each_stretch_once_not_once_per_marker() -> None:
    """Each marker stopped the mark, and each stop was a read of its own under the job's lock: a source committing
    transactions many times a second left the watermark further behind at every batch."""
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    real = kafka._consumer
    try:
        partition = _TransactionalPartition(1000)
        kafka._consumer = partition  # type: ignore[assignment]
        mark = PartitionMark(0)
        mark.add([o for o in range(1000) if o % 10 != 9])  # every record done
        assert mark.advance(lambda offset: kafka.next_existing("t", 0, offset)) == 999  # the last marker: the end
        assert partition.reads <= 12  # a read per 100 records read (and the end), not one per marker (100)
        assert kafka.next_existing("t", 0, 19) == 20  # answered from what was seen
        assert kafka.next_existing("t", 0, 20) == 20
    finally:
        kafka._consumer = real
        kafka.close()


class _LaggingMetadata:
    """A consumer at the edge whose broker does not know the partition yet (partitions just added): the offsets
    lookup says unknown, and the metadata lacks it for the first ``stale`` answers."""

    def __init__(self, stale: int) -> None:
        self.stale, self.asked = stale, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.asked += 1
        partitions = {0: None} if self.asked <= self.stale else {0: None, 1: None}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})


def test_a_partition_is_taken_as_gone_only_when_the_metadata_lacks_it_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """One stale answer made the replay job dead-letter the records of a partition just added as source-missing."""
    monkeypatch.setattr("acker.kafka.lookups.time.sleep", lambda _s: None)
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    real = kafka._consumer
    try:
        kafka._consumer = _LaggingMetadata(stale=1)  # type: ignore[assignment]
        with pytest.raises(LookupError, match="no answer"):  # not an answer: the batch is tried again
            kafka.fetch("t", 1, [42])
        kafka._consumer = _LaggingMetadata(stale=2)  # type: ignore[assignment]
        assert kafka.fetch("t", 1, [42]) == {42: None}
        asked = kafka._consumer.asked  # type: ignore[attr-defined]
        assert kafka.fetch("t", 1, [43]) == {43: None} and kafka._consumer.asked == asked  # type: ignore[attr-defined]
    finally:
        kafka._consumer = real
        kafka.close()


class _ErrorRecord:
    def __init__(self, code: int) -> None:
        self._error = KafkaError(code)

    def offset(self) -> int:
        return -1

    def error(self) -> KafkaError:
        return self._error


class _RefusedRead:
    """A consumer at the edge whose partition has offsets 0..9 and whose first ``refusals`` reads are refused with
    ``code`` (a topic deleted between the offsets' lookup and the read, a leader lost)."""

    def __init__(self, refusals: int, code: int) -> None:
        self.refusals, self.code, self.position = refusals, code, 0

    def get_watermark_offsets(self, _tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, 10

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.position = partitions[0].offset

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        if self.refusals > 0:
            self.refusals -= 1
            return [_ErrorRecord(self.code)]
        batch = [_Record(o) for o in range(self.position, 10)]
        self.position = 10
        return batch


def test_a_refused_read_of_nacked_records_is_no_answer_and_the_replay_job_asks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read Kafka refused raised a `KafkaException`, which the replay job's tries (`LookupError`) let through: the
    batch failed at the first refusal."""
    monkeypatch.setattr(replay_job, "time", SimpleNamespace(sleep=lambda _s: None))
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    real = kafka._consumer
    try:
        kafka._consumer = _RefusedRead(1, KafkaError.UNKNOWN_TOPIC_OR_PART)  # type: ignore[assignment]
        with pytest.raises(LookupError, match=r"no answer for offsets 3\.\.5"):
            kafka.fetch("t", 0, [3, 5])
        kafka._consumer = _RefusedRead(2, KafkaError.NOT_LEADER_FOR_PARTITION)  # type: ignore[assignment]
        found = replay_job._fetch(kafka.fetch, "t", 0, [3, 5])
        assert {o: r is not None and r.offset() for o, r in found.items()} == {3: 3, 5: 5}
    finally:
        kafka._consumer = real
        kafka.close()


def test_a_nacked_record_past_an_open_transaction_is_waited_for_as_long_as_the_broker_may_keep_it_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Such a record was taken for none (dead-lettered ``source-missing`` without its data); then, as a read Kafka
    did not answer, three tries in 3 s failed the batch, and every restart of the job, while a transaction whose
    writer died stays open for a minute. It is waited for as other reads to a partition's end wait; a transaction
    that hangs fails the batch with what to do about it."""
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(replay_job, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep))
    asked: list[float] = []

    def open_until(ends_at: float) -> replay_job.Fetch:
        def fetch(topic: str, partition: int, offsets: list[int]) -> dict[int, Any]:
            asked.append(clock[0])
            if clock[0] < ends_at:
                raise lookups.OpenTransactionError(topic, partition, offsets[0], 1)
            return dict.fromkeys(offsets)

        return fetch

    assert replay_job._fetch(open_until(60.0), "t", 0, [2], open_wait_s=90.0) == {2: None}
    assert len(asked) == 61  # once a second
    hanging = r"offset 2 lies past a transaction open from offset 1.*find-hanging"
    with pytest.raises(lookups.OpenTransactionError, match=hanging):
        replay_job._fetch(open_until(float("inf")), "t", 0, [2], open_wait_s=90.0)
    assert clock[0] - 60.0 == pytest.approx(90.0, abs=1.0)
    monkeypatch.setattr(replay_job, "interrupted", lambda: True)  # the job stopping: its stop does not wait for it
    asked.clear()
    with pytest.raises(lookups.OpenTransactionError):
        replay_job._fetch(open_until(float("inf")), "t", 0, [2], open_wait_s=90.0)
    assert len(asked) == 1


def test_a_groups_offsets_are_asked_within_the_lookups_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing a group's offsets (also the first step of committing them) waited librdkafka's 60 s for a broker that
    does not answer, holding the lookups' lock, where every other lookup waits `_LOOKUP_TIMEOUT_S`."""
    monkeypatch.setattr(lookups, "_LOOKUP_TIMEOUT_S", 1.0)
    kafka = lookups.lookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    began = time.monotonic()
    try:
        with pytest.raises(KafkaException), kafka.lock:
            kafka.committed("g", [("t", 0)])
    finally:
        lookups.close_all()
    assert time.monotonic() - began < 30  # not librdkafka's 60 s


class _NoAdmin:
    """An admin client that must not be asked."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the admin client was asked: {name}")


def test_a_groups_committed_offsets_are_asked_through_a_consumer_of_the_group_renewed_after_a_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not through the admin client, whose coordinator requests abort the process when a broker drops the connection
    at the wrong moment (librdkafka 2.16): one consumer per group asked, kept for the next questions, a new one after
    a question that timed out, at most `_OFFSET_READERS` of them (the oldest closed), all closed with the lookups."""
    monkeypatch.setattr(lookups, "_LOOKUP_TIMEOUT_S", 0.5)
    monkeypatch.setattr(lookups, "_OFFSET_READERS", 2)
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    kafka._admin = _NoAdmin()  # type: ignore[assignment]
    try:
        assert kafka.committed("g", []) == {}  # nothing to ask
        assert kafka._offset_readers == {}
        with pytest.raises(KafkaException) as raised:
            kafka.committed("g", [("t", 0)])
        assert kafka_error(raised.value).code() == KafkaError._TIMED_OUT  # type: ignore[union-attr]
        assert kafka._offset_readers == {}  # the one that timed out is closed, not asked again
        first = kafka._offset_reader("g")
        assert first.memberid() is None  # never joins: a watermark group keeps no member
        assert kafka._offset_reader("g") is first
        second, third = kafka._offset_reader("h"), kafka._offset_reader("i")
        assert list(kafka._offset_readers) == ["h", "i"]
        with pytest.raises(RuntimeError, match="closed"):
            first.assignment()
    finally:
        kafka._admin = None
        kafka.close()
    for closed in (second, third):
        with pytest.raises(RuntimeError, match="closed"):
            closed.assignment()


class _AnsweringWithAnError:
    """A consumer of the group whose committed offsets come back with one partition's error, as the broker answers
    for a topic the client may not describe: offset -1001, no exception."""

    def poll(self, timeout: float) -> None:
        pass

    def close(self) -> None:
        pass

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[Any]:
        refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1001 if tp.partition else 7,
                                error=refused if tp.partition else None) for tp in partitions]  # fmt: skip


class _Altering:
    """An admin client that commits the offsets it is asked to commit, every one of them."""

    def __init__(self) -> None:
        self.committed: dict[tuple[str, int], int] = {}

    def poll(self, timeout: float) -> None:
        pass

    def alter_consumer_group_offsets(self, requests: list[Any], request_timeout: float) -> dict[str, Future[Any]]:
        done: dict[str, Future[Any]] = {}
        for request in requests:
            self.committed |= {(tp.topic, tp.partition): tp.offset for tp in request.topic_partitions}
            done[request.group_id] = Future()
            done[request.group_id].set_result(SimpleNamespace(topic_partitions=request.topic_partitions))
        return done


def test_a_partition_the_broker_answered_with_an_error_is_no_watermark_and_only_the_others_are_committed() -> None:
    """Read as "none committed", its watermark was committed whatever the group had, maybe behind it. It is a failure
    of the group's commit, which still commits the other partitions' watermarks."""
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    admin = kafka._admin = _Altering()  # type: ignore[assignment]
    kafka._offset_readers["g"] = _AnsweringWithAnError()  # type: ignore[assignment]
    try:
        with pytest.raises(KafkaException) as raised:
            kafka.committed("g", [("t", 0), ("t", 1)])
        assert kafka_error(raised.value).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # type: ignore[union-attr]
        assert kafka.committed("g", [("t", 0)]) == {("t", 0): 7}
        with pytest.raises(lookups.WatermarkCommitError) as failed:
            kafka.advance("g", {("t", 0): 9, ("t", 1): 5})
        assert list(failed.value.failures) == [("t", 1)] and "TOPIC_AUTHORIZATION_FAILED" in str(failed.value)
        assert admin.committed == {("t", 0): 9}
    finally:
        kafka._admin = None
        kafka.close()


@pytest.mark.parametrize(
    ("code", "coordinator", "renewed"),
    [
        (KafkaError._TIMED_OUT, False, True),
        (KafkaError._TRANSPORT, False, False),  # a topic's description: only a timeout renews
        (KafkaError._TRANSPORT, True, True),  # a group coordinator's request: any failure renews
    ],
)
def test_which_failures_give_the_next_requests_a_new_admin_client(code: int, coordinator: bool, renewed: bool) -> None:
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    try:
        before = kafka._admin
        kafka._renew_after(KafkaException(KafkaError(code)), coordinator=coordinator)
        assert (kafka._admin is not before) == renewed
    finally:
        kafka.close()


@pytest.mark.parametrize(
    ("commits", "wanted"),
    [
        # where the group has:       nothing, 4 (behind), 5 (the same), 6 (ahead)
        (lookups.Commits.AHEAD, [True, True, False, False]),
        (lookups.Commits.AHEAD_OR_SAME, [True, True, True, False]),
        (lookups.Commits.SAME, [False, False, True, False]),
    ],
)
def test_which_watermarks_each_commit_mode_commits(commits: lookups.Commits, wanted: list[bool]) -> None:
    """A watermark of 5: never committed behind what the group has; renewed where it equals it only when asked; and,
    renewing as they are offsets read from the group, none where the group has none now (a topic deleted since)."""
    assert [commits.wanted(5, current) for current in (None, 4, 5, 6)] == wanted


def test_what_was_seen_of_partitions_not_asked_about_since_is_pruned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read's offsets (up to ~36 KB a partition) answered for `SEEN_FOR_S` but were kept for the life of the
    process, one entry for every partition ever asked about (topics deleted, created, deleted)."""
    clock = [0.0]
    monkeypatch.setattr(lookups, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))
    monkeypatch.setattr(lookups, "_SEEN_KEPT", 4)
    kafka = lookups.KafkaLookups({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    reads: list[int] = []

    def read(_topic: str, partition: int, first: int, _last: int, **_kwargs: Any) -> tuple[list[_Record], int]:
        reads.append(partition)
        return [_Record(first + 2)], 100

    monkeypatch.setattr(kafka, "_ends", lambda _topic, _partition: (0, 100))
    monkeypatch.setattr(kafka, "_read", read)
    try:
        for partition in range(10):
            assert kafka.next_existing("t", partition, 1) == 3
            assert kafka.next_existing("t", partition, 2) == 3 and reads.count(partition) == 1  # seen: not read again
            clock[0] += lookups.SEEN_FOR_S
        assert len(kafka._seen) <= 4
        kafka.next_existing("t", 9, 1)  # what was seen of it answers no more: forgotten, and read again
        assert reads.count(9) == 2 and len(kafka._seen) <= 4
    finally:
        kafka.close()
