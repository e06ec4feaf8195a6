"""The acker service (`acker run`): the tracker over Kafka.

One consumer group reads the acker topic; each instance owns whole partitions, hence whole trees (every message
of a tree is on partition ``partition_of(anchor)``). Per owned partition a `PartitionState` applies the records
in order. Outcomes go to one topic per spout (``<outcome_prefix><spout>``) through an idempotent producer. Tick
records are appended by the owner of each partition and take effect when read back. The committed offset of a
partition is its recovery offset (`PartitionState.recovery_offset`), committed only after every outcome decided
before it has been delivered; a new owner replays from there. The commit's metadata says where the outcomes decided
after that offset lie (`acker.outcome_log`); the new owner reads them back before replaying, so that the replay
neither decides those trees again nor, for a tree the offset cuts in two, differently.

Records that cannot be read are copied to the dead-letter topic with headers saying why and where they came from,
counted, and skipped: one bad record never stops the service. The inits of a record that was read but holds an
invalid message are answered FAILED at once (`failing_inits`): their spouts replay them. An outcome record too large
for its topic is sent in halves (`_produce_outcome`); one that its topic refuses for good (it does not exist and
cannot be created, or one outcome is too large) goes to the dead-letter topic too. Any other failed delivery of an
outcome stops the service (`ServiceError`) before anything past it is committed; a restart replays and re-emits it.

The reasons fails give (`acker.fail_reasons`, a header of the acker record) are kept per partition until their trees
are decided, and go with the FAILED outcomes, by message id, in the outcome record's header; read again with the
log, they are rebuilt by a new owner as the trees are.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from acker import avro_longs, fail_reasons
from acker.columnar.block import Code, Kind, MessageBlock, OutcomeBlock, RecordSpans, join_msg_id
from acker.columnar.tracker import BlockTracker
from acker.config import ServiceConfig
from acker.core.messages import Ack, Init
from acker.core.tracker import Counters
from acker.delivery import DeliveryTracker
from acker.dlq import DLQ_KEPT_BYTES, cut_copy
from acker.errors import AckerError
from acker.headers import HeaderValue, read_headers
from acker.headers import first as first_header
from acker.kafka.acker_client import PARTITIONS_CHECK_S
from acker.kafka.client_log import RepeatFilter, reason_kind, repeats_held_back, say_held_back, serve_log_lines
from acker.kafka.clients import (
    NO_ANSWER,
    READ_TO_SETTINGS,
    REBALANCING,
    TOO_LARGE,
    KafkaClientError,
    RefusedLogin,
    TopicSpec,
    await_topics,
    committed_offsets,
    consume_available,
    create_topics,
    first_answer,
    kafka_error,
    log_bounds,
    produce,
    readable,
    refusal,
    release,
    topic_partitions,
)
from acker.kafka.decided import read_decided
from acker.kafka.held_reads import WatchedConsumer
from acker.metrics import LatencyHistogram, Snapshot
from acker.outcome_log import OutcomeLog, Starts, parse_metadata
from acker.partition import PartitionState, encode_tick
from acker.retries import ACKER_DLQ_REASON, Backoff
from acker.status import status_key
from acker.topics import outcome_topic, service_topics, spout_names
from acker.wire import (
    ANY_CONFIGURATION,
    OUTCOME_RECORD_MAX_BYTES,
    OUTCOMES_PER_RECORD,
    WIRE_REASONS,
    SpoutNames,
    WireError,
    check_block,
    decode_outcomes,
    encode_batch,
    encode_outcomes,
    parse_batch,
    split_outcomes,
)

FIRST_CONTACT_S = 30.0  # how long `AckerService.run` waits for Kafka's first answer before it gives up

log = logging.getLogger("acker.service")
# One line per reason every 30 s, with the number held back: a burst of foreign records (a producer pointed at the
# acker topic) logged a line each, thousands a second. Each is counted (`acker_dead_letters_total`).
_dead_letter_log = logging.getLogger("acker.service.dead_letters")
repeats_held_back(_dead_letter_log, RepeatFilter(kind=reason_kind))

# On outcome records: "<acker partition>/<first>-<last>", the offsets of the acker records that decided the first and
# the last outcome of the record (the service applies many acker records at once).
DECIDED_BY = "acker.decided-by"
_GROUP_MESSAGES = 1 << 16  # acker messages per tracker call, at most (unless one record holds more)
_PARALLEL_BYTES = 1 << 20  # records of a batch decided in parallel threads from this size on (~50,000 messages)
_STATUS_RECHECK_INTERVALS = 10  # a missing status topic is looked up again every this many status intervals
ACKER_TOPIC_RECHECK_S = 60.0  # how often a missing acker topic is looked for again, and said
# An outcome topic's partitions and ends, looked up from the loop before its first record: how long one lookup may
# hold the loop, and how long a failed lookup of a topic's partitions is not tried again (its records go by key).
_LOOKUP_TIMEOUT_S = 5.0
_LOOKUP_BACKOFF_S = 30.0
DLQ_REASON = ACKER_DLQ_REASON
DLQ_DETAIL = "acker.dlq.detail"
DLQ_TOPIC = "acker.dlq.topic"
DLQ_PARTITION = "acker.dlq.partition"
DLQ_OFFSET = "acker.dlq.offset"
DLQ_TIMESTAMP = "acker.dlq.timestamp"
_FALLBACK_FLUSH_S = 30.0  # how long a dead letter sent alone may wait for what was produced before it, and for itself
_OUTCOME_REFUSED = "outcome-refused"  # dead-letter reason of an outcome record its topic will not take
DEAD_LETTER_REASONS = (*WIRE_REASONS, _OUTCOME_REFUSED)  # every reason the service dead-letters a record for
# After a failed creation an outcome topic is looked up (and created) again: 30 s later, doubling up to 10 min.
_ENSURE_AGAIN = Backoff(first_ms=30_000, max_ms=600_000)
# A partition just assigned whose outcomes could not be read back waits, tried again after these delays, this long at
# most; then it is replayed without what could not be read (`AckerService._recover`).
READ_BACK_PATIENCE_S = 120.0
# The read-backs of one turn of the loop stop being started after this; the others wait for the next turn, after a
# poll. Many partitions assigned at once while a broker does not answer (each read waiting out its timeouts) kept the
# loop from polling past max.poll.interval.ms (5 minutes by default): the instance left its group.
READ_BACK_TURN_S = 60.0
_READ_BACK_AGAIN = Backoff(first_ms=1_000, max_ms=15_000)
CREATION_WINDOW_S = 3600.0  # `outcome_topics_per_hour` counts the outcome topics created within this window
TICK_REFUSED_AGAIN_MS = 5000  # a tick the producer refused at once (a partition it does not know yet) waits this
RATE_WINDOW_S = 60.0  # the shortest window of a status's rates (two ticks when they are further apart)
_ENSURE_AGAIN_TIMEOUT_S = 2.0  # the lookup's timeout when it is tried again (the creation's: three times that)
# Topics not created (or not found) remembered at once, with when to try again; the oldest beyond it are forgotten
# (tried again at their next record). A producer naming a spout per tree made one entry of each kind per name, for good.
_REFUSALS_KEPT = 1024
_V = TypeVar("_V")
# A topic that does not exist (and was not created) or whose name is invalid: writing again (or restarting) cannot
# help. Not an authorisation error: once an operator mends the ACL, a restart delivers what stopped the service.
_TOPIC_REFUSES = frozenset({KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_EXCEPTION})
# A topic written to and gone since (deleted): its partition, or the topic itself, unknown to the producer now.
_GONE = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART})
Delivered = Callable[[KafkaError | None, Message | None], None]
DlqHeaders = Sequence[tuple[str, HeaderValue]]


def _steady_ms() -> int:
    """The tick schedule's clock (`PartitionState`): monotonic, so that a wall clock stepped brings no tick early
    (nor stops them, nor a tick refused from being written again)."""
    return int(time.monotonic() * 1000)


class ServiceError(AckerError):
    """The service cannot go on safely (an outcome could not be delivered, a failure between deciding and
    publishing). A fatal consumer error raises `KafkaClientError` (`readable`)."""


def record_groups(sizes: list[int]) -> list[tuple[int, int]]:
    """(start, end) of consecutive runs of records applied in one tracker call: whole records of at most
    _GROUP_MESSAGES messages together (a record holding more makes a group alone)."""
    groups = []
    start = 0
    while start < len(sizes):
        end, size = start + 1, sizes[start]
        while end < len(sizes) and size + sizes[end] <= _GROUP_MESSAGES:
            size += sizes[end]
            end += 1
        groups.append((start, end))
        start = end
    return groups


@dataclass(frozen=True)
class _OutcomeRecord:
    """An outcome-topic record, encoded: the outcomes of one spout decided by the acker records ``first``..``last``
    (offsets) of a partition."""

    spout: str
    value: bytes
    first: int
    last: int
    reasons: bytes | None = None  # the ``acker.fail-reasons`` header of its FAILED outcomes, if any gave one


@dataclass
class _Decided:
    """What one partition's records decided, ready to publish: the outcome records in order, the complete latencies
    of the acks, and the records rejected."""

    outcomes: list[_OutcomeRecord]
    latencies_ms: list[np.ndarray]
    rejected: list[tuple[Message, WireError]]


@dataclass
class _ReadBack:
    """An assigned partition whose outcomes are still to be read back (`AckerService._recover`): tried next at
    ``at`` (monotonic; 0: at once), after ``tries`` that failed, the first at ``since``."""

    at: float = 0.0
    tries: int = 0
    since: float | None = None


@dataclass(frozen=True, slots=True)
class _Destination:
    """Where an outcome record of acker partition ``partition`` (deciding up to its record ``last``) goes: ``topic``,
    its partition ``target`` (None: by key), with ``headers``; ``outcome_log`` is the log of the assignment that
    decided it (not looked up again when it is sent again: the partition may have moved meanwhile)."""

    partition: int
    topic: str
    target: int | None
    headers: DlqHeaders
    last: int
    outcome_log: OutcomeLog | None


def _after_both(done: Delivered) -> Delivered:
    """A delivery callback for each of two records that stand for one: ``done`` once both are reported, with the
    first failure if any."""
    reports: list[tuple[KafkaError | None, Message | None]] = []

    def delivered(error: KafkaError | None, record: Message | None) -> None:
        reports.append((error, record))
        if len(reports) == 2:
            done(*next((r for r in reports if r[0] is not None), reports[-1]))

    return delivered


def outcome_records(
    partition: int, records: RecordSpans, outcomes: OutcomeBlock, reasons: fail_reasons.Kept | None = None
) -> list[_OutcomeRecord]:
    """What a group of records decided, as outcome records: one per spout (whatever its trees' sources), split to
    at most OUTCOMES_PER_RECORD outcomes and OUTCOME_RECORD_MAX_BYTES, each naming the acker records that decided
    its first and last outcome. ``reasons``: those read for the partition's undecided trees, taken for the FAILED
    outcomes of each record (by message id); a record is split further until its header holds every one of its
    reasons (`fail_reasons.fits`: a burst of fails said the first ones only)."""
    out = []
    sources_of: dict[str, list[int]] = {}  # a spout's trees may come from many sources (topic partitions)
    for local, (spout, _) in enumerate(outcomes.sources):
        sources_of.setdefault(spout, []).append(local)
    source = np.asarray(outcomes.source)
    for spout, locals_ in sources_of.items():
        matching = np.flatnonzero(source == locals_[0] if len(locals_) == 1 else np.isin(source, locals_))
        why = _reasons_of(outcomes, matching, reasons)
        chunks = [
            matching[start : start + OUTCOMES_PER_RECORD] for start in range(0, len(matching), OUTCOMES_PER_RECORD)
        ]
        while chunks:
            rows = chunks.pop(0)
            first = int(records.offsets[records.record_of(int(outcomes.index[rows[0]]))])
            last = int(records.offsets[records.record_of(int(outcomes.index[rows[-1]]))])
            halves = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]  # in order
            mine = dict(why[row] for row in rows.tolist() if row in why) if why else {}
            if mine and not fail_reasons.fits(mine) and len(rows) > 1:  # more fails than one header says why
                chunks[:0] = halves
                continue
            value = encode_outcomes(spout, outcomes, rows, acker_partition=partition, acker_offset=last)
            if len(value) > OUTCOME_RECORD_MAX_BYTES and len(rows) > 1:  # long message ids
                chunks[:0] = halves
                continue
            out.append(_OutcomeRecord(spout, value, first, last, fail_reasons.encode(mine)))
    return out


def _reasons_of(
    outcomes: OutcomeBlock, rows: np.ndarray, reasons: fail_reasons.Kept | None
) -> dict[int, tuple[str, str]]:
    """The reasons kept for the FAILED trees of ``rows`` (taken from ``reasons``), by row: its message id and the
    reason; empty when none has one (a light check when none is kept)."""
    if not reasons:
        return {}
    failed = rows[outcomes.code[rows] == Code.FAILED]
    taken = reasons.take(outcomes.anchor[failed].tolist())
    if not taken:
        return {}
    by_row = {}
    for row in failed.tolist():
        reason = taken.get(int(outcomes.anchor[row]))
        if reason is not None:
            _, source = outcomes.sources[int(outcomes.source[row])]
            by_row[row] = (join_msg_id(source, int(outcomes.offset[row])), reason)
    return by_row


def _part_of(to: _Destination, part: bytes) -> _Destination:
    """Where a part of an outcome record sent in halves goes: as the record, with only the fail reasons of its own
    outcomes (the whole header on every half could keep a half too large down to one outcome)."""
    raw = first_header(to.headers, fail_reasons.HEADER)
    if raw is None:
        return to
    ids = set(decode_outcomes(part).msg_ids)
    mine = fail_reasons.encode({m: r for m, r in fail_reasons.decode(raw).items() if m in ids})
    headers = [(k, v) for k, v in to.headers if k != fail_reasons.HEADER]
    return replace(to, headers=headers if mine is None else [*headers, (fail_reasons.HEADER, mine)])


def failing_inits(block: MessageBlock, spouts: SpoutNames = ANY_CONFIGURATION) -> MessageBlock | None:
    """What is applied in place of a record that is not (another message in it is invalid): for each of its inits, a
    fail of that tree, then the init, so that the tree gets its FAILED outcome at once. Without one its spout would
    keep it pending (and the watermark would stop at it) until the spout restarts. The fail comes first, as a spout
    sends a failed record's (`acker.spout`): the init's value may cancel acks of its tree's children applied before
    it (a bolt's record accepted, the spout's rejected), and an init first would ack a tree its record may have
    failed (its emit function raised after emitting those children). Applied by the tracker like any record, these
    are decided once: a tree decided before (read back after a restart, or a tombstone) is not decided again, and
    the tree's later messages are late. Inits with anchor 0 name no tree, and an init of a spout ``spouts`` does not
    answer has no outcome topic; None when no init is left."""
    inits = np.flatnonzero(block.kinds == Kind.INIT)  # the k-th init's source and offset are init_*[k]
    answerable = np.array([spouts.answerable(spout) for spout, _ in block.sources] or [False])
    named = np.flatnonzero((block.anchors[inits] != 0) & answerable[block.init_source])
    if not len(named):
        return None
    rows = inits[named]
    return MessageBlock(
        np.tile(np.array([Kind.FAIL, Kind.INIT], np.uint8), len(rows)),
        np.repeat(block.anchors[rows].astype(np.int64), 2),
        np.stack([np.zeros(len(rows), np.int64), block.values[rows].astype(np.int64)], axis=1).ravel(),
        block.init_source[named].astype(np.int32),
        block.init_offset[named].astype(np.int64),
        list(block.sources),
    )


@dataclass
class _Retired:
    counters: np.ndarray
    ignored_ticks: int = 0


# A start whose compiled loops take longer than this to be ready says so: loaded from numba's cache they take about
# a second; compiled (a new installation's first start), 10-20 s of a core, and on a loaded 2-vCPU host 8 minutes
# were seen with nothing said between the configuration line and the assignment.
COMPILING_SAID_AFTER_S = 5.0


def compile_now() -> None:
    """Compile (or load from numba's on-disk cache) every compiled loop the service runs, before it joins the
    group: no record waits for the compiler. Said once it takes `COMPILING_SAID_AFTER_S` (a warning, which the runners
    show: they start `acker run` with WARNING), and how long it took."""
    started = time.monotonic()
    said = threading.Event()

    def say() -> None:
        said.set()
        log.warning("compiling the tracker's loops (numba), which a new installation's first start does: 10-20 s of "
                    "a core, minutes on a loaded host; later starts load them from its cache (NUMBA_CACHE_DIR, or "
                    "__pycache__ beside the package)")  # fmt: skip

    timer = threading.Timer(COMPILING_SAID_AFTER_S, say)
    timer.daemon = True
    timer.start()
    try:
        _compile_all()
    finally:
        timer.cancel()
    if said.is_set():  # at the level of the line before: the runners start `acker run` with WARNING
        log.warning("the tracker's loops ready in %.0f s", time.monotonic() - started)


def _compile_all() -> None:
    BlockTracker.warm_up()
    parsed = parse_batch(encode_batch(MessageBlock.from_messages([Init(1, "s", "t/0/0", 1), Ack(1, 1)])))
    check_block(parsed, 1, 2)  # read-only columns, as parsed (a record checked alone)
    block = MessageBlock.concat([parsed])
    check_block(block, 1, 2)  # fresh columns, as concatenated
    outcomes = BlockTracker().process(block)
    encode_outcomes("s", outcomes, np.arange(len(outcomes)), acker_partition=0, acker_offset=0)
    avro_longs.long(0)
    avro_longs.outcome_anchors(bytes(9), 0, whole=True)  # an empty outcome record: compiled before any read-back


class AckerService:
    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self._spouts = spout_names(config)  # those whose outcome topics are not the deployment's own
        compile_now()
        self.instance = config.instance
        self._states: dict[int, PartitionState] = {}
        self._outcome_logs: dict[int, OutcomeLog] = {}
        self._reader: Consumer | None = None  # reads commit metadata and outcomes back at assignment
        self._refused_login = RefusedLogin(config.kafka.get("error_cb"))  # the reader's error callback
        self._retired = _Retired(np.zeros(len(fields(Counters)), np.int64))
        self._dead_letters: Tally[str] = Tally()
        self.latency = LatencyHistogram()
        self._known_topics: set[str] = set()  # found or created (`_ensure_topics`)
        self._deleted: set[str] = set()  # of those, found missing since (`_gone`)
        self._ensure_again_at: dict[str, tuple[float, int]] = {}  # could not be created: (when again, failures)
        self._not_created: dict[str, str] = {}  # topic → why it was not created, while it is not known
        self._capped: set[str] = set()  # of those, the topics `outcome_topics_per_hour` kept from being created
        # When this instance created outcome topics, within the last `CREATION_WINDOW_S` (`_may_create`): any
        # producer of the acker topic names spouts, and a spout name made per process or per run (a host name, a
        # uuid) would otherwise have the service create a topic for each, without end.
        self._outcome_creations: deque[float] = deque()
        self._deliveries = DeliveryTracker()  # outcome and dead-letter records in flight
        # Dead letters decided in delivery callbacks, produced from the loop (`_send_fallbacks`): producing inside a
        # callback may serve more callbacks (a full queue is polled), without bound.
        self._fallbacks: list[Callable[[], None]] = []
        self._poisoned = False  # set when the loop failed: no commit may follow
        # Set when `run` committed (or gave up waiting for deliveries to) at its stop: the revoke of `close` then
        # commits nothing again. The loop has stopped, so there is nothing new to commit; with the broker away, it
        # waited another 30 s for the same deliveries.
        self._stop_committed = False
        self._closed = False
        self._partition_count = 0  # of the acker topic (`_look_up_partition_count`; 0: unknown, nothing checked)
        self._next_count_check = 0.0
        self._commits: list[tuple[int, list[TopicPartition]]] = []  # (barrier, offsets) waiting for deliveries
        # Per owned partition, the offset last committed (by this instance, or found at its assignment; negative:
        # none): every outcome decided before it was delivered, so it may be committed again (`_cover`).
        self._committed: dict[int, int] = {}
        self._partition_counts: dict[str, int] = {}  # of the topics written to: created here, or looked up
        self._lookup_failed_at: dict[str, float] = {}  # outcome topics whose partitions could not be looked up
        self._to_recover: dict[int, _ReadBack] = {}  # assigned partitions whose outcomes are still to be read back
        self._paused: set[int] = set()  # partitions paused while they wait for their read-back (`_held_back`)
        self._lock = threading.Lock()  # guards _states (and stand-ins applied: `_apply`) against the metrics thread
        self._pool: ThreadPoolExecutor | None = None  # deciding threads, started when first needed
        self._next_commit = 0.0
        self._next_status = 0.0
        # None: the status topic exists; else when to look for it again (`_status_topic_exists`).
        self._status_recheck_at: float | None = None
        self._acker_topic_said_at: float | None = None  # while the acker topic is missing: when that was last said
        self._tick_refused: dict[int, int] = {}  # partition → when its tick, refused at once, is written again (ms)
        # Per partition, its counters at each status since the rate window began (`_publish_status`).
        self._last_status: dict[int, deque[tuple[float, np.ndarray]]] = {}
        # Per partition, when the last of its records read so far was applied (a status's ``read_at``: its ``time``
        # is when it was published, up to a status interval and a wait for records later).
        self._read_at: dict[int, float] = {}
        # Per owned partition, its lag as of the last status interval, for the metrics (`snapshot`): replaced whole by
        # the loop's thread, never changed in place. The metrics thread must not ask the consumer: a call on its
        # handle waits while the loop is inside `consume`, and the loop is nearly always there (scrapes of an idle
        # instance of 8 partitions took up to 23 s, past Prometheus's 10 s timeout).
        self._lags: dict[int, int] = {}
        self.consumer = WatchedConsumer(
            config.stream_consumer(
                # Partitions added to the acker topic are seen, and taken, within seconds rather than librdkafka's 5
                # minutes: the spouts and bolts place their messages by the new count as soon (`PARTITIONS_CHECK_S`).
                {"topic.metadata.refresh.interval.ms": int(PARTITIONS_CHECK_S * 1000)},
                **{
                    "group.id": config.group,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "partition.assignment.strategy": "cooperative-sticky",
                    "client.id": f"acker-{self.instance}",
                },
            ),
            config.open_transaction_warn_s,
        )
        self.producer = Producer(
            config.producer(**{"enable.idempotence": True, "linger.ms": 1, "client.id": f"acker-{self.instance}"})
        )

    # -- lifecycle ------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; then commit what is safe and leave the group. `TimeoutError` when Kafka
        does not answer at the start (`FIRST_CONTACT_S`), `KafkaException` when it refuses the login."""
        try:
            if not self._first_contact(stop):
                return
            if self.config.status_topic in self._ensure_topics(service_topics(self.config)):
                # Undeliverable, its records would hold every flush (on a revoke, on stop) for 30 s and skip the commit.
                log.warning("no status topic %s: no status is published until it exists", self.config.status_topic)
                self._status_recheck_at = time.time() + _STATUS_RECHECK_INTERVALS * self.config.status_interval_s
            if not self._topic_exists(self.config.acker_topic, timeout_s=5.0):
                self._say_acker_topic_missing(time.time())
            self.consumer.subscribe(
                [self.config.acker_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            log.info("acker %s serving %s as group %s", self.instance, self.config.acker_topic, self.config.group)
            while not stop.is_set():
                self.step(timeout_s=0.1)
                say_held_back()
            self._commit_now()
            self._stop_committed = True
        except BaseException:
            # Something failed between deciding and publishing (or at the start, with nothing assigned yet): commit
            # nothing more (a replay decides again).
            self._poisoned = True
            raise
        finally:
            try:
                self.close()
            finally:
                say_held_back(stopping=True)
        counters = {name: count for name, count in self.snapshot().counters.as_dict().items() if count}
        log.info("acker %s stopped: %s, dead letters %d (since it started)", self.instance, counters,
                 sum(self._dead_letters.values()))  # fmt: skip

    def close(self) -> None:
        """Leave the group (revoking, and committing, what is still assigned unless the loop failed or `run` committed
        at its stop, waiting 30 s at the most for deliveries), deliver what is in flight (10 s at the most), free the
        producer if it delivered everything (`release`), and stop the deciding threads. `run` ends with it; a caller
        driving `step` itself calls it. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.consumer.close()
        self._flush(10)
        release(self.producer, f"acker {self.instance}")
        if self._reader is not None:
            self._reader.close()
        if self._pool is not None:
            self._pool.shutdown()

    def step(self, timeout_s: float) -> int:
        """One turn of the loop: read, decide, publish, tick, commit, report. Returns the records read. When it
        raises, nothing more is committed (`close`'s revoke included): what it read may be decided and not published."""
        try:
            return self._step(timeout_s)
        except BaseException:
            self._poisoned = True  # here, not in `run` alone: a caller driving `step` itself then calls `close`
            raise

    def _step(self, timeout_s: float) -> int:
        # A batch consume waits until the batch is full or the timeout passes: take what is there at once, and wait
        # only for a first record when there is nothing.
        records = consume_available(self.consumer, 1000, timeout_s)
        if self._to_recover:
            self._recover()
            records = self._held_back(records)
        self._handle(records)
        now = time.time()
        self._tick(_steady_ms())
        if now >= self._next_commit:
            self._plan_commit()
            self._next_commit = now + self.config.commit_interval_s
        self._commit_passed()
        if self._states and time.monotonic() >= self._next_count_check:  # short: the loop waits for it
            self._look_up_partition_count(2.0, only_up=True, owned=max(self._states) + 1)
        if self._acker_topic_said_at is not None and now - self._acker_topic_said_at >= ACKER_TOPIC_RECHECK_S:
            if self._states or self._topic_exists(self.config.acker_topic, timeout_s=0.5):
                self._acker_topic_said_at = None
            else:
                self._say_acker_topic_missing(now)
        if now >= self._next_status:
            self._lags = {p: lag for p, state in self._states.items() if (lag := self._lag(p, state)) is not None}
            if self._status_topic_exists(now):
                self._publish_status(now)
            self._next_status = now + self.config.status_interval_s
            if self._reader is not None:  # assigned only while it reads back, within a call
                serve_log_lines(self._reader)
        self.producer.poll(0)
        self._send_fallbacks()
        self._check_deliveries()
        return len(records)

    # -- records --------------------------------------------------------------------------------------------

    def _handle(self, records: list[Message]) -> None:
        """Apply consumed records: per partition, in offset order, many records per tracker call."""
        by_partition: dict[int, list[Message]] = {}
        work: list[tuple[PartitionState, list[Message]]] = []
        for record in records:
            if not readable(record, log, "consumer"):
                continue
            partition = record.partition()
            assert partition is not None  # set on every consumed record
            by_partition.setdefault(partition, []).append(record)
        for partition, mine in by_partition.items():
            state = self._states.get(partition)
            if state is None:  # revoked while this batch was in flight
                continue
            # A partition revoked and assigned again within one consume: its records of the old assignment are not in
            # the batch (librdkafka's batch consume drops a partition's records at the barrier of its revocation,
            # rd_kafka_purge_outdated_messages), so a new state only sees what it reads from its committed offset.
            fresh = mine
            if state.position is not None and (mine[0].offset() or 0) < state.position:
                # The consumer went back within one assignment (an offset reset after the log was truncated under
                # it): those records were applied already, and applying a message twice cancels it in the XOR word.
                fresh = [r for r in mine if (r.offset() or 0) >= state.position]
                log.warning(
                    "partition %d: skipped %d records below the read position %d (already applied)",
                    partition, len(mine) - len(fresh), state.position,
                )  # fmt: skip
            work.append((state, fresh))
        # Partitions are decided apart (each tracker is touched by one thread at a time), in parallel when there are
        # threads for it and enough to decide: the compiled loop releases the GIL. Publishing stays on this thread,
        # partition by partition. A light stream's batches (a few records) stay on this thread: there the handoff
        # to the pool and the threads' turns at the GIL cost more than they save (p99 at 3M messages/s: 9.2 ms
        # against 7.4 ms, with every batch handed off).
        if (
            len(work) > 1
            and self.config.tracker_threads > 1
            and sum(len(r.value() or b"") for _, fresh in work for r in fresh) >= _PARALLEL_BYTES
        ):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.tracker_threads, thread_name_prefix="acker-tracker")
            # Every task ends before anything goes on, also when one fails: none may still change its partition
            # while this thread commits, revokes or closes.
            tasks = [self._pool.submit(self._decide, item) for item in work]
            wait(tasks)
            decisions = [task.result() for task in tasks]
        else:
            decisions = [self._decide(item) for item in work]
        applied_at = time.time()
        for (state, fresh), decided in zip(work, decisions, strict=True):
            if fresh:
                self._read_at[state.partition] = applied_at
            if decided.latencies_ms:  # a new histogram, once a partition: none is changed under a scrape (`snapshot`)
                self.latency = self.latency.observed(np.concatenate(decided.latencies_ms))
            for outcome_record in decided.outcomes:
                self._send_outcomes(state.partition, outcome_record)
            for record, why in sorted(decided.rejected, key=lambda r: r[0].offset() or 0):  # dead letters in order
                self._dead_letter(record, why.reason, why.detail)
                state.skip(record.offset() or 0)

    def _decide(self, item: tuple[PartitionState, list[Message]]) -> _Decided:
        """Parse and apply one partition's records, in groups of whole records (about _GROUP_MESSAGES messages
        each), and encode the outcome records; touches nothing but that partition's state."""
        state, fresh = item
        decided = _Decided([], [], [])
        parsed = []
        for record in fresh:
            try:
                parsed.append((record, parse_batch(record.value() or b"")))
            except WireError as bad:
                decided.rejected.append((record, bad))
        for start, end in record_groups([len(block) for _, block in parsed]):
            self._apply(state, parsed[start:end], decided)
        return decided

    def _apply(self, state: PartitionState, parsed: list[tuple[Message, MessageBlock]], decided: _Decided) -> None:
        """Apply whole records at once; add what they decided, and the records rejected (not applied), to
        ``decided``."""
        partition = state.partition
        rejected = decided.rejected
        stand_ins: dict[int, str] = {}  # the reasons of the trees failed in place of rejected records, by anchor
        standing = 0  # the messages applied in their place
        try:
            block = MessageBlock.concat([b for _, b in parsed])
            check_block(block, partition, self._partition_count, self._spouts)
        except WireError:  # find the culprits one by one; the others are applied
            good = []
            for record, b in parsed:
                try:
                    check_block(b, partition, self._partition_count, self._spouts)
                    good.append((record, b))
                except WireError as bad:
                    rejected.append((record, bad))
                    failing = failing_inits(b, self._spouts)
                    if failing is not None:  # its own trees are failed at once rather than kept pending
                        good.append((record, failing))
                        standing += len(failing)
                        why = f"its acker record {partition}/{record.offset()} was dead-lettered ({bad.reason})"
                        stand_ins.update(dict.fromkeys(failing.anchors[failing.kinds == Kind.INIT].tolist(), why))
            if not good:
                return
            parsed = good
            block = MessageBlock.concat([b for _, b in parsed])
        # The headers of a rejected record (a stand-in's) are left for its dead letter to read: a read takes the
        # headers of a record whose header names are not UTF-8 (`read_headers`).
        rejected_now = {id(r) for r, _ in rejected} if stand_ins else set()
        self._read_reasons(state, [r for r, _ in parsed if id(r) not in rejected_now])
        if stand_ins:
            state.reasons.add(stand_ins)
        now_ms = int(time.time() * 1000)
        records = RecordSpans.of(
            [len(b) for _, b in parsed],
            [r.offset() for r, _ in parsed],  # type: ignore[misc]
            [t if (t := r.timestamp()[1]) > 0 else now_ms for r, _ in parsed],
        )
        if standing:  # counted with the messages the kernel counts, at once for a scrape: acker_messages never dips
            with self._lock:
                outcomes = state.apply_records(block, records, _steady_ms())
                state.stand_ins += standing
        else:
            outcomes = state.apply_records(block, records, _steady_ms())
        if len(outcomes):
            decided.latencies_ms.append(outcomes.latency_ms[outcomes.code == Code.ACK])
            decided.outcomes += outcome_records(partition, records, outcomes, state.reasons)

    @staticmethod
    def _read_reasons(state: PartitionState, records: list[Message]) -> None:
        """Keep the fail reasons of records about to be applied (`acker.fail_reasons`), before they decide their
        trees."""
        for record in records:
            raw = first_header(read_headers(record), fail_reasons.HEADER)
            if raw:
                state.reasons.add(fail_reasons.by_anchor(raw))

    def _send_outcomes(self, partition: int, encoded: _OutcomeRecord) -> None:
        spout, first, last = encoded.spout, encoded.first, encoded.last
        topic = self.config.outcome_topic(spout)
        again = self._ensure_again_at.get(topic)
        if topic not in self._known_topics and (again is None or time.monotonic() >= again[0]):
            timeout_s = 10.0 if again is None else _ENSURE_AGAIN_TIMEOUT_S  # again: on the loop's thread, briefly
            self._ensure_topics([outcome_topic(self.config, spout)], timeout_s=timeout_s, capped=True)
        track, outcome_log = self._deliveries.track(), self._outcome_logs.get(partition)
        # Every record of an acker partition in one partition of the topic, in order: where its records go already
        # (delivered, read back or chosen; None while records sent by key are in flight), else its own, chosen
        # before the first record. Records sent by key (the topic could not be looked up) stay with the partition
        # their first delivery names, and the topic is in the commits from the next one on, not before.
        if outcome_log is not None and outcome_log.written(topic):
            target = outcome_log.partition(topic)
        else:
            target = self._outcome_partition(topic, partition)
            if outcome_log is not None and target is not None:
                self._cover(partition, outcome_log, topic, target)
        headers = [(DECIDED_BY, f"{partition}/{first}-{last}".encode())]
        if encoded.reasons is not None:
            headers.append((fail_reasons.HEADER, encoded.reasons))
        if outcome_log is not None:  # before produce: a refusal reports at once, and takes it back
            outcome_log.sent(topic)
        self._produce_outcome(encoded.value, track, _Destination(partition, topic, target, headers, last, outcome_log))

    def _produce_outcome(self, value: bytes, done: Delivered, to: _Destination, *, alone: bool = False) -> None:
        """Produce an outcome record to ``to``, already counted in flight in its outcome log; ``done`` gets its
        delivery, or the delivery of what stands for it.

        One the broker refuses as too large (it refuses a whole batch) is sent again alone; refused alone (or by the
        producer), it is sent in halves, each alone, down to records of one outcome, which go to the dead-letter
        topic. A record over the topic's ``max.message.bytes`` would otherwise stop the service at every restart:
        the replay decides the same trees into the same record. The halves land after records decided later; a
        read-back from any earlier start reads them all the same. Meanwhile the record stays in flight in the log
        (its halves two records): a commit's metadata cannot leave out a topic whose records are all in flight."""
        partition, topic, headers, last, outcome_log = to.partition, to.topic, to.headers, to.last, to.outcome_log
        key = str(partition).encode()

        def again(part: bytes, then: Delivered) -> Callable[[], None]:
            return lambda: self._produce_outcome(part, then, _part_of(to, part), alone=True)

        def delivered(error: KafkaError | None, record: Message | None) -> None:
            too_large = error is not None and error.code() in TOO_LARGE
            if too_large and record is not None and not alone:
                self._fallbacks.append(again(value, done))  # still in flight in the log
                return
            halves = split_outcomes(value) if too_large else None
            if halves is not None:
                log.warning("an outcome record for %s is too large (%s): sent in halves", topic, error)
                if outcome_log is not None:
                    outcome_log.sent(topic)  # two records in flight where there was one
                both = _after_both(done)
                self._fallbacks += [again(halves[0], both), again(halves[1], both)]
                return
            if outcome_log is not None:
                if error is None and record is not None:
                    outcome_log.delivered(topic, record.partition() or 0, record.offset() or 0, last)
                else:
                    outcome_log.failed(topic)
            if error is not None and error.code() in _GONE and topic in self._known_topics and self._gone(topic):
                # Found or made here, and missing now: deleted while the service ran. Dead-lettered, every outcome of
                # its spout would be until a restart, which makes it again (and decides again what was not
                # delivered): said so, and stopped, as on any outcome not delivered.
                error = KafkaError(error.code(), f"{topic} was deleted while the service ran ({error.str()}): start "
                                   "the service again: it creates the topic, and decides again what was not "
                                   "delivered")  # fmt: skip
                done(error, record)
                return
            if error is not None and (error.code() in _TOPIC_REFUSES or too_large):
                # A topic that will not take it (missing and not creatable, e.g. a spout name that collides with an
                # existing topic's), or one outcome too large for it: kept in the dead-letter topic, whose delivery
                # stands for this one's. Stopping instead would stop at the same record after every restart.
                self._dead_letters[_OUTCOME_REFUSED] += 1
                why = self._not_created.get(topic)
                detail = f"{topic}: {error.str()}" + ("" if why is None else f" (not created: {why})")
                log.error("outcome record for %s refused (%s): dead-lettered", topic, detail)
                where = [
                    (DLQ_REASON, _OUTCOME_REFUSED.encode()),
                    (DLQ_DETAIL, detail.encode()),
                    (DLQ_TOPIC, self.config.acker_topic.encode()),
                    (DLQ_PARTITION, str(partition).encode()),
                    (DLQ_OFFSET, str(last).encode()),
                ]
                # Its fail reasons as its own headers, which a dead letter too large goes without.
                mine = [h for h in headers if h[0] != fail_reasons.HEADER]
                reasons = [h for h in headers if h[0] == fail_reasons.HEADER]
                self._fallbacks.append(lambda: self._send_dead_letter(value, key, [*where, *mine], done, own=reasons))
                return
            done(error, record)

        if topic in self._capped:  # not written: on a broker that creates topics on first use, a write would
            why = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "not written")  # make the topic the limit
            delivered(why, None)  # kept from being made
            return
        where = {} if to.target is None else {"partition": to.target}
        self._produce_reporting(topic, value, key, headers, delivered, **where)

    def _outcome_partition(self, topic: str, partition: int) -> int | None:
        """The partition of outcome topic ``topic`` for the records of acker partition ``partition``: ``partition mod
        n`` of its ``n``. None while its partitions cannot be told (it does not exist, or the lookup failed less than
        `_LOOKUP_BACKOFF_S` ago): written to by key then, and its delivery reports say where its records go."""
        count = self._partition_counts.get(topic)
        if count is None:
            failed_at = self._lookup_failed_at.get(topic)
            if failed_at is not None and time.monotonic() - failed_at < _LOOKUP_BACKOFF_S:
                return None
            try:
                count = len(topic_partitions(self._reading_consumer(), topic, timeout_s=_LOOKUP_TIMEOUT_S))
            except KafkaException as error:
                log.warning("cannot look %s up: %s", topic, kafka_error(error) or error)
                count = 0
            if not count:
                _keep_newest(self._lookup_failed_at, topic, time.monotonic())
                return None
            self._lookup_failed_at.pop(topic, None)
            self._partition_counts[topic] = count
            # Partitions may have been added since the producer last looked (it refuses one it does not know).
            self._refresh_producer(topic, _LOOKUP_TIMEOUT_S)
        return partition % count

    def _cover(self, partition: int, outcome_log: OutcomeLog, topic: str, target: int) -> None:
        """Before the first outcome record of ``topic`` since this instance took ``partition``: commit again the
        offset last committed, its metadata now naming where this topic's records will land. They are in no commit
        made before, so without this a crash before the next commit would leave a new owner reading back every
        topic but this one, and publishing the trees decided here a second time. A synchronous commit, once per
        partition and topic while this instance owns the partition, and again after its outcome log forgot the topic
        (nothing to read back for `acker.outcome_log.FORGET_IDLE_S`); tried once: the next periodic commit names the
        topic all the same."""
        reader = self._reading_consumer()
        try:
            end = log_bounds(reader, TopicPartition(topic, target), timeout_s=_LOOKUP_TIMEOUT_S)[1]
        except KafkaClientError as error:  # its records go there all the same; where from: its first delivery says
            outcome_log.expect(topic, target, None)
            log.warning("partition %d: where the outcomes of %s start not known: %s", partition, topic, error)
            return
        outcome_log.expect(topic, target, end)
        committed = self._committed.get(partition)
        if committed is None:  # the committed offset could not be read at the assignment: not known what to cover
            return
        try:
            if committed < 0:  # nothing committed yet: where a replay starts anyway
                acker = TopicPartition(self.config.acker_topic, partition)
                committed = log_bounds(reader, acker, timeout_s=_LOOKUP_TIMEOUT_S)[0]
            metadata = outcome_log.metadata(self._readback_from(partition, committed))
            if metadata is not None:
                offsets = [TopicPartition(self.config.acker_topic, partition, committed, metadata)]
                self.consumer.commit(offsets=offsets, asynchronous=False)
                self._committed[partition] = committed
        except (KafkaClientError, KafkaException) as error:  # the next periodic commit names the topic all the same
            cause = kafka_error(error) if isinstance(error, KafkaException) else None
            code = error.code if isinstance(error, KafkaClientError) else cause.code() if cause is not None else None
            said = log.info if code in REBALANCING else log.warning  # a commit racing a rebalance: routine
            said("partition %d: where the outcomes of %s start not committed yet (the next commit names it): %s",
                 partition, topic, error)  # fmt: skip

    def _ensure_topics(self, specs: list[TopicSpec], timeout_s: float = 10.0, *, capped: bool = False) -> set[str]:
        """Create the topics of ``specs`` that do not exist (`acker.topics`: made by `acker topics create`, or by an
        earlier owner, they are left as they are). Existence is asked on the reading consumer's connection, whose
        lookups never create a topic: a millisecond or two, where an admin client made for the purpose took 7-47 ms
        even to find the topic there, and a principal without the right to create topics is refused even for
        topics that exist. Returns the names of those that could not be created. An outcome or dead-letter topic
        that cannot be created is written to anyway, with a warning: it may be created on first use. If it is not, an
        outcome record goes to the dead-letter topic (`_send_outcomes`), and the topic is tried again, with
        ``timeout_s`` `_ENSURE_AGAIN_TIMEOUT_S` (on the loop's thread), after the delays of `_ENSURE_AGAIN` (a
        creation may fail for a moment: a request timing out, the controller moving); a dead letter that cannot be
        delivered stops the service. ``capped`` topics (outcome topics) are created only within the budget of
        `_may_create`; one beyond it is not created, and is looked for again as after a failed creation."""
        missing = []
        for spec in specs:
            found = self._topic_lookup(spec.name, timeout_s)
            if found:
                if spec.name in self._ensure_again_at:  # made by another since (its spout, `acker topics create`)
                    # A producer that found it missing refused its next record at once (``Local: Unknown topic``),
                    # dead-lettered as outcome-refused, until it looked again by itself (about a second later).
                    self._refresh_producer(spec.name, timeout_s)
                self._known(spec.name)
            elif found is None and capped:
                # Not known to be missing (the lookup failed): written to, and looked up again later. Taken for
                # missing, an existing topic beyond the creation budget was capped: its outcomes dead-lettered as
                # outcome-refused, for up to 10 minutes while lookups kept failing.
                self._try_again(spec.name, (time.monotonic() + _ENSURE_AGAIN.delay_ms(1) / 1000, 0))
            else:
                missing.append(spec)
        failed = set()
        for spec in missing:  # one at a time: a failure says which
            try:
                if capped and not self._may_create():
                    per_hour = self.config.outcome_topics_per_hour
                    self._capped.add(spec.name)
                    raise AckerError(f"outcome_topics_per_hour ({per_hour}) reached: let its spout create it")
                # Not waited for in the metadata: on the loop's thread, and its partitions are known from here.
                if spec.name in create_topics(self.config.client(), [spec], timeout_s=3 * timeout_s, visible=False):
                    self._partition_counts[spec.name] = spec.partitions  # before the metadata shows them all
                    if capped:
                        self._outcome_creations.append(time.monotonic())
                    # Until the producer's metadata has it: one that had found the topic missing (an outcome refused,
                    # a creation failed) refused its records at once (``Local: Unknown topic``) until a refresh, and
                    # the first outcomes after a creation made again were dead-lettered (``outcome-refused``). Given
                    # up quietly at the lookup's timeout: the records then go as they would have.
                    await_topics(self.producer, [spec.name], time.monotonic() + timeout_s)
                self._known(spec.name)
            except AckerError as error:  # e.g. not allowed to create (a KafkaClientError)
                failures = self._ensure_again_at.get(spec.name, (0.0, 0))[1] + 1
                delay_s = _ENSURE_AGAIN.delay_ms(failures) / 1000
                log.warning("could not create %s (tried again in %.0f s): %s", spec.name, delay_s, error)
                self._not_created[spec.name] = str(error)
                self._try_again(spec.name, (time.monotonic() + delay_s, failures))
                failed.add(spec.name)
        return failed

    def _try_again(self, topic: str, when: tuple[float, int]) -> None:
        """Look ``topic`` up (and create it) again at ``when`` (time, failures so far); the oldest of the topics to
        try again beyond `_REFUSALS_KEPT` are forgotten whole (why, and whether capped, too)."""
        for forgotten in _keep_newest(self._ensure_again_at, topic, when):
            self._not_created.pop(forgotten, None)
            self._capped.discard(forgotten)

    def _known(self, topic: str) -> None:
        self._known_topics.add(topic)
        self._ensure_again_at.pop(topic, None)
        self._not_created.pop(topic, None)
        self._capped.discard(topic)

    def _may_create(self) -> bool:
        """Whether this instance may create one more outcome topic: fewer than ``outcome_topics_per_hour`` created
        within the last `CREATION_WINDOW_S`. The count is the instance's own, since its start."""
        created, now = self._outcome_creations, time.monotonic()
        while created and created[0] <= now - CREATION_WINDOW_S:
            created.popleft()
        return len(created) < self.config.outcome_topics_per_hour

    def _first_contact(self, stop: threading.Event) -> bool:
        """Whether Kafka answered a metadata request before ``stop`` was set; `TimeoutError` when it did not answer
        within `FIRST_CONTACT_S`, and `KafkaException` of a login the broker refused as soon as the client says so
        (`first_answer`: SASL settings at a plaintext listener waited the 30 s, then read as no answer). Without
        this, the start's topic lookups and creations each waited out their own timeout (10 s, then 30 s) in turn:
        with no broker, `acker run` said nothing for over a minute before giving up. Asked about the acker topic
        alone (a small answer, on the reading consumer, whose lookups create nothing), with a timeout that doubles
        from 1 s, serving the client's log lines between attempts, so that what it meets (a connection refused, a
        name that does not resolve) shows at once (`acker.kafka.client_log`)."""
        consumer = self._reading_consumer()
        try:
            return first_answer(
                lambda wait_s: consumer.list_topics(self.config.acker_topic, timeout=wait_s),
                consumer,  # not assigned anything yet: its poll serves its callbacks alone
                self._refused_login,
                FIRST_CONTACT_S,
                stop,
            )
        except KafkaException as error:
            cause = kafka_error(error)
            if self._refused_login.error is None and cause is not None and cause.code() in NO_ANSWER:
                raise TimeoutError(f"within {FIRST_CONTACT_S:.0f} s") from None
            raise

    def _topic_exists(self, topic: str, timeout_s: float) -> bool:
        """Whether ``topic`` exists (`_topic_lookup`); a lookup that fails or times out counts as missing."""
        return bool(self._topic_lookup(topic, timeout_s))

    def _gone(self, topic: str) -> bool:
        """Whether ``topic``, which the producer does not know (or not the partition written to), is missing: not a
        producer's metadata behind partitions another instance added. Looked up once: the records in flight to a
        topic deleted fail together, and the first stops the service."""
        if topic not in self._deleted and self._topic_lookup(topic, _LOOKUP_TIMEOUT_S) is False:
            self._deleted.add(topic)
        return topic in self._deleted

    def _topic_lookup(self, topic: str, timeout_s: float) -> bool | None:
        """Whether ``topic`` exists, asked on the reading consumer's connection (whose lookups create nothing); None
        when the lookup fails or times out."""
        try:
            return bool(topic_partitions(self._reading_consumer(), topic, timeout_s))
        except KafkaException as error:
            log.debug("looking %s up: %s", topic, kafka_error(error) or error)
            return None

    def _say_acker_topic_missing(self, now: float) -> None:
        """Said at start and every `ACKER_TOPIC_RECHECK_S` while it lasts: the service waits for the topic (it serves
        it once made), and the consumer's own error about it comes once."""
        self._acker_topic_said_at = now
        log.warning("acker topic %s not found (or not to be described with these credentials): waiting for it "
                    "(`acker topics create` makes it, with the partition count the spouts and bolts must agree on)",
                    self.config.acker_topic)  # fmt: skip

    def _status_topic_exists(self, now: float) -> bool:
        """Whether status records can be published. A status topic missing at start (it could not be created) is
        looked up again every `_STATUS_RECHECK_INTERVALS` status intervals, on the reading consumer's connection: an
        operator may create it (`acker topics create`) while the service runs. Never written to while missing: its
        undeliverable records would hold every flush (on a revoke, on stop) for 30 s and skip the commit."""
        if self._status_recheck_at is None:
            return True
        if now < self._status_recheck_at:
            return False
        # On the loop's thread: briefly (a lookup that times out is tried again at the next recheck).
        if not self._topic_exists(self.config.status_topic, timeout_s=0.5):
            self._status_recheck_at = now + _STATUS_RECHECK_INTERVALS * self.config.status_interval_s
            return False
        log.info("status topic %s found: publishing status", self.config.status_topic)
        self._status_recheck_at = None
        return True

    def _check_deliveries(self) -> None:
        if self._deliveries.failure is not None:
            raise ServiceError(f"an outcome or dead letter could not be delivered: {self._deliveries.failure}")

    def _dead_letter(self, record: Message, reason: str, detail: str) -> None:
        own = read_headers(record)
        if own is None:  # a header name that is not UTF-8: the letter goes without the record's headers, and says so
            detail, own = f"{detail}; its headers could not be read (a header name is not UTF-8)", []
        self._dead_letters[reason] += 1
        _dead_letter_log.warning(
            "dead-lettering %s[%d]@%d: %s: %s", record.topic(), record.partition(), record.offset(), reason, detail
        )
        headers = [
            (DLQ_REASON, reason.encode()),
            (DLQ_DETAIL, detail.encode()),
            (DLQ_TOPIC, (record.topic() or "").encode()),
            (DLQ_PARTITION, str(record.partition()).encode()),
            (DLQ_OFFSET, str(record.offset()).encode()),
            (DLQ_TIMESTAMP, str(record.timestamp()[1]).encode()),
        ]
        self._send_dead_letter(record.value(), record.key(), headers, self._deliveries.track(), own=own)

    def _send_dead_letter(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: DlqHeaders,
        done: Delivered,
        *,
        own: DlqHeaders = (),
        kept: int | None = None,
        alone: bool = False,
    ) -> None:
        """Produce a dead letter: ``headers`` (the reason, where it comes from) first, then the record's ``own``
        headers; ``done`` gets its delivery report.

        A copy refused as too large (a record near the acker topic's size limit, with the reason headers added; or
        a topic that takes less) is sent again alone, as the broker refuses a whole batch; refused alone, it is sent
        cut: first with at most `DLQ_KEPT_BYTES` of its value and of its key and without its own headers, then with
        no value and no key at all. `DLQ_TRUNCATED` / `DLQ_KEY_TRUNCATED` give the whole value's / key's length;
        its coordinates say where the whole record lies. Only a topic that takes not even the reason headers fails
        it, so that no record of the acker topic can stop the service at every restart."""
        if kept is None:
            sent: tuple[bytes | None, bytes | None, DlqHeaders] = (value, key, [*headers, *own])
        else:
            short_value, short_key, said = cut_copy(value, key, kept)
            sent = (short_value, short_key, [*headers, *said])

        def delivered(error: KafkaError | None, record: Message | None) -> None:
            itself = alone or record is None  # refused for itself (a refusal at once is of the record alone)
            if error is None or error.code() not in TOO_LARGE or (itself and kept == 0):
                done(error, record)
                return
            smaller = kept
            if itself:
                smaller = DLQ_KEPT_BYTES if kept is None else 0
                log.warning("a dead letter is too large (%s): value and key cut to %d bytes", error, smaller)
            self._fallbacks.append(
                lambda: self._send_dead_letter(value, key, headers, done, own=own, kept=smaller, alone=True)
            )

        self._produce_reporting(self.config.dlq_topic, *sent, delivered)

    def _send_fallbacks(self) -> None:
        """Send the dead letters that delivery reports called for, each alone: what was queued before is delivered
        first, and each is delivered before the next, so that a refusal as too large is of that record alone (and
        the dead letters it calls for in turn are sent in this loop too). Rare: the loop may wait for it."""
        while self._fallbacks:
            self.producer.flush(_FALLBACK_FLUSH_S)
            self._fallbacks.pop(0)()
            self.producer.flush(_FALLBACK_FLUSH_S)

    def _flush(self, timeout_s: float) -> int:
        """Deliver everything produced, the dead letters its delivery reports call for included; returns the
        records still undelivered or unsent."""
        undelivered = 0
        for _ in range(5):
            undelivered = int(self.producer.flush(timeout_s))
            if not self._fallbacks:
                break
            self._send_fallbacks()
        return undelivered + len(self._fallbacks)

    def _produce_reporting(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: DlqHeaders,
        delivered: Delivered,
        **kwargs: Any,
    ) -> None:
        """Produce; a record the producer refuses at once (too large, an invalid topic) is reported to ``delivered``
        as a failed delivery, as the broker's refusals are."""
        try:
            self._produce(topic, value, key=key, headers=headers, on_delivery=delivered, **kwargs)
            return
        except KafkaException as refused:
            error = refusal(refused)
        delivered(error, None)  # out of the except block (`acker.kafka.clients`)

    def _produce(self, topic: str, value: bytes | None, **kwargs: Any) -> None:
        produce(self.producer, topic, value, **kwargs)

    # -- ticks, commits, status -----------------------------------------------------------------------------

    def _tick(self, now_ms: int) -> None:
        """Write the ticks due; ``now_ms``: `_steady_ms`."""
        for partition, state in list(self._states.items()):
            if now_ms < self._tick_refused.get(partition, 0):
                continue
            after = state.tick_due(now_ms)
            if after is None:
                continue
            state.tick_sent(now_ms)

            def delivered(error: KafkaError | None, record: Message, state: PartitionState = state) -> None:
                state.tick_delivered(None if error is not None else record.offset())

            try:
                self._produce(self.config.acker_topic, encode_tick(after), partition=partition, on_delivery=delivered)
            except KafkaException as refused:  # a partition the producer does not know yet: written again later
                error = refusal(refused)  # raises when fatal
            else:
                self._tick_refused.pop(partition, None)
                continue
            if partition not in self._tick_refused:
                log.warning("partition %d: tick refused (%s): written again every %d s meanwhile", partition,
                            error.str(), TICK_REFUSED_AGAIN_MS // 1000)  # fmt: skip
            self._tick_refused[partition] = now_ms + TICK_REFUSED_AGAIN_MS
            state.tick_delivered(None)
            self._refresh_producer(self.config.acker_topic, 1.0)  # out of the except block: `acker.kafka.clients`

    def _offsets(self, partitions: list[int] | None = None) -> list[TopicPartition]:
        chosen = self._states if partitions is None else {p: self._states[p] for p in partitions if p in self._states}
        offsets = []
        for partition, state in chosen.items():
            offset = state.recovery_offset()
            if offset is not None:
                offsets.append(TopicPartition(self.config.acker_topic, partition, offset))
        return offsets

    def _with_metadata(self, offsets: list[TopicPartition]) -> list[TopicPartition]:
        """The offsets to commit now, each with where its outcomes start (`acker.outcome_log`), taken now rather than
        when the commit was planned: records delivered since tell the partition of a topic first written to. An
        offset whose metadata cannot be told yet waits for the next commit."""
        ready = []
        for tp in offsets:
            outcome_log = self._outcome_logs.get(tp.partition)
            if outcome_log is None:
                continue
            metadata = outcome_log.metadata(self._readback_from(tp.partition, tp.offset))
            if metadata is not None:
                ready.append(TopicPartition(tp.topic, tp.partition, tp.offset, metadata))
        return ready

    def _readback_from(self, partition: int, offset: int) -> int:
        """Where the outcomes a new owner replaying ``partition`` from ``offset`` reads back start, by the acker offsets
        that decided them (`PartitionState.readback_from`)."""
        state = self._states.get(partition)
        return offset if state is None else state.readback_from(offset)

    def _plan_commit(self) -> None:
        """Take the recovery offsets now; they are committed once what was produced before them is delivered."""
        offsets = self._offsets()
        if offsets:
            self._commits.append((self._deliveries.barrier(), offsets))

    def _commit_passed(self) -> None:
        if self._poisoned:  # a step raised: a caller driving `step` itself may go on calling it
            return
        ready: dict[int, TopicPartition] = {}
        while self._commits and self._deliveries.passed(self._commits[0][0]):
            for tp in self._commits.pop(0)[1]:
                if tp.partition in self._states:
                    ready[tp.partition] = tp  # a later plan supersedes an earlier one
        offsets = self._with_metadata(list(ready.values()))
        if offsets:
            self._check_deliveries()
            try:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            except Exception as error:
                log.warning("commit of %s failed: %s", sorted((t.partition, t.offset) for t in offsets), error)
            self._committed.update((tp.partition, tp.offset) for tp in offsets)

    def _commit_now(self, partitions: list[int] | None = None) -> None:
        """Flush, then commit synchronously (on revoke and on stop)."""
        if self._poisoned:
            return
        undelivered = self._flush(30)
        self._check_deliveries()
        offsets = self._offsets(partitions)
        if undelivered:
            log.warning("%d records still undelivered: commit of %s skipped", undelivered, offsets)
            return
        offsets = self._with_metadata(offsets)  # every outcome delivered: each topic's partition is known
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as error:
            log.warning("commit of %s failed: %s", [(o.partition, o.offset) for o in offsets], error)
        self._committed.update((tp.partition, tp.offset) for tp in offsets)

    def _publish_status(self, now: float, partitions: list[int] | None = None, *, released: bool = False) -> None:
        """Publish the status of the partitions held (of ``partitions`` only, if given); ``released``: the last, as
        this instance gives them up (revoked, or stopping), so that `acker status` does not show it as their owner
        until its row goes stale."""
        with self._lock:
            states = [(p, s) for p, s in self._states.items() if partitions is None or p in partitions]
        # Rates over a window of a minute at least, and of two ticks: timeouts are decided at ticks, in bursts, and
        # over one status interval nacked/s read 0 in most statuses and several times the true rate in the others.
        window_s = max(RATE_WINDOW_S, 2 * self.config.tick_interval_s)
        for partition, state in states:
            counters = self._counter_array(state)
            history = self._last_status.setdefault(partition, deque())
            history.append((now, counters))
            while len(history) > 2 and history[1][0] <= now - window_s:
                history.popleft()
            since, before = history[0]
            rates = (counters - before) / (now - since) if now > since else np.zeros_like(counters)
            names = [f.name for f in fields(Counters)]
            status = {
                "topic": self.config.acker_topic,
                "partition": partition,
                "group": self.config.group,
                "instance": self.instance,
                "time": now,
                "read_at": self._read_at.get(partition),
                "pending": state.tracker.pending,
                "position": state.position,
                "recovery_offset": state.recovery_offset(),
                "lag": self._lag(partition, state),
                "counters": dict(zip(names, counters.tolist(), strict=True)),
                "rates": dict(zip(names, [round(r, 1) for r in rates.tolist()], strict=True)),
                "rate_window_s": round(now - since, 1),
                "status_interval_s": self.config.status_interval_s,
                "ignored_ticks": state.ignored_ticks,
                **({"released": True} if released else {}),
                # Its records wait (paused) until what the previous owners decided is read back (`_recover`).
                **({"reading_back": True} if partition in self._to_recover and not released else {}),
            }
            try:
                self._produce(
                    self.config.status_topic,
                    json.dumps(status).encode(),
                    key=status_key(self.config.group, self.config.acker_topic, partition),
                )
            except KafkaException as refused:  # deleted under it, say: a courtesy to `acker status`, it stopped the
                error = refusal(refused)  # service (raises when fatal); it is looked for again, as one missing at start
                log.warning("status topic %s refuses status records (%s): looked for again every %d status intervals",
                            self.config.status_topic, error.str(), _STATUS_RECHECK_INTERVALS)  # fmt: skip
                self._status_recheck_at = now + _STATUS_RECHECK_INTERVALS * self.config.status_interval_s
                return

    def _lag(self, partition: int, state: PartitionState) -> int | None:
        """The records of ``partition`` not read yet: from its position, or before its first record was read (its
        read-back still going on, say: minutes, a broker away) from its committed offset, where it starts."""
        try:
            _low, high = self.consumer.get_watermark_offsets(
                TopicPartition(self.config.acker_topic, partition), cached=True
            )
        except Exception:
            return None
        position = state.position
        if position is None:
            committed = self._committed.get(partition)
            position = committed if committed is not None and committed >= 0 else None
        if high < 0 or position is None:
            return None
        return max(0, high - position)

    @staticmethod
    def _counter_array(state: PartitionState) -> np.ndarray:
        """The partition's counters; ``messages`` counts the acker messages read (applied), not the stand-ins
        applied for rejected records, which fail their trees."""
        c = replace(state.tracker.counters, messages=state.tracker.counters.messages - state.stand_ins)
        return np.array([getattr(c, f.name) for f in fields(Counters)], np.int64)

    # -- rebalance ------------------------------------------------------------------------------------------

    def _refresh_producer(self, topic: str, timeout_s: float) -> None:
        """Update what the producer knows of ``topic`` (the acker topic, which it writes ticks to, or an outcome
        topic), which exists: a producer refuses a partition it does not know yet, and looks again by itself only
        every 5 minutes, and a topic it found missing for a moment after it is made (a lookup through a handle
        updates what the handle knows)."""
        try:
            self.producer.list_topics(topic, timeout=timeout_s)
        except KafkaException as error:  # looked up again at the next tick refused, or the next assignment
            log.debug("the producer's lookup of %s failed: %s", topic, error)

    def _look_up_partition_count(self, timeout_s: float, *, only_up: bool = False, owned: int = 0) -> None:
        """Read the acker topic's partition count, which each record is checked against (``wrong-partition``): at
        each assignment, and every `PARTITIONS_CHECK_S` from the loop. Not only at assignments: under the consumer
        group protocol (KIP-848) an instance given no new partition when partitions are added gets no callback,
        and kept checking by the old count, dead-lettering records placed rightly by the new one (their inits
        failed, their acks dropped), for as long as its assignment did not change. ``only_up``: a smaller count is
        a broker's metadata not caught up yet (partitions are never taken away), kept for the next assignment.
        ``owned``: the highest partition assigned here, plus one: a count below it is such stale metadata too (it
        checked the rightly placed records of a partition just added, and of every partition past its count, as
        ``wrong-partition``); the count is then unknown (nothing checked) until it is asked again, a second later."""
        try:
            # Not on the consumer whose callback this is: a call on a handle inside its own callback clears the
            # state of the consume() that runs it (confluent-kafka 2.16), and a log line of librdkafka served
            # later in that consume() then aborts the process (with `debug` set, at every assignment).
            existing = topic_partitions(self._reading_consumer(), self.config.acker_topic, timeout_s=timeout_s)
            self._next_count_check = time.monotonic() + PARTITIONS_CHECK_S  # from the answer: it may have waited
            if existing and len(existing) < owned:  # stale: unknown until asked again soon (0: nothing checked)
                self._partition_count, self._next_count_check = 0, time.monotonic() + 1.0
                log.info("acker topic: %d partition(s) said, %d or more assigned: asked again", len(existing), owned)
            elif existing and (len(existing) > self._partition_count or not only_up):
                grown, self._partition_count = len(existing) != self._partition_count, len(existing)
                if grown:  # the producer too (`_refresh_producer`)
                    self._refresh_producer(self.config.acker_topic, 10.0)
        except KafkaException as error:  # keep the count known: raised here, it would end the service
            # Asked again later, not at once: each unanswered lookup holds the loop for its timeout.
            self._next_count_check = time.monotonic() + _LOOKUP_BACKOFF_S
            log.warning("cannot look the acker topic up: %s", kafka_error(error) or error)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owned = max([tp.partition for tp in partitions] + list(self._states), default=-1) + 1
        self._look_up_partition_count(30.0, owned=owned)
        now_ms = _steady_ms()  # the tick schedule's clock (`PartitionState`)
        interval_ms = int(self.config.tick_interval_s * 1000)
        taken_at = time.time()  # the status clock (`_publish_status`)
        with self._lock:
            for tp in partitions:
                state = PartitionState(tp.partition, self.config.tracker_config(), interval_ms, now_ms)
                self._states[tp.partition] = state
                self._outcome_logs[tp.partition] = OutcomeLog()
                # Rates from the takeover: the trees decided from the committed offset before the first status are in
                # its counters, and were left out of its rates (hundreds acked, at 0.4/s, just after a failover).
                self._last_status[tp.partition] = deque([(taken_at, self._counter_array(state))])
        self._partition_counts.clear()  # looked up again: partitions may have been added to a topic
        # Read back in the loop, before the first record is applied, not here: a rebalance callback should be quick.
        for tp in partitions:
            self._to_recover[tp.partition] = _ReadBack()
        log.info("assigned %s", sorted(tp.partition for tp in partitions))

    def _recover(self) -> None:
        """Read back what previous owners decided after the committed offsets of the partitions just assigned
        (`acker.outcome_log`), before any of their records is applied.

        A partition whose read-back fails (its committed offset, or an outcome topic, not read: a broker restarting,
        a leader moving) waits, paused, its records held back (`_held_back`), and is tried again after the delays of
        `_READ_BACK_AGAIN`. Replayed without those outcomes, a tree the committed offset cuts in two would be decided
        again, maybe otherwise (its ack published, then a timeout: a record done replayed), and the trees decided
        after the offset published again. After `READ_BACK_PATIENCE_S` it is replayed without what was not read."""
        now = time.monotonic()
        due = [p for p, waiting in self._to_recover.items() if waiting.at <= now and p in self._states]
        if not due:
            return
        # Those tried least first: partitions whose read-back fails slowly, due again within seconds, took every turn
        # (`READ_BACK_TURN_S`) and kept the others, maybe quick to read back, paused until the slow ones gave up.
        due.sort(key=lambda p: self._to_recover[p].tries)
        starts = self._read_back_starts(due)
        gone: set[tuple[str, int | None]] = set()  # outcome topics and partitions found missing in this turn
        for partition in due:
            if time.monotonic() - now >= READ_BACK_TURN_S:
                break  # the others at the next turn: still due, their records held back meanwhile
            waiting = self._to_recover[partition]
            final = waiting.since is not None and now - waiting.since >= READ_BACK_PATIENCE_S
            failure = self._read_back(partition, starts, gone, final=final)
            if failure is not None and not final:
                waiting.since = now if waiting.since is None else waiting.since
                waiting.tries += 1
                delay_s = _READ_BACK_AGAIN.delay_ms(waiting.tries) / 1000
                waiting.at = time.monotonic() + delay_s  # after the attempt, which may have waited 30 s
                log.warning("partition %d: %s: its records wait, read back again in %.0f s", partition, failure,
                            delay_s)  # fmt: skip
                continue
            if failure is not None:
                log.warning("partition %d: %s for %.0f s: replayed without them (trees decided after the committed "
                            "offset may be decided again)", partition, failure,
                            now - (waiting.since or now))  # fmt: skip
            del self._to_recover[partition]
            self._resume(partition)

    def _read_back(
        self, partition: int, starts: dict[int, Starts] | None, gone: set[tuple[str, int | None]], *, final: bool
    ) -> str | None:
        """Read the partition's outcomes back from ``starts`` (None: the committed offsets were not read) and tell
        its state; what failed, None if nothing did. With ``final``, what was read is told even when a topic was
        not, and that is not a failure."""
        if starts is None:
            return "committed offset not read"
        state = self._states[partition]
        if not starts.get(partition) or state.position is not None:
            return None
        try:
            reader = self._reading_consumer()
            acker = TopicPartition(self.config.acker_topic, partition)
            decided = read_decided(reader, acker, starts[partition], gone)
        except Exception as error:  # any failure waits, then replays without them as before
            return f"outcomes not read back ({error})"
        if decided.unread and not final:
            return f"outcomes of {', '.join(decided.unread)} not read back"
        state.recover(decided.anchors, decided.until, decided.since)
        with self._lock:
            self._outcome_logs[partition] = decided.log
        log.info("partition %d: %d trees decided after the committed offset", partition, len(decided.anchors))
        if decided.unread:
            log.warning("partition %d: outcomes of %s not read back: replayed without them", partition,
                        ", ".join(decided.unread))  # fmt: skip
        return None

    def _held_back(self, records: list[Message]) -> list[Message]:
        """``records`` without those of partitions still waiting for their read-back (`_recover`): each such
        partition's position goes back to its first record here, and it is paused until its read-back is done (or
        given up). A position that cannot be set back leaves its records here: applied without the read-back."""
        if not self._to_recover:
            return records
        kept: list[Message] = []
        held: dict[int, list[Message]] = {}
        for record in records:
            partition = record.partition()
            if partition in self._to_recover and record.error() is None:
                held.setdefault(partition, []).append(record)
            else:
                kept.append(record)
        waiting = [p for p in self._to_recover if p not in self._paused]
        if waiting:
            try:
                self.consumer.pause([TopicPartition(self.config.acker_topic, p) for p in waiting])
                self._paused.update(waiting)
            except KafkaException as error:  # its records are held back at each consume instead
                log.warning("partitions %s not paused: %s", waiting, error)
        for partition, mine in held.items():
            try:
                self.consumer.seek(TopicPartition(self.config.acker_topic, partition, mine[0].offset() or 0))
                continue
            except KafkaException as error:
                log.warning("partition %d: its records cannot wait for the read-back (%s): applied without it",
                            partition, error)  # fmt: skip
            self._to_recover.pop(partition, None)
            self._resume(partition)  # out of the except block (`acker.kafka.clients`)
            kept += mine
        return kept

    def _resume(self, partition: int) -> None:
        """Let ``partition``'s records come again, if `_held_back` paused it."""
        if partition not in self._paused:
            return
        self._paused.discard(partition)
        try:
            self.consumer.resume([TopicPartition(self.config.acker_topic, partition)])
        except KafkaException as error:
            log.debug("partition %d not resumed: %s", partition, error)

    def _reading_consumer(self) -> Consumer:
        """A consumer of this group that never joins it: it reads committed offsets and outcome topics."""
        if self._reader is None:
            self._reader = Consumer(
                self.config.client(
                    **{
                        "group.id": self.config.group,
                        "enable.auto.commit": False,
                        "client.id": f"acker-{self.instance}-reader",
                        "error_cb": self._refused_login,  # the first contact's (`_first_contact`)
                        # Asked about a topic that does not exist, a metadata request must not create it (with the
                        # broker's default partition count): see `_ensure_topics`. The default for consumers, set
                        # here because the pass-through settings may say otherwise.
                        "allow.auto.create.topics": False,
                        **READ_TO_SETTINGS,  # it reads outcome topics back, then looks up offsets
                        # What is written: the acker's outcomes are not in transactions, the replay job's resolutions
                        # are (passed over here). One left open (a driver dead mid-batch) held a read_committed
                        # read-back, and its end, where it began: trees decided after it were decided again.
                        "isolation.level": "read_uncommitted",
                    }
                )
            )
        return self._reader

    def _read_back_starts(self, partitions: list[int]) -> dict[int, Starts] | None:
        """Per assigned partition, where the outcomes to read back start, from the commit's metadata; None when the
        committed offsets could not be read."""
        try:
            committed = committed_offsets(
                self._reading_consumer(), [TopicPartition(self.config.acker_topic, p) for p in partitions], 30
            )
        except Exception as error:  # e.g. a timeout: the partitions wait (`_recover`)
            log.warning("committed offsets of %s not read: %s", sorted(partitions), error)
            return None
        for tp in committed:
            if tp.partition in self._states:
                self._committed.setdefault(tp.partition, tp.offset)  # not over one committed since (`_cover`)
        return {tp.partition: parse_metadata(tp.metadata) for tp in committed if tp.offset >= 0}

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self._stop_committed:
            self._commit_now([tp.partition for tp in partitions])
        now = time.time()
        # Delivered by the loop, or by `close`'s flush; a status topic refusing it (deleted under it, say) does not fail
        # the revoke (`_publish_status`).
        if not self._poisoned and self._status_topic_exists(now):
            self._publish_status(now, [tp.partition for tp in partitions], released=True)
        self._drop(partitions)
        log.info("revoked %s", sorted(tp.partition for tp in partitions))

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._drop(partitions)
        log.warning("lost %s without committing", sorted(tp.partition for tp in partitions))

    def _drop(self, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        # A later assignment reads back anew. ``_paused`` is kept: librdkafka keeps a partition paused across a revoke
        # and a new assignment (cooperative), so the partition is resumed when that read-back is done.
        for partition in gone:
            self._to_recover.pop(partition, None)
        # Planned commits of these partitions are stale: a later owner (maybe this instance again) decides anew.
        self._commits = [
            (barrier, [tp for tp in offsets if tp.partition not in gone]) for barrier, offsets in self._commits
        ]
        with self._lock:
            for tp in partitions:
                state = self._states.pop(tp.partition, None)
                self._outcome_logs.pop(tp.partition, None)
                self._committed.pop(tp.partition, None)
                self._tick_refused.pop(tp.partition, None)  # back here later: it ticks at once, as a new owner does
                if state is not None:
                    self._retired.counters += self._counter_array(state)
                    self._retired.ignored_ticks += state.ignored_ticks
                    self._last_status.pop(tp.partition, None)
                    self._read_at.pop(tp.partition, None)
            # Taken back before the next status interval, a partition showed its lag from before it left.
            self._lags = {p: lag for p, lag in self._lags.items() if p not in gone}

    # -- metrics --------------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        with self._lock:  # the retired counters too: a revoke moves a partition's counters there
            states = list(self._states.items())
            totals = self._retired.counters.copy()
            retired_ticks = self._retired.ignored_ticks
            for _, state in states:  # not while stand-ins are applied (`_apply`)
                totals += self._counter_array(state)
        owned = {p for p, _ in states}
        return Snapshot(
            counters=Counters(*totals.tolist()),
            pending={p: s.tracker.pending for p, s in states},
            lag={p: lag for p, lag in self._lags.items() if p in owned},  # as of the last status interval
            # Every reason, 0 until its first: a series that begins at 1 shows no increase to an alert.
            dead_letters={**dict.fromkeys(DEAD_LETTER_REASONS, 0), **self._dead_letters},
            ignored_ticks=retired_ticks + sum(s.ignored_ticks for _, s in states),
            latency=self.latency,
            reads_held=self.consumer.reads_held,  # a count the statistics callback keeps: no call on the handle
        )


def _keep_newest(entries: dict[str, _V], key: str, value: _V) -> list[str]:
    """Set ``entries[key]``, then forget the oldest entries (first set) beyond `_REFUSALS_KEPT`; their keys."""
    entries[key] = value
    forgotten = list(itertools.islice(entries, max(0, len(entries) - _REFUSALS_KEPT)))
    for old in forgotten:
        del entries[old]
    return forgotten
