"""An outcome record too large for its topic, at the service's Kafka edge (a stand-in producer: a topic that takes
records of at most LIMIT bytes and refuses a batch over it whole, as a broker does): sent again alone, then in
halves down to single outcomes, a single outcome too large dead-lettered; each record's delivery reported once, and
the outcome log counting it in flight until what stands for it is delivered."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from acker.config import ServiceConfig
from acker.delivery import DeliveryTracker
from acker.outcome_log import OutcomeLog
from acker.service import AckerService, _Destination
from acker.wire import decode_outcomes, encode_outcome_rows

LIMIT = 1000
TOPIC = "acker.outcomes.s"


class _Topics:
    """A producer whose flush delivers what was produced, as one batch per topic."""

    def __init__(self, dlq: str) -> None:
        self.dlq, self.queue, self.written = dlq, [], []  # type: ignore[var-annotated]

    def produce(self, topic: str, value: bytes | None = None, **kwargs: Any) -> None:
        self.queue.append((topic, value, kwargs["on_delivery"]))

    def poll(self, _timeout: float = 0) -> int:
        return self.flush()

    def flush(self, _timeout: float = 0) -> int:
        batch, self.queue = self.queue, []
        size = sum(len(value or b"") for topic, value, _ in batch if topic != self.dlq)
        for topic, value, delivered in batch:
            if topic != self.dlq and size > LIMIT:
                delivered(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Message(topic=topic))
            else:
                self.written.append((topic, value))
                delivered(None, Message(topic=topic, partition=0, offset=len(self.written) - 1))
        return 0


def _service() -> AckerService:
    service = AckerService.__new__(AckerService)  # only what producing outcomes needs
    service.config = ServiceConfig(metrics_port=0)
    service.producer = _Topics(service.config.dlq_topic)  # type: ignore[assignment]
    service._fallbacks, service._dead_letters, service._deliveries = [], Counter(), DeliveryTracker()
    service._not_created, service._capped = {}, set()
    return service


def test_records_too_large_are_split_until_they_fit_and_each_is_reported_once() -> None:
    service, log, reports = _service(), OutcomeLog(), Counter[int]()
    rows = [[("ACK", 10 * r + i, f"src/{'x' * 180}/{10 * r + i}", 1) for i in range(8)] for r in range(3)]
    rows[2][3] = ("TIMEOUT", 23, f"src/{'y' * 1500}/23", 2)  # one outcome larger than the topic takes
    for r, record_rows in enumerate(rows):
        log.sent(TOPIC)
        track = service._deliveries.track()

        def done(error: KafkaError | None, _record: Any, r: int = r, track: Any = track) -> None:
            reports[r] += 1
            track(error, _record)

        value = encode_outcome_rows("s", record_rows, acker_partition=0, acker_offset=r)
        service._produce_outcome(value, done, _Destination(0, TOPIC, None, [], r, log))
    service.producer.flush()  # three records in one batch: refused whole
    assert log.metadata(0) is None  # still in flight, where to is not known: no commit may leave the topic out
    while service._fallbacks:
        service._send_fallbacks()
    assert reports == {0: 1, 1: 1, 2: 1} and service._deliveries.in_flight == 0
    assert service._deliveries.failure is None
    written = service.producer.written  # type: ignore[attr-defined]
    outcomes = [m for topic, v in written if topic == TOPIC for m in decode_outcomes(v).msg_ids]
    expected = [msg_id for record_rows in rows for _, _, msg_id, _ in record_rows]
    assert sorted(outcomes) == sorted(m for m in expected if "y" not in m)  # each once
    # Split only as far as needed: the records that fit alone whole, the third's halves down to the large outcome.
    sizes = [len(decode_outcomes(v).msg_ids) for topic, v in written if topic == TOPIC]
    assert sorted(sizes, reverse=True) == [8, 8, 4, 2, 1], sizes
    assert all(len(v) <= LIMIT for topic, v in written if topic == TOPIC)
    letters = [v for topic, v in written if topic == service.config.dlq_topic]
    assert [decode_outcomes(v).msg_ids for v in letters] == [[expected[19]]] and service._dead_letters
    assert log.metadata(0) is not None and log._streams[TOPIC].in_flight == 0


def test_a_record_split_in_halves_is_in_flight_until_each_half_is_settled() -> None:
    """Its halves are two records in flight where it was one: counted once, the first half's dead letter left the
    topic with none in flight and no record delivered, and a commit then would name no start for it though the
    second half was still to land."""
    service, log = _service(), OutcomeLog()
    rows = [("TIMEOUT", 1, f"src/{'y' * 1500}/1", 2), ("ACK", 2, "src/0/2", 1)]  # the first too large alone
    log.sent(TOPIC)
    value = encode_outcome_rows("s", rows, acker_partition=0, acker_offset=0)
    service._produce_outcome(value, service._deliveries.track(), _Destination(0, TOPIC, None, [], 0, log))
    service.producer.flush()
    written = service.producer.written  # type: ignore[attr-defined]
    rounds = 0
    while service._fallbacks:  # one at a time, as `_send_fallbacks` sends them, looked at between
        if not any(topic == TOPIC for topic, _ in written):  # the second half still to land
            assert log.metadata(0) is None, f"a start named after {rounds} fallback(s), before the second half landed"
        service._fallbacks.pop(0)()
        service.producer.flush()
        rounds += 1
    assert rounds == 4  # alone, each half, the first half's dead letter
    assert [decode_outcomes(v).msg_ids for topic, v in written if topic == TOPIC] == [["src/0/2"]]
    assert log.metadata(0) is not None and log._streams[TOPIC].in_flight == 0


class _Reader:
    def get_watermark_offsets(self, _tp: TopicPartition, **_kwargs: Any) -> tuple[int, int]:
        return 0, 7


class _Refusing:
    def __init__(self, code: int) -> None:
        self.code = code

    def commit(self, **_kwargs: Any) -> None:
        raise KafkaException(KafkaError(self.code))


@pytest.mark.parametrize(
    ("code", "level"), [(KafkaError.ILLEGAL_GENERATION, "INFO"), (KafkaError.COORDINATOR_NOT_AVAILABLE, "WARNING")]
)
def test_a_commit_naming_an_outcome_topic_that_races_a_rebalance_is_said_as_routine(
    code: int, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit of where an outcome topic's records start, refused as the group rebalanced (the next periodic commit
    names the topic all the same), was a warning on every instance at every scale-out."""
    service = _service()
    service._reader, service._committed, service._states = _Reader(), {3: 5}, {}  # type: ignore[assignment]
    service.consumer = _Refusing(code)  # type: ignore[assignment]
    log = OutcomeLog()
    log.sent(TOPIC)
    with caplog.at_level(logging.INFO, logger="acker.service"):
        service._cover(3, log, TOPIC, 0)
    [said] = [r for r in caplog.records if "not committed yet" in r.getMessage()]
    assert said.levelname == level and "(the next commit names it)" in said.getMessage()
    assert service._committed == {3: 5}
