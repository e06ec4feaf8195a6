"""The commit job's re-commit of its marks, at its Kafka edge (a recording stand-in for the admin calls): only the
marks of the spouts it serves."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from spark_jobs import commit_job
from spark_jobs.commit_job import CommitJobSettings, Marks, OutcomeSource
from spark_jobs.watermark import PartitionMark


class _Store:
    def __init__(self, marks: dict[tuple[str, str, int], PartitionMark]) -> None:
        self.marks = marks

    def load(self) -> dict[tuple[str, str, int], PartitionMark]:
        return self.marks


class _Kafka:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.commits: list[tuple[str, dict[tuple[str, int], int], bool]] = []

    def advance(self, group: str, marks: dict[tuple[str, int], int], *, again: bool = False) -> dict[Any, int]:
        self.commits.append((group, marks, again))
        return marks


def _recommitted(
    monkeypatch: pytest.MonkeyPatch, spouts: frozenset[str] | None
) -> list[tuple[str, dict[tuple[str, int], int], bool]]:
    kafka = _Kafka()
    monkeypatch.setattr(commit_job, "lookups", lambda _client: kafka)
    source = OutcomeSource({"bootstrap.servers": "127.0.0.1:9"}, topics=("acker.outcomes.a",))
    settings = CommitJobSettings(source, "unused", groups={"b": "b-group"}, spouts=spouts)
    store = _Store(
        {("a", "in", 0): PartitionMark(5), ("a", "in", 1): PartitionMark(2), ("b", "in2", 0): PartitionMark(7)}
    )
    Marks(settings, store).recommit()  # type: ignore[arg-type]
    return sorted(kafka.commits)


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
