"""What a spout's emit function and a basic bolt's function are given works while they run, and refuses loudly
afterwards (a real Producer that never connects: nothing leaves the process)."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from acker import bolt as bolt_module
from acker import spout as spout_module
from acker.bolt import BasicCollector, Bolt, BoltInput, Collector
from acker.columnar.block import Kind
from acker.config import ServiceConfig
from acker.core.ids import IdGenerator
from acker.core.messages import Ack, Fail, Init
from acker.core.outcomes import Nacked, NackReason
from acker.core.tracker import Tracker
from acker.core.tuple_tree import InputTuple, SpoutTree
from acker.errors import ConfigError, ProtocolError, RefusedOutputError
from acker.headers import with_ids
from acker.kafka import acker_client
from acker.kafka.acker_client import AckerClient, OutputTopics
from acker.spout import Emitter, Spout, SpoutSettings, _output_refusal
from acker.topics import output_refusal
from acker.trouble import TroubleReport

CONFIG = ServiceConfig()
SPOUT = SpoutSettings("s", "src", "out")


def _named(topic: str, refused: Callable[[str], str | None]) -> OutputTopics:
    """The topics of a stage made without its constructor: ``topic`` named, nothing looked up."""
    return OutputTopics({}, "stage", "", [topic], fitted={}, refused=refused)


@pytest.fixture
def producer() -> Iterator[Producer]:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    yield producer
    producer.purge()


def _starting_spout(producer: Producer, emit: Any, acker_partitions: int = 1, *, tracked: bool = True) -> Any:
    """A spout with only what starting a tree needs (`Spout._start`), writing to ``out``."""
    spout: Any = Spout.__new__(Spout)
    spout.settings, spout._emit = SpoutSettings("s", "src", "out", tracked=tracked), emit
    spout._ids, spout._on_outcome, spout._told_as, spout._unresolved = IdGenerator(3), None, {}, OrderedDict()
    spout.counters, spout.pending, spout._pending_deadlines, spout._direct = Counter(), {}, deque(), []
    spout._pending_timeout_s, spout.acker = 60.0, AckerClient(producer, "acker", acker_partitions, linger_s=60)
    spout._started_at, spout._direct_reasons = {}, {}
    spout._outputs = _named("out", functools.partial(_output_refusal, CONFIG, SPOUT))
    spout._start_trouble = TroubleReport(logging.getLogger("acker.spout"), "s", ["emit_errors", "unreadable_headers"])
    return spout


def _processing_bolt(producer: Producer, function: Any, acker_partitions: int = 1, *, basic: bool = True) -> Any:
    """A bolt ``split`` with only what processing one input needs (`Bolt._process`), writing to ``words``."""
    bolt: Any = Bolt.__new__(Bolt)
    bolt.basic, bolt._function, bolt.counters, bolt._ids, bolt._processed = (
        basic,
        function,
        Counter(),
        IdGenerator(5),
        {},
    )
    bolt._lost_at, bolt._outputs = {}, _named("words", functools.partial(output_refusal, CONFIG))
    bolt.execute_s, bolt.process_s, bolt.process_count = 0.0, 0.0, 0
    bolt.group, bolt.acker = "split", AckerClient(producer, "acker", acker_partitions, linger_s=60)
    bolt._collector, bolt._trouble = Collector(bolt), TroubleReport(logging.getLogger("t"), "bolt split", ["errors"])
    return bolt


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("acker", "one of the acker's own topics"),
        ("acker.dlq", "one of the acker's own topics"),
        ("acker.replay.s", "the spout's own replay topic: each tuple would be read back as a new record"),
        ("acker.replay.other", "a replay topic (acker.replay.<spout>), written by the replay job alone"),
        ("acker.outcomes.s", "the spout's own outcome topic, written by the acker alone"),
        ("acker.outcomes.other", "an outcome topic (acker.outcomes.<spout>), written by the acker alone"),
        ("src", "the spout's own source topic"),
    ],
)
def test_a_spout_that_emits_into_a_topic_it_would_read_back_or_the_ackers_own_fails_the_record_saying_why(
    producer: Producer, topic: str, why: str
) -> None:
    """An emit function that named its output after ``record.topic()`` wrote each replayed copy back into its replay
    topic, and the spout read its copies as new records, without end: refused at each emit, the record failed."""

    def emit(record: Message, emitter: Emitter) -> None:
        emitter.emit(topic, record.value())

    spout = _starting_spout(producer, emit, 1)
    for offset in (3, 4):  # at every record, not only the first to that topic
        spout._start(Message(topic="src", partition=0, offset=offset, value=b"x"), time.monotonic())
    assert [row[0] for row in spout._direct] == ["FAILED", "FAILED"] and len(spout._direct_reasons) == 2
    for reason in spout._direct_reasons.values():
        assert reason.startswith(f"spout s: RefusedOutputError: cannot write to {topic}: it is {why}")
    assert spout.counters["emitted"] == 0 and topic not in spout._outputs.seen


def test_a_bolt_that_writes_into_an_outcome_topic_fails_its_input_saying_why(producer: Producer) -> None:
    def sink(message: BoltInput, collector: BasicCollector) -> None:
        collector.write("acker.outcomes.s", b"a")

    bolt = _processing_bolt(producer, sink, 1)
    root = SpoutTree("s", "src/0/1", IdGenerator(6)).emit()
    bolt._process(Message(topic="split", partition=0, offset=4, value=b"a", headers=with_ids(None, root)))
    batch = bolt.acker._batches[0]
    assert bolt.counters["written"] == 0 and bolt.counters["acked"] == 0 and batch is not None
    assert list(batch.reasons.values()) == [
        "bolt split: RefusedOutputError: cannot write to acker.outcomes.s: it is an outcome topic "
        "(acker.outcomes.<spout>), written by the acker alone"
    ]


def test_a_stage_that_names_a_refused_topic_among_its_outputs_is_refused_at_once() -> None:
    _refused = functools.partial(output_refusal, CONFIG)
    with pytest.raises(ConfigError, match=r"spout s cannot name acker.replay.s among its outputs: it is a replay"):
        OutputTopics({}, "spout s", "", ["out", "acker.replay.s"], fitted={}, refused=_refused)


def test_a_function_catching_value_errors_does_not_swallow_a_refused_write() -> None:
    with pytest.raises(RefusedOutputError), contextlib.suppress(ValueError):  # as a function would, around its parsing
        _named("out", functools.partial(output_refusal, CONFIG)).check("acker.replay.s", Counter())


def test_only_the_ackers_topics_and_those_under_its_separated_prefixes_are_refused_as_outputs() -> None:
    assert output_refusal(CONFIG, "words") is None and output_refusal(CONFIG, "acker.words") is None
    assert output_refusal(CONFIG, "acker.replay.dlq") is not None  # the replay job's dead letters
    namespaced = CONFIG.namespaced("run1")
    assert output_refusal(namespaced, "acker.replay.s") is None and output_refusal(namespaced, "run1.replay.s")
    # A prefix without a separator at its end names no topics apart: any could begin so.
    loose = ServiceConfig(outcome_prefix="o", replay_prefix="")
    assert output_refusal(loose, "orders") is None and output_refusal(loose, "anything") is None
    # A spout refuses its own replay and outcome topics by name, whatever the prefixes.
    loop = SpoutSettings("loop", "src", "out")
    assert (
        _output_refusal(loose, loop, "loop") == "it is the spout's own replay topic: each tuple would be read back "
        "as a new record"
    )
    assert _output_refusal(loose, loop, "oloop") == "it is the spout's own outcome topic, written by the acker alone"
    assert _output_refusal(loose, loop, "orders") is None


class _StopError(Exception):
    """Raised where a stage would make its producer: what the constructor did before it is what is tested."""


def _no_broker(monkeypatch: pytest.MonkeyPatch, module: Any, fitted: list[tuple[str, ...]]) -> None:
    monkeypatch.setattr(module, "answering", lambda *_: None)
    monkeypatch.setattr(module, "partition_count", lambda *_: 1)

    def fit(_client: Any, *topics: str) -> dict[str, Any]:
        fitted.append(topics)
        return {}

    monkeypatch.setattr(acker_client, "fitted_batch_size", fit)

    def no_producer(*_: Any, **__: Any) -> None:
        raise _StopError

    monkeypatch.setattr(module, "Producer", no_producer)


def test_a_spout_fits_its_batches_to_what_it_writes_and_refuses_to_name_a_topic_it_would_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fitted: list[tuple[str, ...]] = []
    _no_broker(monkeypatch, spout_module, fitted)
    with pytest.raises(_StopError):
        Spout(CONFIG, SpoutSettings("s", "src", "out", other_output_topics=("x",)))
    assert fitted == [("acker", "acker.outcomes.s", "out", "x")]
    with pytest.raises(ConfigError, match=r"^spout s cannot name src among its outputs: it is the spout's own source"):
        Spout(CONFIG, SpoutSettings("s", "src", "src"))
    with pytest.raises(ConfigError, match=r"^spout s cannot name acker among its outputs: it is one of the acker's"):
        Spout(CONFIG, SpoutSettings("s", "src", "out", other_output_topics=("acker",)))


def test_a_bolt_fits_its_batches_to_what_it_writes_and_refuses_to_name_the_ackers_topics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fitted: list[tuple[str, ...]] = []
    _no_broker(monkeypatch, bolt_module, fitted)
    with pytest.raises(_StopError):
        Bolt(CONFIG, "words", "count", lambda *_: None, output_topics=["counts"])
    assert fitted == [("acker", "counts")]
    with pytest.raises(ConfigError, match=r"^bolt count cannot name acker\.replay\.s among its outputs"):
        Bolt(CONFIG, "words", "count", lambda *_: None, output_topics=["counts", "acker.replay.s"])


def test_an_emitter_kept_after_its_function_returned_refuses_to_emit(producer: Producer) -> None:
    """The record's init is sent when its function returns: a tuple emitted later would not be in its tree, which
    could then be acked while that tuple is still being processed."""
    kept: list[Emitter] = []

    def emit(record: Message, emitter: Emitter) -> None:
        emitter.emit("out", record.value())
        kept.append(emitter)

    spout = _starting_spout(producer, emit, 4)
    spout._start(Message(topic="src", partition=0, offset=7, value=b"first part"), time.monotonic())
    assert spout.counters["emitted"] == 1 and list(spout.pending) == ["src/0/7"]
    with pytest.raises(ProtocolError):
        kept[0].emit("out", b"second part")
    assert spout.counters["emitted"] == 1


def test_a_basic_collector_kept_after_its_function_returned_refuses_to_emit(producer: Producer) -> None:
    """The input is acked when the function returns, with the children it emitted until then: a later child would
    be lost without a word."""
    kept: list[BasicCollector] = []

    def split(message: BoltInput, collector: BasicCollector) -> None:
        collector.emit("words", b"a")
        kept.append(collector)

    bolt = _processing_bolt(producer, split, 4)
    root = SpoutTree("s", "src/0/1", IdGenerator(6)).emit()
    bolt._process(Message(topic="split", partition=0, offset=4, value=b"a b", headers=with_ids(None, root)))
    assert bolt.counters["emitted"] == 1 and bolt.counters["acked"] == 1 and bolt._processed == {("split", 0): 5}
    with pytest.raises(ProtocolError):
        kept[0].emit("words", b"b")


def test_a_root_whose_produce_raised_starts_its_tree_so_that_its_fail_is_decided(producer: Producer) -> None:
    """The edge of a root the producer refused (a value that is not bytes) is in the tree, and its fail is sent:
    with the init too, the acker nacks the tree ``FAILED``; without it, the fail would wait for an init that never
    comes, and expire as one whose init was lost."""

    def emit(record: Message, emitter: Emitter) -> None:
        emitter.emit("out", 42)  # type: ignore[arg-type]

    spout = _starting_spout(producer, emit, 1)
    spout._start(Message(topic="src", partition=0, offset=8, value=b"x"), time.monotonic())
    batch = spout.acker._batches[0]
    assert batch is not None and [Kind(k) for k in batch.kinds] == [Kind.FAIL, Kind.FAIL, Kind.INIT]
    assert spout._direct == [] and list(spout.pending) == ["src/0/8"] and spout.counters["emit_errors"] == 1
    # the fail says why, in the acker record's header (`acker.fail_reasons`)
    assert list(batch.reasons.values()) == ["spout s: TypeError: a bytes-like object is required, not 'int'"]


def test_a_record_the_emit_function_raises_on_after_emitting_is_failed_whatever_its_children_did(
    producer: Producer,
) -> None:
    """Its fail goes to the acker before its init: the child, taken and acked downstream before the acker reads the
    spout's messages, does not complete the tree with the init (an ACK, seen in CI when the fail came after it)."""

    def emit(record: Message, emitter: Emitter) -> None:
        emitter.emit("out", b"child")
        raise ValueError("cannot parse the rest of this record")

    spout = _starting_spout(producer, emit, 1)
    spout._start(Message(topic="src", partition=0, offset=3, value=b"x"), time.monotonic())
    batch = spout.acker._batches[0]
    assert batch is not None and [Kind(k) for k in batch.kinds] == [Kind.FAIL, Kind.INIT]
    tree = spout.pending["src/0/3"]
    init = Init(tree, "s", "src/0/3", batch.values[1])
    tracker = Tracker()
    assert tracker.handle(Ack(tree, batch.values[1])) == ()  # the child acked by a bolt, before the acker read these
    assert tracker.handle(Fail(tree)) == ()
    assert tracker.handle(init) == (Nacked(tree, "s", "src/0/3", NackReason.FAILED, 0),)


def test_records_the_emit_function_raises_on_are_said_in_one_line_with_the_first_ones_traceback(
    producer: Producer, caplog: pytest.LogCaptureFixture
) -> None:
    """As a bolt's inputs (`acker.trouble`): a line a record flooded the log of a spout whose function raised on
    every record, and said no traceback."""

    def emit(record: Message, emitter: Emitter) -> None:
        raise ValueError(f"cannot parse {record.value()!r}")

    spout = _starting_spout(producer, emit, 1)
    with caplog.at_level(logging.WARNING, logger="acker.spout"):
        for offset in range(5):
            spout._start(Message(topic="src", partition=0, offset=offset, value=b"x"), time.monotonic())
        spout._start(Message(topic="src", partition=0, offset=5, value=b"y"), time.monotonic(), unreadable=True)
        spout._start_trouble.check(spout.counters)
        spout._start_trouble.check(spout.counters)  # within the interval: nothing more to say
    assert spout.counters["emit_errors"] == 6 and len(spout._direct) == 6
    [said] = caplog.records
    assert "emit errors 6, unreadable headers 1" in said.getMessage() and "src/0/0" in said.getMessage()
    assert said.exc_info is not None and "cannot parse b'x'" in caplog.text and "Traceback" in caplog.text


@pytest.mark.parametrize(("emits", "outcome"), [(0, "FAILED"), (1, "ACK")])
def test_an_untracked_record_the_emit_function_raises_on_is_failed_only_if_nothing_of_it_was_sent(
    producer: Producer, emits: int, outcome: str
) -> None:
    """Failed, it is replayed and then dead-lettered rather than dropped; but a replay would send again what was sent
    of it, and untracked mode is at-most-once downstream: a record taken in part is done."""

    def emit(record: Message, emitter: Emitter) -> None:
        for _ in range(emits):
            emitter.emit("out", b"part")
        raise ValueError("cannot parse the rest")

    spout = _starting_spout(producer, emit, 1, tracked=False)
    told: list[tuple[str, str]] = []
    spout._on_outcome = lambda msg_id, outcome: told.append((msg_id, outcome))
    spout._start(Message(topic="src", partition=0, offset=9, value=b"x"), time.monotonic())
    assert spout._direct == [(outcome, 0, "src/0/9", 0)] and spout.counters["emit_errors"] == 1
    assert told == [("src/0/9", outcome)]  # Storm's ack or fail, at once: no tree to wait for
    reasons = {"src/0/9": "spout s: ValueError: cannot parse the rest"} if outcome == "FAILED" else {}
    assert spout._direct_reasons == reasons
    assert spout.acker._batches == [None]  # untracked: nothing for the acker


def test_on_outcome_tells_a_replay_under_its_origin_and_a_record_read_again_for_its_new_tree_only(
    producer: Producer,
) -> None:
    """Each attempt of a record is told under the record's own coordinates, whatever topic the attempt was read from
    (and its emit function given them, `Emitter.source`);
    a record read again after a rebalance that now starts no tree (nothing emitted) is told that, and its old tree,
    pending no more, neither holds room nor is told when its outcome comes."""
    emits = {b"tree": 1, b"none": 0}
    sources: list[str] = []

    def emit(record: Message, emitter: Emitter) -> None:
        sources.append(emitter.source)
        for _ in range(emits[record.value() or b""]):
            emitter.emit("out", b"part")

    spout = _starting_spout(producer, emit)
    told: list[tuple[str, str]] = []
    spout._on_outcome = lambda msg_id, outcome: told.append((msg_id, outcome))
    spout._held, spout._replay_topic, spout._replay_of = {}, "acker.replay.s", b"src/"
    origin: list[tuple[str, str | bytes | None]] = [("acker.replay.origin", b"src/0/7")]
    spout._take([Message(topic="acker.replay.s", partition=0, offset=3, value=b"none", headers=origin),
                 Message(topic="acker.replay.s", partition=0, offset=4, value=b"tree", headers=origin),
                 Message(topic="src", partition=0, offset=8, value=b"tree"),
                 Message(topic="src", partition=0, offset=9, value=b"none", headers=origin),
                 Message(topic="acker.replay.s", partition=0, offset=5, value=b"none",
                         headers=[("acker.replay.origin", b"")])], 0)  # fmt: skip
    assert told == [("src/0/7", "ACK"), ("src/0/9", "ACK"), ("acker.replay.s/0/5", "ACK")]
    assert list(spout.pending) == ["acker.replay.s/0/4", "src/0/8"]
    # What the emit function may key a sink's writes on; an origin header on a source record (copied from another
    # pipeline's replay topic) is not taken, nor an empty one (told and emitted under the record's own coordinates).
    assert sources == ["src/0/7", "src/0/7", "src/0/8", "src/0/9", "acker.replay.s/0/5"]
    spout._tell("acker.replay.s/0/4", "FAILED")  # as its outcome is read (test_spout_outcomes)
    assert told[-1] == ("src/0/7", "FAILED") and spout._told_as == {}
    old = spout.pending["src/0/8"]
    emits[b"tree"] = 0  # read again, it emits nothing now
    spout._start(Message(topic="src", partition=0, offset=8, value=b"tree"), time.monotonic())
    assert told[-1] == ("src/0/8", "ACK") and "src/0/8" not in spout.pending and old not in spout._started_at


@pytest.mark.parametrize("basic", [True, False])
def test_an_input_a_bolts_function_raises_on_is_failed_saying_why(producer: Producer, basic: bool) -> None:
    """The fail carries the stage and the exception (`acker.fail_reasons`) to the record's dead letter; an explicit
    fail says what its caller gives."""

    def parse(message: BoltInput, _collector: Any) -> None:
        raise ValueError(f"cannot parse {message.value!r}")

    bolt = _processing_bolt(producer, parse, 1, basic=basic)
    root = SpoutTree("s", "src/0/1", IdGenerator(6)).emit()
    bolt._process(Message(topic="split", partition=0, offset=4, value=b"a b", headers=with_ids(None, root)))
    batch = bolt.acker._batches[0]
    assert batch is not None and batch.reasons == {root.edges[0][0]: "bolt split: ValueError: cannot parse b'a b'"}
    assert bolt.counters["failed"] == 1 and bolt.counters["errors"] == 1
    other = SpoutTree("s", "src/0/2", IdGenerator(7)).emit()
    message = BoltInput(b"v", None, [], "split", 0, 5, InputTuple(other, IdGenerator(8)))
    bolt._collector.fail(message, "x" * 1000)
    assert len(batch.reasons[other.edges[0][0]]) == 500
    # Whatever it is given, the fail is sent: a reason that raised after the input was settled left its tree to
    # time out. An exception as a reason, a message of undecodable bytes (lone surrogates) in it:
    third = SpoutTree("s", "src/0/3", IdGenerator(9)).emit()
    bad = ValueError(b"\xff".decode("utf-8", "surrogateescape"))
    bolt._collector.fail(BoltInput(b"v", None, [], "split", 0, 6, InputTuple(third, IdGenerator(10))), bad)
    assert batch.reasons[third.edges[0][0]] == "\\udcff"
    bolt.acker.flush(0)  # encoded without an error


@pytest.mark.parametrize(
    "bad",
    [
        {"value": 123},
        {"key": ["k"]},
        {"topic": ""},
        {"headers": [("h", 5)]},
        {"headers": "h=v"},
    ],
)
def test_a_child_of_a_type_the_producer_refuses_fails_its_input_before_any_child_is_sent(
    producer: Producer, bad: dict[str, Any]
) -> None:
    """Children are sent once the function returns: one refused then, the children before it were sent already,
    orphans of a failed input (processed downstream, and again at its replay). Refused at its emit, it is the
    function's exception."""

    def split(message: BoltInput, collector: BasicCollector) -> None:
        collector.emit("words", b"first")
        collector.emit(**{"topic": "words", "value": b"second", **bad})

    bolt = _processing_bolt(producer, split, 1)
    root = SpoutTree("s", "src/0/1", IdGenerator(6)).emit()
    bolt._process(Message(topic="split", partition=0, offset=4, value=b"a b", headers=with_ids(None, root)))
    assert (bolt.counters["emitted"], bolt.counters["failed"], bolt.counters["errors"]) == (0, 1, 1)  # no child


@pytest.mark.parametrize("basic", [True, False])
def test_a_bolt_counts_the_time_its_function_takes_while_it_runs_and_once_it_returned(
    producer: Producer, basic: bool
) -> None:
    """Storm's execute latency and capacity (`acker.stage_metrics`): the time on each input, summed."""
    seen_busy: list[float] = []

    def slow(message: BoltInput, collector: Any) -> None:
        time.sleep(0.02)
        seen_busy.append(bolt.busy_s())  # as a scrape sees a function still running
        if not basic:
            collector.ack(message)

    bolt = _processing_bolt(producer, slow, basic=basic)
    root = SpoutTree("s", "src/0/1", IdGenerator(6)).emit()
    bolt._process(Message(topic="split", partition=0, offset=4, value=b"a b", headers=with_ids(None, root)))
    assert seen_busy[0] >= 0.02 and bolt.execute_s >= seen_busy[0] and bolt.busy_s() == bolt.execute_s


def test_a_bolt_times_each_input_from_taking_it_to_its_ack_and_not_a_failed_one(producer: Producer) -> None:
    """Storm's process latency (`acker.stage_metrics`): an explicit bolt that holds an input (a join waiting for its
    other side) acks it long after its function returned; the time until the ack counts, the wait for input between
    the two does not count as executing. A basic bolt acks as its function returns: within its execute time."""
    held: list[tuple[BoltInput, Any]] = []

    def hold_first(message: BoltInput, collector: Any) -> None:
        if message.offset == 4:
            held.append((message, collector))
        elif message.offset == 5:
            collector.fail(message)
        else:
            time.sleep(0.01)
            collector.ack(held[0][0])
            collector.ack(message)

    bolt = _processing_bolt(producer, hold_first, basic=False)
    for offset in (4, 5):
        root = SpoutTree("s", f"src/0/{offset}", IdGenerator(offset)).emit()
        bolt._process(Message(topic="split", partition=0, offset=offset, value=b"a", headers=with_ids(None, root)))
    assert (bolt.process_count, bolt.process_s) == (0, 0.0)  # one held, one failed
    time.sleep(0.2)
    root = SpoutTree("s", "src/0/6", IdGenerator(6)).emit()
    bolt._process(Message(topic="split", partition=0, offset=6, value=b"a", headers=with_ids(None, root)))
    assert bolt.process_count == 2 and bolt.counters["acked"] == 2 and bolt.counters["failed"] == 1
    assert bolt.process_s >= 0.21 + 0.01 and bolt.execute_s < 0.2  # the held input's 210 ms and more, the last's 10

    def split(message: BoltInput, collector: BasicCollector) -> None:
        time.sleep(0.01)

    basic = _processing_bolt(producer, split)
    root = SpoutTree("s", "src/0/7", IdGenerator(7)).emit()
    basic._process(Message(topic="split", partition=0, offset=7, value=b"a", headers=with_ids(None, root)))
    assert basic.process_count == 1 and 0.01 <= basic.process_s <= basic.execute_s


def test_a_basic_bolt_takes_every_child_the_producer_takes() -> None:
    """Headers as lists of pairs (read from JSON), as a mapping, str values and keys: the producer takes them, and
    so does a basic bolt's emit."""
    collector = BasicCollector()
    collector.emit("words", "a", "k", [["trace", "abc"], ("n", None)])  # type: ignore[arg-type, list-item]
    collector.write("counts", b"1", None, {"trace": b"abc"})
    assert [child[3] for child in collector.children] == [[("trace", "abc"), ("n", None)], [("trace", b"abc")]]
