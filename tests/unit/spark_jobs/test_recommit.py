"""The commit job's re-commit and recheck of its marks, at its Kafka edge (a recording stand-in for the admin calls
and lookups): only the marks of the spouts it serves."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Container
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from acker.config import ServiceConfig
from acker.kafka.clients import KafkaClientError
from acker.kafka.lookups import CONFIRM_S, Commits, WatermarkCommitError
from acker.spout import WAIT_TIMEOUTS, pending_timeout_s
from spark_jobs import commit_job, watermark
from spark_jobs.commit_job import CommitJobSettings, Marks, OutcomeSource
from spark_jobs.watermark import PartitionMark
from tests.bitmaps import bitmap_rows
from tests.unit.spark_jobs.starts import started_with


class _Store:
    def __init__(self, marks: dict[tuple[str, str, int], PartitionMark]) -> None:
        self.marks = marks
        self.topic_ids: dict[str, str] = {}

    def load(self) -> dict[tuple[str, str, int], PartitionMark]:
        return self.marks

    def save(
        self, _batch_id: int, marks: dict[tuple[str, str, int], PartitionMark], topic_ids: dict[str, str] | None = None
    ) -> None:
        self.marks = marks


class _Kafka:
    def __init__(self, groups: dict[str, dict[tuple[str, int], int]] | None = None) -> None:
        self.lock = threading.Lock()
        self.commits: list[tuple[str, dict[tuple[str, int], int], bool]] = []
        self.groups = groups or {}  # every offset each group has committed

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return self.groups.get(group, {})

    def advance(
        self, group: str, marks: dict[tuple[str, int], int], commits: Commits = Commits.AHEAD
    ) -> dict[Any, int]:
        self.commits.append((group, marks, commits is not Commits.AHEAD))
        return marks

    def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {}  # nothing committed: the groups were deleted

    def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
        return dict.fromkeys(topics, ("id", 4))  # every topic there, as it was, with 4 partitions

    def next_existing(self, _topic: str, _partition: int, offset: int) -> int:
        return offset  # every offset holds a record


def _marks(
    monkeypatch: pytest.MonkeyPatch, kafka: _Kafka, store: _Store, spouts: frozenset[str] | None = None
) -> Marks:
    """The marks of a job reading spout a's outcomes, over ``store``, asking ``kafka``."""
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    return Marks(CommitJobSettings(source, "unused", spouts=spouts), store)  # type: ignore[arg-type]


def _row(partition: int, offsets: list[int]) -> list[Any]:
    return bitmap_rows("a", "in", partition, offsets)


def _recommitted(
    monkeypatch: pytest.MonkeyPatch,
    spouts: frozenset[str] | None,
    groups: dict[str, dict[tuple[str, int], int]] | None = None,
) -> list[tuple[str, dict[tuple[str, int], int], bool]]:
    kafka = _Kafka(groups)
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    settings = CommitJobSettings(source, "unused", groups={"b": "b-group"}, spouts=spouts)
    store = _Store(
        {("a", "in", 0): PartitionMark(5), ("a", "in", 1): PartitionMark(2), ("b", "in2", 0): PartitionMark(7)}
    )
    Marks(settings, store).recommit()  # type: ignore[arg-type]
    return sorted(kafka.commits, key=lambda commit: commit[0])  # stable: the marks first, then the others


def test_every_mark_is_committed_again_when_the_job_serves_every_spout_it_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _recommitted(monkeypatch, None) == [
        ("a.acked", {("in", 0): 5, ("in", 1): 2}, True),
        ("b-group.acked", {("in2", 0): 7}, True),
    ]


def test_a_spout_the_job_no_longer_serves_is_not_committed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its watermark group, deleted by an operator, is not recreated every hour."""
    assert _recommitted(monkeypatch, frozenset({"a"})) == [("a.acked", {("in", 0): 5, ("in", 1): 2}, True)]


def test_the_watermarks_of_served_groups_without_a_mark_are_committed_again_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a spout started a partition that has had no outcome since (partition 2 of a's source; every partition of
    spout c, named but without an outcome yet): renewed only with the marks, Kafka deleted them after its offset
    retention, and the spout, started again with reset latest, went past the records written meanwhile. Not those
    of a group of no spout served (retired's)."""
    groups = {
        "a.acked": {("in", 0): 5, ("in", 1): 2, ("in", 2): 0},
        "c.acked": {("x", 0): 4},
        "retired.acked": {("y", 0): 9},
    }
    assert _recommitted(monkeypatch, frozenset({"a", "c"}), groups) == [
        ("a.acked", {("in", 0): 5, ("in", 1): 2}, True),
        ("a.acked", {("in", 2): 0}, True),
        ("c.acked", {("x", 0): 4}, True),
    ]
    assert _recommitted(monkeypatch, None, groups) == [
        ("a.acked", {("in", 0): 5, ("in", 1): 2}, True),
        ("a.acked", {("in", 2): 0}, True),
        ("b-group.acked", {("in2", 0): 7}, True),
    ]


def test_a_batch_rechecks_only_the_marks_of_spouts_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """A micro-batch also asks again about marks waiting on a gap (done offsets above the mark): not those of a
    spout the job no longer serves, whose group would be committed, and so recreated, every minute."""
    monkeypatch.setattr(commit_job, "lookups", lambda _client: _Kafka())
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    store = _Store({("a", "in", 0): PartitionMark(5, [(7, 9)]), ("retired", "in2", 0): PartitionMark(3, [(5, 6)])})
    marks = Marks(CommitJobSettings(source, "unused", spouts=frozenset({"a"})), store)  # type: ignore[arg-type]
    assert marks.apply([], batch_id=1) == {"a.acked": {("in", 0): 5}}


def test_a_batch_whose_topics_kafka_cannot_look_at_now_is_kept_and_commits_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka not answering for a moment must not stop the job; nor may a mark be committed to a topic that might have
    been created again meanwhile: the batch's marks are saved, and a later batch commits them."""

    class _Silent(_Kafka):
        def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    monkeypatch.setattr(commit_job, "lookups", lambda _client: _Silent())
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    store = _Store({("a", "in", 0): PartitionMark(5)})
    marks = Marks(CommitJobSettings(source, "unused"), store)  # type: ignore[arg-type]
    assert marks.apply(_row(0, [6, 5]), batch_id=1) == {}
    assert store.marks[("a", "in", 0)].mark == 7


def test_outcomes_of_a_deleted_topic_without_a_mark_wait_for_kafka_to_say_the_topic_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka not answering about the source topics for a moment, in the batch bringing the first outcomes of a topic
    deleted since (the replay job's resolutions of its nacks): asked where their watermark starts, Kafka refused (as
    for any partition that no longer exists), the batch failed and the job stopped. A mark to start waits for the
    topics' answer, as the answer of where it starts is waited for."""

    class _SilentThenGone(_Kafka):
        looks = 0

        def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
            self.looks += 1
            if self.looks == 1:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
            return dict.fromkeys(topics)  # deleted

        def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            raise AssertionError(f"asked where the watermark of a deleted topic starts: {partitions}")

    monkeypatch.setattr("spark_jobs.commit_job.time.sleep", lambda _s: None)
    kafka, store = _SilentThenGone(), _Store({})
    assert _marks(monkeypatch, kafka, store).apply(_row(0, [5, 6]), batch_id=1) == {}
    assert store.marks == {} and kafka.looks == 3  # silent, then missing, confirmed missing


def test_outcomes_of_a_partition_that_no_longer_exists_have_nothing_to_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source topic created again with fewer partitions, or an outcome naming a partition it never had (the replay
    job dead-letters its nack as source-missing, and the DEAD_LETTERED comes here): asked where its watermark starts,
    Kafka refused, the batch failed, and the job stopped at every start, on the same outcome."""

    class _Refusing(_Kafka):
        def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            assert all(p < 4 for _, p in partitions), "asked about a partition that does not exist"
            return {}

    monkeypatch.setattr("spark_jobs.commit_job.time.sleep", lambda _s: None)
    store = _Store({("a", "in", 5): PartitionMark(5)})
    assert _marks(monkeypatch, _Refusing(), store).apply(_row(5, [5, 6]), batch_id=1) == {}
    assert ("a", "in", 5) not in store.marks


def test_a_partition_a_brokers_metadata_has_not_shown_yet_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions just added to a source topic: one look at a broker behind the growth must not drop their marks,
    nor their outcomes of the batch (Spark's checkpoint moves past them: their offsets would never be done)."""

    class _Behind(_Kafka):
        looks = 0

        def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
            self.looks += 1
            return dict.fromkeys(topics, ("id", 4 if self.looks == 1 else 8))

        def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            return dict.fromkeys(partitions, 0)

    monkeypatch.setattr("spark_jobs.commit_job.time.sleep", lambda _s: None)
    store = _Store({("a", "in", 5): PartitionMark(5)})
    assert _marks(monkeypatch, _Behind(), store).apply(_row(5, [5, 6]), batch_id=1) == {"a.acked": {("in", 5): 7}}


def test_a_topic_a_broker_does_not_know_for_a_moment_keeps_its_marks_and_the_batchs_offsets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One answer "no such topic" from a broker behind (restarted, say) dropped the topic's marks and the offsets done
    in the batch: Spark's checkpoint moves past them, so the mark waited at the first of them until the spout read
    the records again. Whole-topic absence is confirmed a moment later, as partitions missing are."""

    class _Forgetful(_Kafka):
        looks = 0

        def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
            self.looks += 1
            return dict.fromkeys(topics, None if self.looks == 1 else ("id", 4))

        def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            return dict.fromkeys(partitions, 0)

    monkeypatch.setattr("spark_jobs.commit_job.time.sleep", lambda _s: None)
    mark = PartitionMark(100)
    store = _Store({("a", "in", 0): mark})
    marks = _marks(monkeypatch, _Forgetful(), store)
    assert marks.apply(_row(0, list(range(102, 500))), batch_id=1) == {"a.acked": {("in", 0): 100}}
    assert store.marks[("a", "in", 0)] is mark  # kept, with the batch's offsets above the two still pending
    assert marks.apply(_row(0, [100, 101]), batch_id=2) == {"a.acked": {("in", 0): 500}}


def test_a_topic_confirmed_missing_is_not_confirmed_again_at_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outcomes of a deleted topic keep coming for a while (the replay job resolving its nacks): each batch waited
    CONFIRM_S for a second look."""

    class _Deleted(_Kafka):
        def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
            return dict.fromkeys(topics)

    sleeps: list[float] = []
    monkeypatch.setattr("spark_jobs.commit_job.time.sleep", sleeps.append)
    marks = _marks(monkeypatch, _Deleted(), _Store({}))
    for batch in range(1, 4):
        assert marks.apply(_row(0, [batch]), batch_id=batch) == {}
    assert sleeps == [CONFIRM_S]


def test_a_group_whose_offsets_kafka_cannot_tell_for_a_moment_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group coordinator loading: raised at once, the micro-batch failed and the job stopped."""

    class _Loading(_Kafka):
        asked = 0

        def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            self.asked += 1
            if self.asked < 3:
                raise KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
            return {}

    kafka = _Loading()
    monkeypatch.setattr("spark_jobs.commit_job.time.sleep", lambda _s: None)
    marks = _marks(monkeypatch, kafka, _Store({("a", "in", 0): PartitionMark(5)}))
    assert marks.apply(_row(0, [5, 6]), batch_id=1) == {"a.acked": {("in", 0): 7}}
    assert kafka.asked == 3


class _Ends(_Kafka):
    """Partitions whose records end before their end offset (the marker of a last transaction), or whose lookup
    fails (a deleted topic: None here)."""

    def __init__(self, ends: dict[tuple[str, int], int | None]) -> None:
        super().__init__()
        self.ends = ends
        self.asked: list[tuple[str, int, int]] = []

    def next_existing(self, topic: str, partition: int, offset: int) -> int | None:  # type: ignore[override]
        self.asked.append((topic, partition, offset))
        end = self.ends[(topic, partition)]
        if end is None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        return end if end > offset else None


def test_a_recheck_moves_the_marks_no_micro_batch_moves_and_commits_them_where_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mark unchanged since the last recheck is looked at: an idle transactional partition's gets past the marker
    of its last transaction. Not one waiting on a record found a moment ago, nor a retired spout's, nor one a
    micro-batch moved since; a partition Kafka cannot look at does not stop the others. Each mark looked at is
    committed where it is ahead (a commit that failed before is made again)."""
    kafka = _Ends({("in", 0): 11, ("in", 1): 9, ("in", 2): 7, ("in", 3): 20, ("gone", 0): None, ("in2", 0): 5})
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    store = _Store(
        {
            ("a", "gone", 0): PartitionMark(3),
            ("a", "in", 0): PartitionMark(10),
            ("a", "in", 1): PartitionMark(4, verified=4, verified_at=time.time()),
            ("a", "in", 2): PartitionMark(7),
            ("a", "in", 3): PartitionMark(12),
            ("retired", "in2", 0): PartitionMark(3),
        }
    )
    marks = Marks(CommitJobSettings(source, "unused", spouts=frozenset({"a"})), store)  # type: ignore[arg-type]
    assert marks.recheck() == {} and kafka.asked == []  # the first one: nothing known to be idle yet
    assert marks.marks is not None
    marks.marks[("a", "in", 3)].add([12])  # a micro-batch moves this one: it is the stream's
    marks.marks[("a", "in", 3)].advance(lambda _offset: None)
    assert marks.recheck() == {"a.acked": {("in", 0): 11, ("in", 2): 7}}
    assert kafka.commits == [("a.acked", {("in", 0): 11, ("in", 2): 7}, False)]
    assert sorted(kafka.asked) == [("gone", 0, 3), ("in", 0, 10), ("in", 2, 7)]
    assert marks.marks[("retired", "in2", 0)].mark == 3 and marks.marks[("a", "in", 3)].mark == 13


def test_a_mark_a_micro_batch_moves_while_a_recheck_asks_kafka_is_left_where_the_batch_put_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka is asked outside the lock: a micro-batch that moves the mark meanwhile (to 13) is not undone by what the
    recheck found for the mark as it was (11), which would take the watermark back."""
    marks: Marks | None = None

    class _BatchMeanwhile(_Ends):
        def next_existing(self, topic: str, partition: int, offset: int) -> int | None:  # type: ignore[override]
            assert marks is not None and marks.marks is not None
            with marks._lock:
                marks.marks[("a", "in", 0)].add([10, 11, 12])
                marks.marks[("a", "in", 0)].advance(lambda _offset: None)
            return super().next_existing(topic, partition, offset)

    kafka = _BatchMeanwhile({("in", 0): 11})
    marks = _marks(monkeypatch, kafka, _Store({("a", "in", 0): PartitionMark(10)}))
    assert marks.recheck() == {}  # learns which marks are idle
    marks.recheck()
    assert kafka.asked == [("in", 0, 10)] and marks.marks is not None and marks.marks[("a", "in", 0)].mark == 13


def test_outcomes_of_a_partition_its_spout_never_started_in_the_group_taken_are_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A spout commits where it starts a partition to its watermark group before it reads: outcomes without that
    commit are most likely of a spout whose group is not the one taken (a --spout-group forgotten)."""

    class _Unstarted(_Kafka):
        def start_mark(self, group: str, topic: str, partition: int) -> tuple[int, bool]:
            return 0, False

    marks = _marks(monkeypatch, _Unstarted(), _Store({}))
    with caplog.at_level(logging.WARNING, "spark_jobs.commit"):
        marks.apply(_row(0, [0]) + _row(1, [0]), batch_id=1)
    said = [r.getMessage() for r in caplog.records if "has no watermark" in r.getMessage()]
    assert len(said) == 1 and "--spout-group a=GROUP" in said[0]


def test_a_mark_waiting_long_at_one_offset_with_offsets_done_above_it_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The outcome of the record there may be lost: nothing else said where a watermark stood still, or why."""
    marks = _marks(monkeypatch, _Kafka(), _Store({}))
    waiting = {("a", "in", 0): PartitionMark(5, [(7, 9)]), ("a", "in", 1): PartitionMark(3)}  # 1: nothing above
    with caplog.at_level(logging.WARNING, "spark_jobs.commit"):
        for now in (0.0, commit_job.STUCK_S - 1, commit_job.STUCK_S, 2 * commit_job.STUCK_S):
            marks._say_stuck(waiting, now)
        waiting[("a", "in", 0)] = PartitionMark(6, [(7, 9)])  # moved: a new wait
        marks._say_stuck(waiting, 2 * commit_job.STUCK_S + 1)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert said[0].startswith("in[0]: the watermark of spout a has waited at offset 5 for 15 min, with 2 offsets done")
    assert "is the replay job running?" in said[0]


def test_a_mark_is_said_stuck_only_after_a_tree_could_have_been_pending_and_replayed() -> None:
    """A fixed 15 minutes: with an acker timeout of an hour, a slow tree's record was said to have lost its outcome
    while it was pending as it may be."""
    assert commit_job.stuck_after_s(ServiceConfig()) == commit_job.STUCK_S  # a spout waits 2.5 minutes
    hour = ServiceConfig(timeout_s=3600)
    assert commit_job.stuck_after_s(hour) == (WAIT_TIMEOUTS + 1) * pending_timeout_s(hour) > 10 * 3600


@pytest.mark.parametrize(
    ("extra", "stuck_s"),
    [([], commit_job.STUCK_S), (["--timeout-s", "3600"], commit_job.stuck_after_s(ServiceConfig(timeout_s=3600))),
     (["--timeout-s", "3600", "--stuck-after-s", "120"], 120.0)],
)  # fmt: skip
def test_the_commit_command_says_a_mark_stuck_after_the_acker_timeout_or_the_time_it_is_given(
    monkeypatch: pytest.MonkeyPatch, extra: list[str], stuck_s: float
) -> None:
    """A spout given a wait of its own (`SpoutSettings.pending_timeout_s`) waits longer than the acker's settings
    say: ``--stuck-after-s`` tells the job."""
    argv = ["spark", "commit", "--spout", "s", "--checkpoint", "/nowhere", *extra]
    assert started_with(monkeypatch, argv, kafka=False).stuck_s == stuck_s


class _Groups(_Kafka):
    """Commits as Kafka does: a watermark only where it is ahead of the group's (or equal, ``again``); a group with a
    live member refuses every commit."""

    def __init__(self, groups: dict[str, dict[tuple[str, int], int]], busy: str) -> None:
        super().__init__(groups)
        self.busy = busy

    def advance(
        self, group: str, marks: dict[tuple[str, int], int], commits: Commits = Commits.AHEAD
    ) -> dict[Any, int]:
        if group == self.busy:
            raise WatermarkCommitError(group, dict.fromkeys(marks, "UNKNOWN_MEMBER_ID"))
        current = self.groups.get(group, {})
        ahead = {tp: m for tp, m in marks.items() if commits.wanted(m, current.get(tp))}
        self.commits.append((group, ahead, commits is not Commits.AHEAD))
        return ahead


def test_a_group_ahead_of_its_mark_is_renewed_at_its_own_offset_and_a_busy_group_stops_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator moved a's watermark of in[1] on, past the mark (an idle partition: no batch made the mark follow):
    neither committed again (behind) nor renewed (it has a mark), it expired. And a group with a live member kept the
    groups after it from their renewal."""
    groups = {"a.acked": {("in", 0): 5, ("in", 1): 9}, "b-group.acked": {("y", 0): 3}, "c.acked": {("x", 0): 4}}
    kafka = _Groups(groups, busy="b-group.acked")
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    settings = CommitJobSettings(source, "unused", groups={"b": "b-group"}, spouts=frozenset({"a", "b", "c"}))
    store = _Store({("a", "in", 0): PartitionMark(5), ("a", "in", 1): PartitionMark(2)})
    Marks(settings, store).recommit()  # type: ignore[arg-type]
    assert kafka.commits == [
        ("a.acked", {("in", 0): 5}, True),  # the mark, where it is the group's
        ("a.acked", {("in", 1): 9}, True),  # the group's own, ahead of the mark
        ("c.acked", {("x", 0): 4}, True),  # after b-group.acked, which refused
    ]


class _Transactions(_Kafka):
    """A partition written in transactions of two records, each followed by its marker (offsets 2, 5, 8, ...). Reads
    (`KafkaLookups.record_offsets`) are recorded by where they start (``reads``), questions (`next_existing`) by their
    offset (``asked``); Kafka cannot answer a read from ``unanswered`` once, and ``meanwhile`` runs at the first read
    (a micro-batch's work)."""

    def __init__(self, unanswered: int = -1) -> None:
        super().__init__()
        self.asked: list[int] = []
        self.reads: list[int] = []
        self.unanswered = unanswered
        self.meanwhile: Any = None

    def next_existing(self, _topic: str, _partition: int, offset: int) -> int | None:  # type: ignore[override]
        self.asked.append(offset)
        return offset + 1 if offset % 3 == 2 else offset

    def record_offsets(
        self, _topic: str, _partition: int, first: int, last: int, keep: Container[int]
    ) -> tuple[list[int], int] | None:
        self.reads.append(first)
        if self.meanwhile is not None:
            self.meanwhile, meanwhile = None, self.meanwhile
            meanwhile()
        if first == self.unanswered:
            self.unanswered = -1
            return None
        reached = (last + 1 if last % 3 == 2 else last) + 1  # just past the first record at or after ``last``
        return [o for o in range(first, reached) if o % 3 != 2 and o in keep], reached


def _stuck_at_zero(monkeypatch: pytest.MonkeyPatch, kafka: _Transactions) -> Marks:
    """Every record of 100 transactions done but the first: its mark waits at 0 with 100 runs above it."""
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    marks = _marks(monkeypatch, kafka, _Store({("a", "in", 0): PartitionMark(0)}))
    marks.apply(_row(0, [o for o in range(1, 300) if o % 3 != 2]), 0)
    assert marks.marks is not None
    mark = marks.marks[("a", "in", 0)]
    assert (mark.mark, mark.verified, len(mark.runs)) == (0, 0, 100)
    kafka.asked.clear()
    kafka.reads.clear()
    return marks


def test_a_recheck_merges_the_runs_above_a_waiting_mark_that_only_transaction_markers_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transactional source whose first record waits (nacked, no replay job running) while the rest are done: a run
    per transaction piled up above the mark, saved and merged again at every micro-batch, for as long as it waited.
    A recheck finds that only markers part them: one run is left, and the mark waits where it did. A walk Kafka
    cannot answer at a read merges what it found before, and the next recheck goes on from there. A few runs above a
    mark are the usual case (a run per record in flight): no more than `MERGE_ABOVE` are left alone."""
    monkeypatch.setattr(watermark, "READ_AT_MOST", 60)  # a read spans 20 transactions
    kafka = _Transactions(unanswered=122)
    marks = _stuck_at_zero(monkeypatch, kafka)
    assert marks.marks is not None
    mark = marks.marks[("a", "in", 0)]
    monkeypatch.setattr(commit_job, "MERGE_ABOVE", 100)
    marks.recheck()
    assert kafka.reads == []
    monkeypatch.setattr(commit_job, "MERGE_ABOVE", 10)
    marks.recheck()
    assert kafka.reads == [2, 62, 122]  # the third not answered
    assert mark.runs == [(1, 122), *((o, o + 2) for o in range(123, 298, 3))] and mark.mark == 0
    kafka.reads.clear()
    marks.recheck()
    assert kafka.reads == [122, 182, 242]
    assert (mark.mark, mark.runs) == (0, [(1, 299)])
    marks.recheck()  # one run: nothing to merge
    assert kafka.reads == [122, 182, 242]


def test_runs_are_not_merged_with_what_was_found_of_a_topic_created_again_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A micro-batch finds the topic deleted and created again while a recheck reads its gaps: what Kafka said
    of the old topic is not added to the new topic's mark, and the new mark is walked from its first gap, not from
    where the old one's walk ended."""
    kafka = _Transactions()
    marks = _stuck_at_zero(monkeypatch, kafka)

    def recreated() -> None:  # what `Marks._check_topics` does then (asked here under Kafka's lock, it waits for it)
        with marks._lock:
            assert marks.marks is not None
            marks._topic_ids["in"] = "new id"
            monkeypatch.setattr(kafka, "topic_ids", lambda topics: dict.fromkeys(topics, ("new id", 4)))
            marks.marks[("a", "in", 0)] = PartitionMark(0, [(1, 2), (3, 5)], 0)

    kafka.meanwhile = recreated
    marks.recheck()
    assert marks.marks is not None and marks.marks[("a", "in", 0)].runs == [(1, 2), (3, 5)]
    marks.apply(_row(0, [o for o in range(5, 300) if o % 3 != 2]), 1)  # the new topic's: walked from its start
    kafka.reads.clear()
    marks.recheck()
    assert kafka.reads == [2] and marks.marks[("a", "in", 0)].runs == [(1, 299)]


def test_the_marks_waiting_share_a_rechecks_time_for_kafkas_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source's partitions wait together when its nacks are not replayed: the first walked must not take every
    recheck's `MERGE_BUDGET_S` and leave the others' runs to grow. Here each read takes a second of 20 (the job's
    recheck every minute: a third of it)."""
    clock = [0.0]
    monkeypatch.setattr("spark_jobs.commit_job.time.monotonic", lambda: clock[0])
    asked: list[int] = []

    class _Slow(_Transactions):
        def record_offsets(
            self, topic: str, partition: int, first: int, last: int, keep: Container[int]
        ) -> tuple[list[int], int] | None:
            clock[0] += 1.0
            asked.append(partition)
            return super().record_offsets(topic, partition, first, last, keep)

    monkeypatch.setattr(watermark, "READ_AT_MOST", 6)  # two transactions a read

    kafka = _Slow()
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    store = _Store({("a", "in", 0): PartitionMark(0), ("a", "in", 1): PartitionMark(0)})
    marks = _marks(monkeypatch, kafka, store)
    marks.apply(
        _row(0, [o for o in range(1, 300) if o % 3 != 2]) + _row(1, [o for o in range(1, 300) if o % 3 != 2]), 0
    )
    firsts = []
    for _ in range(2):
        asked.clear()
        marks.recheck()
        assert asked in ([0] * 10 + [1] * 10, [1] * 10 + [0] * 10)
        firsts.append(asked[0])
    assert sorted(firsts) == [0, 1]  # they take turns at going first: one slow to answer would take the most


def test_runs_parted_by_records_not_done_are_not_walked_again_and_a_mark_not_waiting_not_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first record of every transaction nacked (no replay job), the others done: once walked, the runs are
    parted by those records alone, and walking them again at every recheck would find nothing, at a recheck's cost.
    Only runs done above where the last walk ended are walked, once more than `MERGE_ABOVE` of them. A mark that
    does not wait on a record (its runs go as the stream moves) is not walked."""

    walked: list[int] = []  # the reads of partition 1

    class _Unanswered(_Transactions):  # of partition 1, Kafka says nothing: its mark never finds a record to wait on
        def next_existing(self, topic: str, partition: int, offset: int) -> int | None:  # type: ignore[override]
            return None if partition else super().next_existing(topic, partition, offset)

        def record_offsets(
            self, topic: str, partition: int, first: int, last: int, keep: Container[int]
        ) -> tuple[list[int], int] | None:
            if partition:
                walked.append(first)
                return None
            return super().record_offsets(topic, partition, first, last, keep)

    kafka = _Unanswered()
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    moving = PartitionMark(1_000, [(o, o + 1) for o in range(1_001, 1_200, 2)])  # 100 runs, no record waited on
    marks = _marks(monkeypatch, kafka, _Store({("a", "in", 0): PartitionMark(0), ("a", "in", 1): moving}))
    marks.apply(_row(0, [o for o in range(1, 300) if o % 3 == 1]), 0)
    assert marks.marks is not None
    mark = marks.marks[("a", "in", 0)]
    kafka.reads.clear()
    marks.recheck()
    assert kafka.reads == [2]  # one read through the gaps: the records not done are found with the markers
    assert mark.runs == [*((o, o + 2) for o in range(1, 296, 3)), (298, 299)]  # a record not done after each: 3k
    kafka.reads.clear()
    marks.recheck()
    assert kafka.reads == []
    marks.apply(_row(0, [o for o in range(300, 600) if o % 3 == 1]), 1)  # 100 transactions more, done likewise
    kafka.reads.clear()
    marks.recheck()
    assert kafka.reads == [299]  # from where the last walk ended
    assert len(mark.runs) == 200 and mark.mark == 0
    assert walked == []


def test_an_idle_mark_whose_runs_are_merged_is_looked_at_as_idle_in_the_same_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No outcomes come any more: the record the mark waits on was found long ago, and the recheck asks again
    whether it is still there (retention may have deleted it). Merging the runs above it does not make it look moved
    by a micro-batch, which would put that question off to the next recheck."""
    kafka = _Transactions()
    runs = [(1, 2), *((o, o + 2) for o in range(3, 298, 3))]  # 100 transactions done but record 0, as before
    marks = _marks(monkeypatch, kafka, _Store({("a", "in", 0): PartitionMark(0, runs, verified=0, verified_at=0.0)}))
    monkeypatch.setattr(commit_job, "MERGE_ABOVE", 1_000)
    marks.recheck()  # learns it is idle
    kafka.asked.clear()
    monkeypatch.setattr(commit_job, "MERGE_ABOVE", 64)
    marks.recheck()
    assert kafka.reads == [2] and kafka.asked == [0]  # the walk, then the idle look at the record waited on
    assert marks.marks is not None and marks.marks[("a", "in", 0)].runs == [(1, 299)]


@pytest.mark.parametrize(
    ("retention", "expected"),
    [
        ("10080", 3600.0),  # Kafka's default, 7 days: the hourly renewal
        ("2", 30.0),  # minutes: a quarter of them, so that a renewal failing once still comes in time
        ("240", 3600.0),  # a quarter is an hour: the same
        (None, 3600.0),  # the brokers did not say
        ("-1", 3600.0),  # not a retention
        ("soon", 3600.0),
    ],
)
def test_the_watermarks_are_renewed_well_within_the_brokers_offset_retention(
    retention: str | None, expected: float
) -> None:
    assert commit_job.renewal_s(3600.0, retention) == expected


def test_the_renewal_follows_the_brokers_retention_and_said_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Renewed hourly under a retention of 2 minutes, a watermark was gone for 58 minutes of each hour while the job
    ran: a spout started then read its partition from its reset policy."""
    settings = CommitJobSettings(OutcomeSource({}, topics=("acker.outcomes.a",)), "/nowhere")
    monkeypatch.setattr(commit_job, "broker_config", lambda _client: {"offsets.retention.minutes": "2"})
    with caplog.at_level(logging.INFO, logger=commit_job.log.name):
        assert commit_job._renewal_every(settings, said=False) == 30.0
    assert "committed again every 30 s" in caplog.text


class _Clock:
    """`time.monotonic` that `time.sleep` moves on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Renewed:
    """Marks whose renewals are counted, at the clock's times."""

    def __init__(self, clock: _Clock) -> None:
        self.clock, self.at = clock, list[float]()

    def recommit(self) -> None:
        self.at.append(self.clock.now)

    def recheck(self) -> dict[str, dict[tuple[str, int], int]]:
        return {}


def _renewals(monkeypatch: pytest.MonkeyPatch, told: list[dict[str, str] | Exception], for_s: float) -> list[float]:
    """When `_refresh` committed the marks again over ``for_s`` seconds, the brokers answering ``told`` in turn (the
    last answer then for good): the times after the start."""
    clock = _Clock()
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    monkeypatch.setattr(time, "sleep", clock.sleep)

    def broker_config(_client: object) -> dict[str, str]:
        answer = told.pop(0) if len(told) > 1 else told[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(commit_job, "broker_config", broker_config)
    start, marks = clock.now, _Renewed(clock)
    query: Any = type("Query", (), {"isActive": property(lambda _self: clock.now < start + for_s)})()
    settings = CommitJobSettings(OutcomeSource({}, topics=("acker.outcomes.a",)), "/nowhere")
    commit_job._refresh(marks, query, settings)  # type: ignore[arg-type]
    return [at - start for at in marks.at]


def test_the_watermarks_are_committed_again_at_the_pace_the_brokers_retention_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At once, then at a quarter of a 2-minute retention; at the hour under Kafka's default."""
    assert _renewals(monkeypatch, [{"offsets.retention.minutes": "2"}], 120) == [0, 30, 60, 90]
    assert _renewals(monkeypatch, [{"offsets.retention.minutes": "10080"}], 7300) == [0, 3600, 7200]


def test_while_the_brokers_do_not_tell_their_retention_the_watermarks_are_renewed_every_5_minutes_and_asked_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A job started with its brokers, before they answer: it kept the hourly renewal for good. A failure of another
    kind than Kafka's (anything the lookup raises) does not end the refresher's thread, which renews and rechecks."""
    refused = KafkaClientError("describing broker 1", KafkaError(KafkaError._TRANSPORT))
    told: list[dict[str, str] | Exception] = [refused, RuntimeError("no"), {"offsets.retention.minutes": "2"}]
    with caplog.at_level(logging.WARNING, logger=commit_job.log.name):
        assert _renewals(monkeypatch, told, 700) == [0, 300, 600, 630, 660, 690]
    assert len([r for r in caplog.records if "is not known" in r.getMessage()]) == 1  # said once
