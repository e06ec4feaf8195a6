"""`topic_partitions` tells a missing topic (no partitions) from one the cluster refuses to describe (an error)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from acker.kafka.clients import topic_partitions


class _Metadata:
    """A consumer whose metadata for topic ``t`` has the given partitions and error (None: no such topic listed)."""

    def __init__(self, partitions: list[int] | None, error: int | None = None) -> None:
        topic = SimpleNamespace(partitions=dict.fromkeys(partitions or []), error=error and KafkaError(error))
        self.cluster = SimpleNamespace(topics={} if partitions is None else {"t": topic})

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        return self.cluster


def test_partitions_ascending_and_missing_topics_empty() -> None:
    assert topic_partitions(_Metadata([2, 0, 1]), "t") == [0, 1, 2]  # type: ignore[arg-type]
    assert topic_partitions(_Metadata(None), "t") == []  # type: ignore[arg-type]
    assert topic_partitions(_Metadata([], KafkaError.UNKNOWN_TOPIC_OR_PART), "t") == []  # type: ignore[arg-type]
    assert topic_partitions(_Metadata([0], KafkaError.LEADER_NOT_AVAILABLE), "t") == []  # type: ignore[arg-type]


def test_a_topic_the_cluster_will_not_describe_is_an_error_not_a_missing_topic() -> None:
    with pytest.raises(KafkaException) as raised:
        topic_partitions(_Metadata([], KafkaError.TOPIC_AUTHORIZATION_FAILED), "t")  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert raised.value.args[0].str().startswith("topic t: ")  # which topic: an error read later must say
