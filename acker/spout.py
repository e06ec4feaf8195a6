"""The spout: each record of a source topic becomes the root of a tracked tuple tree.

For every record read, the spout starts a tree whose message id is the record's coordinates
``"<topic>/<partition>/<offset>"``, lets the user's emit function send the record's tuples downstream (by default
the record itself, to one output topic) with the anchor header (`acker.headers`), then sends the tree's init to the
acker partition of its anchor. It learns the fate of its trees from its own outcome topic.

Where the fully-processed watermark lives: the committed offsets of the consumer group ``<group>.acked``, a group
that never has members (nothing subscribes with it). The Spark commit job writes them; ``acker watermarks <group>``
(or Kafka's ``kafka-consumer-groups --describe --group <group>.acked``) then shows the fully-processed lag of the
source.
The spout reads its source in its group and its replay topic in ``<group>.replays`` (each topic's partitions spread
over the spout's processes on their own). It never commits either group's offsets: on every assignment it seeks each
partition to its watermark (or applies the reset policy where there is none; its replay topic always starts at its
first record, also under a watermark beyond its end), so after a
restart or a rebalance it re-emits every record that was not known to be fully processed: at-least-once, including
records whose init never reached the acker. A watermark below a partition's first record (retention deleted what it
waited on) starts at that first record.

Max pending (Storm's max.spout.pending): while ``max_pending`` of its trees are unfinished the spout stops reading
(pauses its partitions) and resumes as outcomes arrive.

Records that start no tree are fully processed at once, and the spout says so itself on its outcome topic (an
``ACK`` with ``acker_partition`` -1), so that the watermark passes them: records for which the emit function
emitted nothing, and every record it took in untracked mode (at-most-once, no acker traffic). A data message or an init
that cannot be delivered (librdkafka has retried it) fails the tree: a `Fail` to the acker, or, for an init sent
`INIT_ATTEMPTS` times without delivery, a ``FAILED`` outcome published by the spout. So does an exception from the
emit function (counted, ``emit_errors``), in either mode: the spout goes on, and the replay job replays the record,
then dead-letters it. An untracked record gets its ``FAILED`` from the spout, as its ``ACK``, when the function raised
before it emitted anything (or its headers could not be read): at-most-once is what untracked mode promises for what
happens downstream, not for a record the spout could not take; one it took in part is done, as a replay would send
again what it sent. Nothing is dropped silently. Either mode needs the replay job for its failed records: without it
the watermark waits at the first.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from acker import fail_reasons
from acker.config import ServiceConfig
from acker.core.ids import IdGenerator, partition_of
from acker.core.messages import Fail, Init
from acker.core.tuple_tree import UNTRACKED, SpoutTree
from acker.errors import ConfigError, ProtocolError, UnreadableHeadersError
from acker.headers import HeaderList, Headers, decimal, first, read_headers, text
from acker.kafka.acker_client import AckerClient, OutputTopics, partition_lookup
from acker.kafka.client_log import run_turns, serve_log_lines
from acker.kafka.clients import (
    LOOKUP_ATTEMPTS,
    TOO_LARGE,
    KafkaClientError,
    ProducerFailedError,
    TopicsNotCreatedError,
    TopicSpec,
    answering,
    committed_offsets,
    consume_available,
    end_offsets,
    ensure_topics,
    kafka_error,
    log_bounds,
    partition_count,
    partitions_named,
    produce,
    readable,
    refusal,
    release,
    topic_max_bytes,
    topic_partitions,
)
from acker.kafka.held_reads import WatchedConsumer
from acker.kafka.lookups import lookups
from acker.metrics import LatencyHistogram
from acker.retries import DEAD_LETTERED, MAX_HOLD_MS, NOT_BEFORE, ORIGIN, REDRIVEN, RESOLUTIONS
from acker.topics import check_spout_name, output_refusal
from acker.topics import outcome_topic as outcome_topic_spec
from acker.trouble import TroubleReport
from acker.watermarks import acked_group
from acker.wire import OUTCOME_RECORD_MAX_BYTES, OUTCOMES_PER_RECORD, WireError, decode_outcomes, encode_outcome_rows

log = logging.getLogger("acker.spout")
# Sends of an init lost (the first included) before the record is failed here. At most
# `acker.kafka.acker_client.RESENDS` + 1: the fail of a record whose emit function raised goes with each send of
# its init, and is given up after that many.
INIT_ATTEMPTS = 3


_RESETS = dict.fromkeys(("earliest", "smallest", "beginning"), "earliest")
_RESETS.update(dict.fromkeys(("latest", "largest", "end"), "latest"))


@dataclass(frozen=True)
class SpoutSettings:
    # The spout id: its outcomes go to <outcome_prefix><name>, its replays come from <replay_prefix><name>. One spout
    # of that name per acker service: two pipelines' spouts of one name would read each other's replayed records.
    name: str
    source_topic: str
    output_topic: str
    group: str = ""  # default: the spout's name
    max_pending: int = 10_000
    tracked: bool = True
    # Where to start a partition that has no watermark yet. "latest" skips the records already there, which then count
    # as done: those of a partition added to the topic are written before the spout sees it, and are never processed.
    reset: str = "earliest"
    # How long a tree waits for its outcome before the spout times it out (`Spout._expire_pending`): None =
    # `pending_timeout_s` of the acker's settings; 0 = for ever. Set it above the longest a tree lives, resets
    # included (a bolt's `reset_timeout`, and every update of a tree with the acker's `relocate_on_update`).
    pending_timeout_s: float | None = None
    # Topics an emit function writes besides ``output_topic``: the producer's record batches fit them too (a topic
    # written and not named here is checked at its first record, `OutputTopics.check`).
    other_output_topics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # librdkafka's other names for the two policies: taken as them (compared literally, "smallest" started a
        # partition without a watermark at its end, and wrote that end as its watermark: its records never read).
        reset = _RESETS.get(self.reset.lower())
        if reset is None:  # "error" too: a partition without a watermark would stop the spout at every assignment
            raise ConfigError(f"spout {self.name}: reset {self.reset!r} is not earliest or latest")
        object.__setattr__(self, "reset", reset)
        if self.max_pending < 1:  # 0: a spout that never reads
            raise ConfigError(f"spout {self.name}: max_pending {self.max_pending} is not a positive count")
        timeout = self.pending_timeout_s
        if timeout is not None and not timeout >= 0:  # negative (or NaN): max_pending would bound nothing
            raise ConfigError(f"spout {self.name}: pending_timeout_s {self.pending_timeout_s} is not 0 or more")

    @property
    def consumer_group(self) -> str:
        return self.group or self.name

    @property
    def watermark_group(self) -> str:
        return acked_group(self.consumer_group)

    @property
    def replay_group(self) -> str:
        """The group that shares the replay topic's partitions among the spout's processes (`Spout.replays`)."""
        return f"{self.consumer_group}.replays"


# The spout reads outcomes only to count its pending trees: it asks the broker to answer a fetch once it holds
# OUTCOME_BYTES_PER_PENDING bytes per pending tree allowed (64 KB at most, at max_pending 8,192 and above), or after
# 100 ms, instead of at every outcome record the service writes. In the word count (max_pending 10,000: 64 KB) this
# cut the broker's CPU per word in each of 4 paired runs, and the tracked mode ran faster in 3 of them
# (docs/benchmarks.md). An outcome takes ~16 bytes in its record, so a fetch returns once about half of max_pending
# trees were decided: a spout paused at max_pending resumes with half its window free. The price: when fewer trees than
# that finish (light traffic), they leave the pending count up to 100 ms late. Pass-through settings override these.
OUTCOME_BYTES_PER_PENDING = 8
OUTCOME_FETCH_MAX_BYTES = 65536
OUTCOME_FETCH_WAIT_MS = 100

# How often the spout looks for partitions added to its outcome topic. The service keys outcome records by acker
# partition, and added partitions take some keys over: outcomes there would never free their trees' room.
OUTCOME_PARTITIONS_CHECK_S = 30.0
# A tree whose acker partition has decided nothing started after it waits on for this many pending timeouts at most
# (an acker's outage: the spout stops at max_pending meanwhile), then is timed out all the same: were that partition's
# outcomes lost for good (records nobody can read), the spout would otherwise stop for good.
WAIT_TIMEOUTS = 4
# The records told a nack (``on_outcome``) whose resolution by the replay job (``REPLAYED``, ``DEAD_LETTERED``) the
# spout waits for, at most: the oldest forgotten first (a spout without a replay job would keep them all). About
# 25 MB when full; the replay job resolves a nack within seconds, so a spout beside it keeps few.
UNRESOLVED_KEPT = 100_000


def pending_timeout_s(config: ServiceConfig) -> float:
    """How long a tree waits for its outcome, by default: twice the longest a pending tree lives in the acker
    (T·(1 + 1/(B−1))), and a minute for an acker instance's failover. Past that, once its acker partition has decided
    a tree started at least that longest life after it, its outcome was most likely lost (an unreadable outcome
    record), and the spout times the tree out itself, as Storm's spout times out its pending tuples
    (`Spout._expire_pending`). Unlike Storm's, this spout does not see a bolt's `reset_timeout`, nor the restart of a
    tree's timeout at each of its updates (an acker run with ``relocate_on_update``): a tree kept alive so for longer
    is timed out too (its record replayed while it is still being processed), and its outcome, when it comes, is not
    counted."""
    return 2 * config.tree_lifetime_s + 60.0


def decided_margin_s(config: ServiceConfig, pending_timeout_s: float) -> float:
    """How much later than a pending tree a tree decided in its acker partition must have started to be the
    evidence `Spout._expire_pending` asks for before it times the pending one out: the longest a tree lives in the
    acker (or the pending timeout, when one below it was asked for).

    The acker reads its partition in order, ticks among the messages (one a tick interval while it keeps up: a
    lagging acker writes its next tick an interval after it read the last). Having decided a tree started so much
    later, an acker that kept up had expired the pending one; one down meanwhile shows that the pending one has taken
    longer than a tree lives (its acks come after those of the tree started so much later); one lagging by more than a
    tick interval may not have yet, and its outcome comes after the spout's own (as after a failover). A tree started
    just after it and decided before an outage is no evidence: trees finish out of order (with it, the trees
    overtaken before an acker went down were replayed at their timeout while it was away, most of them processed
    already)."""
    return min(config.tree_lifetime_s, pending_timeout_s)


# Room in a replay topic's records for what a copy carries beside the record (`acker.retries`' headers: origin,
# attempt, reason, spout, the failure's detail of 500 characters at most, not-before): a few hundred bytes to 2.5 KB.
REPLAY_HEADERS_ROOM = 4096
_TOPIC_MAX_BYTES = 2**31 - 1  # max.message.bytes is an int: a source's "no limit" plus the room would be refused
_LIMIT_REFUSED = frozenset({KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION})


def make_replay_topic(config: ServiceConfig, settings: SpoutSettings, partitions: int) -> None:
    """The spout's replay topic, made when missing: as many partitions as its source, and records as large as the
    source takes, with room for the replay headers. Made with the broker's default limit, a record the source took
    but its replay topic refused was dead-lettered at its first nack (``too-large``, cut to 64 KB). Where the
    source's limit cannot be read (no right to describe it), or the cluster refuses that limit (a policy, a cap of a
    managed service), the broker's default, said."""
    plain = TopicSpec(config.replay_topic(settings.name), partitions, config.replication_factor)
    try:
        limit = min(topic_max_bytes(config.client(), settings.source_topic) + REPLAY_HEADERS_ROOM, _TOPIC_MAX_BYTES)
    except KafkaClientError as error:
        log.debug("a replay topic made now gets the broker's record size limit: that of %s not read (%s)",
                  settings.source_topic, error)  # fmt: skip
        ensure_topics(config.client(), [plain])
        return
    try:
        ensure_topics(config.client(), [replace(plain, config={"max.message.bytes": str(limit)})])
    except TopicsNotCreatedError as refused:
        cause = refused.failed.get(plain.name)
        if cause is None or cause.code() not in _LIMIT_REFUSED:
            raise
        log.warning("replay topic %s made with the broker's record size limit: max.message.bytes %d refused "
                    "(%s); copies of larger records are dead-lettered (too-large)",
                    plain.name, limit, cause.str())  # fmt: skip
        ensure_topics(config.client(), [plain])


def outcome_consumer(config: ServiceConfig, settings: SpoutSettings, group: str) -> dict[str, Any]:
    """The configuration of the spout's outcome consumer (see `OUTCOME_BYTES_PER_PENDING`)."""
    fetch = {
        "fetch.min.bytes": max(1, min(OUTCOME_FETCH_MAX_BYTES, OUTCOME_BYTES_PER_PENDING * settings.max_pending)),
        "fetch.wait.max.ms": OUTCOME_FETCH_WAIT_MS,
    }
    # Assigned, never subscribed, and never committing: a fresh group each start, which would keep its offsets
    # (and show in the group listings) for the broker's offset retention. Read uncommitted: the acker's outcomes are
    # not written in transactions; the replay job's resolutions are (rows the spout passes over, anchor 0), and one
    # left open (a driver dead mid-batch) hid every later outcome from a read_committed spout until the broker
    # aborted it: no room freed, the spout stopped at max_pending.
    return config.stream_consumer(
        fetch, **{"group.id": group, "enable.auto.commit": False, "isolation.level": "read_uncommitted"}
    )


class Emitter:
    """Given to the emit function: ``emit`` sends one tuple of the record's tree to a topic, while the function runs.

    Kept and called later, it raises `ProtocolError`: the record's tree is started (its init sent) when the function
    returns, and a tuple emitted after that would not be in it."""

    __slots__ = ("_spout", "_tree", "closed", "emitted", "source")

    def __init__(self, spout: Spout, tree: SpoutTree | None, source: str) -> None:
        self._spout, self._tree, self.closed = spout, tree, False
        self.emitted = 0  # tuples sent
        # The source record's coordinates, ``<topic>/<partition>/<offset>``, a replayed copy's origin's: one id for
        # every attempt of a record (the id `on_outcome` is told), for a sink to deduplicate on what a replay re-sends.
        self.source = source

    def emit(self, topic: str, value: bytes | None, key: bytes | None = None, headers: Headers | None = None) -> None:
        if self.closed:
            raise ProtocolError("emit is only for the record being emitted: its emit function has returned")
        if topic not in self._spout._outputs.seen:
            self._spout._outputs.check(topic, self._spout.counters)
        ids = self._tree.emit() if self._tree is not None else UNTRACKED
        counters = self._spout.counters
        self._spout.acker.produce_anchored(
            topic, value, key, headers, ids, on_failure=lambda _: counters.update(["data_delivery_failures"])
        )
        counters["emitted"] += 1
        self.emitted += 1


def _output_refusal(config: ServiceConfig, settings: SpoutSettings, topic: str) -> str | None:
    """Why a spout may not emit to ``topic`` (`acker.topics.output_refusal`), or to its own source or replay topic
    (each tuple read back as a new record, without end) or outcome topic, by name whatever the prefixes."""
    if topic == settings.source_topic:
        return "it is the spout's own source topic: each tuple would be read back as a new record"
    if topic == config.replay_topic(settings.name):
        return "it is the spout's own replay topic: each tuple would be read back as a new record"
    if topic == config.outcome_topic(settings.name):
        return "it is the spout's own outcome topic, written by the acker alone"
    return output_refusal(config, topic)


EmitFunction = Callable[[Message, Emitter], None]
# Storm's ISpout.ack and fail: told (the record's id, outcome: ACK, FAILED, TIMEOUT or OVERLOAD) of each record this
# spout process started, once its outcome is known here (`Spout`).
OutcomeFunction = Callable[[str, str], None]
DirectRow = tuple[str, int, str, int]  # an outcome the spout decides itself: (outcome, anchor, msg_id, latency ms)


class Spout:
    _told_as: dict[str, str]  # msg_id of a pending replay -> the id on_outcome is told (its origin)
    # msg_id told a nack -> the id it was told under, until the replay job's resolution of it is read (`_resolved`)
    _unresolved: OrderedDict[str, str]
    _odd_slot_to_replays = 1  # whose turn an odd room's last slot is (`step`): 1 the replays', 0 the source's

    def __init__(
        self,
        config: ServiceConfig,
        settings: SpoutSettings,
        emit: EmitFunction | None = None,
        ids: IdGenerator | None = None,
        on_outcome: OutcomeFunction | None = None,
    ) -> None:
        """``on_outcome`` (Storm's ``ack`` and ``fail`` of a spout): called in the spout's thread with the record's id
        and the outcome of each record it started, once known here: read from its outcome topic (the acker's, or the
        spout's own ``FAILED`` for an init that could not be delivered), timed out by the spout itself
        (`_expire_pending`), or at once for a record that started no tree (``ACK``, or ``FAILED`` when its emit function
        raised). The id is the record's coordinates, and a replay's (a copy read from the replay topic) those of the
        record it replays (its ``acker.replay.origin``): each attempt of a record is told under one id. When the replay
        job dead-letters a record after its last attempt's nack, the spout process that told that nack is told
        ``DEAD_LETTERED`` too (read from its outcome topic, where the job resolves each nack in the nack's partition,
        after it; of the last `UNRESOLVED_KEPT` nacks told): the record's final outcome. A record read again (a
        rebalance that gave its partition back) is told for its new tree only; an outcome that comes after a spout's own
        timeout is not told, nor one of a tree pending when the spout stops (whoever starts next reads the record
        again). What it does is not part of the guarantee: the Spark jobs commit and replay from the outcome topic
        whatever it does; an exception from it is counted (``on_outcome_errors``, said once a minute with the first) and
        the spout goes on."""
        check_spout_name(config, settings.name)
        self.config, self.settings = config, settings
        self._emit = emit or self._forward
        self._on_outcome = on_outcome
        self._told_as, self._unresolved = {}, OrderedDict()
        self._ids = ids or IdGenerator()
        self.pending: dict[str, int] = {}  # msg_id → anchor of the trees not finished yet
        # (give up at, msg_id, anchor) in the order the trees started: a deadline queue over `pending`.
        self._pending_deadlines: deque[tuple[float, str, int]] = deque()
        self._started_at: dict[int, float] = {}  # anchor → when its tree started, for the trees in `pending`
        # acker partition → when the latest tree decided there had started: the evidence that the acker has moved
        # past the trees of that partition started before, which `_expire_pending` asks for before it times one out.
        self._decided_upto: dict[int, float] = {}
        timeout = settings.pending_timeout_s
        self._pending_timeout_s = pending_timeout_s(config) if timeout is None else (timeout or float("inf"))
        self._decided_margin_s, self._next_waiting_said = decided_margin_s(config, self._pending_timeout_s), 0.0
        self.counters: Counter[str] = Counter()
        self._direct: list[DirectRow] = []  # outcomes the spout decides itself
        self._direct_reasons: dict[str, str] = {}  # msg_id -> why, for a FAILED of those (`acker.fail_reasons`)
        self._direct_rows = OUTCOMES_PER_RECORD  # a record's rows, halved when one is refused as too large
        self._init_attempts: dict[int, int] = {}
        self._paused = self._closed = False  # waiting at max_pending (`paused`); `close` called
        # Trouble counted and said at most once a report interval, each report with its own example (`acker.trouble`):
        # an outcome record it cannot read (one line a record flooded the log of a spout whose outcome topic another
        # producer wrote to, and said not where); an exception of `on_outcome`; a source record the emit function
        # raised on, or whose headers cannot be read; an init not delivered (a line a record flooded the log of a
        # spout failing every record, a bug in its function or a broker away, and said no traceback).
        self._reports = tuple(
            TroubleReport(log, f"spout {settings.name}", names)
            for names in (("unreadable_outcomes",), ("on_outcome_errors",), ("emit_errors", "unreadable_headers"),
                          ("init_delivery_failures",))
        )  # fmt: skip
        self._trouble, self._told_trouble, self._start_trouble, self._init_trouble = self._reports
        # Storm's complete latency of the trees it saw acked: from starting a tree to reading its ACK. Replaced, not
        # changed, at each outcome record: a scrape in another thread reads one whole (`acker.stage_metrics`).
        self.complete_latency = LatencyHistogram()
        # Every delivery callback here acts on failures only (`ServiceConfig.stage_producer`). Its record batches fit
        # every topic it writes (`fitted_batch_size`): a batch larger than its topic takes is refused whole.
        own = [config.acker_topic, config.outcome_topic(settings.name)]
        # First: a login refused said as such within seconds, a cluster away within 10 s. Then the source, before
        # any topic is made: a source misnamed (a typo) left a spout's outcome topic made under the wrong name.
        answering(config.client(), config.acker_topic)
        partitions = partition_count(config.client(), settings.source_topic)
        self._outputs = OutputTopics(
            config.client(),
            f"spout {settings.name}",
            "name the topic in SpoutSettings(..., other_output_topics=...)",
            [settings.output_topic, *settings.other_output_topics],
            None,
            internal=own,
            refused=functools.partial(_output_refusal, config, settings),
        )
        self.producer = Producer(config.stage_producer(**self._outputs.fitted))
        self.acker = AckerClient(
            self.producer,
            config.acker_topic,
            partition_count(config.client(), config.acker_topic),
            linger_s=config.ack_linger_ms / 1000,
            on_failure=self._acker_delivery_failed,
        )
        # Cooperative rebalancing by default, as the service and the bolts: with the eager protocol every rebalance
        # (a spout process joining) took every partition away and gave it back, and the spout read the records of its
        # pending trees again on the partitions it kept. The pass-through settings may choose another assignor, or
        # the new group protocol; with either incremental one an assignment only adds partitions.
        # The reset policy is applied in `_on_assign`, where a partition has no watermark (or one beyond its end).
        # The consumer's own reset moves a position that falls out of range as the spout goes (retention deleted the
        # records it was to read, while it lagged or waited at max_pending): to the first record left, never to the
        # end, past records that are still there and would never be read.
        source = config.stream_consumer(
            {"partition.assignment.strategy": "cooperative-sticky"},
            **{"group.id": settings.consumer_group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
               # The replay job writes the replay topic in transactions: an aborted one's copies are not replays.
               "isolation.level": "read_committed"},
        )  # fmt: skip
        self._incremental = config.incremental_assignment(source)
        self.consumer = WatchedConsumer(source, config.open_transaction_warn_s)
        # The replay topic in a group of its own: one group subscribed to both topics balances their partitions
        # together, not each topic (the sticky assignor counts a member's partitions, whatever their topic), and a
        # second spout process took the replay topic's partitions alone, or the source's alone, leaving the first
        # nothing to read: scaling out shared nothing. The same settings otherwise; it never commits either.
        self.replays = WatchedConsumer({**source, "group.id": settings.replay_group}, config.open_transaction_warn_s)
        self._consumers = (self.replays, self.consumer)  # what max_pending pauses, and the paused loop polls
        self._watermarks = Consumer(
            config.client(**{"group.id": settings.watermark_group, "enable.auto.commit": False})
        )
        outcome_group = f"{settings.name}.outcomes-{uuid.uuid4().hex[:8]}"
        self.outcomes = Consumer(outcome_consumer(config, settings, outcome_group))
        self.acker.watch_partitions(partition_lookup(self.producer, config.acker_topic))
        outcome_topic = config.outcome_topic(settings.name)
        # From the current ends, resolved now: OFFSET_END would be resolved when the first fetch starts, possibly
        # after the outcomes of the first trees were written, and those would never be seen.
        parts = [TopicPartition(outcome_topic, p) for p in range(self._outcome_partition_count())]
        ends = end_offsets(self.outcomes, parts)
        self.outcomes.assign(
            [TopicPartition(outcome_topic, tp.partition, end) for tp, end in zip(parts, ends, strict=True)]
        )
        self._outcome_topic, self._outcome_partitions = outcome_topic, {tp.partition for tp in parts}
        self._next_outcome_check = time.monotonic() + OUTCOME_PARTITIONS_CHECK_S
        self._held: dict[tuple[str, int], int] = {}  # replay partitions held until a record's not-before (ms)
        # Always read, whether or not a replay job runs: a copy written there stands for a record whose outcome is
        # already REPLAYED (the watermark passed it), so a spout that did not read it would lose the record.
        self._replay_topic = config.replay_topic(settings.name)
        self._replay_of = f"{settings.source_topic}/".encode()  # how the origin of this spout's replays starts
        make_replay_topic(config, settings, partitions)
        for consumer, topic in ((self.consumer, settings.source_topic), (self.replays, self._replay_topic)):
            consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _outcome_partition_count(self) -> int:
        """The outcome topic's partitions, the topic created first if it does not exist: the service creates it before
        its first outcome, which needs a spout's init, and a spout that could not start without it went round in
        circles on a fresh deployment until somebody ran ``acker topics create``."""
        spec = outcome_topic_spec(self.config, self.settings.name)
        if spec.name in ensure_topics(self.config.client(), [spec]):  # made here: the metadata may not show it all yet
            log.info("created outcome topic %s (%d partitions)", spec.name, spec.partitions)
            return spec.partitions
        return partition_count(self.config.client(), spec.name)

    # -- the loop -------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        run_turns(stop, lambda: self.step(0.1), self.close)

    def close(self) -> None:
        """Deliver what is in flight (30 s at the most), leave the groups, and free the producer if it delivered
        everything (`release`). A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.acker.flush(30)  # its delivery callbacks may add outcomes to publish (inits that failed)
            for _ in range(3):  # a direct outcome whose delivery failed is queued again
                try:
                    self._publish_direct(until=time.monotonic() + 30)
                except BufferError:  # no room in 30 s (the broker away, the queue full): left unpublished, said below
                    break
                self.producer.flush(30)
                if not self._direct:
                    break
            unsent = self.acker.flush(0)  # what is left: in the producer, or batches it refused
            if unsent or self._direct:  # nothing lost: the watermark waits for their trees' source records
                log.warning("stopped with %d acker record(s) undelivered and %d outcome(s) unpublished: nothing is "
                            "lost, their trees' source records are replayed (those failed already) or read again at "
                            "the next start", unsent, len(self._direct))  # fmt: skip
            for report in self._reports:
                report.check(self.counters, at_once=True)  # what close's flush failed too (inits), with its example
            log.info("spout %s stopped: %s", self.settings.name, dict(sorted(self.counters.items())))
        finally:  # a producer failed for good (the flush raises) still leaves the groups now, not at their sessions'
            try:  # timeout: the partitions' next owner starts at once
                self.replays.close()
            finally:
                self.consumer.close()
                self.outcomes.close()
                self._watermarks.close()
        release(self.producer, f"spout {self.settings.name}")

    @property
    def paused(self) -> bool:
        """Waiting at ``max_pending``: its partitions paused until outcomes give room back."""
        return self._paused

    def step(self, timeout_s: float) -> int:
        """Read outcomes, then (unless too many trees are pending) source records. Returns the records read."""
        timeout_s = self.acker.input_wait(timeout_s)  # not waiting longer for input than inits and acks linger
        self._read_outcomes()
        now = time.monotonic()
        self._expire_pending(now)
        if now >= self._next_outcome_check:
            self._next_outcome_check = now + OUTCOME_PARTITIONS_CHECK_S
            self._watch_outcome_partitions()
            serve_log_lines(self._watermarks)  # never assigned: asked for committed offsets only
        self._release_held()
        self._pause_or_resume()
        room = min(500, self.settings.max_pending - len(self.pending))
        if room > 0:
            # Both consumers at every step (but one whose room of 1 a replay took), the replays' buffered records
            # taking half the room at most: a backlog of replays that took it all kept the source's consumer from
            # being called, for minutes after an outage (no source read, its rebalances stalled, and past
            # max.poll.interval.ms it left its group and read its pending records again). The source's wait is the
            # step's, unless replays came. An odd room's last slot goes to each in turn: the replays' half rounded
            # down was none at a room of 1 (max_pending 1, or 2 with outcomes coming one at a time), and their
            # copies were never read, their records lost.
            share = (room + self._odd_slot_to_replays) // 2
            self._odd_slot_to_replays ^= room & 1
            records = self.replays.consume(share, timeout=0) if share else []
            if len(records) < room:  # (asked for none, `consume_available` would read one all the same)
                records += consume_available(self.consumer, room - len(records), 0 if records else timeout_s)
        else:  # paused: serve the consumers' callbacks (rebalances), read nothing, wait a little for outcomes
            # An event all the same, taken as a record is (`readable`): a fatal error (a static member fenced by its
            # successor) is reported once, and dropped here the spout ran on, reading nothing, for good.
            records = [event for consumer in self._consumers if (event := consumer.poll(0)) is not None]
            self._read_outcomes(timeout_s)
        self._take(records, int(time.time() * 1000))
        self._publish_direct()
        self.acker.poll()
        return len(records)

    def _take(self, records: list[Message], now_ms: int) -> None:
        """Start the trees of ``records``, but those held (`_hold`), whose partitions are read again from them. Each
        tree's wait for its outcome starts when its own record is started, not when the batch was read: a slow emit
        function would otherwise take the time of the records before from the last ones' wait."""
        for record in records:
            if not readable(record, log, "source consumer"):
                continue
            headers = read_headers(record)
            if self._hold(record, headers, now_ms):  # whether its headers can be read or not
                continue
            origin = None  # a replay's: its record is told under the id of the record it replays, and emitted so
            if headers is not None and record.topic() == self._replay_topic:
                origin = text(headers, ORIGIN) or None  # an empty one names nothing: its own coordinates then
            self._start(record, time.monotonic(), unreadable=headers is None, origin=origin)
            self.acker.poll_due()  # a slow emit function: inits go out at their linger, not after the whole batch

    def _start(self, record: Message, now: float, *, unreadable: bool = False, origin: str | None = None) -> None:
        """Start the record's tree. If the emit function raises (the record's fault or the function's), the tree is
        failed rather than the spout stopped, as a bolt fails an input its function raises on: a fail and its init (the
        edges of the tuples emitted before the raise) go to the acker, which nacks it ``FAILED``, and the replay
        job replays the record, then dead-letters it. A record that starts no tree (nothing emitted, or untracked)
        gets its outcome from the spout itself: ``ACK``, or ``FAILED`` when it raised (untracked: before it emitted
        anything).

        A record whose headers cannot be read (`acker.headers.read_headers`: a header name that is not UTF-8) is
        taken as one the emit function raised on, before it is called: it could only be forwarded without its
        headers. The replay job dead-letters it as such (``unreadable-headers``), with its coordinates, where it lies
        whole.

        ``origin``: the coordinates of the record a replay replays, the id ``on_outcome`` is told its outcome under
        (`Emitter.source`)."""
        msg_id = f"{record.topic()}/{record.partition()}/{record.offset()}"
        self.counters["read"] += 1
        # A tree of the record read before (a rebalance gave its partition back) no longer counts, whether or not the
        # record starts one now: its outcome neither frees room nor is told.
        replaced = self.pending.pop(msg_id, None)
        if replaced is not None:
            self._started_at.pop(replaced, None)
        if origin is not None and self._on_outcome is not None:
            self._told_as[msg_id] = origin
        tree = SpoutTree(self.settings.name, msg_id, self._ids) if self.settings.tracked else None
        emitter = Emitter(self, tree, origin or msg_id)
        raised: str | None = None  # the reason of its fail, when the function raised
        try:
            if unreadable:
                self.counters["unreadable_headers"] += 1
                raise UnreadableHeadersError("a header name is not UTF-8: its headers cannot be read")
            self._emit(record, emitter)
        except ProducerFailedError:  # a producer that takes no more records: no record's fault, the spout stops
            raise
        except Exception as error:
            raised = fail_reasons.reason_of(error, f"spout {self.settings.name}")
            self.counters["emit_errors"] += 1
            self._start_trouble.example(msg_id, error)  # failed: said with the next count, traceback included
        finally:
            emitter.closed = True
        # A root whose produce raised (a value that is not bytes) counts: its edge is in the tree, and its fail was
        # sent, which only the init makes a decision of (without it, an entry that expires without one).
        if tree is None or tree.empty:
            if raised is None:
                self.counters["done_at_once"] += 1
            # Untracked, a record is failed (replayed, then dead-lettered) only if nothing of it was sent: a replay
            # would send again what was (at-most-once downstream), so one taken in part is done.
            failed = raised is not None and (tree is not None or not emitter.emitted)
            self._direct.append(("FAILED" if failed else "ACK", tree.anchor if tree else 0, msg_id, 0))
            if failed and raised is not None:
                self._direct_reasons[msg_id] = raised
            self._tell(msg_id, "FAILED" if failed else "ACK")
            return
        self.pending[msg_id] = tree.anchor
        self._started_at[tree.anchor] = now
        deadlines = self._pending_deadlines
        deadlines.append((now + self._pending_timeout_s, msg_id, tree.anchor))
        if len(deadlines) > 2 * len(self.pending) + 1024:  # mostly trees decided since: keep the pending ones
            self._pending_deadlines = deque(d for d in deadlines if self.pending.get(d[1]) == d[2])
        # The fail before the init, on the same acker partition (read in that order): the acker then nacks the tree
        # `FAILED` when the init comes, whatever acks of its children came first. After it, children the bolts took
        # and acked before the acker read the fail completed the tree with the init, and the record was acked. Both in
        # one record (`send_all`): written or lost together, so that the init never reaches the acker without the fail.
        if raised is not None:
            self.acker.send_all([Fail(tree.anchor), tree.init()], raised)
        else:
            self.acker.send(tree.init())

    def _hold(self, record: Message, headers: HeaderList | None, now_ms: int) -> bool:
        """True if ``record`` must wait: a replay (read from this spout's replay topic) whose backoff has not passed
        (its partition is paused and rewound to it until then), or one behind such a record, whether or not its
        headers can be read (``None``): it is read again when the hold ends."""
        key = (record.topic() or "", record.partition() or 0)
        if key in self._held:
            return True
        if headers is None:
            return False
        # Only this spout's replay topic: the headers of a source record are its producer's, e.g. another spout's
        # replay context, forwarded by that spout downstream to this one's source.
        if key[0] != self._replay_topic:
            return False
        # The first of a header given twice, as `acker.retries` reads it (which counts the attempts by the same one).
        not_before = decimal(first(headers, NOT_BEFORE))
        if not_before is not None and not_before > now_ms + MAX_HOLD_MS:  # a corrupt header must not stop it
            self.counters["implausible_not_before"] += 1
            log.warning("%s/%d/%d: not-before %d is more than %d ms away: read now", *key, record.offset(), not_before,
                        MAX_HOLD_MS)  # fmt: skip
        elif not_before is not None and not_before > now_ms:
            tp = TopicPartition(key[0], key[1], record.offset() or 0)
            self.replays.pause([tp])
            self.replays.seek(tp)
            self._held[key] = not_before
            self.counters["held"] += 1
            return True
        # Said when it is processed, not when it is held (it is read again then).
        origin = first(headers, ORIGIN)
        if isinstance(origin, bytes) and not origin.startswith(self._replay_of):
            self._foreign(key, record, origin, headers)
        return False

    def _foreign(self, key: tuple[str, int], record: Message, origin: bytes, headers: HeaderList) -> None:
        """A replay of another source's record, processed all the same (it cannot be told whose it is to hand back).
        Re-driven (``acker dlq redrive``, which with ``--spout`` sends a record to any spout on purpose), it is
        counted; otherwise another pipeline's spout has this one's name (`SpoutSettings`), which is counted and said
        once (that pipeline's re-driven records alone would not say it)."""
        if first(headers, REDRIVEN) is not None:
            self.counters["redriven_from_other_sources"] += 1
            return
        self.counters["foreign_replays"] += 1
        if self.counters["foreign_replays"] == 1:
            log.warning("%s/%d/%d replays %s, not a record of %s: does another pipeline's spout have this one's "
                        "name, %r? Each needs its own.", *key, record.offset(), origin.decode(errors="replace"),
                        self.settings.source_topic, self.settings.name)  # fmt: skip

    def _release_held(self) -> None:
        now_ms = int(time.time() * 1000)
        due = [key for key, until in self._held.items() if until <= now_ms]
        for key in due:
            del self._held[key]
        if due and not self._paused:
            self.replays.resume([TopicPartition(t, p) for t, p in due])

    def _forward(self, record: Message, emitter: Emitter) -> None:
        emitter.emit(self.settings.output_topic, record.value(), record.key(), record.headers())

    def _pause_or_resume(self) -> None:
        full = len(self.pending) >= self.settings.max_pending
        if full != self._paused:
            for consumer in self._consumers:
                assignment = [tp for tp in consumer.assignment() if (tp.topic, tp.partition) not in self._held]
                (consumer.pause if full else consumer.resume)(assignment)
            self._paused = full
            self.counters["pauses" if full else "resumes"] += 1

    def _read_outcomes(self, timeout_s: float = 0) -> None:
        for record in self.outcomes.consume(1000, timeout=timeout_s):
            if not readable(record, log, "outcome consumer"):
                continue
            try:
                decoded = decode_outcomes(record.value() or b"")
            except WireError as error:
                self.counters["unreadable_outcomes"] += 1
                self._trouble.example(f"outcome record {record.topic()}/{record.partition()}/{record.offset()}", error)
                continue
            by_acker = decoded.acker_partition >= 0  # an acker's record: not the spout's own rows (inits it failed)
            read_at, acked_after = time.monotonic(), []
            for outcome, msg_id, tree in zip(decoded.outcomes, decoded.msg_ids, decoded.anchors, strict=True):
                self._init_attempts.pop(tree, None)  # decided: an init sent again was delivered after all
                # Only the outcome of the tree pending now frees room: after a rebalance a record is read again as a
                # new tree, and the old tree's outcome (or a replay job's REPLAYED row, anchor 0) must not.
                anchor = self.pending.get(msg_id)
                if anchor == tree:
                    del self.pending[msg_id]
                    started = self._started_at.pop(tree, None)
                    if started is not None and by_acker:  # evidence that this acker partition has moved on
                        part = decoded.acker_partition
                        self._decided_upto[part] = max(started, self._decided_upto.get(part, started))
                    if started is not None and outcome == "ACK":
                        acked_after.append(read_at - started)
                    self.counters["acked" if outcome == "ACK" else f"nacked_{outcome.lower()}"] += 1
                    self._tell(msg_id, outcome)
                elif outcome in RESOLUTIONS and self._unresolved:
                    self._resolved(msg_id, outcome)
            if acked_after:
                self.complete_latency = self.complete_latency.observed(np.array(acked_after) * 1000)
        for report in self._reports:
            report.check(self.counters)

    def _expire_pending(self, now: float) -> None:
        """Time out the trees pending for `pending_timeout_s` without an outcome, when their acker partition has
        decided a tree started a tree's life after them (`decided_margin_s`): as Storm's spout fails a tuple pending
        for longer than the message timeout, a ``TIMEOUT`` the spout decides itself, so that the record is replayed,
        and the watermark, which waits for an outcome of every offset, moves on. Their outcome was then most likely
        lost (an outcome record nobody could read, or one the broker refused and the service dead-lettered); if it
        comes after all, the record has two, as after an acker's failover (the replay job replays a message id once,
        the commit job takes either as done).

        A tree whose acker partition has decided nothing started so long after it waits on: the acker is behind, or
        down (a failover, an outage), and will decide it. Timed out then, every pending tree would be replayed while
        still being processed, the room given back filled with trees timed out in turn, and records replayed until
        dead-lettered for the length of the outage; kept, the spout stops at ``max_pending`` until the acker is back
        (Storm's backpressure, without its replays)."""
        deadlines, given_up, waiting, overdue_count = self._pending_deadlines, [], 0, 0
        timeout_ms = int(min(self._pending_timeout_s, 2**31) * 1000)
        for _ in range(len(deadlines)):  # those there now: one re-armed is not looked at again in this pass
            if deadlines[0][0] > now:
                break
            _, msg_id, anchor = deadlines.popleft()
            if self.pending.get(msg_id) != anchor:  # decided, or read again as a new tree
                continue
            started = self._started_at.get(anchor, float("-inf"))
            overdue = now - started >= WAIT_TIMEOUTS * self._pending_timeout_s  # waited on for too long: time it out
            decided_upto = self._decided_upto.get(partition_of(anchor, self.acker.partitions), started)
            if not overdue and decided_upto <= started + self._decided_margin_s:
                waiting += 1
                deadlines.append((now + self._pending_timeout_s, msg_id, anchor))  # asked again after a timeout
                continue
            del self.pending[msg_id]
            self._started_at.pop(anchor, None)
            given_up.append(msg_id)
            overdue_count += overdue
            self._direct.append(("TIMEOUT", anchor, msg_id, timeout_ms))
            self._tell(msg_id, "TIMEOUT")
        if given_up:
            self.counters["pending_given_up"] += len(given_up)
            if len(given_up) > overdue_count:
                log.warning("no outcome for %d tree(s) after %.0f s (e.g. %s), while their acker partitions decided "
                            "trees started %.0f s or more after them (their outcomes lost, or their trees kept "
                            "alive by reset_timeout past pending_timeout_s): timed out by the spout, to be replayed",
                            len(given_up) - overdue_count, self._pending_timeout_s, given_up[0],
                            self._decided_margin_s)  # fmt: skip
            if overdue_count:  # an acker down, or far behind, for that long: said as it is
                log.warning("no outcome for %d tree(s) after %d timeouts (%.0f s; e.g. %s), waited on while their "
                            "acker partitions decided no tree started %.0f s or more after them (the acker behind or "
                            "down): timed out by the spout, to be replayed", overdue_count, WAIT_TIMEOUTS,
                            WAIT_TIMEOUTS * self._pending_timeout_s, given_up[-1], self._decided_margin_s)  # fmt: skip
        if waiting:
            self.counters["pending_waiting_on_acker"] += waiting
            if now >= self._next_waiting_said:  # an outage re-arms trees at every step: said once a minute
                self._next_waiting_said = now + 60.0
                log.warning("no outcome for %d tree(s) after %.0f s, and their acker partitions decided no tree "
                            "started %.0f s or more after them: the acker is behind or down, or none came since; they "
                            "keep their room (for %d timeouts at most; a tree kept alive by reset_timeout needs "
                            "pending_timeout_s above its life)", waiting, self._pending_timeout_s,
                            self._decided_margin_s, WAIT_TIMEOUTS)  # fmt: skip

    def _tell(self, msg_id: str, outcome: str) -> None:
        """``on_outcome``, if any, whose exception is counted and said (`TroubleReport`), not the spout's end."""
        told = self._on_outcome
        if told is None:
            return
        told_as = self._told_as.pop(msg_id, msg_id)
        if outcome != "ACK":  # the replay job replays it, or dead-letters it: its final outcome, told then
            unresolved = self._unresolved
            unresolved[msg_id] = told_as
            if len(unresolved) > UNRESOLVED_KEPT:
                unresolved.popitem(last=False)
        self._say(told, told_as, outcome)

    def _resolved(self, msg_id: str, resolution: str) -> None:
        """The replay job's resolution of a nack told before: ``DEAD_LETTERED`` is told (the record's last attempt);
        ``REPLAYED`` only ends the wait (its copy's outcome is told when it comes, under the same id)."""
        told_as = self._unresolved.pop(msg_id, None)
        if told_as is not None and resolution == DEAD_LETTERED and self._on_outcome is not None:
            self._say(self._on_outcome, told_as, DEAD_LETTERED)

    def _say(self, told: OutcomeFunction, told_as: str, outcome: str) -> None:
        try:
            told(told_as, outcome)
        except Exception as error:
            self.counters["on_outcome_errors"] += 1
            self._told_trouble.example(f"{told_as} ({outcome})", error)

    def _watch_outcome_partitions(self) -> None:
        """Read partitions added to the outcome topic, from their first record (all written since they were
        added)."""
        try:
            found = topic_partitions(self.outcomes, self._outcome_topic, timeout_s=1.0)
        except KafkaException as error:  # asked again at the next check
            log.debug("outcome topic lookup failed: %s", error)
            return
        added = [p for p in found if p not in self._outcome_partitions]
        if added:
            self.outcomes.incremental_assign([TopicPartition(self._outcome_topic, p, OFFSET_BEGINNING) for p in added])
            self._outcome_partitions.update(added)
            log.info("outcome topic %s: reading its new partitions %s", self._outcome_topic, added)

    # -- producing ------------------------------------------------------------------------------------------

    def _acker_delivery_failed(self, _partition: int, inits: list[Init], error: KafkaError) -> None:
        for message in inits:
            if self.pending.get(message.msg_id) != message.anchor:
                # Its tree is decided (the init was written after all: librdkafka reports a record it timed out
                # as failed, though it may be in the log) or given up: sent again, the init would open a tree that
                # nothing acks, nacked TIMEOUT, and its record replayed though done; failed, it would be a FAILED.
                self._init_attempts.pop(message.anchor, None)
                continue
            attempts = self._init_attempts.get(message.anchor, 1)
            if attempts < INIT_ATTEMPTS:
                self._init_attempts[message.anchor] = attempts + 1
                self.acker.send(message)
                continue
            self._init_attempts.pop(message.anchor, None)
            self.counters["init_delivery_failures"] += 1  # failed: said with the next count
            self._init_trouble.example(f"the init of {message.msg_id}", KafkaException(error))
            self._direct.append(("FAILED", message.anchor, message.msg_id, 0))
            why = f"spout {self.settings.name}: its init could not be delivered: {error.str()}"
            self._direct_reasons[message.msg_id] = why

    def _publish_direct(self, until: float | None = None) -> None:
        """Publish the outcomes the spout decided itself, in records of at most `OUTCOMES_PER_RECORD` rows and
        `OUTCOME_RECORD_MAX_BYTES` (rows sent again after an outage must not add up to a record the broker refuses),
        and fewer rows a record from the first one refused as too large (a producer's or topic's lower limit).
        ``until``: how long a record waits for room in librdkafka's full queue (`produce`), then `BufferError`, the
        rows not taken kept."""
        topic = self.config.outcome_topic(self.settings.name)
        while self._direct:
            rows = self._direct[: self._direct_rows]
            why = self._reasons_of(rows)
            while why and len(rows) > 1 and not fail_reasons.fits(why):  # a burst of fails: fewer rows, each said why
                rows = rows[: len(rows) // 2]
                why = self._reasons_of(rows)
            value = encode_outcome_rows(self.settings.name, rows)
            if len(value) > OUTCOME_RECORD_MAX_BYTES and len(rows) > 1:  # long message ids
                self._direct_rows = len(rows) // 2
                continue

            def delivered(
                error: KafkaError | None, _record: Message, rows: list[DirectRow] = rows, told: dict[str, str] = why
            ) -> None:
                # Called for a failure only (the stage producer reports no success: `ServiceConfig.stage_producer`).
                if error is not None:  # published again at the next step: the watermark waits for these offsets
                    if error.code() in TOO_LARGE:
                        self._direct_rows = min(self._direct_rows, max(1, len(rows) // 2))
                    log.warning("outcomes the spout decided could not be delivered (%s): sending them again", error)
                    self._direct.extend(rows)
                    for msg_id, reason in told.items():  # with their reasons, but a later FAILED's of the record
                        self._direct_reasons.setdefault(msg_id, reason)

            try:
                produce(
                    self.producer, topic, value, key=b"spout", on_delivery=delivered, until=until,
                    **fail_reasons.as_headers(why),
                )  # fmt: skip
            except KafkaException as refused:  # at once: too large for the producer, say (`KafkaClientError`: fatal)
                error = refusal(refused)
                if error.code() in TOO_LARGE and len(rows) > 1:
                    self._direct_rows = len(rows) // 2
                    continue
                raise  # another refusal stops the spout, as before (its records are read again at its restart)
            del self._direct[: len(rows)]  # only once produce took them
            # Their reasons too: the record holds them, and a failed delivery gives them back (`delivered`). Kept until
            # a delivery report said so, they were never forgotten: the producer reports failures only.
            for msg_id, reason in why.items():  # not one given since to a later FAILED of the same record
                if self._direct_reasons.get(msg_id) == reason:
                    del self._direct_reasons[msg_id]

    def _reasons_of(self, rows: list[DirectRow]) -> dict[str, str]:
        """The reasons of the FAILED among ``rows``, by message id."""
        reasons = self._direct_reasons
        return {m: r for o, _, m, _ in rows if o == "FAILED" and (r := reasons.get(m)) is not None} if reasons else {}

    # -- assignment -----------------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Seek every assigned partition to its fully-processed watermark (committed in ``<group>.acked``)."""
        if not partitions:  # a cooperative rebalance that gives nothing: no watermark to ask for (a coordinator moving
            return  # made that wait 30 s and stop the spout); the client assigns the empty list itself
        asked = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        try:  # a coordinator moving (a broker just back) is asked again; any other error stops the spout: not "no
            # watermark", as starting anywhere else could skip or repeat records
            committed = committed_offsets(self._watermarks, asked, 30, attempts=LOOKUP_ATTEMPTS)
        except KafkaException as error:
            raise KafkaClientError(f"reading the watermarks of {partitions_named(asked)}", kafka_error(error)) from None
        kafka = lookups(self.config.client())
        starts: dict[tuple[str, int], int] = {}
        for tp, mark in zip(partitions, committed, strict=True):
            # The replay topic is read from its first record whatever the policy, without a watermark or with one
            # beyond its end (the topic deleted and made again: the spout makes it at start): every copy there stands
            # for a record whose outcome is already REPLAYED (the watermark has passed the original), so one skipped
            # is lost.
            earliest = self.settings.reset == "earliest" or tp.topic == self._replay_topic
            if mark.offset >= 0:  # below the first record (retention deleted what it waited on): the consumer's
                tp.offset = mark.offset  # reset moves it there, whatever the spout's policy (`__init__`)
                if not earliest:
                    # Beyond the end (a log truncated by an unclean leader election, an operator's reset): at the
                    # end, as the policy says, where the consumer's reset would read the partition again from its
                    # first record.
                    tp.offset = min(mark.offset, log_bounds(self._watermarks, tp)[1])
            else:  # no watermark yet: it starts where the reset policy starts reading
                low, high = log_bounds(self._watermarks, tp)
                tp.offset = low if earliest else high
                starts[(tp.topic, tp.partition)] = tp.offset
        if starts:
            with kafka.lock:
                kafka.advance(self.settings.watermark_group, starts)  # so the commit job starts there too
        for tp in partitions:  # a partition held before a rebalance is read again from its watermark
            self._held.pop((tp.topic, tp.partition), None)
        if self._incremental:
            consumer.incremental_assign(partitions)  # these are added; the others stay
        else:
            consumer.assign(partitions)
        # librdkafka keeps a partition's pause across a revoke and a new assignment: a partition paused before (at
        # max_pending, or held for a replay's backoff) would otherwise stay paused for good if the spout resumed
        # while it was away. Gained partitions start as the spout is now: paused while too many trees are pending.
        (consumer.pause if self._paused else consumer.resume)(partitions)
        log.info("assigned %s", ", ".join(f"{tp.topic}/{tp.partition}@{tp.offset}" for tp in partitions))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            log.info("revoked %s", partitions_named(partitions))
        self._drop(partitions)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Taken for dead (its session timed out, or it polled too late): another process reads the partitions now.
        A spout commits nothing of its own (the commit job does), so it gives them up as when they are revoked."""
        if partitions:
            log.warning("lost %s (taken for dead: another process reads them now)", partitions_named(partitions))
        self._drop(partitions)

    def _drop(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._held.pop((tp.topic, tp.partition), None)
