"""The commit job's state: every source partition's `PartitionMark`, saved in the job's checkpoint directory.

One small JSON file per micro-batch, ``<checkpoint>/marks-state/<batch id>.json``, written through Hadoop's file
system API (so the checkpoint may be local, HDFS, S3, ... like Spark's own) before the batch's watermarks are
published; the newest ``KEEP`` files are kept. On start the job loads the newest one.

Why this is exact without Spark's state store: applying a micro-batch is idempotent (done offsets are a set, a mark
only moves forward), and the file of batch ``n`` is written before Spark commits batch ``n``. So the newest file
holds every batch Spark has committed, and perhaps the batch Spark runs again after a crash, which then changes
nothing. (Spark's own stateful operator for Python functions, ``applyInPandasWithState``, cost about 0.3 s per
micro-batch here even with a function that does nothing: most of the delay from an ack to its watermark.)
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from spark_jobs.watermark import PartitionMark

Key = tuple[str, str, int]  # spout, source topic, source partition
KEEP = 10


class MarkStore:
    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a driver's context
        self._jvm = jvm
        self._dir = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/marks-state")
        self._fs = self._dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def _batches(self) -> list[int]:
        if not self._fs.exists(self._dir):
            return []
        names = [status.getPath().getName() for status in self._fs.listStatus(self._dir)]
        return sorted(int(n.removesuffix(".json")) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def load(self) -> dict[Key, PartitionMark]:
        """The marks of the newest micro-batch saved (none before the first)."""
        batches = self._batches()
        if not batches:
            return {}
        stream = self._fs.open(self._path(batches[-1]))
        try:
            document = json.loads(bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)))
        finally:
            stream.close()
        return {
            (m["spout"], m["topic"], int(m["partition"])): PartitionMark(
                int(m["mark"]), [(int(s), int(e)) for s, e in m["runs"]], int(m["verified"])
            )
            for m in document["marks"]
        }

    def save(self, batch_id: int, marks: dict[Key, PartitionMark]) -> None:
        """Write the marks as of ``batch_id`` (atomically: a temporary file renamed), and drop old files."""
        document: dict[str, Any] = {
            "batch": batch_id,
            "marks": [
                {"spout": s, "topic": t, "partition": p, "mark": m.mark, "runs": m.runs, "verified": m.verified}
                for (s, t, p), m in marks.items()
            ],
        }
        path, temporary = self._path(batch_id), self._jvm.org.apache.hadoop.fs.Path(self._dir, f".{batch_id}.tmp")
        out = self._fs.create(temporary, True)
        try:
            out.write(bytearray(json.dumps(document).encode()))
        finally:
            out.close()
        self._fs.delete(path, False)  # a batch that Spark runs again
        if not self._fs.rename(temporary, path):
            raise OSError(f"could not rename {temporary} to {path}")
        for old in self._batches()[:-KEEP]:
            self._fs.delete(self._path(old), False)

    def _path(self, batch_id: int) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._dir, f"{batch_id}.json")
