"""PySpark Structured Streaming jobs over the outcome topics: the commit job and the replay job.

This package imports no pyspark itself (its modules that run a job do): the ``acker`` command lists ``acker spark``
whether the package's ``spark`` extra is installed or not, and says which is missing when it is not
(`require_spark`)."""

from __future__ import annotations

import importlib.util

from acker.errors import AckerError


def require_spark(command: str) -> None:
    """`AckerError` naming how to install pyspark when it is not: ``command`` (``acker spark``, ``acker demo``)
    failed with a traceback of ``ModuleNotFoundError`` in a plain install (``pip install kafka-acker``), the demo
    after starting its broker and stages."""
    if importlib.util.find_spec("pyspark") is None:
        raise AckerError(f"{command} runs Spark, which is not installed here: pip install 'kafka-acker[spark]'")
