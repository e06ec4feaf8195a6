"""A coordinated step at its Kafka edge, with a producer that only records what it is given (no broker): answers
kept exact, state that would change across a restart refused, crafted headers dead-lettered."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import zlib
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from acker.config import ServiceConfig
from acker.coordinated import FAILURE_GRACE_MS, WHY_MAX_BYTES, RequestState, TaskState
from acker.dlq import DLQ_KEY_TRUNCATED, DLQ_TRUNCATED, DeadLetter
from acker.headers import read_headers, record_size
from acker.kafka import coordinated_stage
from acker.kafka.client_log import RepeatFilter
from acker.kafka.clients import LOOKUP_ATTEMPTS, KafkaClientError
from acker.kafka.coordinated_stage import (
    ABORTABLE_START_OVERS,
    DEADLINE,
    REPORT,
    REQUEST,
    REQUEST_ID_MAX,
    STATUS,
    WHY,
    Chain,
    CoordinatedStage,
    CoordinationError,
    Emit,
    Request,
    WedgedProducerError,
)


class _Producer:
    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, **kwargs: Any) -> None:
        self.out.append({"topic": topic, "value": value, "key": key, **kwargs})


def _last_step(step: Any) -> CoordinatedStage:
    """The last step of a chain of two, one task, as `CoordinatedStage.__init__` would set it up (without Kafka)."""
    stage = CoordinatedStage.__new__(CoordinatedStage)
    stage.chain, stage.index, stage.step, stage.last = Chain("c", 2), 1, step, True
    stage.input, stage.output = stage.chain.topic(1), stage.chain.results
    stage.group = f"{stage.chain.name}.step{stage.index}"
    stage.changelog, stage.dlq = f"{stage.input}.state", f"{stage.input}.dlq"
    stage.tasks_count, stage.next_count, stage._round_robin = 1, 1, 0
    stage.counters = {"processed": 0, "finished": 0, "failed": 0, "dead_letters": 0, "late": 0, "assigned": 0,
                      "started_over": 0, "producers_renewed": 0}  # fmt: skip
    stage._touched, stage.producer, stage._refused_emit = {}, _Producer(), None  # type: ignore[assignment]
    stage._unreadable = {}
    stage.max_record = stage.max_dead_letter = 1_000_000 - 1024
    stage.tasks = {0: TaskState(first=False, tasks=1, next_tasks=1, after_first=True)}  # step 1, as the stage makes it
    return stage


def _middle_step(step: Any) -> CoordinatedStage:
    """Step 1 of a chain of three, one task, whose next step has 3 tasks (`_last_step` otherwise)."""
    stage = _last_step(step)
    stage.chain, stage.last, stage.output, stage.next_count = Chain("c", 3), False, "c.step2", 3
    stage.tasks = {0: TaskState(first=False, tasks=1, next_tasks=3, after_first=True)}
    return stage


def _first_step(step: Any) -> CoordinatedStage:
    """Step 0 of a chain of two, one task, whose next step has 1 (`_last_step` otherwise)."""
    stage = _last_step(step)
    stage.index, stage.last, stage.input, stage.output = 0, False, "c.step0", "c.step1"
    stage.changelog, stage.dlq = "c.step0.state", "c.step0.dlq"
    stage.tasks = {0: TaskState(first=True, tasks=1, next_tasks=1)}
    return stage


def _handle(stage: CoordinatedStage, record: Message, now_ms: int) -> None:
    """``record`` processed as `CoordinatedStage.poll` does, its headers read once."""
    stage._handle(record, read_headers(record), now_ms)


def _report(request: str, deadline: bytes | None = None, *, failed: bool = False, body: bytes | None = None) -> Message:
    deadline = deadline or str(int(time.time() * 1000) + 60_000).encode()
    body = body or json.dumps({"from": 0, "count": 0, "reporters": 1, "failed": failed}).encode()
    return Message(topic="c.step1", partition=0, offset=7, headers=[(REQUEST, request.encode()), (DEADLINE, deadline),
                                                                     (REPORT, body)])  # fmt: skip


class _Answer:
    def __init__(self, answer: bytes, user: dict[Any, Any] | None = None) -> None:
        self.answer, self.user = answer, user

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        pass

    def finished(self, request: Request, emit: Emit) -> None:
        if self.user is not None:
            request.state.update(self.user)
        emit(self.answer)


def _out(stage: CoordinatedStage, topic: str) -> list[dict[str, Any]]:
    return [r for r in stage.producer.out if r["topic"] == topic]  # type: ignore[attr-defined]


def test_a_binary_answer_arrives_exactly_and_its_done_marker_keeps_none_of_it() -> None:
    """Exact bytes out; the marker left in the changelog until the deadline holds no answer (an answer kept in a
    changelog state, before the request finishes, round-trips exactly: `test_the_state_round_trips_through_json`)."""
    answer = bytes([0, 0xFF, 0x80, 0x41])
    stage = _last_step(_Answer(answer))
    _handle(stage, _report("r1"), int(time.time() * 1000))
    assert [r["value"] for r in _out(stage, "c.results")] == [answer]
    marker = RequestState.from_json(json.loads(stage._encode(0, stage.tasks[0].requests["r1"])))
    assert marker.done and marker.answer is None


def test_step_state_too_large_for_the_changelog_fails_the_request_instead_of_every_batch() -> None:
    """Over the changelog's max.message.bytes, the broker refused the batch's whole transaction, and the restart
    failed on the same records again, until the request's deadline."""
    stage = _last_step(_Answer(b"x"))
    stage.max_record = 1000
    state = RequestState("r1", int(time.time() * 1000) + 60_000, user={"blob": "x" * 900})
    stage.tasks[0].requests["r1"] = state
    saved = stage._encode(0, state)
    assert state.failed and state.done and len(saved) < 200
    assert [r["headers"][-1] for r in _out(stage, "c.results")] == [(STATUS, b"failed")]


def test_step_state_that_json_would_change_fails_the_request_instead_of_changing_after_a_restart() -> None:
    stage = _last_step(_Answer(b"x"))
    _handle(stage, _report("r1"), int(time.time() * 1000))
    state = stage.tasks[0].requests["r1"]
    state.done, state.user = False, {3: 1}  # type: ignore[dict-item]  # keyed by an int: "3" after a restore
    stage._encode(0, state)
    assert state.failed


def test_step_state_holding_a_nan_is_saved_not_failed() -> None:
    """JSON keeps a NaN, which is never equal to itself: the mean of nothing failed its request as state that would
    change after a restart."""
    stage = _last_step(_Answer(b"x"))
    _handle(stage, _report("r1"), int(time.time() * 1000))
    state = stage.tasks[0].requests["r1"]
    state.done, state.user = False, {"mean": float("nan"), "means": [float("nan"), 1.5], "pair": [1, {"a": 2}]}
    saved = json.loads(stage._encode(0, state))
    assert not state.failed and saved["user"]["means"][1] == 1.5
    state.user = {"pair": (1, 2)}  # a list after a restore
    stage._encode(0, state)
    assert state.failed


UNSAID = b"this task: failed upstream (task 0 of the step before said so, not why)"


@pytest.mark.parametrize(
    ("why", "said"), [("step 0 task 2: execute: KeyError: 'u3'", b"step 0 task 2: execute: KeyError: 'u3'"),
                      (5, UNSAID), (None, UNSAID)]
)  # fmt: skip
def test_a_failed_reports_reason_is_the_failed_answers_and_one_that_is_not_text_is_left_out(
    why: object, said: bytes
) -> None:
    """None or not text: a report of an earlier version's step, or anybody's; the request fails all the same."""
    stage = _last_step(_Answer(b"x"))
    body = {"from": 0, "count": 0, "reporters": 1, "failed": True, **({"why": why} if why is not None else {})}
    _handle(stage, _report("r1", body=json.dumps(body).encode()), int(time.time() * 1000))
    [answer] = _out(stage, "c.results")
    headers = dict(answer["headers"])
    assert (headers[STATUS], headers[WHY]) == (b"failed", said)
    assert stage.counters["dead_letters"] == 0  # a reason never decides: not a report refused


class _Raising(_Answer):
    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        raise ValueError("\N{GRINNING FACE}" * 600)


def test_a_failed_reports_reason_is_held_to_its_bytes_in_the_report() -> None:
    """Cut to 500 characters, escaped in the report's JSON: 600 emoji made a report header of 5.7 KB, which no size
    check looks at (a topic taking the step's records could refuse the report, and the whole batch with it)."""
    stage = _first_step(_Raising(b"x"))
    now_ms = int(time.time() * 1000)
    headers: list[tuple[str, str | bytes | None]] = [(REQUEST, b"r1"), (DEADLINE, str(now_ms + 60_000).encode())]
    _handle(stage, Message(topic="c.step0", partition=0, offset=3, headers=headers), now_ms)
    [report] = _out(stage, "c.step1")
    body = dict(report["headers"])[REPORT]
    assert len(body) <= WHY_MAX_BYTES + 100
    assert json.loads(body)["why"].startswith("this task: execute: ValueError: \N{GRINNING FACE}")


class _Emitting(_Answer):
    """Emits a message for each it is given, and counts them."""

    def __init__(self) -> None:
        super().__init__(b"")
        self.calls = 0

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        self.calls += 1
        emit(b"child")


def test_a_message_of_a_request_whose_saved_state_could_not_be_read_is_not_worked_on() -> None:
    """Failed as restored (`TaskState.unreadable`), the request was still open until the next batch's expiries: a
    message of it ran the step's code, on empty state, and its emits went downstream before the failed report."""
    stage = _first_step(_Emitting())
    now_ms = int(time.time() * 1000)
    stage.tasks[0].unreadable("r1", "its saved state could not be read (x)", now_ms)
    headers: list[tuple[str, str | bytes | None]] = [(REQUEST, b"r1"), (DEADLINE, str(now_ms + 60_000).encode())]
    _handle(stage, Message(topic="c.step0", partition=0, offset=3, headers=headers), now_ms)
    [report] = _out(stage, "c.step1")  # the failed report alone
    assert REPORT in dict(report["headers"]) and not stage.step.calls  # type: ignore[attr-defined]
    assert json.loads(dict(report["headers"])[REPORT])["why"] == "this task: its saved state could not be read (x)"
    assert stage.tasks[0].requests["r1"].done and stage.tasks[0].expired(now_ms) == ([], [])


class _Pairing(_Answer):
    """Keeps a tuple in its request state: a list after a restore."""

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        request.state["pair"] = (1, 2)


@pytest.mark.parametrize("saved_between", [False, True])
def test_step_state_that_json_would_change_fails_its_request_whether_or_not_a_batch_ended_between(
    saved_between: bool,
) -> None:
    """The state was checked when a batch saved it: a request begun and finished within one batch never was, and of
    identical requests some were answered, some failed (15 and 1 in a user's trial), by how the batches fell."""
    stage = _last_step(_Pairing(b"x"))
    now_ms = int(time.time() * 1000)
    deadline = str(now_ms + 60_000).encode()
    data = Message(topic="c.step1", partition=0, offset=6, headers=[(REQUEST, b"r1"), (DEADLINE, deadline)])
    _handle(stage, data, now_ms)
    if saved_between:
        stage._save()
    body = json.dumps({"from": 0, "count": 1, "reporters": 1, "failed": False}).encode()
    _handle(stage, _report("r1", deadline, body=body), now_ms)
    assert [r["headers"][-1] for r in _out(stage, "c.results")] == [(STATUS, b"failed")]


class _Limited(_Producer):
    """A producer that refuses a record over ``limit`` bytes at once, as librdkafka does over message.max.bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, **kwargs: Any) -> None:
        if len(value or b"") + len(key or b"") > self.limit:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        super().produce(topic, value, key, **kwargs)


def test_a_flood_of_reports_from_senders_made_up_fails_the_request_and_leaves_a_small_marker() -> None:
    """Reports of distinct senders, each saying the upstream step has 10^18 tasks: the request's state grew by each
    until it was too large for the changelog, then failed, and its done marker kept every sender. The producer refused
    the marker, and the step stopped, at every restart, until the request's deadline (up to a day)."""
    stage = _last_step(_Answer(b"x"))
    stage.chain, stage.index, stage.last = Chain("c", 4), 2, False
    stage.input, stage.output, stage.changelog = "c.step2", "c.step3", "c.step2.state"
    stage.tasks = {0: TaskState(first=False, tasks=1, next_tasks=1, upstream_tasks=2)}
    stage.max_record = 20_000
    stage.producer = _Limited(stage.max_record + 1024)  # type: ignore[assignment]  # the margin below its limit
    now = int(time.time() * 1000)
    deadline = str(now + 3_600_000).encode()
    state = None
    for sender in range(10**17, 10**17 + 5000):
        body = json.dumps({"from": sender, "count": 0, "reporters": 10**18, "failed": False}).encode()
        record = Message(topic="c.step2", partition=0, offset=sender % 10**17,
                         headers=[(REQUEST, b"r1"), (DEADLINE, deadline), (REPORT, body)])  # fmt: skip
        _handle(stage, record, now)
        if sender % 500 == 0:  # a batch's worth
            stage._save()
        state = stage.tasks[0].requests["r1"]
        if state.done:
            break
    stage._save()
    assert state is not None and state.done and state.failed and not state.senders
    [*_, marker] = _out(stage, "c.step2.state")
    assert len(marker["value"]) < 500 and RequestState.from_json(json.loads(marker["value"])).done


def test_step_state_nested_too_deep_to_save_fails_the_request_instead_of_every_batch() -> None:
    """JSON raised `RecursionError`, not taken for state that cannot be saved: the batch's transaction was aborted,
    and the restart failed on the same records again, until the request's deadline."""
    stage = _last_step(_Answer(b"x"))
    _handle(stage, _report("r1"), int(time.time() * 1000))
    state = stage.tasks[0].requests["r1"]
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    state.done, state.user = False, {"deep": nested}
    stage._encode(0, state)
    assert state.failed


def test_a_deadline_too_long_to_be_a_time_is_dead_lettered_not_a_crash() -> None:
    stage = _last_step(_Answer(b"x"))
    _handle(stage, _report("r1", deadline=b"9" * 5000), int(time.time() * 1000))
    letters = _out(stage, stage.dlq)
    assert len(letters) == 1 and stage.counters["dead_letters"] == 1
    origin = dict(letters[0]["headers"])["acker.dlq.origin"]
    letter = DeadLetter(stage.dlq, 0, 0, 0, None, b"", letters[0]["headers"])
    assert letter.origin == origin.decode() == "c.step1/0/7"


class _Executing(_Answer):
    def __init__(self) -> None:
        super().__init__(b"x")
        self.seen: list[bytes | None] = []

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        self.seen.append(value)


def test_a_report_header_without_a_value_is_dead_lettered_not_handed_to_the_step() -> None:
    """Read as no report (a header without a value is none to `text`), it was data to the step's code, which never
    sees reports."""
    step = _Executing()
    stage = _last_step(step)
    deadline = str(int(time.time() * 1000) + 60_000).encode()
    headers: list[tuple[str, str | bytes | None]] = [(REQUEST, b"r1"), (DEADLINE, deadline), (REPORT, None)]
    _handle(stage, Message(topic="c.step1", partition=0, offset=7, headers=headers), int(time.time() * 1000))
    assert step.seen == [] and stage.counters["dead_letters"] == 1
    assert dict(_out(stage, stage.dlq)[0]["headers"])["acker.dlq.reason"].startswith(b"unreadable report")


@pytest.mark.parametrize("failed", [False, True])
def test_a_report_to_the_first_step_is_dead_lettered_not_a_request_held_to_its_deadline(failed: bool) -> None:
    """No step reports to the first: such a record (another writer's) opened a request that waited there for its
    deadline (up to a day), then sent failed reports down the chain, whose last step answered it failed; one that
    said failed failed a live request whose data had not reached the first step yet."""
    stage = _first_step(_Executing())
    _handle(stage, _report("r1", failed=failed), int(time.time() * 1000))
    assert stage.tasks[0].requests == {} and stage.counters["dead_letters"] == 1
    [letter] = _out(stage, stage.dlq)
    assert dict(letter["headers"])["acker.dlq.reason"].startswith(b"report at the first step")
    assert _out(stage, "c.step1") == []


def test_request_ids_that_are_not_utf8_are_dead_lettered_not_taken_for_one_another() -> None:
    """Read with replacement characters, b"req-\\xff" and b"req-\\xfe" were one request, and its answer went out
    under an id neither sender used."""
    stage = _last_step(_Answer(b"x"))
    deadline = str(int(time.time() * 1000) + 60_000).encode()
    body = json.dumps({"from": 0, "count": 0, "reporters": 1, "failed": False}).encode()
    for raw in (b"req-\xff", b"req-\xfe"):
        headers: list[tuple[str, str | bytes | None]] = [(REQUEST, raw), (DEADLINE, deadline), (REPORT, body)]
        _handle(stage, Message(topic="c.step1", partition=0, offset=7, headers=headers), int(time.time() * 1000))
    assert stage.counters["dead_letters"] == 2 and stage.tasks[0].requests == {}
    assert _out(stage, "c.results") == []
    _handle(stage, _report("req-\ufffd"), int(time.time() * 1000))  # the character itself, written as UTF-8: an id
    assert stage.counters["dead_letters"] == 2 and len(_out(stage, "c.results")) == 1


@pytest.mark.parametrize(
    "body",
    [
        b'{"from": 0, "count": 1e999, "reporters": 1, "failed": false}',  # int(inf): OverflowError
        b'{"from": 0, "count": Infinity, "reporters": 1, "failed": false}',
        b"[" * 100_000,  # RecursionError in the parser
        b'{"from": 0, "count": -3, "reporters": 1, "failed": false}',
        b'{"from": 0, "count": 0, "reporters": -1, "failed": false}',
        b'{"from": -1, "count": 1, "reporters": 1, "failed": false}',  # behind the second step: step 1's one report
        b'{"from": 0, "count": "x", "reporters": 1, "failed": false}',
        b'{"from": 0, "count": 1.9, "reporters": 1, "failed": false}',
        b'{"from": 0, "count": true, "reporters": 1, "failed": false}',
        b'{"from": 0, "count": 0, "reporters": 1, "failed": "false"}',
        b'{"from": 0, "count": 9223372036854775808, "reporters": 1, "failed": false}',  # above a signed 64-bit long
        b'{"from": 0, "count": 1, "reporters": 9223372036854775808, "failed": false}',
        b'{"from": 9223372036854775808, "count": 1, "reporters": 1, "failed": false}',
    ],
)
def test_a_report_that_cannot_be_counted_is_dead_lettered_not_a_crash(body: bytes) -> None:
    stage = _last_step(_Answer(b"x"))
    _handle(stage, _report("r1", body=body), int(time.time() * 1000))
    assert len(_out(stage, stage.dlq)) == 1 and stage.counters["dead_letters"] == 1
    assert _out(stage, "c.results") == [] and "r1" not in stage.tasks[0].requests


def test_two_reports_whose_counts_sum_past_what_json_writes_cannot_stop_the_step() -> None:
    """Each count readable (Python reads integers of up to 4,300 digits), their sum in the request's state was not
    (`json.dumps` refuses 4,301 digits): the batch's save raised, and the step stopped at every restart. Such counts
    are dead-lettered now, and the request goes on."""
    stage = _last_step(_Answer(b"x"))
    now = int(time.time() * 1000)
    nines = "9" * 4300
    for sender, count in ((0, nines), (1, "1")):
        body = f'{{"from": {sender}, "count": {count}, "reporters": 3, "failed": false}}'.encode()
        _handle(stage, _report("r1", body=body), now)
    stage._save()
    assert stage.counters["dead_letters"] == 1 and stage.tasks[0].requests["r1"].expected == 1


def test_the_last_step_answers_failed_for_a_failure_found_upstream_at_the_deadline() -> None:
    stage = _last_step(_Answer(b"x"))
    now = int(time.time() * 1000)
    past = str(now - 1_000).encode()
    _handle(stage, _report("r1", deadline=past), now)  # an ok report past the deadline: late
    assert _out(stage, "c.results") == [] and stage.counters["late"] == 1
    _handle(stage, _report("r1", deadline=past, failed=True), now)
    _handle(stage, _report("r1", deadline=past, failed=True), now)  # another upstream task's: answered once
    answers = _out(stage, "c.results")
    assert len(answers) == 1 and dict(answers[0]["headers"])[STATUS] == b"failed"


class _Transactions(_Producer):
    """A transactional producer that records its calls; ``commit_errors`` are raised by the commits, in turn (None:
    that commit succeeds)."""

    def __init__(self, *commit_errors: KafkaError | None) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.commit_errors = list(commit_errors)

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, positions: list[TopicPartition], *_: Any) -> None:
        self.calls.append(f"offsets {[(tp.partition, tp.offset) for tp in positions]}")

    def commit_transaction(self, _timeout: float) -> None:
        self.calls.append("commit")
        error = self.commit_errors.pop(0) if self.commit_errors else None
        if error is not None:
            raise KafkaException(error)

    def abort_transaction(self, _timeout: float) -> None:
        self.calls.append("abort")


class _Consumer:
    """Reads nothing; knows the position ``position`` of partition 0, or none (-1001) and no committed offset."""

    def __init__(self, position: int) -> None:
        self.position_, self.asked = position, 0

    def consume(self, *_: Any, **__: Any) -> list[Message]:
        return []

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.position_) for tp in partitions]

    def committed(self, *_: Any) -> list[TopicPartition]:
        self.asked += 1
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def consumer_group_metadata(self) -> object:
        return object()


def _expiring(producer: _Transactions, position: int = 5) -> CoordinatedStage:
    """The last step with one request past its deadline: the next poll expires it in a transaction."""
    stage = _last_step(_Answer(b"x"))
    stage.producer, stage.consumer = producer, _Consumer(position)  # type: ignore[assignment]
    stage._broken, stage._next_count_check, stage._batch_s = False, float("inf"), 10.0
    stage._fencing_retry_at, stage._abortable_in_row = 0.0, 0
    stage._wedged, stage._producer_config, stage.transaction_timeout_ms = False, {}, 10_000
    stage.config = ServiceConfig(bootstrap_servers="127.0.0.1:1")  # no --instance-id: a transactional id its own
    stage.tasks[0].request("late", int(time.time() * 1000) - 1, 0)
    return stage


def test_a_commit_that_failed_retriably_is_tried_again() -> None:
    """A timeout of the transaction's commit (the coordinator moving) went straight to an abort, which librdkafka
    refuses while committing: the process died on a hiccup."""
    producer = _Transactions(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))
    stage = _expiring(producer)
    stage.poll(0)
    assert producer.calls == ["begin", "offsets [(0, 5)]", "commit", "commit"]
    assert [r["headers"][-1] for r in _out(stage, "c.results")] == [(STATUS, b"failed")]  # the expired request


def test_a_done_marker_forgotten_is_deleted_from_the_changelog_in_the_batchs_transaction() -> None:
    """Kept there, every request id would stay in the compacted changelog for good, and each restore read them all."""
    producer = _Transactions()
    stage = _expiring(producer)
    marker = RequestState("old", int(time.time() * 1000) - FAILURE_GRACE_MS - 1)
    marker.done = True
    stage.tasks[0].requests["old"] = marker
    stage.poll(0)
    assert "old" not in stage.tasks[0].requests and producer.calls == ["begin", "offsets [(0, 5)]", "commit"]
    assert [r["value"] for r in _out(stage, "c.step1.state") if r["key"] == b"old"] == [None]  # a tombstone


def test_records_of_a_partition_revoked_while_in_flight_are_neither_handled_nor_committed() -> None:
    """One consume may return records fetched before a revoke that happens within it: handled, they would work on a
    task another process owns; their offsets sent, they would overwrite that process's."""
    stage = _last_step(_Answer(b"x"))
    moved = Message(topic="c.step1", partition=1, offset=9, value=b"v",
                    headers=[(REQUEST, b"r"), (DEADLINE, str(int(time.time() * 1000) + 60_000).encode())])  # fmt: skip
    _handle(stage, moved, int(time.time() * 1000))
    assert stage.producer.out == [] and stage.counters["processed"] == 0  # type: ignore[attr-defined]
    kept = _report("r")
    assert [(tp.partition, tp.offset) for tp in stage._positions([kept, moved])] == [(0, 8)]


@pytest.mark.parametrize(
    "error",
    [KafkaError(KafkaError.INVALID_TXN_STATE, "no"),
     KafkaError(KafkaError._FENCED, "fenced", fatal=True, txn_requires_abort=True)],  # fatal: the producer is done
    ids=["not-abortable", "fatal"],
)  # fmt: skip
def test_after_an_aborted_batch_the_stage_refuses_to_go_on(error: KafkaError) -> None:
    """After an abort the stage's memory held the batch's changes (done markers, counts) and its consumer had moved
    past the batch: a caller that polled again skipped the batch's records for good."""
    producer = _Transactions(error)
    stage = _expiring(producer)
    with pytest.raises(KafkaException):
        stage.poll(0)
    assert producer.calls[-1] == "abort"
    with pytest.raises(CoordinationError, match="restart the process"):
        stage.poll(0)


class _AbortFenced(_Transactions):
    """Its abort fails fatally too (a producer fenced), which renews the producer where the cause allows it."""

    def abort_transaction(self, _timeout: float) -> None:
        self.calls.append("abort")
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))


@pytest.mark.parametrize("producer_type", [_Transactions, _AbortFenced], ids=["aborted", "abort-failed"])
def test_a_step_fenced_by_a_process_with_its_static_members_id_stops_saying_so(producer_type: type) -> None:
    """Two processes of a step started with one ``group.instance.id``: the fenced one's batch was aborted and started
    over, twice, and the process stopped on "Failed to seek to offset 10572: Local: Erroneous state"."""
    fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, "Failed to commit offsets to transaction: Static consumer "
                        "fenced by other consumer with same group.instance.id", txn_requires_abort=True)  # fmt: skip
    producer = producer_type(fenced)
    stage = _expiring(producer)
    stage.config = ServiceConfig(bootstrap_servers="127.0.0.1:1", kafka={"group.instance.id": "rs-s2a"})
    with pytest.raises(KafkaClientError, match=r"took group.instance.id rs-s2a: .* needs an id of its own"):
        stage.poll(0)
    assert producer.calls[-1] == "abort"
    assert stage.counters["started_over"] == 0 and stage.counters["producers_renewed"] == 0


_ABORTABLE = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "requires epoch bump", txn_requires_abort=True)


def _restoring(stage: CoordinatedStage) -> list[int]:
    """The stage's tasks restored from their changelogs as ``stage`` holds them now (committed); the partitions
    restored, in turn."""
    committed = {p: {r: state.to_json() for r, state in task.requests.items()} for p, task in stage.tasks.items()}
    restored: list[int] = []

    def restore(partition: int) -> TaskState:
        restored.append(partition)
        task = TaskState(first=False, tasks=1, next_tasks=1, after_first=stage.index == 1)
        for request, state in committed[partition].items():
            task.requests[request] = RequestState.from_json(state)  # scheduled as `_restore` does
        return task

    stage._restore = restore  # type: ignore[method-assign]
    return restored


def test_a_batch_whose_transaction_must_be_aborted_starts_again_from_the_last_commit() -> None:
    """librdkafka wanted a batch's transaction aborted (a lost sequence, the producer's epoch to bump; in CI after a
    rebalance): the abort went through and the process stopped all the same, though the producer takes new
    transactions after it. The request expired in the aborted batch is failed once, by the next batch."""
    producer = _Transactions(_ABORTABLE)
    stage = _expiring(producer)
    restored = _restoring(stage)
    assert stage.poll(0) == 0
    assert producer.calls == ["begin", "offsets [(0, 5)]", "commit", "abort"] and restored == [0]
    assert not stage.tasks[0].requests["late"].done and stage.counters["failed"] == 0
    assert stage.counters["started_over"] == 1
    stage.poll(0)
    assert producer.calls[4:] == ["begin", "offsets [(0, 5)]", "commit"]
    failed = stage.tasks[0].requests["late"]
    assert failed.done and stage.counters["failed"] == 1


def test_a_transaction_that_keeps_failing_stops_the_process_after_a_few_batches() -> None:
    """A cause that stays (a topic the process may not write to) would abort and start over for ever. A transaction
    of expiries only, which may come between two tries of the same records, does not start the count again."""
    producer = _Transactions(_ABORTABLE, None, *[_ABORTABLE] * ABORTABLE_START_OVERS)
    stage = _expiring(producer)
    _restoring(stage)
    assert stage.poll(0) == 0 and stage.poll(0) == 0  # started over, then committed
    stage.tasks[0].request("later", int(time.time() * 1000) - 1, 0)  # another request to expire, as committed
    _restoring(stage)
    for _ in range(ABORTABLE_START_OVERS - 1):
        assert stage.poll(0) == 0
    with pytest.raises(KafkaException, match="epoch bump"):
        stage.poll(0)
    assert stage.counters["started_over"] == ABORTABLE_START_OVERS
    with pytest.raises(CoordinationError, match="restart the process"):
        stage.poll(0)


_TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Failed to add offsets to transaction: Local: Timed out")
_FENCED_BY_TIMEOUT = KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True)


class _Outage(_Transactions):
    """A producer whose offsets' send fails with ``offsets_error`` (None: blocks until the test ends, as librdkafka
    2.16's can for ever after a broker restart) and whose abort fails with ``abort_error``, once each."""

    def __init__(self, offsets_error: KafkaError | None, abort_error: KafkaError | None = None) -> None:
        super().__init__()
        self.offsets_error, self.abort_error = offsets_error, abort_error
        self.purged = False
        self.release = threading.Event()

    def send_offsets_to_transaction(self, positions: list[TopicPartition], *_: Any) -> None:
        super().send_offsets_to_transaction(positions)
        if self.offsets_error is None:
            self.release.wait(30)
        else:
            raise KafkaException(self.offsets_error)

    def abort_transaction(self, _timeout: float) -> None:
        super().abort_transaction(_timeout)
        if self.abort_error is not None:
            raise KafkaException(self.abort_error)

    def purge(self) -> None:
        self.purged = True


@pytest.fixture
def new_producers(monkeypatch: pytest.MonkeyPatch) -> list[_Transactions]:
    """The producers the stage makes in place of one that takes no more transactions; calls wedge after 0.3 s."""
    made: list[_Transactions] = []

    def producer(_config: Any) -> _Transactions:
        made.append(_Transactions())
        made[-1].init_transactions = lambda _timeout: made[-1].calls.append("init")  # type: ignore[attr-defined]
        return made[-1]

    monkeypatch.setattr(coordinated_stage, "Producer", producer)
    monkeypatch.setattr(coordinated_stage, "WEDGED_AFTER_S", 0.3)
    return made


@pytest.mark.parametrize(
    "offsets_error", [_TIMED_OUT, _ABORTABLE], ids=["timed-out-then-fenced", "abortable-then-fenced"]
)
def test_a_producer_an_outage_left_fenced_is_replaced_and_the_batch_starts_again(
    new_producers: list[_Transactions], offsets_error: KafkaError
) -> None:
    """Seen after a broker's restart of 5 s: a step's offsets' send timed out, and the abort found the producer fenced
    (the broker had aborted the transaction past its timeout): the step stopped. A new producer of the same
    transactional id goes on, and the batch's tasks start again from their last commit."""
    old = _Outage(offsets_error, _FENCED_BY_TIMEOUT)
    _goes_on_with_a_new_producer(_expiring(old), old, ["begin", "offsets [(0, 5)]", "abort"], new_producers)


def _goes_on_with_a_new_producer(
    stage: CoordinatedStage, old: _Outage, calls: list[str], new_producers: list[_Transactions]
) -> None:
    """``stage``'s batch fails, ``old`` making ``calls``; a new producer takes its place, the batch's task starts
    again from its last commit, and the batch goes through on the new producer."""
    restored = _restoring(stage)
    assert stage.poll(0) == 0
    assert old.calls == calls and old.purged
    assert len(new_producers) == 1 and new_producers[0].calls == ["init"]
    assert id(stage.producer) == id(new_producers[0])  # the new one, in its place
    assert restored == [0] and stage.counters["started_over"] == 1 and stage.counters["producers_renewed"] == 1
    stage.poll(0)  # the batch again, on the new producer
    assert new_producers[0].calls == ["init", "begin", "offsets [(0, 5)]", "commit"]
    assert stage.tasks[0].requests["late"].done and stage.counters["failed"] == 1


def test_a_step_whose_transactional_call_never_returns_stops_saying_so_rather_than_hang(
    new_producers: list[_Transactions],
) -> None:
    """Seen after a broker's restart of 5 s: librdkafka blocked in `send_offsets_to_transaction` for minutes past its
    timeout, the broker back; the step hung, deaf to its stop. It stops instead (its supervisor restarts it): no
    abort, no new producer beside a call still in the old one, which the process's end takes with it."""
    producer = _Outage(None)
    stage = _expiring(producer)
    try:
        with pytest.raises(WedgedProducerError, match="send_offsets_to_transaction has not returned"):
            stage.poll(0)
    finally:
        producer.release.set()
    assert producer.calls == ["begin", "offsets [(0, 5)]"] and new_producers == [] and stage._wedged
    with pytest.raises(CoordinationError, match="restart the process"):
        stage.poll(0)


def test_a_step_with_a_stable_instance_id_stops_when_its_producer_is_fenced(new_producers: list[_Transactions]) -> None:
    """Its transactional id may be a successor's too (a process started in its place while it was cut off), which
    a new producer here would fence."""
    stage = _expiring(_Outage(_TIMED_OUT, _FENCED_BY_TIMEOUT))
    stage.config = ServiceConfig(bootstrap_servers="127.0.0.1:1", instance_id="host1")
    with pytest.raises(KafkaException, match="Timed out"):
        stage.poll(0)
    assert new_producers == []


def test_a_producer_fenced_after_a_failure_that_is_not_an_outage_stops_the_process(
    new_producers: list[_Transactions],
) -> None:
    """A zombie's transaction (its group moved on) must not go on with a new producer, which would fence its
    successor's."""
    producer = _Outage(KafkaError(KafkaError.ILLEGAL_GENERATION, "a generation fenced"), _FENCED_BY_TIMEOUT)
    stage = _expiring(producer)
    with pytest.raises(KafkaException, match="a generation fenced"):
        stage.poll(0)
    assert new_producers == [] and stage._broken


class _FencedCommit(_Outage):
    """Its commit fails as the broker's abort of a transaction past its timeout leaves it: fenced, fatal."""

    def commit_transaction(self, _timeout: float) -> None:
        self.calls.append("commit")
        raise KafkaException(_FENCED_BY_TIMEOUT)


@pytest.mark.parametrize(("timeout_ms", "renewed"), [(0, True), (10_000, False)], ids=["outlived", "within"])
def test_a_producer_fenced_in_a_transaction_that_outlived_its_timeout_is_replaced(
    new_producers: list[_Transactions], timeout_ms: int, renewed: bool
) -> None:
    """Seen after a broker's restart: the commit of a batch that had waited out the outage failed, fenced (the
    broker had aborted the transaction past its timeout). Within its timeout, a fencing is another producer's of the
    same transactional id (a successor of the same --instance-id): the process stops rather than fence it in turn."""
    producer = _FencedCommit(None, _FENCED_BY_TIMEOUT)
    producer.release.set()  # the offsets go through
    stage = _expiring(producer)
    stage.transaction_timeout_ms = timeout_ms
    _restoring(stage)
    if renewed:
        assert stage.poll(0) == 0
        assert len(new_producers) == 1 and stage.counters["producers_renewed"] == 1
    else:
        with pytest.raises(KafkaException, match="fenced by a newer instance"):
            stage.poll(0)
        assert new_producers == []
    assert producer.calls[-2:] == ["commit", "abort"]


_COMMIT_TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish, retry call to resume",
                               retriable=True)  # fmt: skip
# librdkafka 2.16's answers to an abort after a commit that timed out (seen against a broker stopped by SIGSTOP, and
# after a commit given no time): the commit is still the call in progress, and only a call of it again is taken; or
# the transaction is committing.
_COMMIT_IN_PROGRESS = KafkaError(KafkaError._CONFLICT, "Conflicting commit_transaction API call is already in progress",
                                 retriable=True)  # fmt: skip
_COMMITTING = KafkaError(KafkaError._STATE, "Operation not valid in state BeginCommit")


def _held_commit(abort_error: KafkaError = _COMMIT_IN_PROGRESS) -> _Outage:
    """A producer whose offsets go through, whose every commit times out, and whose abort is refused for that."""
    producer = _Outage(None, abort_error)
    producer.release.set()
    producer.commit_errors = [_COMMIT_TIMED_OUT] * coordinated_stage.COMMIT_ATTEMPTS
    return producer


@pytest.mark.parametrize("abort_error", [_COMMIT_IN_PROGRESS, _COMMITTING], ids=["conflict", "state"])
def test_a_batch_whose_commit_kafka_never_answered_goes_on_with_a_new_producer(
    new_producers: list[_Transactions], abort_error: KafkaError
) -> None:
    """After its commit's attempts timed out (an outage longer than they last), the abort was refused, the commit
    still in progress in librdkafka: the step stopped. A new producer of the same transactional id goes on (its
    `init_transactions` ends the batch's transaction, committed or aborted), and the tasks start again from what was
    committed."""
    old = _held_commit(abort_error)
    calls = ["begin", "offsets [(0, 5)]", *["commit"] * coordinated_stage.COMMIT_ATTEMPTS, "abort"]
    _goes_on_with_a_new_producer(_expiring(old), old, calls, new_producers)


def test_a_batch_of_expiries_only_found_committed_after_all_keeps_its_counts(
    new_producers: list[_Transactions],
) -> None:
    """Its commit had reached the coordinator: the tasks restored hold the expired request as failed already, and
    nothing fails it again. Its counts were put back to before the batch (only a batch of records, whose committed
    offsets tell, kept them): the request's failure was never counted."""
    old = _held_commit()
    stage = _expiring(old)

    def restore(partition: int) -> TaskState:  # as committed: this batch's transaction with the rest
        task = TaskState(first=False, tasks=1, next_tasks=1, after_first=stage.index == 1)
        for request, state in stage.tasks[partition].requests.items():
            task.requests[request] = RequestState.from_json(state.to_json())
        return task

    stage._restore = restore  # type: ignore[method-assign]
    assert stage.poll(0) == 0
    assert len(new_producers) == 1 and stage.counters["producers_renewed"] == 1
    assert stage.tasks[0].requests["late"].done
    assert stage.counters["failed"] == 1 and stage.counters["started_over"] == 1
    stage.poll(0)  # nothing left to expire: no transaction, and the failure counted once
    assert new_producers[0].calls == ["init"] and stage.counters["failed"] == 1


def test_a_step_with_a_stable_instance_id_whose_commit_kafka_never_answered_stops(
    new_producers: list[_Transactions],
) -> None:
    """Its transactional id may be a successor's too: a new producer here would fence it."""
    stage = _expiring(_held_commit())
    stage.config = ServiceConfig(bootstrap_servers="127.0.0.1:1", instance_id="host1")
    with pytest.raises(KafkaException, match="retry call to resume"):
        stage.poll(0)
    assert new_producers == [] and stage._broken


def test_a_batch_kafka_did_not_answer_in_time_starts_again_when_its_abort_goes_through() -> None:
    """A timeout is not the step's fault: its batch is read again, as a batch librdkafka wants aborted is."""
    producer = _Outage(_TIMED_OUT)
    stage = _expiring(producer)
    restored = _restoring(stage)
    assert stage.poll(0) == 0
    assert producer.calls == ["begin", "offsets [(0, 5)]", "abort"] and restored == [0]
    assert stage.counters["started_over"] == 1 and stage.counters["producers_renewed"] == 0


class _Committed:
    """A consumer whose committed offsets' lookups raise ``errors`` in turn, then answer offset 7."""

    def __init__(self, *errors: KafkaError, silent: KafkaError | None = None) -> None:
        self.errors, self.closed, self.silent = list(errors), False, silent

    def committed(self, partitions: list[TopicPartition], _timeout: float = 0) -> list[TopicPartition]:
        if self.errors:
            raise KafkaException(self.errors.pop(0))
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in partitions]

    def list_topics(self, _topic: str, timeout: float) -> object:
        """The brokers' metadata, or ``silent`` raised: no broker answers."""
        if self.silent is not None:
            raise KafkaException(self.silent)
        return object()

    def close(self) -> None:
        self.closed = True


# As confluent-kafka raises it from a consumer's committed offsets: not retriable, whatever the code.
_NOT_COORDINATOR = KafkaError(KafkaError.NOT_COORDINATOR, "Broker: Not coordinator", retriable=False)


@pytest.mark.parametrize(
    ("fresh_errors", "asked", "answered"),
    [
        ([], 1, True),
        ([_NOT_COORDINATOR] * 3, 4, True),  # asked again while the coordinator is not back: a fourth new one answers
        # never back: LOOKUP_ATTEMPTS in all with the step's own (about 30 s)
        ([_NOT_COORDINATOR] * (LOOKUP_ATTEMPTS - 1), LOOKUP_ATTEMPTS - 1, False),
        ([KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)], 1, False),
        ([KafkaError(KafkaError._TIMED_OUT)] * 3, 2, False),  # a timeout is asked again once
    ],
    ids=["answered-by-a-new-consumer", "answered-after-a-while", "never-answered", "refused", "timed-out-twice"],
)
def test_committed_offsets_are_asked_again_of_a_new_consumer_while_the_coordinator_is_not_back(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_errors: list[KafkaError],
    asked: int,
    answered: bool,
) -> None:
    """Seen after a broker's restart: the step's consumer and a new one said NOT_COORDINATOR (the group's coordinator
    not loaded yet), and a new one answered 0.2 s later; the lookup stopped the step (a start over, a restore). A
    lookup that timed out twice says what may hold it: a transaction committing the offsets that does not end (seen
    after a broker's crash: a hanging one)."""
    made: list[_Committed] = []

    def consumer(_config: Any) -> _Committed:
        made.append(_Committed(*fresh_errors[len(made) :][:1]))
        return made[-1]

    monkeypatch.setattr(coordinated_stage, "Consumer", consumer)
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    stage = _last_step(_Answer(b"x"))
    stage.config, stage.group = ServiceConfig(bootstrap_servers="127.0.0.1:1"), "c.step1"
    own = _Committed(_NOT_COORDINATOR)
    partitions = [TopicPartition(stage.input, 0)]
    if answered:
        assert [tp.offset for tp in stage._committed(partitions, own)] == [7]  # type: ignore[arg-type]
    else:
        with pytest.raises(KafkaException):
            stage._committed(partitions, own)  # type: ignore[arg-type]
    assert len(made) == asked
    assert all(c.closed for c in made) and not own.closed  # the step's own consumer stays open
    hinted = [r.getMessage() for r in caplog.records if "find-hanging" in r.getMessage()]
    if fresh_errors and fresh_errors[0].code() == KafkaError._TIMED_OUT:
        assert hinted == [
            "step 1: the committed offsets of [0] were not answered in 30 s, twice: a transaction committing offsets "
            'of group c.step1 that does not end may hold them (README, "A transaction that does not end": '
            "kafka-transactions.sh find-hanging --topic __consumer_offsets)"
        ]
    else:
        assert hinted == []


def test_a_lookup_that_timed_out_twice_while_no_broker_answers_blames_the_outage_not_a_transaction(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every step stopped in a broker outage of minutes saying that a transaction that does not end may hold the
    offsets (find-hanging), while librdkafka logged "Connection refused"."""
    down = KafkaError(KafkaError._TRANSPORT, "Connection refused")
    monkeypatch.setattr(coordinated_stage, "Consumer", lambda _c: _Committed(KafkaError(KafkaError._TIMED_OUT),
                                                                             silent=down))  # fmt: skip
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    stage = _last_step(_Answer(b"x"))
    stage.config = ServiceConfig(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(KafkaException):
        stage._committed([TopicPartition(stage.input, 0)], _Committed(KafkaError(KafkaError._TIMED_OUT)))  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert said == [
        "step 1: the committed offsets of [0] were not answered in 30 s, twice, nor a request for metadata in 5 s "
        "(Connection refused): Kafka's brokers do not answer, and the step stops"
    ]


class _Refusing(_Transactions):
    """Refuses every record as librdkafka does once a transaction failed: ``_STATE``."""

    def produce(self, *_: Any, **__: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE, "Local: Erroneous state"))


def test_an_emit_refused_because_the_transaction_failed_fails_the_batch_not_the_request() -> None:
    """The step's emit raised ``_STATE`` and the request was failed (its failure logged as the step's) in a batch
    that could not commit anyway: the request's failure is the batch's, which starts again."""
    stage = _middle_step(_Follower())
    stage.producer = _Refusing()  # type: ignore[assignment]
    with pytest.raises(KafkaException, match="Erroneous state"):
        _handle(stage, _data("r", b"f", 1), int(time.time() * 1000))
    assert stage.counters["processed"] == 0 and not stage.tasks[0].requests["r"].failed


class _EmitsWhenFinished:
    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        pass

    def finished(self, request: Request, emit: Emit) -> None:
        emit(b"summary")


def test_an_emit_refused_in_finished_fails_the_batch_not_the_request() -> None:
    stage = _middle_step(_EmitsWhenFinished())
    stage.producer = _Refusing()  # type: ignore[assignment]
    state = stage.tasks[0].request("r", int(time.time() * 1000) + 60_000, 0)
    assert state is not None
    with pytest.raises(KafkaException, match="Erroneous state"):
        stage._finish(0, state)
    assert not state.failed and stage.counters["failed"] == 0


class _OwnClient(_EmitsWhenFinished):
    """A step whose own Kafka client (not the stage's producer) raises."""

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE, "its own consumer's seek"))


def test_a_kafka_error_of_the_steps_own_client_fails_the_request_not_the_batch() -> None:
    """Taken for the transaction's, it aborted the batch at every try of the record, and stopped the process."""
    stage = _middle_step(_OwnClient())
    _handle(stage, _data("r", b"f", 1), int(time.time() * 1000))
    assert stage.counters["processed"] == 1 and stage.tasks[0].requests["r"].failed


def test_expiries_wait_for_offsets_that_check_the_group_generation() -> None:
    """A transaction of expiries only, with no offsets known to send, was committed without the broker checking
    that this process still owns the partition (KIP-447): a zombie could answer requests its successor owns."""
    producer = _Transactions()
    stage = _expiring(producer, position=-1001)
    assert stage.poll(0) == 0 and stage.poll(0) == 0
    assert producer.calls == [] and not stage.tasks[0].requests["late"].done
    assert stage.consumer.asked == 1  # type: ignore[attr-defined]  # not at every poll (each waits up to 10 s)


def test_an_answer_is_held_to_what_the_changelog_takes_of_it_in_base64() -> None:
    """An answer is kept in the request's state until it is written, in base64: an answer of 80 % of the limit
    passed `emit` and then failed the request when its state was saved, though the results topic took it."""
    fits, over = _last_step(_Answer(b"a" * 300)), _last_step(_Answer(b"a" * 400))
    for stage in (fits, over):
        stage.max_record = 1000
        _handle(stage, _report("r1"), int(time.time() * 1000))
    assert [r["headers"][-1] for r in _out(fits, "c.results")] == [(STATUS, b"ok")]
    assert [r["headers"][-1] for r in _out(over, "c.results")] == [(STATUS, b"failed")]
    state = RequestState("r2", int(time.time() * 1000) + 60_000, answer=b"a" * 300)
    assert len(fits._encode(0, state)) <= 1000 and not state.failed  # what emit let through, saved


class _Unreadable(Message):
    """A record whose header name is not UTF-8: ``headers()`` raises, as confluent-kafka does (`read_headers`)."""

    def headers(self) -> Any:
        raise SystemError("<method 'headers'> returned a result with an exception set")


class _Reading(_Consumer):
    """Reads ``records`` once, at position 8 of partition 0."""

    def __init__(self, records: list[Message]) -> None:
        super().__init__(8)
        self.records = records

    def consume(self, *_: Any, **__: Any) -> list[Message]:
        records, self.records = self.records, []
        return records


def test_a_record_whose_headers_cannot_be_read_is_dead_lettered_by_a_step_behind_the_second() -> None:
    """From the third step on, the batch is looked through for reports before its transaction, and that look read
    the headers itself: the client's error escaped `poll`, and every restart died on the same record."""
    producer = _Transactions()
    stage = _expiring(producer)
    stage.chain, stage.index = Chain("c", 3), 2
    stage.input, stage.dlq = stage.chain.topic(2), f"{stage.chain.topic(2)}.dlq"
    stage.tasks[0].requests.clear()
    stage.consumer = _Reading([_Unreadable(topic=stage.input, partition=0, offset=7, value=b"x")])  # type: ignore[assignment]
    assert stage.poll(0) == 1
    letters = _out(stage, stage.dlq)
    assert len(letters) == 1 and stage.counters["dead_letters"] == 1
    assert b"unreadable headers" in dict(letters[0]["headers"])["acker.dlq.reason"]
    assert producer.calls == ["begin", "offsets [(0, 8)]", "commit"]


class _Rewinding(_Reading):
    """Also knows the committed offsets (those of partition 0: 8), and records its seeks."""

    def __init__(self, records: list[Message]) -> None:
        super().__init__(records)
        self.seeks: list[tuple[int, int]] = []

    def committed(self, partitions: list[TopicPartition], *_: Any) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 8) for tp in partitions]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))


def test_a_committed_batch_of_records_starts_the_count_of_failed_transactions_again() -> None:
    producer = _Transactions(None, _ABORTABLE)
    stage = _expiring(producer)
    stage.tasks[0].requests.clear()
    _restoring(stage)
    stage._abortable_in_row = ABORTABLE_START_OVERS  # as many in a row as are started over
    stage.consumer = reading = _Rewinding([_Unreadable(topic=stage.input, partition=0, offset=7, value=b"x")])  # type: ignore[assignment]
    assert stage.poll(0) == 1 and stage._abortable_in_row == 0
    reading.records = [_Unreadable(topic=stage.input, partition=0, offset=8, value=b"x")]
    assert stage.poll(0) == 0 and stage.counters["started_over"] == 1  # started over, not stopped
    assert reading.seeks == [(0, 8)]  # the aborted batch's record read again


def test_a_record_too_large_to_copy_whole_is_dead_lettered_cut_to_fit() -> None:
    """A record just below its topic's limit, with the reason headers added, was more than the dead-letter topic
    (or the producer) takes: the refusal aborted the batch at every restart on it."""
    stage = _last_step(_Answer(b"x"))
    stage.max_dead_letter = 10_000
    big = Message(topic="c.step1", partition=0, offset=7, value=b"v" * 50_000, key=b"k" * 20_000,
                  headers=[("own", b"h" * 5_000)])  # fmt: skip
    small = Message(topic="c.step1", partition=0, offset=8, value=b"v" * 100, headers=[("own", b"h")])
    for record in (big, small):
        _handle(stage, record, int(time.time() * 1000))
    cut, whole = _out(stage, stage.dlq)
    assert record_size(cut["value"], cut["key"], cut["headers"]) <= stage.max_dead_letter
    said = dict(cut["headers"])
    assert (said[DLQ_TRUNCATED], said[DLQ_KEY_TRUNCATED]) == (b"50000", b"20000") and "own" not in said
    assert cut["value"] == b"v" * len(cut["value"]) and len(cut["value"]) > 1_000
    assert whole["value"] == b"v" * 100 and dict(whole["headers"])["own"] == b"h"


def test_a_request_id_over_its_limit_is_dead_lettered() -> None:
    """A request id is in every record of its request and keys its state: one of 600 KB made a done marker the
    changelog could not take, and the batch aborted at every restart until the deadline."""
    stage = _last_step(_Answer(b"x"))
    _handle(stage, _report("r" * (REQUEST_ID_MAX + 1)), int(time.time() * 1000))
    _handle(stage, _report("r" * REQUEST_ID_MAX), int(time.time() * 1000))
    assert stage.counters["dead_letters"] == 1 and list(stage.tasks[0].requests) == ["r" * REQUEST_ID_MAX]


def test_a_burst_of_bad_or_late_records_logs_a_line_a_kind_not_a_line_each(caplog: pytest.LogCaptureFixture) -> None:
    """A producer pointed at a step's topic logged a warning per record dead-lettered, and records of requests past
    their deadline were dropped without a word: each is counted, and said once per kind every 30 s."""
    for name in ("acker.coordinated.dead_letters", "acker.coordinated.requests"):  # nothing said before this test
        for kept in logging.getLogger(name).filters:
            assert isinstance(kept, RepeatFilter)
            kept._kinds.clear()
    stage = _last_step(_Answer(b"x"))
    now_ms = int(time.time() * 1000)
    past = str(now_ms - 60_000).encode()
    with caplog.at_level(logging.INFO, logger="acker.coordinated"):
        for offset in range(200):
            _handle(stage, Message(topic="c.step1", partition=0, offset=offset, value=b"stray"), now_ms)
        for offset in range(200, 250):
            late: list[tuple[str, str | bytes | None]] = [(REQUEST, f"r{offset}".encode()), (DEADLINE, past)]
            _handle(stage, Message(topic="c.step1", partition=0, offset=offset, value=b"v", headers=late), now_ms)
    assert (stage.counters["dead_letters"], stage.counters["late"]) == (200, 50)
    assert len(_out(stage, stage.dlq)) == 200
    lines = [r.getMessage() for r in caplog.records]
    assert sum("dead-lettering" in line for line in lines) == 1
    assert sum("counted late" in line for line in lines) == 1


class _Follower:
    """A middle step: each message's value is a follower, sent on by key (fields grouping)."""

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        with contextlib.suppress(CoordinationError):  # a step that goes on past the error: the request fails all
            emit(value, key=value)  # the same

    def finished(self, request: Request, emit: Emit) -> None:
        pass


def _data(request: str, value: bytes, offset: int) -> Message:
    deadline = str(int(time.time() * 1000) + 60_000).encode()
    return Message(topic="c.step1", partition=0, offset=offset, value=value,
                   headers=[(REQUEST, request.encode()), (DEADLINE, deadline)])  # fmt: skip


def test_a_request_whose_keys_went_by_another_task_count_fails_rather_than_send_a_key_to_a_second_task() -> None:
    """Partitions were added to the next step's topic (3 → 4): a process that started before sent follower f of the
    request to crc32(f) % 3, stopped, and its successor, restoring the request, sent f again to crc32(f) % 4. Both
    tasks counted f, and the chain answered ok with the follower counted twice."""
    stage = _middle_step(_Follower())
    _handle(stage, _data("r", b"f", 1), int(time.time() * 1000))
    saved = json.loads(stage._encode(0, stage.tasks[0].requests["r"]))
    assert saved["routed"] == 3 and not saved["failed"]
    stage.next_count = 4  # its successor, started with the new count, restores the task
    stage.tasks = {0: TaskState(first=False, tasks=1, next_tasks=4, after_first=True)}
    stage.tasks[0].requests["r"] = RequestState.from_json(saved)
    _handle(stage, _data("r", b"f", 2), int(time.time() * 1000))
    assert stage.tasks[0].requests["r"].failed
    sent = [r["partition"] for r in _out(stage, "c.step2") if REPORT not in dict(r["headers"])]
    assert sent == [zlib.crc32(b"f") % 3]  # not sent a second time


def test_a_deadline_further_than_a_request_may_live_is_dead_lettered() -> None:
    """A request whose deadline is years away kept its state, then its done marker, that long at every task."""
    stage = _last_step(_Answer(b"x"))
    now_ms = int(time.time() * 1000)
    _handle(stage, _report("far", deadline=str(now_ms + 10**9 * 1000).encode()), now_ms)
    letters = _out(stage, stage.dlq)
    assert len(letters) == 1 and dict(letters[0]["headers"])["acker.dlq.reason"].startswith(b"deadline too far")
    assert "far" not in stage.tasks[0].requests
    _handle(stage, _report("day", deadline=str(now_ms + 86_400_000).encode()), now_ms)
    assert [r["value"] for r in _out(stage, "c.results")] == [b"x"]


def test_a_chains_changelogs_roll_segments_that_compaction_can_shrink() -> None:
    """Compacted only, a changelog's active segment held a week of requests (Kafka never compacts it), and each
    restore read them all, at every rebalance."""
    changelogs = [spec for spec in Chain("c", 3).topics(ServiceConfig(), 2) if spec.name.endswith(".state")]
    assert [spec.name for spec in changelogs] == ["c.step0.state", "c.step1.state", "c.step2.state"]
    for spec in changelogs:
        assert spec.config["cleanup.policy"] == "compact" and int(spec.config["segment.ms"]) <= 3_600_000


@pytest.mark.parametrize(
    ("error", "unanswered"),
    [
        (KafkaError(KafkaError.NOT_COORDINATOR, retriable=False), True),  # as confluent-kafka makes a lookup's
        (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=False), True),
        (KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, retriable=False), True),
        (KafkaError(KafkaError._TIMED_OUT), True),
        (KafkaError(KafkaError.REQUEST_TIMED_OUT, retriable=True), True),
        (KafkaError(KafkaError.NOT_COORDINATOR, fatal=True), False),  # a fatal error is never tried again
        (KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), False),
    ],
)
def test_a_coordinator_moving_is_kafka_not_answering_yet_whatever_the_error_says(
    error: KafkaError, unanswered: bool
) -> None:
    """A batch whose transactional call met a coordinator moving starts over from its last commit, as one Kafka did not
    answer in time: a broker restarting, not a reason to stop the step."""
    assert coordinated_stage._unanswered(KafkaException(error)) is unanswered
