"""A source topic deleted and created again while the commit job runs never gets the old topic's watermark, at its
Kafka edge (a stand-in for the admin calls and lookups): the marks' topic ids are checked again just before a
commit. A recheck looks its idle marks up outside its lock (seconds, for a deleted partition), and committed them
after: the new topic got the old watermark, its spout started there, and its records below were never read."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from acker.kafka.lookups import Commits
from spark_jobs import commit_job
from spark_jobs.commit_job import CommitJobSettings, Marks, OutcomeSource
from spark_jobs.watermark import PartitionMark
from tests.bitmaps import bitmap_rows

Key = tuple[str, str, int]


class _Store:
    def __init__(self, marks: dict[Key, PartitionMark]) -> None:
        self.marks, self.topic_ids = marks, {"in": "old-id"}

    def load(self) -> dict[Key, PartitionMark]:
        return self.marks

    def save(self, _batch_id: int, marks: dict[Key, PartitionMark], topic_ids: dict[str, str] | None = None) -> None:
        self.marks = marks


class _Kafka:
    """Topic ``in`` (4 partitions); `recreate` deletes it and makes it again: Kafka drops the group's offsets of
    the old one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.topic_id = "old-id"
        self.groups: dict[str, dict[tuple[str, int], int]] = {"a.acked": {("in", 0): 500}}
        self.recreate_on_lookup = False

    def recreate(self) -> None:
        self.topic_id, self.groups["a.acked"] = "new-id", {}

    def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
        return dict.fromkeys(topics, (self.topic_id, 4))

    def next_existing(self, _topic: str, _partition: int, offset: int) -> int | None:
        if self.recreate_on_lookup:  # while the recheck asks, outside its lock
            self.recreate()
            return None
        return offset

    def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.groups.get(group, {}).get(tp, -1001) for tp in partitions}

    def start_mark(self, group: str, topic: str, partition: int) -> tuple[int, bool]:
        found = self.groups.get(group, {}).get((topic, partition))
        return (found, True) if found is not None else (0, False)

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return dict(self.groups.get(group, {}))

    def advance(
        self, group: str, marks: dict[tuple[str, int], int], commits: Commits = Commits.AHEAD
    ) -> dict[Any, int]:
        offsets = self.groups.setdefault(group, {})
        ahead = {tp: m for tp, m in marks.items() if commits.wanted(m, offsets.get(tp))}
        offsets.update(ahead)
        return ahead


def _marks(monkeypatch: pytest.MonkeyPatch, kafka: _Kafka) -> Marks:
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    monkeypatch.setattr("spark_jobs.commit_job.time.sleep", lambda _s: None)
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    store = _Store({("a", "in", 0): PartitionMark(500)})
    return Marks(CommitJobSettings(source, "unused"), store)  # type: ignore[arg-type]


def test_a_topic_created_again_while_a_recheck_asks_gets_no_old_watermark(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = _Kafka()
    marks = _marks(monkeypatch, kafka)
    marks.recheck()  # learns which marks are idle
    kafka.recreate_on_lookup = True
    marks.recheck()  # looks them up; the topic is created again meanwhile
    assert ("in", 0) not in kafka.groups["a.acked"]
    kafka.recreate_on_lookup = False
    # The next micro-batch drops the old mark and starts the new topic's from its first offset.
    assert marks.apply(bitmap_rows("a", "in", 0, [0, 1]), batch_id=7) == {"a.acked": {("in", 0): 2}}


def test_a_topic_created_again_between_a_batch_and_its_commit_gets_no_old_watermark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = _Kafka()
    marks = _marks(monkeypatch, kafka)
    touched, topic_ids = marks.apply_batch(bitmap_rows("a", "in", 0, [500, 501]), batch_id=1)
    assert touched == {"a.acked": {("in", 0): 502}} and topic_ids == {"in": "old-id"}
    kafka.recreate()
    lookups: Any = kafka
    assert commit_job.commit_group(lookups, "a.acked", touched["a.acked"], topic_ids=topic_ids) == {}
    assert kafka.groups["a.acked"] == {}
    kafka.topic_id = "old-id"  # as it was: the same commit goes through
    assert commit_job.commit_group(lookups, "a.acked", touched["a.acked"], topic_ids=topic_ids) == {("in", 0): 502}
