"""`acker watermarks` at its Kafka edge: a partition whose end Kafka did not tell in the time all had is not asked
again with a whole timeout of its own."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from acker import watermarks
from acker.config import ServiceConfig

LEADERLESS = set(range(6))


class _Consumer:
    """Partitions 0-5 have no leader: librdkafka waits out the timeout asked for, then fails."""

    asked: list[int]

    def __init__(self, _settings: dict[str, Any]) -> None:
        pass

    def list_topics(self, topic: str, timeout: float) -> Any:
        partitions = {p: SimpleNamespace(leader=-1 if p in LEADERLESS else 1) for p in range(8)}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        _Consumer.asked.append(tp.partition)
        if tp.partition in LEADERLESS:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return 0, 5

    def close(self) -> None:
        pass


class _Admin:
    def __init__(self, _settings: dict[str, Any]) -> None:
        pass

    def list_consumer_group_offsets(self, requests: list[Any], request_timeout: float) -> dict[str, Any]:
        group = requests[0].group_id
        marks = [SimpleNamespace(topic="in", partition=p, offset=5, error=None) for p in range(8)]
        return {group: SimpleNamespace(result=lambda: SimpleNamespace(topic_partitions=marks))}


def test_partitions_without_a_leader_are_not_asked_again_each_with_the_whole_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`end_offsets` gives one timeout to all partitions and skips those without a leader; each was then asked for
    its first offset with the whole timeout again: minutes, for a cluster that lost a broker."""
    _Consumer.asked = []
    monkeypatch.setattr(watermarks, "Consumer", _Consumer)
    monkeypatch.setattr(watermarks, "AdminClient", _Admin)
    monkeypatch.setattr(watermarks, "topic_partitions", lambda *_args: list(range(8)))
    marks = watermarks.read_watermarks(ServiceConfig(), ["orders"], timeout_s=10.0)
    assert [(m.partition, m.end) for m in marks] == [(p, None if p in LEADERLESS else 5) for p in range(8)]
    assert sorted(_Consumer.asked) == [6, 6, 7, 7]  # their ends, then their first offsets: the led ones only


class _Refusing(_Admin):
    """Describes only the groups ending in one ".acked": the operator may look at those alone."""

    code = KafkaError.GROUP_AUTHORIZATION_FAILED

    def list_consumer_group_offsets(self, requests: list[Any], request_timeout: float) -> dict[str, Any]:
        group = requests[0].group_id
        if group.endswith(".acked.acked"):
            error = KafkaException(KafkaError(self.code))

            def refused() -> Any:
                raise error

            return {group: SimpleNamespace(result=refused)}
        return super().list_consumer_group_offsets(requests, request_timeout)


def test_a_group_looked_up_only_in_case_it_was_meant_does_not_end_the_command_when_it_cannot_be_described(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``orders.acked`` is also looked up as the group of a spout whose own group ends so (``orders.acked.acked``):
    an operator allowed to describe ``orders.acked`` alone had the command fail on the other."""
    _Consumer.asked = []
    monkeypatch.setattr(watermarks, "Consumer", _Consumer)
    monkeypatch.setattr(watermarks, "AdminClient", _Refusing)
    monkeypatch.setattr(watermarks, "topic_partitions", lambda *_args: list(range(8)))
    marks = watermarks.read_watermarks(ServiceConfig(), ["orders.acked"], timeout_s=10.0)
    assert {m.group for m in marks} == {"orders.acked"} and len(marks) == 8
    with pytest.raises(KafkaException):  # named, it is the command's to say
        watermarks.read_watermarks(ServiceConfig(), ["orders.acked.acked"], timeout_s=10.0)
    monkeypatch.setattr(_Refusing, "code", KafkaError._TIMED_OUT)
    with pytest.raises(KafkaException):  # not answered: its rows are not left out unsaid
        watermarks.read_watermarks(ServiceConfig(), ["orders.acked"], timeout_s=10.0)
