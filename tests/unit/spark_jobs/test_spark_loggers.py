"""The JVM loggers the jobs quiet are classes of the Spark they run: a name Spark moved quiets nothing."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyspark

from spark_jobs.session import SPARK_LOGGERS


def _classes() -> set[str]:
    """Every class name in pyspark's jars (those of a Spark the jobs run on, as they do by default; another SPARK_HOME
    or a cluster's spark-submit brings its own, which this does not see)."""
    names: set[str] = set()
    for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"):
        with zipfile.ZipFile(jar) as opened:
            names.update(n.removesuffix(".class").replace("/", ".") for n in opened.namelist() if n.endswith(".class"))
    return names


def test_each_logger_the_jobs_set_is_a_class_of_this_spark() -> None:
    classes = _classes()
    assert "org.apache.spark.SparkContext" in classes  # the jars were read
    missing = [name for name in SPARK_LOGGERS if name not in classes]
    assert not missing, f"no such class in pyspark {pyspark.__version__}: {missing}"
