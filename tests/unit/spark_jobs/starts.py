"""Catching the settings `acker spark commit|replay` starts its job with, without Spark or Kafka."""

from __future__ import annotations

from typing import Any

import pytest

from acker.cli import main
from spark_jobs.commit_job import OutcomeSource


class StartedError(Exception):
    """Raised in place of starting the job: the command goes no further."""


def started_with(monkeypatch: pytest.MonkeyPatch, argv: list[str], *, kafka: bool = True) -> Any:
    """The settings ``acker <argv>`` (a ``spark commit`` or ``spark replay`` command) starts its job with. Spark is
    not started; ``kafka`` False: nor is Kafka asked whether the outcome topics exist, or told to make the jobs'."""
    started: list[Any] = []

    def start(_spark: object, settings: Any) -> None:
        started.append(settings)
        raise StartedError

    monkeypatch.setattr("spark_jobs.session.spark_session", lambda *_, **__: object())
    monkeypatch.setattr("spark_jobs.session.stop", lambda *_: None)
    monkeypatch.setattr("spark_jobs.java_client.check_in_jvm", lambda *_, **__: None)  # a JVM's
    monkeypatch.setattr(f"spark_jobs.{argv[1]}_job.start", start)
    if not kafka:
        monkeypatch.setattr(OutcomeSource, "check_login", lambda _: False)  # Kafka not asked: topics not checked
        monkeypatch.setattr("acker.kafka.clients.ensure_topics", lambda *_, **__: None)
    with pytest.raises(StartedError):
        main(argv)
    return started[0]
