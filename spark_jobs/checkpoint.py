"""Small files a job keeps in its checkpoint directory, through Hadoop's file system API (local, HDFS, S3, ... like
Spark's own checkpoint)."""

from __future__ import annotations

import uuid

from pyspark.sql import SparkSession


def run_id(spark: SparkSession, checkpoint: str) -> str:
    """A random id made the first time a job starts on ``checkpoint`` and kept there (``<checkpoint>/run-id``): the
    same for every restart from that checkpoint, new when the checkpoint is wiped and the job starts afresh at the
    same path (when Spark's micro-batch ids start again at 0)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a driver's context
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/run-id")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        fresh = uuid.uuid4().hex
        temporary = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/.run-id-{fresh}.tmp")
        out = fs.create(temporary, True)
        try:
            out.write(bytearray(fresh.encode()))
        finally:
            out.close()
        if not fs.rename(temporary, path):  # another start made it first: use theirs
            fs.delete(temporary, False)
    stream = fs.open(path)
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode().strip()
    finally:
        stream.close()
