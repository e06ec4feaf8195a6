"""The commit job's state: every source partition's `PartitionMark`, saved in the job's checkpoint directory.

One small JSON file per micro-batch, ``<checkpoint>/marks-state/<batch id>.json``, written through Hadoop's file
system API (so the checkpoint may be local, HDFS, S3, ... like Spark's own) before the batch's watermarks are
published; the newest ``KEEP`` files are kept. On start the job loads the newest one it can read.

Why this is exact without Spark's state store: applying a micro-batch is idempotent (done offsets are a set, a mark
only moves forward), and the file of batch ``n`` is written before Spark commits batch ``n``. So the newest file
holds every batch Spark has committed, and perhaps the batch Spark runs again after a crash, which then changes
nothing. (Unless the newest file cannot be read, cut short by a power loss: `MarkStore.load` then loads the one
before, and what a batch Spark committed since added is not read again; no watermark goes past it, see there.)
(Spark's own stateful operator for Python functions, ``applyInPandasWithState``, cost about 0.3 s per
micro-batch here even with a function that does nothing: most of the delay from an ack to its watermark.)
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql import SparkSession

from spark_jobs.checkpoint import CheckpointFiles
from spark_jobs.watermark import PartitionMark

log = logging.getLogger("spark_jobs.mark_store")

Key = tuple[str, str, int]  # spout, source topic, source partition
KEEP = 10


class MarkStore:
    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        self._files = CheckpointFiles(spark, f"{checkpoint.rstrip('/')}/marks-state")
        self.topic_ids: dict[str, str] = {}  # as the newest file has them (`load`): each source topic's Kafka id

    def _batches(self) -> list[int]:
        names = self._files.names()
        return sorted(int(n.removesuffix(".json")) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def load(self) -> dict[Key, PartitionMark]:
        """The marks of the newest micro-batch saved (none before the first). A file that cannot be read (cut short
        by a power loss on a file system that renamed it before its bytes were on disk: not JSON, or failing its
        checksum on Hadoop's local file system, `OSError`) is passed over, said, for
        the one before, and with none readable the job starts as a new one would (no marks): it fails at no start for
        it (with one file, the first after a new checkpoint, a power loss stopped the job at every start until the
        file was deleted by hand). What the older file (or none) lacks is safe, not always recovered: the offsets
        batches committed to the watermark groups are caught up from there (`Marks._skip_to_committed`; a partition
        without a mark starts at its group's committed offset), but offsets found done above a watermark are not read
        again, and the watermark waits below them until their records are decided again: a restart of their spout
        reads them again from the watermark. Said as the file is passed over; a mark that waits is said again after
        the job's ``stuck_s`` (``--stuck-after-s``) only with offsets done above it (`Marks._say_stuck`: without, it
        cannot be told from a spout that has not read that far)."""
        batches = self._batches()
        for batch in reversed(batches):
            try:
                return self._read(batch)
            except (OSError, ValueError, KeyError, TypeError) as error:
                log.warning("marks of batch %d in %s cannot be read (%r): %s; a watermark that then waits on offsets "
                            "done in that batch moves on once their spout is restarted", batch, self._files.dir, error,
                            "the older file is loaded" if batch != batches[0] else
                            "no older file: each watermark starts from its group's committed offset")  # fmt: skip
        return {}

    def _read(self, batch: int) -> dict[Key, PartitionMark]:
        document = json.loads(self._files.read(f"{batch}.json"))
        marks = {
            (m["spout"], m["topic"], int(m["partition"])): PartitionMark(
                int(m["mark"]), [(int(s), int(e)) for s, e in m["runs"]], int(m["verified"])
            )
            for m in document["marks"]
        }
        self.topic_ids = dict(document.get("topic_ids", {}))  # none in the files of earlier versions
        return marks

    def save(self, batch_id: int, marks: dict[Key, PartitionMark], topic_ids: dict[str, str] | None = None) -> None:
        """Write the marks as of ``batch_id`` (atomically; a batch that Spark runs again replaces its file), and drop
        old files, and any of a later batch: Spark's batch ids only grow in one checkpoint, so those are left from a
        run whose query checkpoint was since removed, and would otherwise be the ones loaded (and keep this one's
        files from being the newest)."""
        document: dict[str, Any] = {
            "batch": batch_id,
            "marks": [
                {"spout": s, "topic": t, "partition": p, "mark": m.mark, "runs": m.runs, "verified": m.verified}
                for (s, t, p), m in marks.items()
            ],
            "topic_ids": topic_ids or {},
        }
        self._files.write(f"{batch_id}.json", json.dumps(document).encode())
        batches = self._batches()
        stale = [b for b in batches if b > batch_id]
        kept = [b for b in batches if b <= batch_id]
        for old in stale + kept[:-KEEP]:
            self._files.delete(f"{old}.json")
