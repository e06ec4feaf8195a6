"""The bolt: processes an input topic, emits anchored messages downstream, and acks or fails its inputs.

Storm's reliability API over Kafka. Each input message carries its tree ids in the anchor header
(`acker.headers`); the bolt calls the user's function with the message and a collector:

- **Basic** (the default, Storm's BasicBolt): ``emit`` anchors each child to the input; the input is acked when the
  function returns and failed if it raises. Children are sent only after the function returned, so a failed input
  leaves no orphan children behind (a child of a type the producer refuses raises at its ``emit``; one the broker
  refuses later, too large for its topic say, fails the input's trees once those before it are sent).
- **Explicit** (``basic=False``, for joins and aggregations): ``emit(..., anchors=[in1, in2])`` anchors a child to
  any inputs (multi-anchoring: it joins every root of every input) or to none (unanchored); ``ack``, ``fail`` and
  ``reset_timeout`` may be called later, from later calls of the function. If the function raises, the input is
  failed unless it was acked or failed already (inputs held from earlier calls are the function's to settle).

Records that leave the pipeline (a sink's output: no stage reads and acks them) are written with ``write`` in
either mode, anchored as ``emit`` would: their trees complete only once they are written. They go without the
anchor header through a second producer, made on the first such record, that reports every delivery: a delivery
report acks the record's edges, a failed one fails its trees. An unanchored ``emit`` is not part of any tree: if it
cannot be written, the source record is acked all the same.

In either mode an exception from the function is counted (``errors``) and does not stop the bolt: a record that
always raises is failed at every replay until the replay job dead-letters it, rather than crash-looping the stage.
The fail says why (the bolt and the exception: `acker.fail_reasons`), and the dead letter shows it; an explicit
``fail`` may give its own reason.
A `ProtocolError` from an explicit bolt's function (acking an input twice, anchoring to a settled one) is a bug in the
function, not in its input: it stops the bolt, as it would stop a Storm worker.

Inputs an explicit bolt holds (a join's first side, an open window) belong to their input partition. When the
partition goes to another process of the stage (a rebalance, this one closing), its later inputs go there, a held
input's partner among them, and the held input is never settled here: its tree times out. ``on_revoke`` tells the
function which partitions go, before their offsets are committed, so that it fails what it holds of them: their
trees are nacked at once, and their source records replayed (after the replay job's backoff) to the new owner
rather than after the timeout (the join example does so). Partitions lost (this process was taken for dead) are
not told: the new owner may already be settling what this one holds. ``on_tick`` (Storm's tick tuples) calls the
function's timer every ``tick_s`` with the collector, also while no input comes: what it holds until something
happens (a batch written in bulk, a window that closes, a side held too long) is settled on time on a quiet input.

Acks are combined (one per root per input: the input's edge XOR its children's edges) and batched per acker
partition with a short linger (`AckerClient`). An input without a valid anchor header is processed as unanchored
and counted, never a crash; so is one whose header is malformed, and one whose headers cannot be read at all (a
header name that is not UTF-8: counted ``unreadable_headers`` too; its function sees no headers).

Offsets: the bolt commits its own input offsets every ``commit_interval_s`` after flushing what it produced (its
children and its acks): the offset after the last input its function was called on and returned (or raised), never
the consumer's position, which is past every record of the batch being processed. So a bolt whose loop stops (a
`ProtocolError`, a ``SystemExit`` from the function) commits, as it closes, only what it processed, and its
successor processes the rest. The guarantee comes from the tree, not from these commits: on a crash, inputs that were
read but not acked (or whose acks were not delivered) are processed again by the successor, and their trees complete
unless children of the first processing got out without its ack (their edges stay in the word): those trees time
out, and the spout's records are replayed; so do the trees not yet complete of inputs acked since the last commit
(their acks delivered: processed again, each puts its input's edge back in the word). Inputs an explicit bolt holds
past its function's return (a join's side, a batch not yet written) are committed all the same: after a crash they
are not read again, and their trees time out. A child that cannot be delivered fails its trees, and so does a batch
of acks that cannot be delivered (librdkafka has retried it): those trees could not complete.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from acker import fail_reasons
from acker.config import ServiceConfig
from acker.core.ids import IdGenerator
from acker.core.tuple_tree import UNTRACKED, InputTuple, TupleIds, anchored
from acker.errors import ProtocolError
from acker.headers import HeaderList, Headers, pairs, read_headers, split
from acker.kafka.acker_client import AckerClient, OutputTopics, partition_lookup
from acker.kafka.client_log import run_turns
from acker.kafka.clients import (
    REBALANCING,
    ProducerFailedError,
    answering,
    consume_available,
    partition_count,
    partitions_named,
    readable,
    release,
    written_at_ms,
)
from acker.kafka.held_reads import WatchedConsumer
from acker.topics import output_refusal
from acker.trouble import TroubleReport

log = logging.getLogger("acker.bolt")


@dataclass
class BoltInput:
    """One input message: its payload and coordinates, and its place in its trees."""

    value: bytes | None
    key: bytes | None
    headers: HeaderList
    topic: str
    partition: int
    offset: int
    tuple: InputTuple = field(repr=False)
    timestamp_ms: int | None = None  # the record's Kafka timestamp (when its producer wrote it), None when it has none
    # When the bolt took it (`time.perf_counter`), for the time until its ack (Storm's process latency); None for an
    # input the bolt did not read (one made by hand), whose ack is not timed.
    taken_at: float | None = field(default=None, repr=False, compare=False)


class Collector:
    """Explicit API: emit anchored to any inputs, then ack or fail each input exactly once."""

    def __init__(self, bolt: Bolt) -> None:
        self._bolt = bolt

    def emit(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        anchors: Sequence[BoltInput] = (),
    ) -> None:
        ids = anchored([a.tuple for a in anchors]) if anchors else UNTRACKED
        self._bolt._produce_child(topic, value, key, headers, ids)

    def write(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        anchors: Sequence[BoltInput] = (),
    ) -> None:
        """Write a record out of the pipeline (a sink's output, which no stage reads and acks): anchored to
        ``anchors``, whose trees complete only once it is written (see the module's note)."""
        ids = anchored([a.tuple for a in anchors]) if anchors else UNTRACKED
        self._bolt._write(topic, value, key, headers, ids)

    def ack(self, message: BoltInput) -> None:
        bolt = self._bolt
        bolt.acker.send_acks(message.tuple.ack_values())
        bolt.counters["acked"] += 1
        if message.taken_at is not None:
            bolt.process_s += time.perf_counter() - message.taken_at
            bolt.process_count += 1

    def fail(self, message: BoltInput, reason: str | None = None) -> None:
        """Fail the input: its trees are nacked ``FAILED`` at once. ``reason`` (optional, cut to 500 characters)
        travels with the fail to the record's replays and dead letter (``acker.replay.detail``)."""
        why = fail_reasons.cut(str(reason)) if reason else None  # before the input is settled: nothing may raise after
        self._bolt.acker.send_all(message.tuple.fail(), why)
        self._bolt.counters["failed"] += 1

    def reset_timeout(self, message: BoltInput) -> None:
        self._bolt.acker.send_all(message.tuple.reset_timeout())


class BasicCollector:
    """Basic API: every child is anchored to the input being processed; acking is automatic.

    Only while the function runs: the children are sent and the input acked when it returns, so a child emitted
    later (a collector kept for a callback) would be lost; it raises `ProtocolError` instead."""

    def __init__(self) -> None:
        self.children: list[tuple[str, bytes | None, bytes | None, Headers | None, bool]] = []  # ..., written out
        self.closed = False

    def emit(self, topic: str, value: bytes | None, key: bytes | None = None, headers: Headers | None = None) -> None:
        if self.closed:
            raise ProtocolError("a basic bolt emits while its function runs: the input was acked when it returned")
        self.children.append((topic, value, key, _taken(topic, value, key, headers), False))

    def write(self, topic: str, value: bytes | None, key: bytes | None = None, headers: Headers | None = None) -> None:
        """`Collector.write`: a record out of the pipeline; the input's trees complete once it is written."""
        if self.closed:
            raise ProtocolError("a basic bolt writes while its function runs: the input was acked when it returned")
        self.children.append((topic, value, key, _taken(topic, value, key, headers), True))


def _taken(topic: object, value: object, key: object, headers: Headers | None) -> HeaderList:
    """The headers of a child, as a list; `TypeError` for a child the producer would refuse for its types, raised
    while the function runs: its children are sent after it returns, and one refused then left those before it sent
    (orphans of a failed input, processed downstream and again at its replay)."""
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"a child's topic must be a topic's name, not {topic!r}")
    for name, part in (("value", value), ("key", key)):
        if part is not None and not isinstance(part, bytes | str):
            raise TypeError(f"a child's {name} must be bytes, str or None, not {type(part).__name__}")
    taken: HeaderList = []
    for pair in pairs(headers):  # any pair: a list too (headers read from JSON), as the producer takes them
        if not (isinstance(pair, Sequence) and not isinstance(pair, str | bytes) and len(pair) == 2
                and isinstance(pair[0], str) and (pair[1] is None or isinstance(pair[1], bytes | str))):  # fmt: skip
            raise TypeError(f"a child's headers must be (str, bytes | str | None) pairs, not {pair!r}")
        taken.append((pair[0], pair[1]))
    return taken


BasicFunction = Callable[[BoltInput, BasicCollector], None]
ExplicitFunction = Callable[[BoltInput, Collector], None]
# An explicit bolt's inputs of these (topic, partition) pairs go to another process from now on (`Bolt`'s on_revoke).
RevokeFunction = Callable[[set[tuple[str, int]], Collector], None]
# These (topic, partition) pairs may be another process's already (`Bolt`'s on_lost): for the function to forget
# what it knows of them, not to settle anything. Not what it holds: given back soon, a partition's inputs processed
# before are not handed to it again (`Bolt._read_again`).
LostFunction = Callable[[set[tuple[str, int]]], None]
# These (topic, partition) pairs came to this process (`Bolt`'s on_assign), called inside the consumer's callback,
# before any of their inputs: for bookkeeping only (no Kafka call on the bolt's consumer from there).
AssignFunction = Callable[[set[tuple[str, int]]], None]
# Called every ``tick_s`` in the bolt's thread, between inputs and while none come (`Bolt`'s on_tick, Storm's tick
# tuples): for an explicit bolt to settle what it holds on time (a batch written in bulk, a window closed).
TickFunction = Callable[[Collector], None]


class Bolt:
    def __init__(
        self,
        config: ServiceConfig,
        input_topic: str,
        group: str,
        function: BasicFunction | ExplicitFunction,
        *,
        basic: bool = True,
        commit_interval_s: float = 1.0,
        ids: IdGenerator | None = None,
        on_revoke: RevokeFunction | None = None,
        on_lost: LostFunction | None = None,
        on_assign: AssignFunction | None = None,
        output_topics: Iterable[str] = (),
        on_tick: TickFunction | None = None,
        tick_s: float = 1.0,
    ) -> None:
        """``output_topics``: the topics the function emits or writes to, so that the producers' record batches fit
        the smallest ``max.message.bytes`` among them (`fitted_batch_size`): the broker refuses a batch larger than
        its topic takes whole, and every child in it failed its trees, at every replay. A topic written and not
        named is checked at its first record, and one that takes smaller batches is said in an error line
        (`OutputTopics.check`).

        ``on_revoke`` (explicit bolts): told which input partitions go to another process (a rebalance, this bolt
        closing) before the bolt commits them, with the collector, so that the function settles the inputs of theirs
        it holds. Their later inputs, a held one's partner among them, go to the new owner; failed now, the held
        ones are nacked at once and replayed to it, where they would wait for their timeout (module docstring). Not
        called for partitions lost (`_on_lost`), which ``on_lost`` is told of (without a collector: nothing may be
        settled of them), for a function that keeps what it knows per partition. ``on_assign`` is told which input
        partitions came here, before their first input (the word count reads the counts its new partitions' words
        were last written with once for all of them, not once per partition).

        ``on_tick`` (explicit bolts; Storm's tick tuples) is called with the collector every ``tick_s`` seconds in the
        bolt's thread, between inputs and while none come: a bolt that holds inputs until something happens (a batch
        written to a database in bulk, then acked; a window closed) settles them on time when its input goes quiet,
        rather than at its next input or after their trees timed out. An exception from it is counted as the
        function's (``errors``); the bolt goes on. Its time counts as executing (`busy_s`), its inputs' work."""
        if basic and (on_revoke is not None or on_tick is not None):
            raise ValueError("on_revoke and on_tick are for explicit bolts (basic=False): a basic bolt holds no input")
        if not tick_s > 0:
            raise ValueError(f"tick_s must be above 0, not {tick_s!r}")
        self.config, self.input_topic, self.group = config, input_topic, group
        self._function = function
        self._revoked = on_revoke
        self._lost = on_lost
        self._assigned = on_assign
        self._ticked, self.tick_s = on_tick, tick_s
        self._next_tick = time.monotonic() + tick_s
        self.basic = basic
        self.commit_interval_s = commit_interval_s
        self._ids = ids or IdGenerator()
        self.counters: Counter[str] = Counter()
        # Seconds spent on the inputs counted ``processed``, summed (Storm's execute latency and capacity, exported by
        # `acker.stage_metrics` with the input in hand: `busy_s`): from reading an input's headers to its function's
        # return, and for a basic bolt on to its children sent to the producer and its ack to the acker client. Not
        # the waits for input, nor the commits and flushes between batches.
        self.execute_s = 0.0
        self._executing_since: float | None = None  # when the input in hand was taken (perf_counter), else None
        # Inputs acked and the seconds from taking each to its ack, summed (Storm's process latency): an explicit
        # bolt's ack may come long after its function returned (a join holding one side), a basic bolt's comes as
        # it returns. Failed inputs are not counted.
        self.process_s = 0.0
        self.process_count = 0
        self._next_commit = time.monotonic() + commit_interval_s
        self._processed: dict[tuple[str, int], int] = {}  # (topic, partition) -> the offset after the last processed
        # (topic, partition) lost -> the offset after the last processed here, and until when inputs below it, read
        # again if it comes back, are passed over (`_read_again`)
        self._lost_at: dict[tuple[str, int], tuple[int, float]] = {}
        # First: a login refused said as such within seconds, a cluster away within 10 s.
        answering(config.client(), config.acker_topic)
        fix = "name the topic in Bolt(..., output_topics=...)"
        refused = functools.partial(output_refusal, config)
        self._outputs = OutputTopics(
            config.client(), f"bolt {group}", fix, output_topics, None, internal=[config.acker_topic], refused=refused
        )
        # Every delivery callback here acts on failures only (`ServiceConfig.stage_producer`).
        self.producer = Producer(config.stage_producer(**self._outputs.fitted))
        self._sink: Producer | None = None  # for records written out of the pipeline, made on the first (`_write`)
        self._closed = False
        self.acker = AckerClient(
            self.producer,
            config.acker_topic,
            partition_count(config.client(), config.acker_topic),
            linger_s=config.ack_linger_ms / 1000,
        )
        # Cooperative rebalancing: when a process of the stage dies or joins, the others keep their partitions and
        # go on, instead of all stopping until the dead member's session times out.
        self.consumer = WatchedConsumer(
            config.stream_consumer(
                **{
                    "group.id": group,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "partition.assignment.strategy": "cooperative-sticky",
                }
            ),
            config.open_transaction_warn_s,
        )
        self.consumer.subscribe(
            [input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self.acker.watch_partitions(partition_lookup(self.producer, config.acker_topic))
        # Unanchored inputs are not trouble: an untracked pipeline's are all unanchored.
        self._trouble = TroubleReport(log, f"bolt {group}", ("invalid_anchor_headers", "unreadable_headers", "errors",
                                                             "child_delivery_failures"))  # fmt: skip
        self._collector = Collector(self)

    def run(self, stop: threading.Event) -> None:
        run_turns(stop, lambda: self.step(0.1), self.close)

    def close(self) -> None:
        """Commit what is processed once delivered (30 s at the most), leave the group (records written out and still
        not delivered are dropped then, their trees failed: `_drop_unwritten`), and free the producers if
        they delivered everything (`release`): a freed producer takes nothing more (an ack, an emit or `flush` after
        the close raises `RuntimeError`). A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            try:
                self._commit()
            finally:  # a producer failed for good (the commit's flush raises) still leaves the group now, not at its
                self.consumer.close()  # session's timeout, and an explicit bolt's on_revoke is told
            if self.acker.lingering():  # the fails of records written out that the close's revoke dropped
                self.acker.flush(5)
            for producer in (self._sink, self.producer):
                if producer is not None:
                    release(producer, f"bolt {self.group}")
        finally:  # what came since the last line (close's flush too), whether the close failed or not
            self._trouble.check(self.counters, at_once=True)
        log.info(
            "bolt %s stopped: %s, %.1f s executing", self.group, dict(sorted(self.counters.items())), self.execute_s
        )

    def step(self, timeout_s: float) -> int:
        # Not waiting longer for input than acks (or records written out, whose delivery acks them) linger.
        timeout_s = self.acker.input_wait(timeout_s, waiting=self._sink is not None and len(self._sink) > 0)
        ticked = self._ticked
        if ticked is not None:  # nor longer than the next tick
            timeout_s = min(timeout_s, max(0.0, self._next_tick - time.monotonic()))
        records = consume_available(self.consumer, 500, timeout_s)
        for record in records:
            if readable(record, log, "consumer"):
                self._process(record)
            if self.acker.poll_due():  # a slow function: acks go out at their linger, not after the whole batch
                self._poll_sink()
            if ticked is not None and time.monotonic() >= self._next_tick:  # on time, not after the whole batch
                self._tick(ticked)
        self._poll_sink()
        if ticked is not None and time.monotonic() >= self._next_tick:
            self._tick(ticked)
        self.acker.poll()
        if time.monotonic() >= self._next_commit:
            self._commit()
        return len(records)

    def _tick(self, function: TickFunction) -> None:
        """Call ``on_tick``, timed as the inputs are; the next tick is ``tick_s`` after this one began (a tick that
        takes longer than that is followed at once, never by a burst of those missed)."""
        started = self._executing_since = time.perf_counter()
        self._next_tick = time.monotonic() + self.tick_s
        try:
            function(self._collector)
        except (ProtocolError, ProducerFailedError):  # a bug in the function, a producer that takes no more: it stops
            raise
        except Exception as error:
            self._raised_in("tick", error)
        finally:
            self.execute_s += time.perf_counter() - started
            self._executing_since = None

    def _poll_sink(self) -> None:
        if self._sink is not None:
            self._sink.poll(0)  # its delivery reports ack what was written

    def _process(self, record: Message) -> None:
        topic, partition, offset = record.topic() or "", record.partition() or 0, record.offset() or 0
        if not self._read_again(topic, partition, offset):
            started = self._executing_since = time.perf_counter()
            try:
                self._handle(record, topic, partition, offset, started)
            finally:
                self.execute_s += time.perf_counter() - started
                self._executing_since = None
        self._processed[(topic, partition)] = offset + 1

    def busy_s(self) -> float:
        """`execute_s` and the time on the input in hand so far, for a reader in another thread: a function that
        hangs shows as busy, where `execute_s` alone grows once it returns. Read in this order, an input that ends
        meanwhile is left out of this answer (lower than one given before by at most that input's time), never
        counted twice."""
        total, since = self.execute_s, self._executing_since
        return total if since is None else total + max(0.0, time.perf_counter() - since)

    def _read_again(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the input at ``offset`` was processed here before its partition was lost (or revoked before its
        offsets could be committed), and comes again now that it is back (from the offset committed before: a session
        that timed out for a moment, the partition given back by the sticky assignor). Its acks went out once (or an
        explicit function holds it still); processed again, its edge would be acked twice, the XOR would never reach
        zero, and its tree would time out and be replayed. Passed over for twice the longest a tree lives from the
        loss (`_pass_over_s`): after that its tree is decided anyway, and a topic made again (from offset 0) is read."""
        lost = self._lost_at.get((topic, partition))
        if lost is None:
            return False
        below, until = lost
        if offset >= below or time.monotonic() >= until:
            del self._lost_at[(topic, partition)]
            return False
        self.counters["read_again"] += 1
        return True

    def _handle(self, record: Message, topic: str, partition: int, offset: int, taken_at: float) -> None:
        raw = read_headers(record)
        headers: HeaderList
        if raw is None:  # a header name that is not UTF-8: no header can be read, the anchors neither
            ids, headers, invalid = UNTRACKED, [], True
            self.counters["unreadable_headers"] += 1
        else:
            ids, headers, invalid = split(raw)
        self.counters["processed"] += 1
        if invalid:
            self.counters["invalid_anchor_headers"] += 1
        if not ids.tracked:
            self.counters["unanchored_inputs"] += 1
        message = BoltInput(
            record.value(), record.key(), headers, topic, partition, offset, InputTuple(ids, self._ids),
            written_at_ms(record), taken_at,
        )  # fmt: skip
        if not self.basic:
            try:
                self._function(message, self._collector)  # type: ignore[arg-type]
            except ProtocolError as error:  # acking twice, anchoring to a settled input: the function's bug, not its
                if not message.tuple.finished:  # input's. The bolt stops; its input is failed, not left to time out,
                    self._collector.fail(message, self._reason(error))  # and counted as processed: its tree is
                self._processed[(topic, partition)] = offset + 1  # nacked, and replayed whole.
                raise
            except ProducerFailedError:  # a producer that takes no more records: no input's fault, the bolt stops
                raise
            except Exception as error:  # the input fails, unless it was acked or failed before the raise
                self._raised(message, error)
                if not message.tuple.finished:
                    self._collector.fail(message, self._reason(error))
            return
        collector = BasicCollector()
        try:
            self._function(message, collector)  # type: ignore[arg-type]
        except Exception as error:
            self._raised(message, error)
            self._collector.fail(message, self._reason(error))
            return
        finally:
            collector.closed = True
        try:
            for to, value, key, child_headers, out in collector.children:
                (self._write if out else self._produce_child)(to, value, key, child_headers, anchored([message.tuple]))
        except ProducerFailedError:  # a producer that takes no more records: no input's fault, the bolt stops
            raise
        except Exception as error:  # a child the client does not take (a value that is not bytes): as if it raised
            self._raised(message, error)
            self._collector.fail(message, self._reason(error))
            return
        self._collector.ack(message)

    def _reason(self, error: Exception) -> str:
        """The reason a fail caused by ``error`` gives (`acker.fail_reasons`): the stage and the exception."""
        return fail_reasons.reason_of(error, f"bolt {self.group}")

    def _raised(self, message: BoltInput, error: Exception) -> None:
        self._raised_in(f"{message.topic}/{message.partition}/{message.offset}", error)

    def _raised_in(self, where: str, error: Exception) -> None:
        self.counters["errors"] += 1
        self._trouble.example(where, error)  # said with the next count, traceback included
        log.debug("%s raised %r", where, error)

    def _produce_child(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Headers | None, ids: TupleIds
    ) -> None:
        if topic not in self._outputs.seen:
            self._outputs.check(topic, self.counters)
        self.acker.produce_anchored(topic, value, key, headers, ids, on_failure=self._child_failed)
        self.counters["emitted"] += 1

    def _write(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Headers | None, ids: TupleIds
    ) -> None:
        if topic not in self._outputs.seen:
            self._outputs.check(topic, self.counters)
        if not ids.tracked and self._sink is None:  # nothing to ack: the stage's own producer (an untracked bolt's)
            self.acker.produce_anchored(topic, value, key, headers, ids, on_failure=self._child_failed)
            self.counters["written"] += 1
            return
        # Once there is a sink producer, every record written goes through it, untracked ones too (an input without
        # valid anchors): one producer keeps a key's records in the order written (a word's counts).
        if self._sink is None:
            # Untracked records written before went through the stage's producer: delivered first, they cannot land
            # after the records of their keys written through the sink's from now on.
            if left := self.producer.flush(30):
                log.warning("%d records written before the sink producer was made are not delivered after 30 s: a "
                            "key's records may land out of the order written", left)  # fmt: skip
            self._sink = Producer(self.config.sink_producer(**self._outputs.fitted))
        self.acker.produce_anchored(
            topic, value, key, headers, ids, on_failure=self._child_failed, written_by=self._sink
        )
        self.counters["written"] += 1

    def _child_failed(self, _error: KafkaError) -> None:
        self.counters["child_delivery_failures"] += 1

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions came here (the consumer assigns them itself after this returns): said, as a spout says its own
        (a bolt said nothing from its start until its first report or its stop: had it joined its group?)."""
        if partitions:  # a cooperative rebalance may give nothing
            log.info("bolt %s: assigned %s", self.group, partitions_named(partitions))
        self._tell("assign", self._assigned, partitions)

    def _tell(self, hook: str, function: AssignFunction | None, partitions: list[TopicPartition]) -> None:
        """Tell ``function`` (the bolt's ``on_<hook>``) which partitions came or went; what it raises is counted as
        the function's error, never raised out of the consumer's callback."""
        if function is not None and partitions:
            try:
                function({(tp.topic, tp.partition) for tp in partitions})
            except Exception as error:
                self._raised_in(f"on_{hook} of {partitions_named(partitions)}", error)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:  # said as assignments are: which process holds which partitions, from its log alone
            log.info("bolt %s: revoked %s", self.group, partitions_named(partitions))
        bug: ProtocolError | None = None
        if self._revoked is not None and partitions:
            try:
                self._revoked({(tp.topic, tp.partition) for tp in partitions}, self._collector)
            except ProtocolError as error:  # settling an input twice: the function's bug, raised out of consume
                bug = error  # once the partitions are committed: it stops the bolt as the function's own would
            except Exception as error:  # the held inputs it did not settle time out
                self._raised_in(f"on_revoke of {partitions_named(partitions)}", error)
        try:
            self._commit()
        except Exception:
            if bug is not None:  # the cause of the stop, the commit's failure its context
                raise bug  # noqa: B904
            raise
        finally:  # whatever was not committed is its next owner's: never committed from here later (`close`)
            self._mark_read(partitions)
            self._drop_unwritten("revoked", partitions)  # the commit's flush left them
        if bug is not None:
            raise bug

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Taken for dead (its session timed out, or it polled too late): the partitions may be another process's
        already, which reads their uncommitted inputs again, held ones among them, and may settle them first. So
        nothing is committed (it would be refused) and ``on_revoke`` is not called: a fail now could decide a tree
        the new owner is about to complete. What the function holds of them is settled as before (the join's
        housekeeping fails it once its tree may have expired)."""
        if partitions:
            log.warning(
                "bolt %s: lost %s (taken for dead: nothing committed)", self.group, partitions_named(partitions)
            )
        self._mark_read(partitions)
        self._drop_unwritten("lost", partitions)
        self._tell("lost", self._lost, partitions)

    def _drop_unwritten(self, how: str, partitions: list[TopicPartition]) -> None:
        """Records written out that are not delivered yet, once ``partitions`` go (lost, or revoked with the commit's
        flush timed out: a broker away): delivered later, they would land after the next owner read what was written
        (the word count reads each word's last count and counts on from it: a late count of the old owner's would
        become the word's last, below the new owner's). So they are purged, and each fails its trees
        (`AckerClient.produce_anchored`): their source records are replayed, and counted again, too high rather than
        too low. The sink's records of the partitions still here go too (one producer for all): their trees fail
        alike. A librdkafka consumer may take its partitions for lost while the broker is away (its session ran out
        without an answer from the coordinator), before the records could go; one that learns it only once the broker
        is back may find them delivered already, unless they were held past a tree's life
        (`ServiceConfig.sink_producer` gives them up then). Not a fence (the word count's docstring)."""
        sink = self._sink
        if sink is None or not len(sink):
            return
        # A purge is no barrier: records produced just after it were purged too, now and then (librdkafka 2.16), and
        # the partitions still here go on writing. So the purged producer is let go, and the next record written
        # out makes a new one.
        self._sink = None
        failed = self.counters["child_delivery_failures"]
        sink.purge(in_queue=True, in_flight=True, blocking=True)
        sink.flush(5)  # their delivery reports (and those of records delivered before): each fails its trees
        release(sink, f"bolt {self.group}")
        if dropped := self.counters["child_delivery_failures"] - failed:
            self.counters["unwritten_dropped"] += dropped
            where = partitions_named(partitions)
            log.warning("bolt %s: %d record(s) written out and not delivered are dropped, their trees failed (to be "
                        "replayed; one without anchors is lost): %s %s", self.group, dropped, where,
                        "may be another process's now" if how == "lost" else "went to another process")  # fmt: skip

    def _mark_read(self, partitions: list[TopicPartition]) -> None:
        """Forget the offsets processed in ``partitions`` and not committed (lost, or a commit that could not be
        made), keeping where they end: given back, inputs below it are passed over (`_read_again`)."""
        until = time.monotonic() + self._pass_over_s()
        for tp in partitions:
            done = self._processed.pop((tp.topic, tp.partition), None)
            if done is not None:  # a mark of an earlier loss still in force may be further on
                before = self._lost_at.get((tp.topic, tp.partition), (done, until))[0]
                self._lost_at[(tp.topic, tp.partition)] = (max(done, before), until)

    def _pass_over_s(self) -> float:
        """Twice the longest a tree lives (a timeout and a tick: `ServiceConfig.tick_interval_s`), for an acker that
        lags behind its ticks."""
        return 2 * self.config.tree_lifetime_s

    def flush(self, timeout_s: float) -> int:
        """Deliver what was produced (records written out, acker batches, children) within ``timeout_s``; return
        how many are not. Each producer is flushed whatever the one before left undelivered; the sink first, whose
        delivery reports queue acks and fails."""
        deadline = time.monotonic() + timeout_s
        undelivered = self._sink.flush(timeout_s) if self._sink is not None else 0
        undelivered += self.acker.flush(max(0.0, deadline - time.monotonic()))
        return int(undelivered + self.producer.flush(max(0.0, deadline - time.monotonic())))

    def _commit(self) -> None:
        """Commit the offsets after the processed inputs, once everything produced for them is delivered."""
        self._next_commit = time.monotonic() + self.commit_interval_s
        self._trouble.check(self.counters)
        if self.flush(30):
            log.warning("undelivered messages: input offsets not committed")
            return
        if not self._processed:
            return
        offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in self._processed.items()]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as error:
            code = error.args[0].code() if isinstance(error, KafkaException) and error.args else None
            if code in REBALANCING:  # offsets kept: committed at the next commit, or by `_on_revoke` if they go
                log.info("input commit put off by a rebalance (%s): made at the next commit", error)
            else:
                log.warning("input commit failed: %s", error)
            return
        self._processed.clear()
