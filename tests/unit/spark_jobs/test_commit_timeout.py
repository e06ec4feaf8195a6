"""The replay job's commit of a transaction a broker does not answer (`spark_jobs.replay_job._Publisher._commit`)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from acker.errors import AckerError
from spark_jobs.replay_job import _Publisher


class _Producer:
    """Stands for the job's transactional producer: its commit fails with ``error``."""

    def __init__(self, error: KafkaError) -> None:
        self.error = error

    def commit_transaction(self, _timeout: float) -> None:
        raise KafkaException(self.error)


def _publisher(error: KafkaError) -> _Publisher:
    publisher = object.__new__(_Publisher)  # only its producer
    publisher.producer = _Producer(error)  # type: ignore[assignment]
    return publisher


def test_a_commit_not_answered_stops_the_job_saying_that_a_restart_publishes_the_batch_again() -> None:
    """librdkafka's "retry call to resume" is not something the job can do: by then the transaction has outlived its
    timeout, and the broker aborts it once back."""
    timed_out = KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish, retry call to resume",
                           retriable=True)  # fmt: skip
    with pytest.raises(AckerError, match=r"not committed within 60 s .*Started again once Kafka answers"):
        _publisher(timed_out)._commit()


def test_another_commit_error_is_raised_as_it_is() -> None:
    fenced = KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True)
    with pytest.raises(KafkaException, match="fenced by a newer instance"):
        _publisher(fenced)._commit()
