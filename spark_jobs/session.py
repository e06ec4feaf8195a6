"""The SparkSession of the jobs, with Spark's Kafka and Avro connectors of pyspark's own version.

pyspark ships neither connector. They are resolved from Maven Central on the first run
(``spark.jars.packages``) into an Ivy cache under the project's cache directory (``$ACKER_CACHE_DIR``, default
``~/.cache/kafka-acker``) and reused afterwards. On a cluster, spark-submit's ``--packages`` does the same.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from acker.kafka import lookups
from acker.kafka.local_broker import default_cache_dir
from spark_jobs.replay_job import close_publishers

SPARK_VERSION = pyspark.__version__

SCALA = "2.13"  # pyspark 4 is built for Scala 2.13 only


def connector_packages() -> list[str]:
    """Maven coordinates of the Kafka source/sink and Avro functions matching this pyspark."""
    return [
        f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}:{SPARK_VERSION}",
        f"org.apache.spark:spark-avro_{SCALA}:{SPARK_VERSION}",
    ]


def spark_session(app: str, master: str = "local[2]") -> SparkSession:
    """A session for ``app`` (getOrCreate: the jobs of one process share it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this interpreter's packages
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    ivy = default_cache_dir() / "ivy"
    ivy.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.appName(app)
        .config("spark.jars.packages", ",".join(connector_packages()))
        .config("spark.jars.ivy", str(ivy))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # progress bars on stderr, cut into the log lines
    )
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else a warning that the host name is a loopback one
        builder = (
            builder.master(master)
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def stop(session: SparkSession | None) -> None:
    """Stop ``session`` (if one was made) and the jobs' Kafka clients, and make sure no Spark JVM started by this
    process outlives it.

    pyspark's JVM exits when this process's end of its stdin closes, but one still starting up (an interrupt during
    ``getOrCreate``) may not get there: it is terminated here, found among this process's children.
    """
    if session is not None:
        session.stop()
    # Then the jobs' own Kafka clients: left open, they would log connection errors once the cluster goes (a demo's).
    close_publishers()
    lookups.close_all()
    jvms = _children_running(b"org.apache.spark.deploy.SparkSubmit")
    for pid in jvms:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while jvms and time.monotonic() < deadline:
        jvms = [pid for pid in jvms if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        time.sleep(0.1)
    for pid in jvms:
        os.kill(pid, signal.SIGKILL)


def _children_running(marker: bytes) -> list[int]:
    """This process's children whose command line contains ``marker`` (Linux; none elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == os.getpid() and marker in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
