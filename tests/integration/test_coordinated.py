"""Coordinated steps and DRPC on the real broker: Storm's ReachTopology, exact answers, restarts, failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined] # documented location

from acker.config import ServiceConfig, to_argv
from acker.coordinated import RequestState
from acker.drpc import GRACE_S, DrpcClient, DrpcError
from acker.examples.reach import CHAIN, Graph, steps
from acker.kafka import coordinated_stage
from acker.kafka.clients import KafkaClientError, TopicSpec, create_topics, end_offsets, produce, read_to
from acker.kafka.coordinated_stage import (
    DEADLINE,
    REPORT,
    REQUEST,
    STATUS,
    WHY,
    Chain,
    CoordinatedStage,
    CoordinationError,
    Emit,
    Request,
    Step,
    create_chain_topics,
)
from tests.integration.helpers import Running

GRAPH = Graph.generate()
_Wrapped = TypeVar("_Wrapped")  # a stage's producer, wrapped by a test


class Recorded:
    """A step that logs every call, in the order its task saw them."""

    def __init__(self, index: int, inner: Step, log: list[tuple[str, int, int, str]]) -> None:
        self.index, self.inner, self.log = index, inner, log

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        self.log.append(("execute", self.index, request.task, request.id))
        self.inner.execute(request, value, key, emit)

    def finished(self, request: Request, emit: Emit) -> None:
        self.log.append(("finished", self.index, request.task, request.id))
        self.inner.finished(request, emit)


@pytest.fixture
def chain(config: ServiceConfig) -> Chain:
    chain = Chain(f"reach-{uuid.uuid4().hex[:6]}", CHAIN.steps)
    create_chain_topics(config, chain, partitions=3)
    return chain


def _ask(config: ServiceConfig, chain: Chain, urls: list[str], deadline_s: float = 60) -> dict[str, Any]:
    client = DrpcClient(config, chain)
    try:
        sent = {url: client.send(url.encode(), deadline_s) for url in urls}  # all in flight at once
        answers: dict[str, Any] = {}
        for url, request in sent.items():
            try:
                answers[url] = int(client.wait(request) or b"-1")
            except DrpcError as error:
                answers[url] = error
        return answers
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_concurrent_requests_are_exact_and_each_task_finishes_each_request_once(
    config: ServiceConfig, chain: Chain, protocol: str
) -> None:
    """Also with Kafka's new group protocol (KIP-848) for the steps' groups and the DRPC client's."""
    if protocol == "consumer":
        config = replace(config, kafka={"group.protocol": "consumer"})
    log: list[tuple[str, int, int, str]] = []
    stages = [
        Running(CoordinatedStage(config, chain, i, Recorded(i, step, log))) for i, step in enumerate(steps(GRAPH))
    ]
    try:
        urls = sorted(GRAPH.tweeted_by)  # 42 requests, skewed fan-out, two that emit nothing at some step
        answers = _ask(config, chain, urls)
    finally:
        for stage in stages:
            stage.stop()
    assert answers == {url: GRAPH.reach(url) for url in urls}
    finished: dict[tuple[int, int, str], int] = {}
    for position, (kind, index, task, request) in enumerate(log):
        if kind == "finished":
            assert (index, task, request) not in finished, "finished twice"
            finished[(index, task, request)] = position
        else:
            assert (index, task, request) not in finished, "a message of a request after its finished"
    requests = {request for _, _, _, request in log}
    for request in requests:
        tasks_per_step = [sorted(t for i, t, r in finished if r == request and i == step) for step in range(4)]
        # One task of the first step has the request; every task of the middle steps hears of it; one joins.
        assert [len(t) for t in tasks_per_step] == [1, 3, 3, 1]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_process_joining_a_step_moves_only_the_tasks_that_change_owner(
    config: ServiceConfig, chain: Chain, protocol: str
) -> None:
    """Step 1's first process keeps the tasks it keeps when a second joins, as they are in memory: restored once
    each. Eager rebalancing revoked all of them, and every one was read again from its changelog (restored 3 + the
    tasks kept). The answers asked meanwhile are exact."""
    if protocol == "consumer":
        config = replace(config, kafka={"group.protocol": "consumer"})
    stages = [CoordinatedStage(config, chain, i, step) for i, step in enumerate(steps(GRAPH))]
    running = [Running(stage) for stage in stages]
    first = stages[1]
    urls = sorted(GRAPH.tweeted_by)
    try:
        assert _ask(config, chain, urls[:10]) == {url: GRAPH.reach(url) for url in urls[:10]}
        assert sorted(first.tasks) == [0, 1, 2] and first.counters["assigned"] == 3
        second = CoordinatedStage(replace(config, instance_id="second"), chain, 1, steps(GRAPH)[1])  # its own txn id
        running.append(Running(second))
        answers: dict[str, Any] = {}
        asking = threading.Thread(target=lambda: answers.update(_ask(config, chain, urls[10:], deadline_s=90)))
        asking.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (second.tasks and len(first.tasks) + len(second.tasks) == 3):
            time.sleep(0.1)
        asking.join(150)
        assert not asking.is_alive()
        kept = sorted(first.tasks)
        assert 0 < len(kept) < 3 and sorted(kept + sorted(second.tasks)) == [0, 1, 2]
        assert (first.counters["assigned"], second.counters["assigned"]) == (3, 3 - len(kept))
    finally:
        for stage in reversed(running):
            stage.stop()
    assert answers == {url: GRAPH.reach(url) for url in urls[10:]}


class _Wrapping:
    """A stage's producer wrapped by a test: what the wrapper does not define is the producer's."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)


class _RefusedOnce(_Wrapping):
    """A stage's producer whose first offsets sent to a transaction are refused as the broker refuses those of a
    batch the group moved on under (a rebalance completed in the background while it ran): ILLEGAL_GENERATION."""

    def __init__(self, producer: Producer) -> None:
        super().__init__(producer)
        self.refused = 0

    def send_offsets_to_transaction(self, *args: Any) -> None:
        if not self.refused:
            self.refused += 1
            raise KafkaException(
                KafkaError(KafkaError.ILLEGAL_GENERATION, "Specified group generation id is not valid")
            )
        self.producer.send_offsets_to_transaction(*args)


def test_a_batch_the_group_moved_on_under_starts_its_tasks_again_and_the_step_goes_on(
    config: ServiceConfig, chain: Chain
) -> None:
    """Step 2's first batch is refused its offsets as a rebalance's would be (its tasks' distinct followers already
    counted in memory): the process stopped (`CoordinationError`), where the tasks it has may start again from their
    last commit. Every answer is exact: nothing of the aborted batch is counted twice."""
    refusing = _started_over_once(config, chain, _RefusedOnce)
    assert refusing.refused == 1


def _started_over_once(config: ServiceConfig, chain: Chain, wrap: Callable[[Producer], _Wrapped]) -> _Wrapped:
    """Every request asked of the chain, step 2's producer wrapped by ``wrap`` (returned): one batch of step 2 is
    aborted and started over, and every answer is exact."""
    stages = [CoordinatedStage(config, chain, i, step) for i, step in enumerate(steps(GRAPH))]
    wrapped = wrap(stages[2].producer)
    stages[2].producer = wrapped  # type: ignore[assignment]
    running = [Running(stage) for stage in stages]
    urls = sorted(GRAPH.tweeted_by)
    try:
        answers = _ask(config, chain, urls)
    finally:
        for stage in reversed(running):
            stage.stop()
    assert stages[2].counters["started_over"] == 1
    assert answers == {url: GRAPH.reach(url) for url in urls}
    # The aborted batch's records, read again, are counted once: as many as the step's input holds.
    assert stages[2].counters["processed"] == _data_messages(config, chain, 2)
    return wrapped


class _BrokerRefusesOne(_Wrapping):
    """A stage's producer that puts one record the broker refuses (too large for ``small``) in the transaction of its
    first record, and waits for the refusal: librdkafka then wants the transaction aborted, and refuses the batch's
    next record with ``_STATE`` (the failure seen in CI after a lost sequence, the producer's epoch to bump)."""

    def __init__(self, producer: Producer, small: str) -> None:
        super().__init__(producer)
        self.small, self.refusals = small, list[KafkaError | None]()
        self.next: KafkaError | None = None  # what the produce after the refusal raised

    def produce(self, *args: Any, **kwargs: Any) -> None:
        if self.refusals:
            self.producer.produce(*args, **kwargs)
            return
        self.producer.produce(self.small, b"x" * 4096, on_delivery=lambda error, _: self.refusals.append(error))
        deadline = time.monotonic() + 30
        while not self.refusals and time.monotonic() < deadline:
            self.producer.poll(0.1)
        try:
            self.producer.produce(*args, **kwargs)
        except KafkaException as error:
            self.next = error.args[0]
            raise


def test_a_batch_whose_transaction_failed_starts_its_tasks_again_and_the_step_goes_on(
    config: ServiceConfig, chain: Chain
) -> None:
    """The broker refused a record of step 2's batch: librdkafka refused the batch's next record (``_STATE``), and
    the process stopped, though its producer takes new transactions once the failed one is aborted. The batch starts
    again from the last commit; every answer is exact, nothing of the aborted batch counted twice."""
    small = f"{chain.name}.small"
    create_topics(config.client(), [TopicSpec(small, 1, config.replication_factor, {"max.message.bytes": "1024"})])
    refusing = _started_over_once(config, chain, lambda producer: _BrokerRefusesOne(producer, small))
    assert [error.code() if error else None for error in refusing.refusals] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert refusing.next is not None and refusing.next.code() == KafkaError._STATE


class _CommitUnanswered(_Wrapping):
    """A stage's producer as an outage longer than a commit's attempts leaves it, once: a batch's commit is sent and
    librdkafka is given no time to wait for its answer (it says ``_TIMED_OUT``, the commit still in progress; a
    commit answered at once is let through, and the next batch's is tried); the attempts after it are said
    unanswered, as they are while Kafka stays away. The abort that follows is librdkafka's own."""

    def __init__(self, producer: Producer) -> None:
        super().__init__(producer)
        self.held = False
        self.abort_errors: list[KafkaError] = []

    def commit_transaction(self, timeout: float) -> None:
        if self.abort_errors:
            self.producer.commit_transaction(timeout)
        elif not self.held:
            try:
                self.producer.commit_transaction(0)
            except KafkaException as error:
                self.held = error.args[0].code() == KafkaError._TIMED_OUT
                raise
        else:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish, retry "
                                            "call to resume", retriable=True))  # fmt: skip

    def abort_transaction(self, timeout: float) -> None:
        try:
            self.producer.abort_transaction(timeout)
        except KafkaException as error:
            self.abort_errors.append(error.args[0])
            raise


def test_a_batch_whose_commit_kafka_never_answered_goes_on_with_a_new_producer_and_every_answer_is_exact(
    config: ServiceConfig, chain: Chain
) -> None:
    """Step 2's commit unanswered in all its attempts: librdkafka refuses the abort while that commit is in progress
    (``_CONFLICT``, or ``_STATE`` while it is committing), and the process stopped. It goes on with a new producer of
    the same transactional id, whose start ends the batch's transaction (committed if the commit reached the broker,
    else aborted), and the batch's tasks start again from what was committed: every answer is exact, and the batch's
    records are counted once."""
    config = replace(config, instance_id="")  # transactional ids of the processes' own: a new producer fences none
    stages = [CoordinatedStage(config, chain, i, step) for i, step in enumerate(steps(GRAPH))]
    held = _CommitUnanswered(stages[2].producer)
    stages[2].producer = held  # type: ignore[assignment]
    running = [Running(stage) for stage in stages]
    urls = sorted(GRAPH.tweeted_by)
    answers: dict[str, Any] = {}
    try:
        for start in range(0, len(urls), 10):  # until a commit was held (one answered at once is let through)
            answers.update(_ask(config, chain, urls[start : start + 10]))
            if held.abort_errors:
                answers.update(_ask(config, chain, urls[start + 10 :]))
                break
    finally:
        for stage in reversed(running):
            stage.stop()
    assert [e.code() for e in held.abort_errors] in ([KafkaError._CONFLICT], [KafkaError._STATE]), held.abort_errors
    assert stages[2].counters["producers_renewed"] == 1 and stages[2].counters["started_over"] == 1
    assert answers == {url: GRAPH.reach(url) for url in urls}
    # The batch's records, committed or read again, are counted once: as many as the step's input holds.
    assert stages[2].counters["processed"] == _data_messages(config, chain, 2)


def _data_messages(config: ServiceConfig, chain: Chain, index: int) -> int:
    """The committed records of step ``index``'s input that are not reports."""
    reader = Consumer(config.client(**{"group.id": f"count-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                                       "isolation.level": "read_committed"}))  # fmt: skip
    try:
        return sum(
            1
            for p, end in enumerate(_ends(config, chain, index))
            for record in read_to(reader, TopicPartition(chain.topic(index), p, 0), end)
            if REPORT not in dict(record.headers() or [])
        )
    finally:
        reader.close()


def _read(config: ServiceConfig, topic: str, wait_s: float = 30) -> list[Any]:
    """The committed records of partition 0 of ``topic``, once there are some and no more come for 2 s."""
    consumer = Consumer(config.client(**{"group.id": f"read-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[Any] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            batch = [r for r in consumer.consume(100, timeout=2) if r.error() is None]
            if not batch and records:
                return records
            records += batch
        return records
    finally:
        consumer.close()


def _step_process(config: ServiceConfig, chain: Chain, index: int, *extra: str) -> subprocess.Popen[bytes]:
    flags, env = to_argv(replace(config, metrics_port=0))
    argv = [sys.executable, "-m", "acker.cli", "reach", "step", str(index), "--chain", chain.name, *flags, *extra]
    return subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_steps_with_librdkafkas_debug_lines_serve_their_assignments(config: ServiceConfig, chain: Chain) -> None:
    """With librdkafka's ``debug`` setting, each step checked its partition counts on its consumer inside that
    consumer's assignment callback, and the process aborted (SIGABRT) at its first assignment."""
    processes = [_step_process(config, chain, i, "--kafka", "debug=cgrp,topic") for i in range(chain.steps)]
    try:
        urls = sorted(GRAPH.tweeted_by)[:3]
        assert _ask(config, chain, urls) == {url: GRAPH.reach(url) for url in urls}
        assert [p.poll() for p in processes] == [None] * len(processes)
    finally:
        for process in processes:
            process.terminate()
            process.wait(60)


def test_a_task_killed_mid_request_changes_nothing_in_the_answers(config: ServiceConfig, chain: Chain) -> None:
    """Step 2 (which keeps each request's distinct followers) is slowed down, killed with SIGKILL while the
    requests are in flight, and started again: its state and offsets are those of its last committed transaction,
    so every answer is still exact (none is failed)."""
    processes = {i: _step_process(config, chain, i) for i in (0, 1, 3)}
    processes[2] = _step_process(config, chain, 2, "--delay-ms", "20", "--instance-id", "step2")
    urls = sorted(GRAPH.tweeted_by)
    answers: dict[str, Any] = {}
    try:
        asking = threading.Thread(target=lambda: answers.update(_ask(config, chain, urls, deadline_s=90)))
        asking.start()
        deadline = time.monotonic() + 90
        while True:  # until step 2 has committed some of its input and has more of it to do (8 s were too few, loaded)
            written = _ends(config, chain, 2)
            done, waiting = _progress(config, chain, 2, written)
            # Two seconds of work left at least (100 records at 20 ms): the probe and the kill take time, and 10 records
            # (30 ms at 3 ms each) were all done before the kill landed on a loaded machine.
            if done > 0 and waiting >= 100:
                break
            assert time.monotonic() < deadline and asking.is_alive(), (done, waiting)
            time.sleep(0.2)
        processes[2].send_signal(signal.SIGKILL)
        processes[2].wait(30)
        # Against the ends now: step 1 may have written more since the probe (once all of what the probe saw was done
        # by the kill, 2 s of work at 10 ms a record, under CI's load).
        done, waiting = _progress(config, chain, 2, _ends(config, chain, 2))
        assert done > 0 and waiting > 0, (done, waiting)  # killed mid-stream: work committed before, more to do
        processes[2] = _step_process(config, chain, 2, "--instance-id", "step2")  # fences the dead one's transaction
        asking.join(150)
        assert not asking.is_alive()
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            process.wait(60)
    assert answers == {url: GRAPH.reach(url) for url in urls}


def _ends(config: ServiceConfig, chain: Chain, index: int) -> list[int]:
    """The end offset of each partition of step ``index``'s input."""
    reader = Consumer(config.client(**{"group.id": f"ends-{uuid.uuid4().hex[:8]}"}))
    try:
        return end_offsets(reader, [TopicPartition(chain.topic(index), p) for p in range(3)])
    finally:
        reader.close()


def _progress(config: ServiceConfig, chain: Chain, index: int, ends: list[int]) -> tuple[int, int]:
    """Step ``index``'s input records before ``ends``: how many its group has committed (offsets, markers included),
    and how many committed records (read as the step reads them) lie between its committed offsets and ``ends``."""
    group = f"{chain.name}.step{index}"
    reader = Consumer(config.client(**{"group.id": group, "enable.auto.commit": False,
                                       "isolation.level": "read_committed"}))  # fmt: skip
    try:
        parts = reader.committed([TopicPartition(chain.topic(index), p) for p in range(3)], timeout=30)
        done = sum(max(tp.offset, 0) for tp in parts)
        waiting = sum(
            1
            for tp, end in zip(parts, ends, strict=True)
            for _ in read_to(reader, TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)), end)
        )
        return done, waiting
    finally:
        reader.close()


class Failing:
    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        if value == b"u3":
            raise ValueError("this tweeter's followers cannot be read")
        emit(value)

    def finished(self, request: Request, emit: Emit) -> None:
        pass


def test_failures_answer_failed_a_request_nothing_answers_ends_at_its_deadline_bad_records_are_dead_lettered(
    config: ServiceConfig, chain: Chain
) -> None:
    inner = steps(GRAPH)
    failing_url = next(url for url, tweeters in GRAPH.tweeted_by.items() if "u3" in tweeters)
    working_url = next(url for url, tweeters in GRAPH.tweeted_by.items() if tweeters and "u3" not in tweeters)
    stages = [Running(CoordinatedStage(config, chain, i, step)) for i, step in enumerate(inner) if i != 1]
    stages.append(Running(CoordinatedStage(config, chain, 1, Failing())))
    try:
        answers = _ask(config, chain, [failing_url, working_url])
        # Where and why, passed down the chain with the failure to the client.
        said = str(answers[failing_url])
        assert isinstance(answers[failing_url], DrpcError) and "failed in the chain: step 1 task " in said
        assert said.endswith(": execute: ValueError: this tweeter's followers cannot be read")
        assert isinstance(answers[working_url], int)
        # A record that is not a message of a request goes to the step's dead-letter topic; the step goes on.
        producer = Producer(config.client())
        producer.produce(chain.topic(1), b"no headers", partition=0)
        producer.flush(10)
        letters = _read(config, f"{chain.topic(1)}.dlq")
        assert [r.value() for r in letters] == [b"no headers"]
        assert b"not a message of a request" in dict(letters[0].headers())["acker.dlq.reason"]
        assert isinstance(_ask(config, chain, [working_url])[working_url], int)
    finally:
        for stage in stages:
            stage.stop()
    # With step 2 gone, a request cannot finish, and nothing answers it (steps 0 and 1 finished their part, step 3
    # never hears of it): the client says so, and never waits past the deadline and its grace.
    stages = [Running(CoordinatedStage(config, chain, i, step)) for i, step in enumerate(inner) if i != 2]
    try:
        began = time.monotonic()
        late = _ask(config, chain, [working_url], deadline_s=3)[working_url]
        assert isinstance(late, DrpcError) and "got no answer before its deadline" in str(late)
        # The deadline and the grace (`drpc.GRACE_S`), and room for the client's start and close on a busy machine
        # (a group's join and leave): a wait for ever, or for the 60 s of the other requests, is what this catches.
        assert time.monotonic() - began < 3 + GRACE_S + 15
    finally:
        for stage in stages:
            stage.stop()


class _FanOut:
    """Emits ``n`` messages for each message of a request."""

    def __init__(self, n: int, delay_s: float = 0.0, slow_tasks: frozenset[int] = frozenset()) -> None:
        self.n, self.delay_s, self.slow_tasks = n, delay_s, slow_tasks

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        if request.task in self.slow_tasks or not self.slow_tasks:
            time.sleep(self.delay_s)
        for _ in range(self.n):
            emit(b"x")

    def finished(self, request: Request, emit: Emit) -> None:
        pass


class _Count:
    """The joining step: the number of messages the request brought it."""

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        request.state["n"] = request.state.get("n", 0) + 1

    def finished(self, request: Request, emit: Emit) -> None:
        emit(str(request.state.get("n", 0)).encode())


def _small_chain(config: ServiceConfig, steps: int) -> Chain:
    chain = Chain(f"small-{uuid.uuid4().hex[:6]}", steps)
    create_chain_topics(config, chain, partitions=1)
    return chain


def test_a_step_may_emit_more_in_one_batch_than_the_producer_queue_holds(config: ServiceConfig) -> None:
    """librdkafka holds at most 100,000 messages until their delivery is reported; produce raised BufferError past
    that, which failed the stage, again at every restart on the same records."""
    chain = _small_chain(config, 2)
    stages = [
        Running(CoordinatedStage(config, chain, 0, _FanOut(100_001))),
        Running(CoordinatedStage(config, chain, 1, _Count())),
    ]
    client = DrpcClient(config, chain)
    try:
        answer = client.call(b"go", timeout_s=90)
    finally:
        client.close()
        for stage in stages:
            stage.stop()
    assert answer == b"100001"


def test_a_batch_longer_than_the_transaction_timeout_is_committed_in_parts(config: ServiceConfig) -> None:
    """A slow step (0.8 s a message) with a backlog of 30 requests: one transaction of the whole batch outlived its
    10 s timeout, the broker aborted it, and the restarted stage took the same records again, for good."""
    chain = _small_chain(config, 2)
    client = DrpcClient(config, chain)
    stages: list[Running] = []
    try:
        sent = [client.send(f"r{i}".encode(), timeout_s=120) for i in range(30)]  # a backlog, as after a restart
        stages = [Running(CoordinatedStage(config, chain, 0, _FanOut(1, delay_s=0.8))),
                  Running(CoordinatedStage(config, chain, 1, _Count()))]  # fmt: skip
        assert [client.wait(request) for request in sent] == [b"1"] * 30
    finally:
        client.close()
        for stage in stages:
            stage.stop()


def test_a_client_gets_its_answers_after_partitions_are_added_to_the_results_topic(config: ServiceConfig) -> None:
    """The joining step wrote its answers spread by key over the results topic's partitions, and a client reads those
    there were when it started: after partitions were added, most of its calls timed out, answered on the new ones."""
    config = replace(config, kafka={**config.kafka, "topic.metadata.refresh.interval.ms": "500"})
    chain = _small_chain(config, 2)
    client = DrpcClient(config, chain)
    stages = [Running(CoordinatedStage(config, chain, 0, _FanOut(1))),
              Running(CoordinatedStage(config, chain, 1, _Count()))]  # fmt: skip
    try:
        assert client.call(b"before", timeout_s=30) == b"1"
        admin = AdminClient(config.client())
        for future in admin.create_partitions([NewPartitions(chain.results, 4)]).values():
            future.result(30)
        time.sleep(3)  # the joining step's producer has seen the new partitions
        sent = [client.send(f"r{i}".encode(), timeout_s=10) for i in range(12)]
        answers = []
        for request in sent:
            try:
                answers.append(client.wait(request))
            except DrpcError as error:
                answers.append(str(error).encode())
    finally:
        client.close()
        for stage in stages:
            stage.stop()
    assert answers == [b"1"] * 12


def test_an_answer_written_in_time_and_waited_for_late_is_taken(config: ServiceConfig) -> None:
    """A wait begun after the request's deadline (or a client behind on a busy results topic) gave up before
    reading the answer it had: "no answer before its deadline", of a request answered in well under a second."""
    chain = _small_chain(config, 2)
    client = DrpcClient(config, chain)
    stages = [Running(CoordinatedStage(config, chain, 0, _FanOut(1))),
              Running(CoordinatedStage(config, chain, 1, _Count()))]  # fmt: skip
    try:
        request = client.send(b"go", timeout_s=30)
        answered = [r for r in _read(config, chain.results) if dict(r.headers()).get(REQUEST) == request.encode()]
        assert len(answered) == 1
        client._deadlines[request] = time.monotonic() - 1  # its time ran out before the wait began
        assert client.wait(request) == b"1"
    finally:
        client.close()
        for stage in stages:
            stage.stop()


def test_an_answer_written_just_before_a_wait_gives_up_is_taken(config: ServiceConfig) -> None:
    """A client caught up with the results topic had been told it was at its end; an answer written after that,
    not fetched yet when the deadline passed, was reported as none (7 of 10 here)."""
    chain = _small_chain(config, 2)
    client = DrpcClient(config, chain)
    producer = Producer(config.client())
    try:
        for i in range(10):
            request = client.send(f"r{i}".encode(), timeout_s=60)  # no step runs: only this test answers
            for _ in range(5):
                client._read_answers(0.1)  # caught up: the consumer says it is at the end
            produce(producer, chain.results, b"42", key=request.encode(), partition=0,
                    headers=[(REQUEST, request.encode()), (STATUS, b"ok")])  # fmt: skip
            assert producer.flush(10) == 0
            client._deadlines[request] = time.monotonic() - 1
            assert client.wait(request) == b"42", i
    finally:
        client.close()


def test_an_answer_in_a_transaction_committed_after_the_deadline_is_waited_for(config: ServiceConfig) -> None:
    """The joining step wrote the answer in time, in a batch whose transaction commits a moment later. The client
    took the end of the results topic from its read_committed consumer, which says the last stable offset (where that
    transaction begins), and gave up at once: "no answer before its deadline"."""
    chain = _small_chain(config, 2)
    client = DrpcClient(config, chain)
    step = Producer(config.client(**{"transactional.id": f"{chain.name}-step-{uuid.uuid4().hex[:8]}"}))
    step.init_transactions(30)
    try:
        request = client.send(b"go", timeout_s=60)  # no step runs: only this test answers
        step.begin_transaction()
        produce(step, chain.results, b"42", key=request.encode(), partition=0,
                headers=[(REQUEST, request.encode()), (STATUS, b"ok")])  # fmt: skip
        assert step.flush(10) == 0
        committing = threading.Timer(1.0, step.commit_transaction, args=(30,))
        committing.start()
        client._deadlines[request] = time.monotonic() - 1  # its time ran out: the answer is still uncommitted
        try:
            assert client.wait(request) == b"42"
        finally:
            committing.join()
    finally:
        client.close()


def test_partitions_added_to_a_running_step_never_give_an_early_answer(config: ServiceConfig) -> None:
    """Step 1 grows from 1 to 3 partitions while a process of it runs. That process reported with its old task count
    (1), so the joining step finished on its report and answered without the other tasks' messages. It now stops at
    the rebalance (a restart takes the new counts), and reports that disagree fail their request."""
    chain = _small_chain(config, 3)
    old = Running(CoordinatedStage(replace(config, instance_id="old"), chain, 1, _FanOut(1)))
    last = Running(CoordinatedStage(config, chain, 2, _Count()))
    admin = AdminClient(config.client())
    grown = [NewPartitions(chain.topic(1), 3), NewPartitions(f"{chain.topic(1)}.state", 3)]
    for future in admin.create_partitions(grown).values():
        future.result(30)
    deadline = time.monotonic() + 60
    while old.thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert isinstance(old.error, CoordinationError)
    new = Running(CoordinatedStage(replace(config, instance_id="new"), chain, 1, _FanOut(1, 0.5, frozenset({1, 2}))))
    first = Running(CoordinatedStage(config, chain, 0, _FanOut(6)))  # round robin: 2 messages to each of 3 tasks
    client = DrpcClient(config, chain)
    try:
        answer = client.call(b"go", timeout_s=60)
    finally:
        client.close()
        for stage in (first, new, last):
            stage.stop()
    assert answer == b"6"


def test_reports_of_a_process_that_missed_partitions_added_upstream_fail_the_request(config: ServiceConfig) -> None:
    """Step 1 grew from 1 to 3 partitions; a process of it that has not noticed yet (it checks every 5 s) reports
    "1 task" to the joining step, while tasks 1 and 2, run by new processes, have messages of the request too. The
    joining step finished on that one report and answered ok without their share; it now fails the request."""
    chain = _small_chain(config, 3)
    admin = AdminClient(config.client())
    grown = [NewPartitions(chain.topic(1), 3), NewPartitions(f"{chain.topic(1)}.state", 3)]
    for future in admin.create_partitions(grown).values():
        future.result(30)
    last = CoordinatedStage(config, chain, 2, _Count())
    try:
        _poll_until(last, lambda: bool(last.tasks))
        headers: list[tuple[str, str | bytes | None]] = [
            (REQUEST, b"r1"),
            (DEADLINE, str(int(time.time() * 1000) + 60_000).encode()),
        ]
        producer = Producer(config.client())
        stale = json.dumps({"from": 0, "count": 1, "reporters": 1, "failed": False}).encode()
        producer.produce(chain.topic(2), b"x", partition=0, headers=headers)  # task 0's message, then its report
        producer.produce(chain.topic(2), None, partition=0, headers=[*headers, (REPORT, stale)])
        producer.flush(10)
        _poll_until(last, lambda: last.counters["finished"] + last.counters["failed"] >= 1)
        answers = _read(config, chain.results, wait_s=5)
        assert [dict(r.headers())[STATUS] for r in answers] == [b"failed"]
    finally:
        last.consumer.close()


def test_a_zombie_cannot_answer_a_request_its_successor_owns(
    config: ServiceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process of the last step holds a request waiting for its reports; a successor takes its partition over
    (the same static member id: the broker fences the first at once, with no rebalance it could notice; their
    transactional ids differ, as without --instance-id) and the first, a zombie, reaches the request's deadline.
    Its transaction of that expiry held no records, hence no offsets, and nothing checked its group generation: it
    answered, and so did its successor (two answers). The zombie's transaction is now refused, and the request is
    answered once, by the successor."""
    config = replace(config, kafka={**config.kafka, "group.instance.id": f"step-{uuid.uuid4().hex[:6]}"})
    chain = _small_chain(config, 2)
    zombie = CoordinatedStage(replace(config, instance_id="first"), chain, 1, _Count())  # its own transactional id
    successor: CoordinatedStage | None = None
    try:
        _poll_until(zombie, lambda: bool(zombie.tasks))
        deadline_ms = int(time.time() * 1000) + 4000
        producer = Producer(config.client())
        producer.produce(chain.topic(1), b"x", partition=0,
                         headers=[(REQUEST, b"r1"), (DEADLINE, str(deadline_ms).encode())])  # fmt: skip
        producer.flush(10)
        _poll_until(zombie, lambda: zombie.counters["processed"] == 1)  # waits for step 0's report, which never comes
        successor = CoordinatedStage(replace(config, instance_id="second"), chain, 1, _Count())
        _poll_until(successor, lambda: bool(successor.tasks))  # restored: the request is waiting here too
        time.sleep(max(0.0, deadline_ms / 1000 - time.time()) + 0.5)
        # The zombie has not heard of its fencing yet (its consumer would say so at its next heartbeat: a fatal
        # error, which stops a stage): it reads nothing, and expires the request.
        monkeypatch.setattr(coordinated_stage, "consume_available", lambda *_: [])
        with pytest.raises(KafkaClientError, match=r"FENCED_INSTANCE_ID.* took group.instance.id step-"):
            for _ in range(20):
                zombie.poll(0.2)
        monkeypatch.undo()
        _poll_until(successor, lambda: successor.counters["failed"] >= 1)
        answers = _read(config, chain.results, wait_s=5)
        assert [dict(r.headers())[REQUEST] for r in answers] == [b"r1"]
    finally:
        for stage in (zombie, successor):
            if stage is not None:
                stage.consumer.close()


def _poll_until(stage: CoordinatedStage, done: Callable[[], bool], wait_s: float = 30) -> None:
    deadline = time.monotonic() + wait_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        stage.poll(0.2)


def test_reach_run_with_an_instance_id_starts_processes_that_do_not_fence_each_other(config: ServiceConfig) -> None:
    """`reach run --processes 2 --instance-id host1` gave every process of a step the transactional id
    ``<group>-host1``: each new one fenced the one before (which died), and the answers came from restarts."""
    flags, env = to_argv(replace(config, metrics_port=0, instance_id="host1"))
    chain = f"reach-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "acker.cli", "reach", "run", "--chain", chain, "--processes", "2", "--requests", "3"]
    done = subprocess.run(
        [*argv, *flags], env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 of 3 answers exact" in done.stdout
    assert "fenced" not in done.stderr.lower()


def test_ctrl_c_on_reach_run_stops_every_step_cleanly(config: ServiceConfig) -> None:
    """Ctrl-C in a terminal reached the steps too (one process group), and the runner's SIGTERM after it, a second
    signal, ended each at once: their group members and transactions were left to time out, and the next run on the
    chain waited for them (55 s, or every request past its deadline)."""
    flags, env = to_argv(replace(config, metrics_port=0))
    chain = f"reach-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "acker.cli", "reach", "run", "--chain", chain, "--requests", "20", *flags]
    runner = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    admin = AdminClient(config.client())
    groups = [f"{chain}.step{i}" for i in range(CHAIN.steps)]

    def members() -> list[int]:
        try:
            described = admin.describe_consumer_groups(groups, request_timeout=10)
            return [len(future.result().members) for future in described.values()]
        except KafkaException:  # not there yet
            return [0] * len(groups)

    try:
        deadline = time.monotonic() + 120
        while not all(members()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(members()), "the steps did not join their groups"
        os.killpg(runner.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the foreground process group
        _, err = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    assert runner.returncode == 128 + signal.SIGINT, err[-2000:]
    assert "interrupted: every step this run started is stopped" in err
    assert members() == [0] * len(groups)  # each left its group as it stopped


def _children(pid: int) -> dict[int, str]:
    """The processes ``pid`` started that run now, each with its command line (spaces between its arguments)."""
    found: dict[int, str] = {}
    for task in os.listdir(f"/proc/{pid}/task"):  # a child started by any thread is listed under that thread
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                for child in map(int, listed.read().split()):
                    with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                        found[child] = cmdline.read().replace(b"\0", b" ").decode()
        except FileNotFoundError:  # ended in between
            continue
    return found


def test_reach_run_starts_again_a_step_process_killed_and_every_answer_is_exact(config: ServiceConfig) -> None:
    """A step process that died while `reach run` waited for its answers stayed dead, and every request it had a part
    in ran out of time. The joining step is killed here as soon as it is started, before it joins its group: no
    answer can come unless the run starts it again."""
    flags, env = to_argv(replace(config, metrics_port=0))
    chain = f"reach-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "acker.cli", "reach", "run", "--chain", chain, "--requests", "5",
            "--deadline-s", "120", *flags]  # fmt: skip
    runner = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    last = f"reach step {CHAIN.steps - 1} --chain {chain}"
    try:
        deadline = time.monotonic() + 120
        killed = None
        while killed is None and runner.poll() is None and time.monotonic() < deadline:
            killed = next((pid for pid, line in _children(runner.pid).items() if last in line), None)
            time.sleep(0.01)
        assert killed is not None, "the joining step was not started"
        os.kill(killed, signal.SIGKILL)
        out, err = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    assert runner.returncode == 0, err[-3000:]
    assert "5 of 5 answers exact" in out
    name = f"step {CHAIN.steps - 1}.0"
    assert f"{name} exited with status {-signal.SIGKILL}: started again (1 of " in err, err[-3000:]


class _Forward:
    """The first step: the request's value, once, to the joining step."""

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        emit(value)

    def finished(self, request: Request, emit: Emit) -> None:
        pass


class _Sized:
    """The joining step: "answer" gives an answer over 1 MB; anything else a small one."""

    def execute(self, request: Request, value: bytes | None, key: bytes | None, emit: Emit) -> None:
        request.state["kind"] = (value or b"").decode()

    def finished(self, request: Request, emit: Emit) -> None:
        emit(b"y" * 1_100_000 if request.state.get("kind") == "answer" else b"small")


def test_an_answer_too_large_for_its_topic_fails_its_request_and_the_step_goes_on(config: ServiceConfig) -> None:
    """An answer over what the results topic takes raised out of the joining step: the process died, and its
    restart met the request again with its state restored, and died again, for good, every request behind it
    unanswered. It fails its request now (state too large for the changelog: `test_coordinated_stage`)."""
    chain = _small_chain(config, 2)
    stages = [Running(CoordinatedStage(config, chain, 0, _Forward())),
              Running(CoordinatedStage(config, chain, 1, _Sized()))]  # fmt: skip
    client = DrpcClient(config, chain)
    try:
        sent = {kind: client.send(kind, timeout_s=30) for kind in (b"answer", b"fine")}
        outcomes: dict[bytes, Any] = {}
        for kind, request in sent.items():
            try:
                outcomes[kind] = client.wait(request)
            except DrpcError as error:
                outcomes[kind] = str(error)
    finally:
        client.close()
        for stage in stages:
            stage.stop()
    assert outcomes[b"answer"].startswith(f"request {sent[b'answer']} failed in the chain: step 1 task 0: finished: "
                                          "ValueError: a record of ")  # fmt: skip
    assert outcomes[b"fine"] == b"small"
    assert all(stage.error is None for stage in stages)


def test_a_joining_step_topic_of_more_than_one_partition_is_refused(config: ServiceConfig) -> None:
    """The joining step's topic grown to 2 partitions: the step before it sent a request's results to both, and
    each task answered on its own, the first answer (a part of the result) taken as the whole."""
    chain = _small_chain(config, 3)
    admin = AdminClient(config.client())
    grown = [NewPartitions(chain.topic(2), 2), NewPartitions(f"{chain.topic(2)}.state", 2)]
    for future in admin.create_partitions(grown).values():
        future.result(30)
    time.sleep(1)  # the metadata of the new partitions reaches the broker's answers
    for index in (1, 2):
        with pytest.raises(CoordinationError, match=rf"{chain.topic(2)}, the joining step's topic, has 2 partitions"):
            CoordinatedStage(config, chain, index, _Count())
    CoordinatedStage(config, chain, 0, _Count()).consumer.close()  # the first step of three is not concerned


def test_a_task_restored_while_its_previous_owners_last_batch_commits_holds_that_batch(config: ServiceConfig) -> None:
    """The changelog's end was read as a read_committed consumer sees it, the last stable offset: the state of a
    batch still committing (a previous owner's, its offsets already taken) was below it, and the new owner went on
    from the batch's offsets without the batch's state. The end is the log's now, and the read waits for the
    transaction's marker."""
    chain = _small_chain(config, 2)
    stage = CoordinatedStage(config, chain, 1, _Count())
    previous = Producer(config.producer(**{"transactional.id": f"prev-{uuid.uuid4().hex}"}))
    previous.init_transactions(30)
    previous.begin_transaction()
    state = RequestState("r9", int(time.time() * 1000) + 60_000, received=2, user={"n": 2})
    previous.produce(f"{chain.topic(1)}.state", json.dumps(state.to_json()).encode(), key=b"r9", partition=0)
    previous.flush(10)
    committing = threading.Timer(2.0, previous.commit_transaction, args=(30,))
    committing.start()
    try:
        restored = stage._restore(0)
    finally:
        committing.join()
        stage.consumer.close()
    assert restored.requests["r9"].user == {"n": 2}


def _fan_out_count(n: int) -> list[Step]:
    return [_FanOut(n), _Count()]


@pytest.mark.parametrize(
    ("key", "value", "written_ms"),
    [(b"r9", b"not json", 0), (b"r9", b'{"request": "r9"}', 0), (b"r9", b"[1]", 0),
     (b"r9", b'{"request": "r9", "deadline_ms": 1e999}', 0), (b"\xfe", b"{", 0),
     (b"k" * 1025, b"x", 0),  # no request has so long an id: its done marker would be larger than the changelog takes
     (b"r9", b"x", -2 * 86_400_000)],  # written two days ago: past any request's deadline
)  # fmt: skip
def test_a_changelog_record_that_is_not_a_requests_state_is_dead_lettered_and_fails_its_request(
    config: ServiceConfig, key: bytes, value: bytes | None, written_ms: int
) -> None:
    """A record another producer wrote to a step's changelog (or a deadline of 1e999, which JSON takes and int()
    does not; a key not UTF-8) stopped the step at every restart until the topic was mended by hand, and every
    request of the chain with it. It is copied to the step's dead-letter topic, where it lay and why; the request its
    key names fails, answered so with why (its answer could not be trusted), and its done marker replaces the record
    (a key naming no live request, a tombstone, which a restore reads as deleting it); the step goes on, and a
    restart finds nothing more to dead-letter."""
    chain = _small_chain(config, 2)
    changelog = f"{chain.topic(1)}.state"
    producer = Producer(config.producer())
    stamp = {"timestamp": int(time.time() * 1000) + written_ms} if written_ms else {}  # written_ms: before now
    produce(producer, changelog, value, key=key, partition=0, **stamp)
    assert producer.flush(30) == 0
    stages = [Running(CoordinatedStage(config, chain, i, step)) for i, step in enumerate(_fan_out_count(3))]
    client = DrpcClient(config, chain)
    try:
        assert client.call(b"go", timeout_s=60) == b"3"  # the step goes on
        [letter] = _read(config, f"{chain.topic(1)}.dlq")
        said = dict(letter.headers())
        assert (letter.key(), letter.value()) == (key, value)
        assert said["acker.dlq.origin"] == f"{changelog}/0/0".encode()
        assert said["acker.dlq.reason"].startswith(b"unreadable state: ")
        [*_, last] = [r for r in _read(config, changelog) if r.key() == key]
        assert last.offset() > 0
        if key == b"r9" and not written_ms:
            marker = RequestState.from_json(json.loads(last.value()))
            assert marker.done and marker.failed
            [answer] = [r for r in _read(config, chain.results) if r.key() == b"r9"]
            status = dict(answer.headers())
            assert status[STATUS] == b"failed"
            assert status[WHY].startswith(b"step 1 task 0: its saved state could not be read (" + changelog.encode()
                                          + b"[0] offset 0: ")  # fmt: skip
        else:
            assert last.value() is None  # a tombstone: compaction drops the record
            assert not [r for r in _read(config, chain.results, wait_s=5) if r.key() == key]
        for stage in stages:
            stage.stop()
        stages = [Running(CoordinatedStage(config, chain, i, step)) for i, step in enumerate(_fan_out_count(2))]
        assert client.call(b"go", timeout_s=60) == b"2"
        assert len(_read(config, f"{chain.topic(1)}.dlq")) == 1
    finally:
        client.close()
        for stage in stages:
            stage.stop()
