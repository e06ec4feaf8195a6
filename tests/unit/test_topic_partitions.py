"""`topic_partitions` tells a missing topic (no partitions) from one the cluster refuses to describe (an error);
`create_topics` returns once its topics can be found; `readable` tells a record from an event, and stops at a fatal
error."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from acker import topics as acker_topics
from acker.config import ServiceConfig
from acker.kafka import clients
from acker.kafka.clients import KafkaClientError, TopicSpec, create_topics, readable, topic_partitions


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


class _Admin:
    """An admin client whose creations are all answered at once."""

    def __init__(self, _settings: object) -> None:
        pass

    def create_topics(self, topics: list[object], **_timeouts: float) -> dict[str, concurrent.futures.Future[None]]:
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return {topic.topic: done for topic in topics}  # type: ignore[attr-defined]


class _Lagging:
    """A metadata handle whose answers have topic ``t`` only from its ``lag``-th lookup on."""

    def __init__(self, lag: int) -> None:
        self.lookups, self.lag = 0, lag

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.lookups += 1
        return _Metadata([0, 1] if self.lookups >= self.lag else None).cluster


def test_topics_created_are_found_before_create_topics_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A creation is answered once the controller has the topic; a broker's metadata can lag: a spout started at once
    (a test, on a busy machine) was refused its source topic. The lookups wait, bounded by the creation's timeout."""
    consumer = _Lagging(lag=4)
    monkeypatch.setattr(clients, "AdminClient", _Admin)
    monkeypatch.setattr(clients, "metadata_admin", lambda _config: consumer)
    assert create_topics({}, [TopicSpec("t", 2)]) == ["t"]
    assert consumer.lookups == 4
    never = _Lagging(lag=10**9)
    monkeypatch.setattr(clients, "metadata_admin", lambda _config: never)
    assert create_topics({}, [TopicSpec("t", 2)], timeout_s=0.3) == ["t"]  # created all the same, said so
    assert 1 < never.lookups < 20
    unwaited = _Lagging(lag=10**9)
    monkeypatch.setattr(clients, "metadata_admin", lambda _config: unwaited)
    assert create_topics({}, [TopicSpec("t", 2)], visible=False) == ["t"] and unwaited.lookups == 0  # the service's


class _Slow(_Lagging):
    """Metadata that answers just inside the time it is given, never with the topic."""

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        time.sleep(min(timeout, 0.2))
        return super().list_topics(topic, timeout)


def test_the_wait_for_many_topics_ends_at_the_creations_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each lookup of a round was given the time left at the round's start: five slow ones took five times that."""
    monkeypatch.setattr(clients, "AdminClient", _Admin)
    monkeypatch.setattr(clients, "metadata_admin", lambda _config: _Slow(lag=10**9))
    started = time.monotonic()
    create_topics({}, [TopicSpec(f"t{i}", 1) for i in range(5)], timeout_s=0.3)
    assert time.monotonic() - started < 0.75  # 1.0 s or more before


def test_a_fatal_consumer_error_stops_the_reader_and_others_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """A fenced static member's consumer reads nothing more: a stage that went on would idle, or act as a zombie."""
    log = logging.getLogger("test.readable")
    assert readable(Message(topic="t", partition=0, offset=1, value=b"v"), log, "consumer")
    assert not readable(Message(error=KafkaError(KafkaError._PARTITION_EOF)), log, "consumer")
    assert not caplog.records  # the end of a partition is not an error worth a line
    assert not readable(Message(error=KafkaError(KafkaError._TRANSPORT)), log, "consumer")
    assert "consumer error" in caplog.text
    with pytest.raises(KafkaClientError, match="FENCED_INSTANCE_ID"):
        readable(Message(error=KafkaError(KafkaError.FENCED_INSTANCE_ID, fatal=True)), log, "consumer")


def test_group_settings_the_broker_refuses_stop_the_reader() -> None:
    """`acker run --kafka session.timeout.ms=1000` (below the broker's minimum) logged the refusal every 2 s for ever,
    never in its group, reading nothing."""
    refused = KafkaError(KafkaError.INVALID_SESSION_TIMEOUT, "JoinGroup failed: Broker: Invalid session timeout")
    with pytest.raises(KafkaClientError, match=r"INVALID_SESSION_TIMEOUT.*refuses the group's settings"):
        readable(Message(error=refused), logging.getLogger("test.readable"), "consumer")


@pytest.mark.parametrize(
    ("asked", "default", "found", "said"),
    [
        (-1, 3, [1], ["replication factor 1, not 3 (the default)"]),  # made under an older default
        (-1, 3, [3], []),
        (-1, None, [1], []),  # the cluster does not say its default: nothing compared
        (2, 3, [1, 2], ["replication factor 1 to 2, not 2"]),
    ],
)
def test_an_existing_topics_replication_factor_is_held_against_the_one_asked_for_or_the_clusters_default(
    monkeypatch: pytest.MonkeyPatch, asked: int, default: int | None, found: list[int], said: list[str]
) -> None:
    """Compared only when a factor was given, topics made with one replica were shown as plain "exists" by the
    command run as the README says (no --replication-factor: the cluster's default)."""
    monkeypatch.setattr(acker_topics, "replication_factors", lambda *_args: found)
    spec = TopicSpec("t", 1, asked)
    assert acker_topics._replication_difference(ServiceConfig(), spec, lambda: default) == said
