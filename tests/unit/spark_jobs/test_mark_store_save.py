"""What the commit job saves of its marks (`spark_jobs.mark_store.MarkStore.save`) is what its next start loads: every
partition's mark, done runs and verified offset, and each topic's id, at its file-system edge (files in a dict that
write as `spark_jobs.checkpoint.CheckpointFiles` does). `test_mark_store` holds the files kept and dropped."""

from __future__ import annotations

from typing import Any

from spark_jobs.mark_store import Key, MarkStore
from spark_jobs.watermark import PartitionMark


class _Files:
    """A checkpoint directory as `CheckpointFiles` writes it: a file that exists is replaced only when asked."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files, self.dir = files, "cp/marks-state"

    def names(self) -> list[str]:
        return list(self.files)

    def read(self, name: str) -> bytes:
        return self.files[name]

    def write(self, name: str, data: bytes, *, replace: bool = True) -> bool:
        if name in self.files and not replace:
            return False
        self.files[name] = data
        return True

    def delete(self, name: str) -> None:
        del self.files[name]


def _store(files: dict[str, bytes]) -> MarkStore:
    """A store over ``files``, as the job makes one at each start (`MarkStore.__init__` without Spark)."""
    store: Any = MarkStore.__new__(MarkStore)
    store._files, store.topic_ids = _Files(files), {}
    return store  # type: ignore[no-any-return]


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
