"""The commit job's marks file (`spark_jobs.mark_store.MarkStore`) at its file-system edge (files in a dict): a
newest file that cannot be read stopped the job at every start, with older ones there to load."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_jobs.mark_store import KEEP, Key, MarkStore
from spark_jobs.watermark import PartitionMark


class _Files:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files, self.dir = files, "cp/marks-state"

    def names(self) -> list[str]:
        return list(self.files)

    def read(self, name: str) -> bytes:
        return self.files[name]

    def write(self, name: str, data: bytes, *, replace: bool = True) -> bool:  # as `CheckpointFiles.write`
        if name in self.files and not replace:
            return False
        self.files[name] = data
        return True

    def delete(self, name: str) -> None:
        del self.files[name]


def _store(files: dict[str, bytes]) -> MarkStore:
    store: Any = MarkStore.__new__(MarkStore)
    store._files, store.topic_ids = _Files(files), {}
    return store  # type: ignore[no-any-return]


def _saved(mark: int) -> bytes:
    marks = [{"spout": "a", "topic": "in", "partition": 0, "mark": mark, "runs": [[mark + 2, mark + 5]], "verified": 0}]
    return json.dumps({"batch": 1, "marks": marks, "topic_ids": {"in": "id-1"}}).encode()


def test_the_newest_file_that_can_be_read_is_loaded() -> None:
    store = _store({"7.json": _saved(10), "8.json": _saved(20), "9.json": b"", "10.json": b'{"marks": [{"spout'})
    assert store.load() == {("a", "in", 0): PartitionMark(20, [(22, 25)], 0)}
    assert store.topic_ids == {"in": "id-1"}
    # Newest by number, not by name: "10" sorts before "9" as text.
    assert _store({"9.json": _saved(10), "10.json": _saved(20)}).load()[("a", "in", 0)].mark == 20


def test_with_no_file_that_can_be_read_the_job_starts_from_the_committed_watermarks_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The only file there, cut short by a power loss (the first after a new checkpoint): the job stopped at every
    start until it was deleted by hand."""
    assert _store({"3.json": b"", "4.json": b"{}"}).load() == {}
    assert "no older file: each watermark starts from its group's committed offset" in caplog.text
    assert "cp/marks-state" in caplog.text
    assert _store({}).load() == {}


def test_a_save_keeps_the_newest_files_up_to_its_batch_and_drops_those_of_later_batches() -> None:
    """Files of batch ids above the one saved are left from a run whose query checkpoint was since removed (Spark
    counts from 0 again): kept, the newest of them would be the one loaded at the next start, with marks of another
    run, and this run's files would never be the newest."""
    files = {f"{b}.json": _saved(b) for b in range(100, 105)}  # an earlier run's, up to batch 104
    store = _store(files)
    marks = {("a", "in", 0): PartitionMark(7, [(9, 12)], 3)}
    for batch in range(KEEP + 3):
        store.save(batch, {("a", "in", 0): PartitionMark(batch, [], 0)}, {"in": "id-2"})
    store.save(KEEP + 2, marks, {"in": "id-2"})  # the last batch run again (a restart): its file replaced
    assert sorted(files, key=lambda n: int(n[:-5])) == [f"{b}.json" for b in range(3, KEEP + 3)]
    assert store.load() == marks and store.topic_ids == {"in": "id-2"}
    store.save(1, marks)  # a checkpoint removed again: the files of later batches go, whatever their number
    assert list(files) == ["1.json"]


def test_every_partitions_mark_runs_and_verified_offset_and_every_topic_id_are_loaded_as_saved() -> None:
    """Lost on the way, a partition would start at its group's committed offset and the offsets done above its mark
    would not be read again: its watermark would wait below them until their spout was restarted."""
    marks: dict[Key, PartitionMark] = {
        ("words", "lines", 0): PartitionMark(10, [(12, 15), (20, 21), (30, 40)], 10),
        ("words", "lines", 3): PartitionMark(0, [], -1),
        ("words", "other", 3): PartitionMark(7, [(9, 10)], 8),
        ("counts", "lines", 3): PartitionMark(2**40, [(2**40 + 2, 2**40 + 5)], 2**40 + 1),
    }
    files: dict[str, bytes] = {}
    _store(files).save(4, marks, {"lines": "id-lines", "other": "id-other"})
    assert list(files) == ["4.json"]
    restarted = _store(files)
    assert restarted.load() == marks
    assert restarted.topic_ids == {"lines": "id-lines", "other": "id-other"}


def test_a_batch_saved_again_replaces_its_file_whole() -> None:
    """Spark runs the last batch again after a restart: its file as written the first time (or the two merged)
    would be loaded at the next start, marks that batch's second run did not leave."""
    files: dict[str, bytes] = {}
    store = _store(files)
    store.save(5, {("a", "in", 0): PartitionMark(3, [(5, 6)], 3), ("a", "in", 1): PartitionMark(4)}, {"in": "id-1"})
    again = {("a", "in", 0): PartitionMark(6, [], -1)}
    store.save(5, again, {"in": "id-2"})
    assert list(files) == ["5.json"]
    restarted = _store(files)
    assert restarted.load() == again
    assert restarted.topic_ids == {"in": "id-2"}
