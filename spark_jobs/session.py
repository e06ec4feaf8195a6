"""The SparkSession of the jobs, with Spark's Kafka and Avro connectors of pyspark's own version.

pyspark ships neither connector. They are resolved from Maven Central on the first run
(``spark.jars.packages``) into an Ivy cache under the project's cache directory (``$ACKER_CACHE_DIR``, default
``~/.cache/kafka-acker``) and reused afterwards. On a cluster, spark-submit's ``--packages`` does the same.
"""

from __future__ import annotations

import os
import sys

import pyspark
from pyspark.sql import SparkSession

from acker.kafka.local_broker import default_cache_dir

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
    )
    if master.startswith("local"):
        builder = (
            builder.master(master)
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
