"""Where the service sends an acker partition's outcome records, at its Kafka edge (stand-ins for the lookups and the
commit): one partition of each outcome topic, chosen before the first record and named in a commit then."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

import acker.service
from acker.config import ServiceConfig
from acker.outcome_log import OutcomeLog, parse_metadata
from acker.service import AckerService, _OutcomeRecord

TOPIC = "acker.outcomes.s"


class _Kafka:
    """The reading consumer and the group consumer, as far as the service asks them here."""

    def __init__(self, partitions: int | None, ends: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.partitions, self.ends = partitions, ends
        self.lookups = 0
        self.commits: list[list[TopicPartition]] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.lookups += 1
        if self.partitions is None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        found = SimpleNamespace(error=None, partitions=dict.fromkeys(range(self.partitions)))
        return SimpleNamespace(topics={topic: found})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if (tp.topic, tp.partition) not in self.ends:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return self.ends[(tp.topic, tp.partition)]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not asynchronous
        self.commits.append(offsets)

    def close(self) -> None:
        pass


def _service(monkeypatch: pytest.MonkeyPatch, kafka: _Kafka) -> tuple[AckerService, list[dict[str, Any]]]:
    monkeypatch.setattr(acker.service, "_LOOKUP_TIMEOUT_S", 0.1)
    service = AckerService(ServiceConfig(metrics_port=0, kafka={"log_level": "0"}))
    service.consumer.close()
    service.consumer = service._reader = kafka  # type: ignore[assignment]
    service._known_topics = {TOPIC}
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(service, "_produce", lambda topic, value, **kw: sent.append(kw))
    return service, sent


def _send(service: AckerService, partition: int) -> None:
    service._send_outcomes(partition, _OutcomeRecord("s", b"", 10, 12))


def test_the_first_record_of_a_topic_goes_to_p_mod_n_after_a_commit_that_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = _Kafka(3, {(TOPIC, 2): (0, 40), ("acker", 5): (7, 90)})
    service, sent = _service(monkeypatch, kafka)
    service._outcome_logs[5] = OutcomeLog()
    service._committed[5] = -1001  # nothing committed yet: the partition's first offset is committed again
    _send(service, 5)
    _send(service, 5)
    assert [kw["partition"] for kw in sent] == [2, 2]
    [[commit]] = kafka.commits  # once
    assert (commit.partition, commit.offset, parse_metadata(commit.metadata)) == (5, 7, {TOPIC: (2, 40)})
    service.close()


def test_records_keep_to_the_partition_their_topic_already_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read back from a previous owner (which wrote elsewhere, as before partitions were added): no commit, and the
    records go on there, so the next read-back finds them all in one partition."""
    kafka = _Kafka(3, {})
    service, sent = _service(monkeypatch, kafka)
    service._outcome_logs[5] = log = OutcomeLog()
    log.delivered(TOPIC, 0, 17, acker_offset=3)
    service._committed[5] = 3
    _send(service, 5)
    assert sent[0]["partition"] == 0 and kafka.commits == [] and kafka.lookups == 0


def test_a_topic_that_cannot_be_looked_up_is_written_by_key_and_not_asked_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = _Kafka(None, {})
    service, sent = _service(monkeypatch, kafka)
    service._outcome_logs[5] = OutcomeLog()
    service._committed[5] = 3
    for _ in range(3):
        _send(service, 5)
    assert [kw.get("partition") for kw in sent] == [None, None, None] and kafka.lookups == 1
    assert kafka.commits == []


def test_a_partition_whose_end_cannot_be_read_is_written_to_and_named_once_a_delivery_says_where(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = _Kafka(3, {})  # partitions known, ends not answered
    service, sent = _service(monkeypatch, kafka)
    service._outcome_logs[5] = log = OutcomeLog()
    service._committed[5] = 3
    _send(service, 5)
    _send(service, 5)
    assert [kw["partition"] for kw in sent] == [2, 2] and kafka.commits == []
    assert log.starts(3) is None  # in flight, where from not known: a commit waits
    log.delivered(TOPIC, 2, 41, acker_offset=12)
    assert log.starts(3) == {TOPIC: (2, 41)}


def test_a_first_record_refused_at_once_leaves_the_topic_to_be_chosen_again(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = _Kafka(3, {(TOPIC, 2): (0, 40), ("acker", 5): (7, 90)})
    service, sent = _service(monkeypatch, kafka)
    service._outcome_logs[5] = log = OutcomeLog()
    log.sent(TOPIC)  # a record sent by key, refused before it left (too large)
    log.failed(TOPIC)
    service._committed[5] = 3
    _send(service, 5)
    assert sent[0]["partition"] == 2 and len(kafka.commits) == 1


def test_a_topic_found_existing_when_creating_it_is_looked_up_not_taken_for_its_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its existence not told in time, the service tries to create it and finds it there, with 3 partitions, not the
    spec's 8: acker partition 5 writes to 5 mod 3."""
    kafka = _Kafka(3, {(TOPIC, 2): (0, 40), ("acker", 5): (7, 90)})
    service, sent = _service(monkeypatch, kafka)
    service._known_topics = set()
    monkeypatch.setattr(service, "_topic_exists", lambda _name, timeout_s: False)
    monkeypatch.setattr(
        acker.service, "create_topics", lambda _client, _specs, timeout_s=30.0, visible=True: []
    )  # created nothing: it existed
    service._outcome_logs[5] = OutcomeLog()
    service._committed[5] = 3
    assert service.config.partitions == 8
    _send(service, 5)
    assert sent[0]["partition"] == 2


def test_a_refused_tick_does_not_delay_the_ticks_of_the_partition_once_it_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tick refused at once waits 5 s before it is written again; a revoke then an assignment of the partition
    within those 5 s kept the wait, and the partition's ticks, so its expiries, came up to 5 s late."""
    service, _ = _service(monkeypatch, _Kafka(3, {}))
    service._tick_refused[5] = 2**62
    service._drop([TopicPartition("acker", 5)])
    assert 5 not in service._tick_refused
    service.close()


def test_an_outcome_topic_made_by_another_after_it_was_missing_is_looked_up_by_the_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its creation failed here, and its spout made it since: the producer, which had found it missing, refused the
    next record at once (``Local: Unknown topic``), dead-lettered as outcome-refused, while its partitions' lookup was
    still backing off. The producer looks it up when the service finds it."""
    service, sent = _service(monkeypatch, _Kafka(3, {}))
    service._known_topics = set()
    service._ensure_again_at[TOPIC] = (0.0, 1)  # due
    service._lookup_failed_at[TOPIC] = time.monotonic()  # sent by key, as while it was missing
    refreshed: list[str] = []
    monkeypatch.setattr(service, "_refresh_producer", lambda topic, _timeout_s: refreshed.append(topic))
    _send(service, 5)
    assert refreshed == [TOPIC] and TOPIC in service._known_topics and len(sent) == 1
    _send(service, 5)
    assert refreshed == [TOPIC]  # once
    service.close()


def test_records_sent_by_key_keep_the_next_ones_by_key_until_a_delivery_says_where_though_the_topic_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lookup failed, so the first record went by key; found the next time (the backoff over), the topic's own
    partition (5 mod 3) may not be where the key sends records: the next go by key too, behind the first, and those
    after its delivery go where it landed. All in one partition, in order, as a read-back needs them."""
    kafka = _Kafka(None, {(TOPIC, 2): (0, 40), ("acker", 5): (7, 90)})
    service, sent = _service(monkeypatch, kafka)
    monkeypatch.setattr(acker.service, "_LOOKUP_BACKOFF_S", 0.0)
    service._outcome_logs[5] = log = OutcomeLog()
    service._committed[5] = 3
    _send(service, 5)
    kafka.partitions = 3
    _send(service, 5)
    assert [kw.get("partition") for kw in sent] == [None, None] and kafka.commits == []
    log.delivered(TOPIC, 0, 17, acker_offset=12)
    _send(service, 5)
    assert sent[-1]["partition"] == 0


def test_the_topics_remembered_as_not_found_or_not_created_are_the_newest_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer naming a spout per tree (beyond `outcome_topics_per_hour`, its outcomes dead-lettered) left an
    entry of each kind per name for good: 1.4 KB a name with the outcome log's. The oldest are forgotten whole, and
    tried again at their next record."""
    service, _ = _service(monkeypatch, _Kafka(None, {}))  # no lookup answers
    monkeypatch.setattr(acker.service, "_REFUSALS_KEPT", 10)
    for i in range(25):
        assert service._outcome_partition(f"acker.outcomes.s{i}", 0) is None
        service._capped.add(f"acker.outcomes.s{i}")  # as `_ensure_topics` does beyond the budget
        service._not_created[f"acker.outcomes.s{i}"] = "outcome_topics_per_hour (20) reached"
        service._try_again(f"acker.outcomes.s{i}", (time.monotonic() + 30, 1))
    newest = [f"acker.outcomes.s{i}" for i in range(15, 25)]
    assert list(service._lookup_failed_at) == list(service._ensure_again_at) == list(service._not_created) == newest
    assert service._capped == set(newest)
