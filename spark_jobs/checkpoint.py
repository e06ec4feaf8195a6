"""Small files a job keeps in its checkpoint directory, through Hadoop's file system API (local, HDFS, S3, ... like
Spark's own checkpoint)."""

from __future__ import annotations

import uuid
from typing import Any

from py4j.java_gateway import is_instance_of
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from spark_jobs.jvm_errors import java_said


class CheckpointFiles:
    """The files of one directory under a job's checkpoint."""

    def __init__(self, spark: SparkSession, directory: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a driver's context
        self._jvm, self._gateway = jvm, spark.sparkContext._gateway
        self.dir = jvm.org.apache.hadoop.fs.Path(directory.rstrip("/"))
        self._fs = self.dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self.dir, name)

    def names(self) -> list[str]:
        """The names of the files there (none when the directory does not exist yet)."""
        if not self._fs.exists(self.dir):
            return []
        return [status.getPath().getName() for status in self._fs.listStatus(self.dir)]

    def exists(self, name: str) -> bool:
        return bool(self._fs.exists(self.path(name)))

    def read(self, name: str) -> bytes:
        """The file's bytes; `OSError` when they are not all there (a local file whose checksum file says it was cut
        short: Hadoop's local file system checks each file against its ``.<name>.crc``; a file shorter than its
        length said). Any other failure of the file system (a store not answering for a moment) raises as it is:
        the job fails, and its restart reads the file, rather than take an older one."""
        try:
            stream = self._fs.open(self.path(name))
            try:
                return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
            finally:
                stream.close()
        except Py4JJavaError as error:
            cut_short = ("org.apache.hadoop.fs.ChecksumException", "java.io.EOFException")
            if not any(is_instance_of(self._gateway, error.java_exception, kind) for kind in cut_short):
                raise
            raise OSError(f"reading {self.path(name)}: {java_said(error)}") from None

    def write(self, name: str, data: bytes, *, replace: bool = True) -> bool:
        """Write ``name`` whole or not at all (a temporary file renamed); False when it exists and not ``replace``."""
        temporary = self.path(f".{name}.{uuid.uuid4().hex}.tmp")
        out = self._fs.create(temporary, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if replace:
            self._fs.delete(self.path(name), False)
        if not self._fs.rename(temporary, self.path(name)):
            self._fs.delete(temporary, False)
            if replace:
                raise OSError(f"could not rename {temporary} to {self.path(name)}")
            return False
        return True

    def delete(self, name: str) -> None:
        self._fs.delete(self.path(name), False)


RUN_ID = "acker-run-id"


def run_id(spark: SparkSession, checkpoint: str, query: str) -> str:
    """A random id made the first time a job's query starts on ``checkpoint``, kept in the query's own checkpoint
    directory (``<checkpoint>/<query>/acker-run-id``): the same at every restart from it, new when it is wiped (the
    whole checkpoint, or the query's alone, Spark's usual remedy) and Spark's micro-batch ids start again at 0.
    Earlier versions kept it at ``<checkpoint>/run-id``: taken over (and removed there) when the query's checkpoint
    has batches of that run (``commits/``), and not otherwise: Spark writes a new query's ``metadata`` before its
    first batch, so that file alone says nothing."""
    root = checkpoint.rstrip("/")
    files = CheckpointFiles(spark, f"{root}/{query}")
    if not files.exists(RUN_ID):
        earlier = CheckpointFiles(spark, root)
        ran = any(not name.startswith(".") for name in CheckpointFiles(spark, f"{root}/{query}/commits").names())
        taken = earlier.read("run-id") if ran and earlier.exists("run-id") else uuid.uuid4().hex.encode()
        files.write(RUN_ID, taken, replace=False)
        if earlier.exists("run-id"):  # taken over, or of a query checkpoint wiped since: never to be taken again
            earlier.delete("run-id")
    return files.read(RUN_ID).decode().strip()
