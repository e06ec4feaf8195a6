"""A bolt at its edges: every producer flushed at a commit, whatever the one before left undelivered; records written
out of the pipeline through one producer, in order; acks sent at their linger however long a batch takes; a producer
failed for good stops it."""

from __future__ import annotations

import logging
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from acker import bolt as bolt_module
from acker.bolt import Bolt, BoltInput, Collector
from acker.columnar.block import Kind
from acker.config import ServiceConfig
from acker.core.ids import IdGenerator
from acker.core.messages import Ack
from acker.core.tuple_tree import UNTRACKED, TupleIds
from acker.errors import ProtocolError
from acker.kafka import acker_client
from acker.kafka.acker_client import AckerClient, OutputTopics
from acker.kafka.clients import KafkaClientError, ProducerFailedError
from acker.trouble import TroubleReport


class _Flushing:
    def __init__(self, left: int) -> None:
        self.left, self.flushed = left, 0

    def flush(self, _timeout_s: float = 0) -> int:
        self.flushed += 1
        return self.left

    def close(self) -> bool:
        return True


class _Quiet:
    def check(self, _counters: Counter[str]) -> None:
        pass


def test_a_sink_record_not_delivered_does_not_keep_the_acks_and_children_of_other_inputs_unsent() -> None:
    """On close and on revoke the commit is the last flush: with one record of the sink undelivered, the acker's
    batches and the stage's children were never flushed, and their trees timed out though fully processed."""
    bolt: Any = Bolt.__new__(Bolt)  # the edge alone: no Kafka clients
    bolt.commit_interval_s, bolt.counters, bolt._processed, bolt._trouble = 1.0, Counter(), {("t", 0): 5}, _Quiet()
    bolt._sink, bolt.acker, bolt.producer = _Flushing(left=1), _Flushing(left=0), _Flushing(left=0)
    bolt._commit()
    assert (bolt._sink.flushed, bolt.acker.flushed, bolt.producer.flushed) == (1, 1, 1)
    assert bolt._processed == {("t", 0): 5}  # not committed: something is undelivered


class _Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def produce_anchored(self, topic: str, value: Any, key: Any, headers: Any, ids: Any, **kwargs: Any) -> None:
        self.calls.append(("stage", False) if kwargs.get("written_by") is None else ("sink", ids.tracked))


def test_once_records_are_written_through_the_sink_producer_untracked_ones_go_there_too() -> None:
    """A word's counts from an input without valid anchors went through the stage's producer, the others through the
    sink's: two producers, and a key's records could land out of the order written (a stale count last)."""
    bolt: Any = Bolt.__new__(Bolt)
    bolt.counters, bolt._sink, bolt.acker = Counter(), None, _Recording()
    bolt._outputs = OutputTopics({}, "bolt", "", ["counts"], fitted={})
    bolt._write("counts", b"1", b"w", None, UNTRACKED)  # an untracked bolt: its own producer, no success reports
    bolt._sink = object()  # made by the first tracked write
    bolt._write("counts", b"2", b"w", None, TupleIds(((5, 6),)))
    bolt._write("counts", b"3", b"w", None, UNTRACKED)
    assert bolt.acker.calls == [("stage", False), ("sink", True), ("sink", False)]
    assert bolt.counters == Counter({"written": 3})  # each one out of the pipeline (the first was counted emitted)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    perf_counter = monotonic


class _Slow(_Flushing):
    """Takes its whole timeout, and says what it was given."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__(left=0)
        self.clock, self.given = clock, -1.0

    def flush(self, timeout_s: float = 0) -> int:
        self.given = timeout_s
        self.clock.now += timeout_s
        return super().flush(timeout_s)


def test_a_bolts_flush_gives_its_producers_one_timeout_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each producer waited the whole timeout again: a bolt closing against a broker gone waited three times it."""
    clock = _Clock()
    monkeypatch.setattr(bolt_module, "time", clock)
    bolt: Any = Bolt.__new__(Bolt)
    bolt._sink, bolt.acker, bolt.producer = _Slow(clock), _Slow(clock), _Slow(clock)
    bolt.flush(30)
    assert (bolt._sink.given, bolt.acker.given, bolt.producer.given) == (30, 0, 0) and clock.now == 30


class _Committing:
    def __init__(self) -> None:
        self.committed: list[list[TopicPartition]] = []

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.committed.append(offsets)


def _explicit(on_revoke: Any, on_lost: Any = None) -> Any:
    bolt: Any = Bolt.__new__(Bolt)  # the edge alone: no Kafka clients
    bolt.commit_interval_s, bolt.counters = 1.0, Counter()
    bolt._trouble = TroubleReport(logging.getLogger("t"), "b", ("errors",))
    bolt._processed = {("in", 0): 5, ("in", 1): 7}
    bolt._sink, bolt.acker, bolt.producer = None, _Flushing(left=0), _Flushing(left=0)
    bolt.consumer, bolt._collector, bolt._revoked, bolt._lost = _Committing(), object(), on_revoke, on_lost
    bolt.config, bolt._lost_at = ServiceConfig(timeout_s=30.0, buckets=3), {}  # trees live up to 45 s
    bolt.execute_s, bolt._closed, bolt.group = 0.0, False, "split"
    return bolt


@pytest.mark.parametrize(
    ("code", "level"), [(KafkaError.ILLEGAL_GENERATION, logging.INFO), (KafkaError._TIMED_OUT, logging.WARNING)]
)
def test_a_commit_a_rebalance_refuses_is_made_at_the_next_one_without_a_warning(
    caplog: pytest.LogCaptureFixture, code: int, level: int
) -> None:
    """The periodic commit races most rebalances (a process joining or leaving): a warning each time read as lost
    commits at every scale-out. The offsets stay for the next commit either way."""

    class _Refusing(_Committing):
        def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
            raise KafkaException(KafkaError(code))

    bolt = _explicit(None)
    bolt.consumer = _Refusing()
    with caplog.at_level(logging.INFO, logger="acker.bolt"):
        bolt._commit()
    assert [r.levelno for r in caplog.records if "commit" in r.getMessage()] == [level]
    assert bolt._processed == {("in", 0): 5, ("in", 1): 7}
    bolt.consumer = _Committing()
    bolt._commit()
    assert bolt.consumer.committed == [[TopicPartition("in", 0, 5), TopicPartition("in", 1, 7)]]
    assert bolt._processed == {}


def test_on_revoke_is_told_the_partitions_that_go_before_they_are_committed() -> None:
    told: list[tuple[set[tuple[str, int]], int]] = []
    consumer = _Committing()
    bolt = _explicit(lambda partitions, _collector: told.append((partitions, len(consumer.committed))))
    bolt.consumer = consumer
    bolt._on_revoke(None, [TopicPartition("in", 1)])
    assert told == [({("in", 1)}, 0)]
    assert [(tp.partition, tp.offset) for tp in bolt.consumer.committed[0]] == [(0, 5), (1, 7)]
    assert bolt._processed == {}  # committed, all of them


def test_an_on_revoke_that_raises_is_counted_and_the_partitions_are_committed_all_the_same() -> None:
    """What it held and did not settle times out; the bolt goes on. A `ProtocolError` (settling an input twice) is
    the function's bug: it stops the bolt, as one from the function itself does, once the partitions are committed."""

    def raising(_partitions: object, _collector: object) -> None:
        raise RuntimeError("boom")

    bolt = _explicit(raising)
    bolt._on_revoke(None, [TopicPartition("in", 1)])
    assert bolt.counters["errors"] == 1 and len(bolt.consumer.committed) == 1

    def twice(_partitions: object, _collector: object) -> None:
        raise ProtocolError("acked twice")

    stopped = _explicit(twice)
    with pytest.raises(ProtocolError):
        stopped._on_revoke(None, [TopicPartition("in", 1)])
    # Committed first, and forgotten: the bolt's close must not commit a partition another process owns now.
    assert len(stopped.consumer.committed) == 1 and stopped._processed == {}

    def refused(_timeout_s: float) -> int:
        raise KafkaClientError("flush", KafkaError(KafkaError._FATAL))

    failing = _explicit(twice)
    failing.flush = refused
    with pytest.raises(ProtocolError) as raised:  # the cause of the stop, not the commit's failure after it
        failing._on_revoke(None, [TopicPartition("in", 1)])
    assert isinstance(raised.value.__context__, KafkaClientError) and failing._processed == {("in", 0): 5}


class _Closing(_Committing):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_bolt_whose_last_commit_fails_still_leaves_its_group(caplog: pytest.LogCaptureFixture) -> None:
    """A producer failed for good made the commit's flush raise: the consumer was never closed, and the group waited
    for its session to time out before another process took its partitions. The trouble since the last report is
    said all the same."""
    bolt = _explicit(None)
    bolt.consumer = _Closing()
    bolt.counters["errors"] += 1
    bolt._trouble.check(bolt.counters)  # said: the next line is a minute away
    bolt.counters["errors"] += 2

    def broken(_timeout_s: float) -> int:
        raise KafkaClientError("flush", KafkaError(KafkaError._FATAL))

    bolt.flush = broken
    caplog.clear()
    with pytest.raises(KafkaClientError):
        bolt.close()
    assert bolt.consumer.closed and bolt.consumer.committed == []
    assert [r.getMessage() for r in caplog.records] == ["b since the last report: errors 2 (counted in its counters)"]


def test_a_bolt_says_at_its_close_the_trouble_counted_since_its_last_report_with_its_example(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close's commit asked for a report once its interval was over only, before the close's flush: errors of
    the last minute, their traceback, and children that flush failed to deliver went unsaid."""
    now = [0.0]
    bolt = _explicit(None)
    bolt.group, bolt.consumer = "count", _Closing()
    bolt._trouble = TroubleReport(logging.getLogger("acker.bolt"), "bolt count", ("errors", "child_delivery_failures"),
                                  60, lambda: now[0])  # fmt: skip
    monkeypatch.setattr(bolt_module, "release", lambda *_args: None)
    bolt.acker.lingering = lambda: False
    bolt.counters["errors"] += 1
    bolt._commit()  # the first report, at once
    now[0] = 20.0
    bolt.counters["errors"] += 5
    bolt._trouble.example("in/0/7", ValueError("bad word"))

    def failing_children(_timeout_s: float) -> int:
        bolt.counters["child_delivery_failures"] += 3
        return 0

    bolt.flush = failing_children
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="acker.bolt"):
        bolt.close()
    [said] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "errors 5, child delivery failures 3" in said.getMessage() and "in/0/7" in said.getMessage()
    assert said.exc_info is not None and isinstance(said.exc_info[1], ValueError)


def test_partitions_lost_are_neither_committed_nor_told_to_on_revoke() -> None:
    """Another process may own them already, and settle their held inputs first: a fail from here could decide a
    tree it is about to complete. ``on_lost`` is told, without a collector (to forget, not to settle: the word
    count's counts, given back, must be read again)."""
    told: list[object] = []
    lost: list[set[tuple[str, int]]] = []
    bolt = _explicit(lambda partitions, _collector: told.append(partitions), lost.append)
    bolt._on_lost(None, [TopicPartition("in", 0), TopicPartition("in", 1)])
    assert told == [] and bolt.consumer.committed == [] and bolt._processed == {}
    assert lost == [{("in", 0), ("in", 1)}]

    def raising(_partitions: object) -> None:
        raise RuntimeError("boom")

    failing = _explicit(None, raising)
    failing._on_lost(None, [TopicPartition("in", 0)])  # counted, and the bolt goes on
    assert failing.counters["errors"] == 1


def _failed_anchors(client: AckerClient) -> set[int]:
    return {
        int(anchor)
        for batch in client._batches
        if batch is not None
        for kind, anchor in zip(batch.kinds, batch.anchors, strict=True)
        if kind == Kind.FAIL
    }


@pytest.mark.parametrize("how", ["lost", "revoked"])
def test_records_written_out_and_not_delivered_when_their_partitions_go_are_dropped_and_their_trees_failed(
    how: str,
) -> None:
    """A broker away: the word count's undelivered counts landed once it was back, after the partition's new owner
    had read the last counts and counted on from them, and a word's last count fell below the times it was counted.
    Dropped when the partitions go (lost, or revoked with the commit's flush timed out), each fails its trees: their
    records are replayed. A real producer with no broker to go to holds them."""
    sink = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    acks = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    try:
        bolt = _explicit(None)
        bolt._sink, bolt.acker, bolt.group = sink, AckerClient(acks, "acker", 4, linger_s=60), "count"
        for anchor in (11, -5):
            bolt.acker.produce_anchored("counts", b"1", b"w", None, TupleIds(((anchor, 22),)),
                                        on_failure=bolt._child_failed, written_by=sink)  # fmt: skip
        if how == "lost":
            bolt._on_lost(None, [TopicPartition("in", 0)])
        else:
            bolt.flush = lambda _timeout_s: 2  # the commit's flush timed out
            bolt._on_revoke(None, [TopicPartition("in", 0)])
            assert bolt.consumer.committed == []
        assert _failed_anchors(bolt.acker) == {11, -5}
        assert bolt.counters["unwritten_dropped"] == 2 and bolt.counters["child_delivery_failures"] == 2
        assert bolt._sink is None  # let go: the next record written out makes a new one
        bolt._on_lost(None, [TopicPartition("in", 1)])  # nothing left: nothing more
        assert bolt.counters["unwritten_dropped"] == 2
    finally:
        acks.purge()


class _FlushesRecorded(AckerClient):
    """Says when it was flushed, and which trees' fails it held then."""

    def flush(self, timeout_s: float = 30.0) -> int:
        self.flushed.append((timeout_s, _failed_anchors(self)))
        return 0

    flushed: list[tuple[float, set[int]]]


def test_a_bolt_closing_with_records_written_out_undelivered_sends_the_fails_of_their_trees() -> None:
    """The close's revoke drops them (`_drop_unwritten`) after the commit's flush: their fails waited in the acker
    client's batches, never sent, and the trees timed out instead of failing at once."""
    sink = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    acks = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    try:
        bolt = _explicit(None)
        bolt._sink, bolt.acker, bolt.group = sink, _FlushesRecorded(acks, "acker", 4, linger_s=60), "count"
        bolt.acker.flushed = []
        bolt.acker.produce_anchored("counts", b"1", b"w", None, TupleIds(((11, 22),)), on_failure=bolt._child_failed,
                                    written_by=sink)  # fmt: skip
        bolt.flush = lambda _timeout_s: 1  # the commit's flush timed out: a broker away

        class Leaving(_Closing):
            def close(self) -> None:
                super().close()
                bolt._on_revoke(self, [TopicPartition("in", 0)])  # as librdkafka calls it when the consumer closes

        bolt.consumer = Leaving()
        bolt.close()
        assert bolt.consumer.closed and bolt.counters["unwritten_dropped"] == 1
        assert bolt.acker.flushed == [(5, {11})]
    finally:
        acks.purge()


def test_on_revoke_is_for_explicit_bolts() -> None:
    with pytest.raises(ValueError, match="explicit bolts"):
        Bolt(ServiceConfig(), "in", "g", lambda _m, _c: None, on_revoke=lambda _p, _c: None)


class _Records:
    """A consumer holding ``n`` records, handed over in one batch; says the timeout each wait was given."""

    def __init__(self, n: int) -> None:
        self.left, self.waits = n, []  # type: ignore[var-annotated]

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        if timeout:
            self.waits.append(timeout)
        taken, self.left = min(num_messages, self.left), self.left - min(num_messages, self.left)
        return [SimpleNamespace(error=lambda: None) for _ in range(taken)]


class _Counting(Producer):
    """A producer that never connects, counting the records it is given."""

    produced = 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.produced += 1
        super().produce(*args, **kwargs)


def test_a_bolt_sends_its_acks_at_their_linger_while_it_works_through_a_batch_of_slow_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The acks of a batch's inputs went out once the whole batch was processed: at 10 ms an input, 500 inputs held
    the first one's ack 5 s (against a linger of 20 ms), and a backlog's oldest inputs timed out. Waiting for input
    with an ack lingering, the bolt waited its whole timeout (100 ms), not the linger."""
    clock = _Clock()
    monkeypatch.setattr(bolt_module, "time", clock)
    monkeypatch.setattr(acker_client, "time", clock)
    producer = _Counting({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    bolt: Any = Bolt.__new__(Bolt)
    bolt.consumer, bolt._sink, bolt._next_commit, bolt._ticked = _Records(10), None, float("inf"), None
    bolt.acker = AckerClient(producer, "acker", 1, linger_s=0.015)
    queued: list[int] = []

    def process(_record: object) -> None:  # a slow function that acks its input, as the collector does
        clock.now += 0.01
        bolt.acker.send_acks([(len(queued) + 1, 7)])
        queued.append(producer.produced)  # acker records produced so far

    bolt._process = process
    try:
        bolt.step(0.1)
        assert queued == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]  # a record as each batch's 15 ms linger passes
        bolt.acker.send(Ack(99, 7))
        bolt.step(0.1)  # nothing to read: waits for the linger, not the whole timeout
        assert bolt.consumer.waits == [0.015]
    finally:
        producer.purge()


def test_an_explicit_bolt_is_ticked_on_time_through_a_batch_of_slow_inputs_and_while_none_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Storm's tick tuples (`Bolt`'s on_tick): every ``tick_s``, between the inputs of a batch that takes longer
    (not once it is done) and while no input comes (a wait for input ends at the next tick), never a burst for the
    ticks a long batch passed; an exception from it is counted as the function's and the bolt goes on; a
    `ProtocolError` (acking an input twice) stops it."""
    clock = _Clock()
    monkeypatch.setattr(bolt_module, "time", clock)
    monkeypatch.setattr(acker_client, "time", clock)
    producer = _Counting({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    bolt: Any = Bolt.__new__(Bolt)
    bolt.consumer, bolt._sink, bolt._next_commit = _Records(10), None, float("inf")
    bolt.acker, bolt.counters, bolt.execute_s, bolt._collector = AckerClient(producer, "acker", 1), Counter(), 0.0, 7
    bolt._trouble = TroubleReport(logging.getLogger("t"), "b", ("errors",))
    ticks: list[tuple[float, object]] = []
    raising: list[Exception] = []

    def tick(collector: object) -> None:
        ticks.append((clock.now, collector))
        clock.now += 0.05  # the tick's own work
        if raising:
            raise raising.pop()

    def process(_record: object) -> None:  # 0.3 s an input
        clock.now += 0.3

    bolt._process, bolt._ticked, bolt.tick_s, bolt._next_tick = process, tick, 1.0, 1.0
    try:
        bolt.step(0.1)  # 10 inputs: 3 s
        assert [round(at, 2) for at, _ in ticks] == [1.2, 2.45] and {c for _, c in ticks} == {7}
        assert bolt.execute_s == pytest.approx(0.1)  # the ticks' time (the inputs' is `_process`'s, replaced here)
        clock.now = 10.0  # an input that went quiet: ticked at its next wait, once
        raising.append(ValueError("the database is down"))
        bolt.step(0.1)
        assert [round(at, 2) for at, _ in ticks][2:] == [10.0] and bolt.counters["errors"] == 1
        bolt.step(0.1)  # 10.05: not yet
        assert len(ticks) == 3
        clock.now = 10.97  # a wait for input that ends at the next tick, not after it
        bolt.step(0.1)
        assert bolt.consumer.waits[-1] == pytest.approx(0.03) and len(ticks) == 3
        clock.now, raising[:] = 11.0, [ProtocolError("acked twice")]
        with pytest.raises(ProtocolError):
            bolt.step(0.1)
    finally:
        producer.purge()


def test_a_basic_bolt_refuses_a_tick_and_a_tick_needs_a_period() -> None:
    with pytest.raises(ValueError, match="on_revoke and on_tick are for explicit bolts"):
        Bolt(ServiceConfig(), "in", "g", lambda _m, _c: None, on_tick=lambda _c: None)
    with pytest.raises(ValueError, match="tick_s must be above 0"):
        Bolt(ServiceConfig(), "in", "g", lambda _m, _c: None, basic=False, on_tick=lambda _c: None, tick_s=0)


def test_the_first_record_written_through_the_sink_producer_comes_after_those_written_through_the_stages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Untracked records written before the sink producer existed went through the stage's, lingering there: the
    next of a key's records, through the new sink producer, could land first (a stale count last)."""
    events: list[str] = []

    def sink_made(_settings: object) -> object:
        events.append("sink made")
        return object()

    def stage_flushed(_timeout_s: float) -> int:
        events.append("stage flushed")
        return 0

    monkeypatch.setattr(bolt_module, "Producer", sink_made)
    bolt: Any = Bolt.__new__(Bolt)
    bolt.counters, bolt._sink, bolt.acker = Counter(), None, _Recording()
    bolt._outputs = OutputTopics({}, "bolt", "", ["counts"], fitted={})
    bolt.config = SimpleNamespace(sink_producer=dict)
    bolt.producer = SimpleNamespace(flush=stage_flushed)
    bolt._write("counts", b"1", b"w", None, UNTRACKED)
    assert events == []
    bolt._write("counts", b"2", b"w", None, TupleIds(((5, 6),)))
    assert events == ["stage flushed", "sink made"] and bolt.acker.calls == [("stage", False), ("sink", True)]


class _Failing:
    def __init__(self) -> None:
        self.failed: list[object] = []

    def fail(self, message: object, _reason: str) -> None:
        self.failed.append(message)


@pytest.mark.parametrize("basic", [False, True])
def test_a_producer_that_takes_no_more_records_stops_the_bolt_instead_of_failing_the_input(basic: bool) -> None:
    """A fatal producer error, raised by an emit, was taken for the input's fault: the input failed (a fail that
    could not be delivered either), the bolt going on to the next, counted as an error of the function."""
    refused = ProducerFailedError("the producer takes no more records", KafkaError(KafkaError._FATAL))

    def emitting(_message: object, collector: Any) -> None:
        if basic:
            collector.emit("out", b"child")  # produced after the function returns
        else:
            raise refused  # raised by collector.emit within the function

    def producing(*_args: object, **_kwargs: object) -> None:
        raise refused

    bolt: Any = Bolt.__new__(Bolt)
    bolt.basic, bolt._function, bolt._collector = basic, emitting, _Failing()
    bolt.counters, bolt._ids, bolt._produce_child = Counter(), IdGenerator(), producing
    record = SimpleNamespace(headers=lambda: None, value=lambda: b"v", key=lambda: None, timestamp=lambda: (0, 0))
    with pytest.raises(KafkaClientError):
        bolt._handle(record, "in", 0, 3, 0.0)
    assert bolt._collector.failed == [] and bolt.counters["errors"] == 0


@pytest.mark.parametrize("settled", ["ack", "fail", None])
def test_an_explicit_function_that_raises_after_settling_its_input_does_not_settle_it_again(
    settled: str | None,
) -> None:
    """If the function raises, the input is failed unless it was acked or failed already (module docstring): failed
    after its ack, it raised `ProtocolError` (settled twice), which stops the bolt, for an error the bolt goes on
    after. The error is counted either way."""
    sent: list[str] = []
    bolt: Any = Bolt.__new__(Bolt)
    bolt.basic, bolt.group, bolt.counters, bolt._ids = False, "g", Counter(), IdGenerator()
    bolt.acker = SimpleNamespace(send_acks=lambda _values: sent.append("ack"),
                                 send_all=lambda _messages, _why=None: sent.append("fail"))  # fmt: skip
    bolt._collector = Collector(bolt)
    bolt._trouble = TroubleReport(logging.getLogger("test"), "bolt g", ("errors",))

    def function(message: BoltInput, collector: Collector) -> None:
        if settled == "ack":
            collector.ack(message)
        elif settled == "fail":
            collector.fail(message, "its own reason")
        raise RuntimeError("after")

    bolt._function = function
    record = SimpleNamespace(headers=lambda: None, value=lambda: b"v", key=lambda: None, timestamp=lambda: (0, 0))
    bolt._handle(record, "in", 0, 3, 0.0)
    assert sent == [settled or "fail"] and bolt.counters["errors"] == 1


class _UnprintableError(Exception):
    def __str__(self) -> str:
        fields: dict[str, str] = {}
        return "bad record " + fields["id"]  # formats a field the input lacks


@pytest.mark.parametrize("basic", [False, True])
def test_an_exception_whose_message_cannot_be_made_fails_its_input_rather_than_stop_the_bolt(basic: bool) -> None:
    """The fail's reason is made in the handler of the function's exception: a ``__str__`` that raised there escaped
    it, the input neither failed nor committed, and the bolt stopped, on the same input again at every restart."""
    reasons: list[str | None] = []
    bolt: Any = Bolt.__new__(Bolt)
    bolt.basic, bolt.group, bolt.counters, bolt._ids = basic, "g", Counter(), IdGenerator()
    bolt.acker = SimpleNamespace(send_all=lambda _messages, why=None: reasons.append(why))
    bolt._collector = Collector(bolt)
    bolt._trouble = TroubleReport(logging.getLogger("test"), "bolt g", ("errors",))

    def function(_message: BoltInput, _collector: Collector) -> None:
        raise _UnprintableError

    bolt._function = function
    record = SimpleNamespace(headers=lambda: None, value=lambda: b"v", key=lambda: None, timestamp=lambda: (0, 0))
    bolt._handle(record, "in", 0, 3, 0.0)
    assert reasons == ["bolt g: _UnprintableError: <its message could not be made: KeyError>"]
    assert bolt.counters["errors"] == 1


def test_inputs_processed_before_their_partition_was_lost_are_passed_over_when_it_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session that timed out for a moment: the partitions are lost, then given back (the sticky assignor), read
    again from the offset committed before. The inputs processed since were processed again, each edge acked twice:
    every such tree timed out and was replayed. For one message timeout they are passed over (and committed)."""
    clock = _Clock()
    monkeypatch.setattr(bolt_module, "time", clock)
    handled: list[int] = []
    bolt = _explicit(None)
    bolt._handle = lambda _record, _topic, _partition, offset, _taken_at: handled.append(offset)
    bolt._on_lost(None, [TopicPartition("in", 0), TopicPartition("in", 1)])  # processed up to 4 and 6 (_explicit)
    for offset in (2, 3, 4, 5):  # partition 0 back, from its commit at 2
        bolt._process(Message(topic="in", partition=0, offset=offset))
    assert handled == [5] and bolt.counters["read_again"] == 3 and bolt._processed == {("in", 0): 6}
    clock.now += 89.9  # twice the longest a tree lives, less a moment: passed over still
    bolt._process(Message(topic="in", partition=1, offset=5))
    assert handled == [5] and bolt.counters["read_again"] == 4
    clock.now += 0.1  # then partition 1's trees are decided; a topic made again is read whole
    bolt._process(Message(topic="in", partition=1, offset=0))
    assert handled == [5, 0] and bolt._lost_at == {}


def test_inputs_of_a_partition_revoked_before_they_could_be_committed_are_passed_over_if_it_comes_back() -> None:
    """Revoked with something undelivered, the bolt cannot commit: given back, the partition is read again from the
    offset committed before, and its inputs were processed a second time (each edge acked twice). A loss after an
    earlier one does not move the mark back."""
    bolt = _explicit(None)
    bolt.flush = lambda _timeout_s: 1  # one record undelivered: no commit
    bolt._lost_at[("in", 0)] = (9, float("inf"))  # lost before at 9, read again up to 5 since
    bolt._on_revoke(None, [TopicPartition("in", 0), TopicPartition("in", 1)])
    assert bolt.consumer.committed == [] and bolt._processed == {}
    assert {tp: mark for tp, (mark, _) in bolt._lost_at.items()} == {("in", 0): 9, ("in", 1): 7}


def test_a_bolt_says_the_partitions_it_is_assigned(caplog: pytest.LogCaptureFixture) -> None:
    """As a spout does: a bolt said nothing from its start until its first report or its stop, and its operator could
    not tell from its log whether it had joined its group. A rebalance that gives nothing says nothing."""
    bolt: Any = Bolt.__new__(Bolt)
    bolt.group, bolt._assigned = "split", None
    with caplog.at_level(logging.INFO, logger="acker.bolt"):
        bolt._on_assign(None, [TopicPartition("in", 1), TopicPartition("in", 0)])
        bolt._on_assign(None, [])
    assert [r.getMessage() for r in caplog.records] == ["bolt split: assigned in/0, in/1"]


def test_a_bolt_says_the_partitions_it_gives_up(caplog: pytest.LogCaptureFixture) -> None:
    """Revoked or lost, as assigned: an operator running several processes of a stage could not tell from their logs
    which one held which partitions once a member joined or died. A rebalance that takes nothing says nothing."""
    bolt = _explicit(None)
    with caplog.at_level(logging.INFO, logger="acker.bolt"):
        bolt._on_revoke(None, [TopicPartition("in", 1), TopicPartition("in", 0)])
        bolt._on_revoke(None, [])
        bolt._on_lost(None, [TopicPartition("in", 2)])
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "bolt split: revoked in/0, in/1"),
        ("WARNING", "bolt split: lost in/2 (taken for dead: nothing committed)"),
    ]
