"""Sending protocol messages to the acker topic: batched per partition, one columnar record per batch.

Every message of a tree goes to partition ``partition_of(anchor, partitions)`` (`acker.core.ids`), set
explicitly: librdkafka's default partitioner would hash differently. Messages of one partition are collected and
sent as one record of up to ``max_batch`` messages, or after ``linger_s`` (call `poll` regularly). Order within a
partition is the order of `send` calls, except that acks are combined: an ack for a tree whose last message in the
batch is an ack is XORed into that ack. Not thread-safe.

Why combining acks decides every tree as the acks one by one would: the acker XORs a tree's acks into one word, so a
run of acks ``v1 … vn`` of one tree, with no other message of that tree between them, leaves the same word as one ack
``v1 ^ … ^ vn`` at the first one's place; every message of a record has the same timeout generation, so the tree's
timeout is unchanged. A fail, reset, init, anchor or ok of the tree ends the run: merging across it would reorder
the tree's own messages (an ``Ok`` moved before an ``Anchor`` of a child would complete the tree early). What the
acker no longer sees are the run's intermediate words. One of them is zero, with the init known, only if a later ack
of the run is a duplicate of one already applied; sent one by one the tree is acked and the copy ignored, combined
the copy stays in the word and the tree times out and is replayed: at-least-once either way (the producers are
idempotent, so a duplicate is rare). A run whose acks cancel out (an ack and its duplicate, nothing between) combines
to zero, which changes no word: it is left out of the record, as no ack may carry 0 (the acker dead-letters a record
holding one, every other tree of it replayed). Other trees see the run's tree finish at the first ack's place rather
than the last's, which matters only to the overload limit when one client sends inits between acks (the spout sends
inits and fails, the bolts acks, fails and resets). A fan-out stage (a bolt reading every word of a sentence) then sends
one ack per tree and batch instead of one per message: fewer messages for the acker to decode and track.

A fail may carry a reason (`send`): it goes in the record's ``acker.fail-reasons`` header (`acker.fail_reasons`), by
anchor, which the service passes on with the tree's ``FAILED`` outcome.

Nothing is produced from inside a delivery report of this client (confluent-kafka must not be polled from one, and a
produce waits by polling while librdkafka's queue is full): what the report sends — a fail, an init sent again by the
spout's ``on_failure``, the acks of a record written, the halves of a record the broker refused as too large — waits
in its batch, full or not, or with the halves, until the next `poll` or `flush`, which send the halves first. A
record the producer refuses at once is reported outside any report: its halves are sent at once. A `flush` waits for
room in librdkafka's full queue until its timeout at most: the records it could not send then are kept with the halves,
in order, for the next send.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaMessage

from acker.columnar.block import Kind, MessageBlock, split_msg_id
from acker.core.ids import partition_of
from acker.core.messages import Ack, Anchor, Fail, Init, Ok, ResetTimeout, TreeMessage
from acker.core.tuple_tree import UNTRACKED, TupleIds
from acker.errors import ConfigError, RefusedOutputError
from acker.fail_reasons import as_headers, fits
from acker.headers import Headers, with_ids
from acker.kafka.client_log import RepeatFilter, repeats_held_back
from acker.kafka.clients import (
    PRODUCER_MAX_BYTES,
    TOO_LARGE,
    ProducerFailedError,
    produce_reporting,
    smallest_max_bytes,
    topic_partitions,
)
from acker.wire import encode_batch

log = logging.getLogger("acker.client")


def _topic_and_error(record: logging.LogRecord) -> tuple[int, str]:
    """An undelivered data message's line's kind (`RepeatFilter`): its topic and its error, the first two arguments."""
    args = record.args if isinstance(record.args, tuple) else ()
    return record.levelno, " ".join(map(str, args[:2]))


# A line per data message not delivered flooded the log when a broker went away with thousands in flight: one per
# topic and error at most every REPEAT_INTERVAL_S, saying how many more (the stage's counters count every one).
_undelivered_log = logging.getLogger("acker.client.undelivered")
repeats_held_back(_undelivered_log, RepeatFilter(kind=_topic_and_error))

DeliveryFailure = Callable[[int, list[Init], KafkaError], None]

# How many times a fail or a reset is sent again after deliveries that failed; then it is given up. Sending it again
# helps when Kafka was away for a while; a refusal for good (the acker topic's max.message.bytes below one message,
# no right to write to it, the topic deleted) refused it again and again, several times a second for the life of the
# process. Given up loses nothing: a tree that was not failed times out at the acker (or, its init not delivered
# either, at the spout's own timeout) and is replayed, as a tree whose fail was lost in a crash is; a tree whose reset
# was given up may time out while its bolt still works on it, and is replayed too (at-least-once).
RESENDS = 3
_ACK = int(Kind.ACK)  # an enum member's attribute lookup costs as much as the append, on the bolts' hot path


def _fails_before_inits(batch: _Batch) -> set[int]:
    """The trees of ``batch`` with a fail before their init in it."""
    failing: set[int] = set()
    paired: set[int] = set()
    for kind, anchor in zip(batch.kinds, batch.anchors, strict=True):
        if kind == Kind.FAIL:
            failing.add(anchor)
        elif kind == Kind.INIT and anchor in failing:
            paired.add(anchor)
    return paired


class _Batch:
    """The messages waiting for one partition, already as columns."""

    __slots__ = ("acked", "anchors", "first_at", "inits", "kinds", "reasons", "resent", "values")

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.anchors: list[int] = []
        self.values: list[int] = []
        self.inits: list[Init] = []
        self.acked: dict[int, int] = {}  # anchor -> index of its ack, while that is the tree's last message here
        self.reasons: dict[int, str] = {}  # anchor -> the reason of its fail here
        # (anchor, FAIL or RESET) -> times that message here was sent again (`RESENDS`); by kind, so that a tree's
        # fail made for a lost ack does not take its reset's count, and the other way round.
        self.resent: dict[tuple[int, int], int] = {}
        self.first_at = time.monotonic()

    def ack(self, anchor: int, value: int) -> None:
        index = self.acked.get(anchor)
        if index is None:
            self.acked[anchor] = len(self.kinds)
            self.kinds.append(_ACK)
            self.anchors.append(anchor)
            self.values.append(value)
        else:
            self.values[index] ^= value

    def add(self, message: TreeMessage, reason: str | None = None, resent: int = 0) -> None:
        """Add ``message``; ``reason``: why, for a `Fail`; ``resent``: how many times a fail or reset was sent again
        (after deliveries that failed)."""
        if resent:
            key = (message.anchor, Kind.FAIL if isinstance(message, Fail) else Kind.RESET)
            self.resent[key] = max(resent, self.resent.get(key, 0))
        match message:
            case Init():
                self.inits.append(message)
                kind, value = Kind.INIT, message.value
            case Ack(anchor, value):
                self.ack(anchor, value)
                return
            case Anchor(_, value):
                kind = Kind.ANCHOR
            case Ok(_, value):
                kind = Kind.OK
            case Fail():
                kind, value = Kind.FAIL, 0
                if reason:  # the first fail's: the one the acker decides the tree on
                    self.reasons.setdefault(message.anchor, reason)
            case ResetTimeout():
                kind, value = Kind.RESET, 0
        if self.acked:
            self.acked.pop(message.anchor, None)  # a later ack must not move before this message of its tree
        self.kinds.append(kind)
        self.anchors.append(message.anchor)
        self.values.append(value)

    def halves(self) -> tuple[_Batch, _Batch]:
        """The batch cut in two, in order (each init goes with its INIT message). A fail followed by its tree's init
        (a spout's record whose emit function raised: `acker.spout`) is not cut there: in two records, the first
        lost and the second written, the init would reach the acker before the fail sent again, and the tree could be
        acked by children acked meanwhile."""
        mid = len(self.kinds) // 2
        if len(self.kinds) > 2 and self._fail_then_init(mid):  # mid + 1 < len: the second half is not empty
            mid += 1
        inits = sum(1 for kind in self.kinds[:mid] if kind == Kind.INIT)
        first, second = _Batch(), _Batch()
        first.kinds, second.kinds = self.kinds[:mid], self.kinds[mid:]
        first.anchors, second.anchors = self.anchors[:mid], self.anchors[mid:]
        first.values, second.values = self.values[:mid], self.values[mid:]
        first.inits, second.inits = self.inits[:inits], self.inits[inits:]
        if self.reasons or self.resent:
            for half in (first, second):
                mine = set(half.anchors)
                # With the half holding its tree's fail only: one holding its acks or resets would carry it for
                # nothing (more records in a burst of fails, and reasons the acker keeps for trees decided already).
                failed = {a for kind, a in zip(half.kinds, half.anchors, strict=True) if kind == Kind.FAIL}
                half.reasons = {a: r for a, r in self.reasons.items() if a in failed}
                half.resent = {key: n for key, n in self.resent.items() if key[0] in mine}
        return first, second

    def _fail_then_init(self, index: int) -> bool:
        """Whether the message at ``index`` is an init after a fail of its own tree."""
        kinds, anchors = self.kinds, self.anchors
        return kinds[index] == Kind.INIT and kinds[index - 1] == Kind.FAIL and anchors[index] == anchors[index - 1]

    def pieces(self, size: int) -> list[_Batch]:
        """The batch in pieces of at most ``size`` messages, in order: halved until each fits (one that delivery
        reports filled past it), and until the reasons of each piece's fails fit its header (`fits`: a burst of fails
        left those past the header's first ones out)."""
        if len(self.kinds) <= 1 or (len(self.kinds) <= size and (not self.reasons or fits(self.reasons))):
            return [self]
        first, second = self.halves()
        return [*first.pieces(size), *second.pieces(size)]

    def block(self) -> MessageBlock:
        """The batch as one block, without the combined acks whose runs cancelled out (value 0: see the module's
        docstring); it may be empty."""
        sources: dict[tuple[str, str], int] = {}
        init_source, init_offset = [], []
        for init in self.inits:
            source, offset = split_msg_id(init.msg_id)
            init_source.append(sources.setdefault((init.spout, source), len(sources)))
            init_offset.append(offset)
        kinds = np.array(self.kinds, np.uint8)
        anchors = np.array(self.anchors, np.int64)
        values = np.array(self.values, np.int64)
        cancelled = (kinds == _ACK) & (values == 0)
        if cancelled.any():
            kept = ~cancelled
            kinds, anchors, values = kinds[kept], anchors[kept], values[kept]
        return MessageBlock(
            kinds, anchors, values, np.array(init_source, np.int32), np.array(init_offset, np.int64), list(sources)
        )


# How often a client given a lookup (`AckerClient.watch_partitions`), and the service, ask for the acker topic's
# partition count. Until each has the count of partitions added, records placed by the old one are dead-lettered
# (``wrong-partition``) and their trees replayed; a spout's replays placed by the old count fail again, each an
# attempt of its record's: at 30 s a record used four of the replay job's five by default (backoffs of 1, 2, 4 and
# 8 s), and a record failing once more for its own reason was dead-lettered. A lookup of one topic is a millisecond
# while a broker answers; one that goes unanswered (a broker away) takes its timeout, and the next is asked
# `PARTITIONS_RETRY_S` later: at every 5 s, a stage spent a fifth of an outage waiting for lookups.
PARTITIONS_CHECK_S = 5.0
PARTITIONS_RETRY_S = 30.0


def fitted_batch_size(client: Mapping[str, Any], *topics: str) -> dict[str, Any]:
    """``batch.size`` for a producer writing ``topics`` where one of them takes smaller record batches than it makes
    (its ``max.message.bytes``; 1 MB by default, as the producer's batch): the broker refuses a batch of records
    whole, so records sent one after another to a partition (a stage's acker records; a coordinated step's
    transaction), batched by the producer beyond that limit, were all refused together (the acker client halved
    them, and they were batched together again). Empty (the producer's own) where every topic takes them, or does
    not say."""
    smallest = smallest_max_bytes(client, topics)
    if smallest is None or smallest[1] >= int(client.get("batch.size", PRODUCER_MAX_BYTES)):
        return {}
    topic, limit = smallest
    fitted = max(1, limit - 1024)  # room for the framing of the batch and its records
    log.warning("%s takes record batches of %d bytes at most: this producer batches %d bytes at most (all topics)",
                topic, limit, fitted)  # fmt: skip
    return {"batch.size": fitted}


class OutputTopics:
    """The topics a stage's function writes: the producers' record batches fit those named when it starts and the
    stage's own writes (``internal``: the acker topic, a spout's outcome topic) (``fitted``, the producers' settings:
    `fitted_batch_size`); any other is checked at its first record (`check`). A topic for which ``refused`` gives a
    reason is refused: named, at once (`ConfigError`); written to, at each record (`RefusedOutputError`: the function
    raised, its record or input failed)."""

    def __init__(
        self,
        client: Mapping[str, Any],
        stage: str,
        fix: str,
        named: Iterable[str],
        fitted: Mapping[str, Any] | None,
        *,
        internal: Iterable[str] = (),
        refused: Callable[[str], str | None] = lambda _topic: None,
    ) -> None:
        """``fix``: how to name a topic; ``fitted``: None to fit the producers to ``named`` and ``internal``."""
        self._client, self._stage, self._fix, self._refused = client, stage, fix, refused
        # The callers look a topic up here first: a record's cost on the hot path. Invariant: none of it refused.
        self.seen = set(named)
        for topic in sorted(self.seen):
            if (why := refused(topic)) is not None:
                raise ConfigError(f"{stage} cannot name {topic} among its outputs: {why}")
        every = sorted(self.seen | set(internal))
        self.fitted = fitted_batch_size(client, *every) if fitted is None else dict(fitted)

    def check(self, topic: str, counters: Counter[str]) -> None:
        """For a topic not seen before: `RefusedOutputError` for one refused (each time: it is not seen). One that takes
        smaller record batches than the producers make is said in an error line and counted
        (``unfitted_output_topics``): a larger batch is refused whole, and the trees of every record in it failed, at
        every replay. Not fitted here: a producer's batch size is set when it is made, and what it wrote before goes
        through it. Nothing when the broker does not say (a topic not there yet)."""
        if (why := self._refused(topic)) is not None:
            raise RefusedOutputError(f"cannot write to {topic}: {why}")
        self.seen.add(topic)
        batch = int({**self._client, **self.fitted}.get("batch.size", PRODUCER_MAX_BYTES))
        found = smallest_max_bytes(self._client, [topic])
        if found is not None and found[1] < batch:
            log.error("%s writes to %s, which takes record batches of %d bytes at most, and its producers make "
                      "batches of up to %d bytes: one larger is refused whole, and the trees of every record in it "
                      "failed, at every replay; %s", self._stage, topic, found[1], batch, self._fix)  # fmt: skip
            counters["unfitted_output_topics"] += 1


def partition_lookup(producer: Producer, topic: str, timeout_s: float = 1.0) -> Callable[[], int]:
    """For `AckerClient.watch_partitions`: the partition count of ``topic`` (short enough for a stage's thread), 0
    when it does not answer. Asked through the client's own producer: a lookup through a handle updates what the
    handle knows, and a producer refuses a partition it does not know yet (it looks again by itself only every 5
    minutes), so that a count taken up from another handle had every batch to the new partitions refused."""

    def lookup() -> int:
        try:
            return len(topic_partitions(producer, topic, timeout_s=timeout_s))
        except KafkaException as error:
            log.debug("%s lookup failed: %s", topic, error)
            return 0

    return lookup


class _HalvesKeptError(BufferError):
    """`flush`'s time ran out while a record refused at once as too large was sent in halves: the halves not taken
    are kept (`_halves`) in the record's place, and the record is not to be kept as well."""


class AckerClient:
    __slots__ = (
        "_batches",
        "_due_at",
        "_fails_held",
        "_halves",
        "_lookup",
        "_lookup_every_s",
        "_lookup_retry_s",
        "_next_lookup",
        "_on_failure",
        "_reporting",
        "_until",
        "failed_messages",
        "linger_s",
        "max_batch",
        "partitions",
        "producer",
        "topic",
    )

    def __init__(
        self,
        producer: Producer,
        topic: str,
        partitions: int,
        *,
        linger_s: float = 0.02,
        max_batch: int = 8192,
        on_failure: DeliveryFailure | None = None,
    ) -> None:
        self.producer, self.topic, self.partitions = producer, topic, partitions
        self.linger_s, self.max_batch = linger_s, max_batch
        self._batches: list[_Batch | None] = [None] * partitions
        self._on_failure = on_failure
        self._reporting = 0  # > 0 while a delivery report of this client runs: nothing is produced (module docstring)
        # While `flush` sends: how long a record waits for room in librdkafka's full queue (a `time.monotonic` time);
        # None (every other send) for as long as it takes, as a stage's backpressure.
        self._until: float | None = None
        # Of records refused as too large, and the pieces a `flush` found no room for: sent at the next poll or flush.
        self._halves: list[tuple[int, _Batch]] = []
        # While a lost record's inits are handed back (`_on_failure`): the fails of their trees that came before them
        # in that record, each sent again right before its init if the spout sends that again (`send`).
        self._fails_held: dict[int, tuple[str | None, int]] = {}
        self.failed_messages = 0  # in batches that could not be delivered
        self._lookup: Callable[[], int] | None = None
        self._lookup_every_s = self._lookup_retry_s = self._next_lookup = float("inf")
        # When the oldest batch's linger passes (`poll_due`), kept by every batch made (`_new_batch`) and every poll;
        # inf: no batch; -inf: halves of a refused record, or pieces a flush kept, to send.
        self._due_at = math.inf

    def watch_partitions(
        self, lookup: Callable[[], int], every_s: float = PARTITIONS_CHECK_S, retry_s: float = PARTITIONS_RETRY_S
    ) -> None:
        """Ask ``lookup`` for the acker topic's partition count every ``every_s`` (in `poll`), and place messages by
        the new count once it changes. Partitions added to a live acker topic move anchors (`partition_of`), and the
        service, which reads the count at each assignment, dead-letters what arrives on the old partitions
        (``wrong-partition``): a client that kept its first count failed every tree it touched from then on, until it
        was restarted. Trees in flight when the count changes fail or time out, and are replayed, either way.
        ``lookup`` returns 0 when it cannot tell: asked again ``retry_s`` later (such a lookup waited its timeout)."""
        self._lookup, self._lookup_every_s, self._lookup_retry_s = lookup, every_s, retry_s
        self._next_lookup = time.monotonic() + every_s

    def _batch(self, anchor: int) -> tuple[int, _Batch]:
        partition = partition_of(anchor, self.partitions)
        batch = self._batches[partition]
        if batch is None:
            batch = self._new_batch(partition)
        return partition, batch

    def _new_batch(self, partition: int) -> _Batch:
        """An empty batch for ``partition``, sent once its linger has passed (`poll`, `poll_due`)."""
        batch = self._batches[partition] = _Batch()
        self._due_at = min(self._due_at, batch.first_at + self.linger_s)
        return batch

    def send(self, message: TreeMessage, reason: str | None = None, *, resent: int = 0) -> None:
        """Send ``message``; ``reason``: why, for a `Fail` (`acker.fail_reasons`), passed on to its ``FAILED``
        outcome; ``resent``: how many times this fail or reset has been sent again after failed deliveries."""
        partition, batch = self._batch(message.anchor)
        if self._fails_held:
            self._held_fail_before(message, batch)
        batch.add(message, reason, resent)
        if len(batch.kinds) >= self.max_batch and not self._reporting:
            self._send_halves()  # those held before it go first
            self._flush_partition(partition)

    def send_all(self, messages: Iterable[TreeMessage], reason: str | None = None) -> None:
        """Send ``messages`` in one batch, whatever its size (a full batch is sent after the last of them, cut at
        ``max_batch`` messages by `_Batch.pieces`, which keeps a fail with the init after it): a spout's fail and the
        init after it are in one record, written or lost together (`acker.spout`)."""
        touched: dict[int, _Batch] = {}
        for message in messages:
            partition, batch = self._batch(message.anchor)
            if self._fails_held:
                self._held_fail_before(message, batch)
            batch.add(message, reason)
            touched[partition] = batch
        if self._reporting:
            return
        for partition, batch in touched.items():
            if len(batch.kinds) >= self.max_batch and self._batches[partition] is batch:
                self._send_halves()  # those held before it go first
                self._flush_partition(partition)

    def _held_fail_before(self, message: TreeMessage, batch: _Batch) -> None:
        """Add to ``batch`` the fail held for ``message``'s tree (`_lost`) if ``message`` is its init: right before
        it, as they were in the lost record, where `_Batch.halves` never cuts between them."""
        if isinstance(message, Init) and message.anchor in self._fails_held:
            why, sends = self._fails_held.pop(message.anchor)
            batch.add(Fail(message.anchor), why, sends)

    def send_acks(self, acks: Iterable[tuple[int, int]]) -> None:
        """Combined acks as (anchor, value) pairs: the bolt's hot path, without message objects."""
        batches, partitions = self._batches, self.partitions
        for anchor, value in acks:
            partition = partition_of(anchor, partitions)
            batch = batches[partition]
            if batch is None:
                batch = self._new_batch(partition)
            batch.ack(anchor, value)
            if len(batch.kinds) >= self.max_batch and not self._reporting:
                self._send_halves()  # those held before it go first
                self._flush_partition(partition)

    def produce_anchored(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        ids: TupleIds,
        *,
        on_failure: Callable[[KafkaError], None] | None = None,
        written_by: Producer | None = None,
    ) -> None:
        """Send a data message of the trees ``ids`` (with their anchor header) on the same producer.

        A message that cannot be delivered (librdkafka has retried it) fails its trees at once, so that the source
        records are replayed without waiting for the timeout; ``on_failure`` is told (for counting).

        ``written_by``: a record that leaves the pipeline (no stage reads and acks it: a sink's output), whose trees
        complete only once it is written: sent without the anchor header (nothing downstream acks it) through that
        producer, which must report successful deliveries (`ServiceConfig.sink_producer`); its delivery report acks
        its edges.
        """

        def delivered(error: KafkaError | None, _record: KafkaMessage | None) -> None:
            self._reporting += 1
            try:
                if error is not None:
                    self._undelivered(topic, ids, error, on_failure)
                elif written_by is not None:
                    self.send_acks(ids.edges)
            finally:
                self._reporting -= 1

        producer, shown = (self.producer, ids) if written_by is None else (written_by, UNTRACKED)
        try:
            produce_reporting(producer, topic, value, delivered, key=key, headers=with_ids(headers, shown))
        except Exception:  # not a message (a value that is not bytes): the caller's error, raised to it. Its edge is
            for anchor, _ in ids.edges:  # already in its trees, and no message carries it: they could never complete
                self._batch(anchor)[1].add(Fail(anchor))  # not sent here: a refusal must not replace the caller's error
            raise

    def _undelivered(
        self, topic: str, ids: TupleIds, error: KafkaError, on_failure: Callable[[KafkaError], None] | None
    ) -> None:
        """A message of the trees ``ids`` that could not be delivered (librdkafka has retried it): they fail at once,
        so that the source records are replayed without waiting for the timeout."""
        trees = f"failing its {len(ids.edges)} tree(s)" if ids.tracked else "unanchored: no tree to fail"
        _undelivered_log.warning("a data message to %s could not be delivered (%s): %s", topic, error, trees)
        reason = f"a message to {topic} could not be delivered: {error.str()}"
        for anchor, _ in ids.edges:
            self.send(Fail(anchor), reason)
        if on_failure is not None:
            on_failure(error)

    def lingering(self) -> bool:
        """Whether messages wait to be sent (a batch lingering, halves of a refused record, pieces a flush kept): a
        caller about to wait for input waits at most ``linger_s`` then, so that they go out at their linger, not after
        the wait."""
        return bool(self._halves) or any(batch is not None for batch in self._batches)

    def input_wait(self, timeout_s: float, *, waiting: bool = False) -> float:
        """How long a stage waits for input: ``timeout_s``, or, while messages wait to be sent (`lingering`, or
        ``waiting``: others whose deliveries send some, a sink's), their linger, 5 ms at least (a linger of 0 must
        not make the stage spin)."""
        return min(timeout_s, max(self.linger_s, 0.005)) if waiting or self.lingering() else timeout_s

    def poll_due(self) -> bool:
        """`poll`, if a batch's linger has passed: for a loop that calls a user's function on many records between
        polls (a slow function's acks go out at their linger, not once the whole batch is done). True if it polled."""
        if time.monotonic() < self._due_at:
            return False
        self.poll()
        return True

    def poll(self) -> None:
        """Send the batches whose linger has passed, serve delivery reports, and send what they held back."""
        now = time.monotonic()
        self._send_halves()  # before the batches that come after them
        for partition, batch in enumerate(self._batches):
            if batch is not None and now - batch.first_at >= self.linger_s:
                self._flush_partition(partition)
        self.producer.poll(0)
        self._send_held()
        if now >= self._next_lookup:
            self._check_partitions(now)
        lingering = [batch.first_at for batch in self._batches if batch is not None]
        self._due_at = min(lingering) + self.linger_s if lingering else math.inf
        if self._halves:  # held back by a delivery report of this poll
            self._due_at = -math.inf

    def _send_halves(self) -> None:
        while self._halves:
            half = self._halves.pop(0)
            try:
                self._produce_batch(*half)
            except _HalvesKeptError:  # refused as too large, its halves kept ahead of the rest in its place
                raise
            except (ProducerFailedError, BufferError):  # left unsent, as a batch is (`_flush_partition`)
                self._halves.insert(0, half)
                raise

    def _send_held(self) -> None:
        """Send what delivery reports held back (module docstring): the halves of refused records, and the batches
        they filled."""
        self._send_halves()
        for partition, batch in enumerate(self._batches):
            if batch is not None and len(batch.kinds) >= self.max_batch:
                self._flush_partition(partition)

    def _check_partitions(self, now: float) -> None:
        assert self._lookup is not None
        count = self._lookup()
        self._next_lookup = now + (self._lookup_every_s if count else self._lookup_retry_s)
        # Only up: a topic's partitions are never taken away, and a smaller count is a broker's metadata not caught
        # up yet with the growth (switching back and forth would misplace messages each time).
        if count <= self.partitions:
            return
        self._send_all()  # where they were placed
        if self._halves or any(batch is not None for batch in self._batches):  # refused at once, held: in a second
            self._next_lookup = now + 1.0
            return
        log.warning("the acker topic %s has %d partitions, no longer %d: messages placed by the new count (trees in "
                    "flight fail or time out, and are replayed)", self.topic, count, self.partitions)  # fmt: skip
        self.partitions, self._batches = count, [None] * count

    def flush(self, timeout_s: float = 30.0) -> int:
        """Send every batch and wait for delivery; returns the number of records still undelivered, counting the
        batches and halves still unsent.

        Delivery callbacks may send more (a retried init, a fail): those are sent and waited for too, five rounds at
        the most (a broker that refuses everything would go on for ever), all within ``timeout_s``: a record finding
        librdkafka's queue full waits for room until then at most (it waited until librdkafka timed out what filled
        it, 5 minutes by default, with the broker away: a stage's close or commit held that long), and it and those
        after it are kept, unsent and in order, for the next send.
        """
        deadline = time.monotonic() + timeout_s
        undelivered = 0
        for _ in range(5):
            sent = self._send_all(until=deadline)
            undelivered = int(self.producer.flush(max(0.0, deadline - time.monotonic())))
            while sent and self._halves:  # a record halved until it fits: log2(max_batch) levels at most, not rounds
                sent = self._send_all(until=deadline)
                undelivered = int(self.producer.flush(max(0.0, deadline - time.monotonic())))
            if not sent or all(batch is None for batch in self._batches):
                break
        if self._halves:  # kept for want of room: sent at the next poll
            self._due_at = -math.inf
        return undelivered + len(self._halves) + sum(batch is not None for batch in self._batches)

    def _send_all(self, until: float | None = None) -> bool:
        """Send the halves held, then every batch, each waiting for room in librdkafka's queue until ``until`` at
        most (None: as long as it takes); False when one found none by then (it and the rest kept, in order:
        `_send_halves`, `_flush_partition`)."""
        self._until = until
        try:
            self._send_halves()
            for partition, batch in enumerate(self._batches):
                if batch is not None:
                    self._flush_partition(partition)
        except BufferError:
            return False
        finally:
            self._until = None
        return True

    def _flush_partition(self, partition: int) -> None:
        batch = self._batches[partition]
        assert batch is not None
        self._batches[partition] = None
        pieces = batch.pieces(self.max_batch)
        sent = 0
        try:
            for piece in pieces:
                self._produce_batch(partition, piece)
                sent += 1
        except ProducerFailedError:
            # The producer takes nothing any more: the batch stays unsent (or what its refusals queued meanwhile), so
            # that `flush` counts it, and no input offset is committed past acks that never left the process.
            self._batches[partition] = self._batches[partition] or batch
            raise
        # `flush`'s time ran out with librdkafka's queue full: the pieces not taken are kept, in order, first at the
        # next send (each once: an ack applied twice cancels itself).
        except _HalvesKeptError:  # the piece was refused as too large: its halves, kept first, stand for it, and
            # the pieces after it follow them
            self._halves += [(partition, piece) for piece in pieces[sent + 1 :]]
            raise
        except BufferError:
            self._halves[:0] = [(partition, piece) for piece in pieces[sent:]]
            raise

    def _lost(self, partition: int, batch: _Batch, error: KafkaError) -> None:
        """``batch``, sent to ``partition``, was not written (``error``): its trees failed, its fails and resets sent
        again, its inits handed back (`_on_failure`)."""
        inits = batch.inits
        # A tree that lost an ack, anchor or ok here cannot complete: it is failed now rather than left to time
        # out (if the record was written after all, the tree is replayed once more: at-least-once). Fails and
        # resets are sent again (a second one changes nothing); acks are not (applied twice, an ack cancels
        # itself), `RESENDS` times at the most. Inits go back to the spout, which sends them again.
        again: list[tuple[TreeMessage, str | None, int]] = []
        failed: set[int] = set()
        given_up: set[tuple[int, int]] = set()
        lost = f"acker messages to {self.topic}[{partition}] could not be delivered: {error.str()}"
        # The trees with a fail before their init here (a spout's record whose emit function raised): the fail
        # goes again with the init, if the spout sends it again, never apart from it (`_Batch.halves`). Sent
        # first and the init later, both landed in one batch with other trees' fails and inits between them,
        # which a full batch could cut apart: the init written, the fail lost, the tree acked.
        held: dict[int, tuple[str | None, int]] = {}
        with_init = _fails_before_inits(batch)
        for kind, anchor in zip(batch.kinds, batch.anchors, strict=True):
            if kind == Kind.INIT or anchor in failed:
                continue
            # A fail or reset counts its own sends; a lost ack, anchor or ok makes a fail sent for the first time.
            resent = batch.resent.get((anchor, kind), 0) + 1 if kind in {Kind.FAIL, Kind.RESET} else 1
            if resent > RESENDS:
                given_up.add((anchor, kind))
            elif kind == Kind.RESET:
                again.append((ResetTimeout(anchor), None, resent))
            else:
                failed.add(anchor)
                if anchor in with_init:
                    held[anchor] = (batch.reasons.get(anchor, lost), resent)
                else:
                    again.append((Fail(anchor), batch.reasons.get(anchor, lost), resent))
        self.failed_messages += len(batch.kinds)
        resets = sum(isinstance(message, ResetTimeout) for message, _, _ in again)
        log.warning(
            "a batch of %d acker messages to partition %d could not be delivered (%s): %d trees failed, "
            "%d resets sent again, %d inits to the spout%s",
            len(batch.kinds), partition, error, len(failed), resets, len(inits),
            f"; {len(given_up)} fails or resets given up after {RESENDS} sends again (their trees time out, and"
            " are replayed)" if given_up else "",
        )  # fmt: skip
        for message, reason, resent in again:
            self.send(message, reason, resent=resent)
        self._fails_held = held
        try:
            if self._on_failure is not None:
                self._on_failure(partition, inits, error)
        finally:
            # Those whose init the spout did not send again (its tree decided meanwhile, or given up): sent alone,
            # as before, a fail again changes nothing.
            left, self._fails_held = self._fails_held, {}
            for anchor, (reason, resent) in left.items():
                self.send(Fail(anchor), reason, resent=resent)
        if self._on_failure is None and inits:  # a client that sends inits without being told: no outcome for them
            log.error("%d inits lost, and nothing told: their records get no outcome until read again", len(inits))

    def _produce_batch(self, partition: int, batch: _Batch) -> None:
        """Send ``batch`` as one record. A record the producer refuses at once is handled as a failed delivery (an
        exception here would lose the batch without failing its trees, and stop the stage), except that a batch too
        large (for the producer's ``message.max.bytes``, at once, or for the broker, in its delivery report) is sent
        in halves (at once, or after the report: module docstring), and a fatal error (the producer takes nothing any
        more) raises: the stage must stop, and its trees time out."""

        def delivered(error: KafkaError | None, record: KafkaMessage | None) -> None:
            if error is None:
                return
            at_once = record is None and not self._reporting  # refused by the producer, within a send: no report
            self._reporting += 1
            try:
                undelivered(error, at_once)
            finally:
                self._reporting -= 1
            if at_once:
                try:
                    self._send_halves()
                except BufferError as full:  # `flush`'s time ran out: its halves kept, in its place
                    raise _HalvesKeptError from full

        def undelivered(error: KafkaError, at_once: bool) -> None:
            if error.code() in TOO_LARGE and len(batch.kinds) > 1:
                # Refused by the broker: larger than the acker topic takes (its max.message.bytes below what
                # max_batch messages encode to). Nothing of it was written: sent again in halves, and the batches
                # from now on are cut at half as many messages. Failed, its trees were replayed into batches as large,
                # refused again, until every record was dead-lettered.
                if len(batch.kinds) // 2 < self.max_batch:
                    log.warning("the acker topic %s refused a record of %d messages as too large: batches of %d "
                                "from now on", self.topic, len(batch.kinds), len(batch.kinds) // 2)  # fmt: skip
                    self.max_batch = len(batch.kinds) // 2
                halves = [(partition, half) for half in batch.halves()]
                if at_once:  # sent next, before the halves held after it (those of the record it is a half of)
                    self._halves[:0] = halves
                else:
                    self._halves += halves
                self._due_at = -math.inf  # sent at the next poll
                return
            self._lost(partition, batch, error)

        block = batch.block()
        if not len(block):  # acks that all cancelled out
            return
        # A refusal at once is reported there too (one too large is sent in halves); a fatal one raises.
        produce_reporting(
            self.producer, self.topic, encode_batch(block), delivered, partition=partition, until=self._until,
            **as_headers(batch.reasons),
        )  # fmt: skip
