"""Avro's reader limits, and its fast reader turned off, in Spark's JVMs (`spark_jobs.session`): added beside the
options a user gave, never instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.session import AVRO_PROPERTIES, _spark_default, _with_avro_limits


def test_the_limits_are_added_to_the_options_of_spark_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given when pyspark starts the JVM, the executors' options replaced those of spark-defaults.conf (a Kerberos or
    TLS flag, say), which this process's SparkConf does not see."""
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.driver.extraJavaOptions  -Dmy.krb=1\nspark.executor.extraJavaOptions=-Dmy.exec=1 -Dx=2\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    given = _spark_default("spark.executor.extraJavaOptions")
    assert given == "-Dmy.exec=1 -Dx=2"
    options = _with_avro_limits(given)
    assert options.startswith("-Dmy.exec=1 -Dx=2 ") and all(f"-D{name}=" in options for name in AVRO_PROPERTIES)
    assert "-Dorg.apache.avro.fastread=false" in options  # its cache kept a reader a micro-batch (AVRO-3524)
    assert _with_avro_limits("-Dorg.apache.avro.fastread=true").count("fastread") == 1  # a user's choice is kept
    own = "-Dorg.apache.avro.limits.string.maxLength=5"
    assert _with_avro_limits(own).count("string.maxLength") == 1  # a user's own limit is kept
    (tmp_path / "spark-defaults.conf").write_text("spark.executor.extraJavaOptions   -Dmy.krb=1 -Dy=2\n")
    assert _spark_default("spark.executor.extraJavaOptions") == "-Dmy.krb=1 -Dy=2"  # its "=" is the value's
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "none"))
    assert _spark_default("spark.executor.extraJavaOptions") == ""
