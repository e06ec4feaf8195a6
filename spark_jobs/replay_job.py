"""The replay job: nacks in, records re-published for their spout (or dead-lettered) out.

readStream over the spouts' outcome topics → the nacks (``FAILED``, ``TIMEOUT``, ``OVERLOAD``) whose message id is
a record's coordinates → duplicates dropped (an acker replay re-emits outcomes; Spark keeps the keys seen within
``dedupe_window`` in its checkpointed state) → each micro-batch, on the driver, in a Kafka transaction (or one per
part, below):

- fetches each nacked record by its coordinates and re-publishes it to the spout's replay topic
  (``<replay_prefix><spout>``, which the spout reads besides its source topic), or after ``max_attempts`` replays
  to the dead-letter topic (a record that no longer exists too, with an empty value and reason
  ``source-missing``; and one too large to publish, cut, with reason ``too-large``), keeping its key, value and
  other headers and adding the attempt, its origin, the last nack's reason, the spout and the backoff
  (`acker.retries`, which decides);
- writes ``REPLAYED`` / ``DEAD_LETTERED`` outcomes for the nacked message ids to the outcome topic and partition
  each nack was read from (after it: its spout reads the nack first): the commit job then counts those offsets as
  done (the replayed copy has its own offset and tree);
- writes the micro-batch id to the job's progress topic.

A nack of a record its spout's watermark (``<group>.acked``) has passed is skipped: that record was decided before (the
watermark passes only offsets done), and this is a late copy of a nack handled long ago, as an acker that recovers
after a long outage emits for the trees its spout timed out itself meanwhile; the deduplication window (an hour by
default, as a rule up to twice that: Spark forgets a nack once it has seen one a window newer than the first's expiry)
has forgotten the first. A copy later than that, of a record the watermark has not passed (held back by an undecided
record below it, or by a commit job stopped), is replayed again: the job keeps no record of its own replays beyond
the window, and asks Kafka for its spout's committed watermark alone.

A micro-batch that Spark runs again after a crash finds its id in the progress topic and publishes nothing: a nack
is replayed once, and none is lost (Spark's checkpoint holds the read position; the transaction holds the output).
A micro-batch of more nacks than ``nacks_per_transaction`` is published in parts, a transaction each (a burst of
nacks after an outage must not need one transaction longer than ``transaction.timeout.ms``, which would abort at
every run of the batch): its nacks sorted by spout and message id (unique in a batch, and the same rows at every run
of it: Spark restores the batch's offsets and its deduplication state), each part's progress record
``<batch>/<n>/<spout>/<msg_id>`` with the number of the batch's nacks published so far and the last of them, the last
part's ``<batch>``. A run of the batch after a crash publishes the nacks after that last one, whatever the size of its
parts: by key, not by position, as the run may have fewer rows (outcome records retention deleted meanwhile, which the
source skips: ``failOnDataLoss`` is false), and the first ``n`` of those would pass over nacks never published. (A
batch whose progress record has the older form, ``<batch>/<n>``, is resumed by position.)
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from acker.config import without_consumer_settings
from acker.errors import AckerError
from acker.headers import HeaderList, read_headers, record_size, text
from acker.kafka.clients import (
    PRODUCER_MAX_BYTES,
    AsWritten,
    KafkaClientError,
    TopicSpec,
    after_failure,
    ensure_topics,
    fatal,
    kafka_error,
    open_transaction_wait_s,
    partition_count,
    produce,
    topic_partitions,
)
from acker.kafka.lookups import CONFIRM_S, OpenTransactionError, lookups
from acker.places import TOPIC_NAME_MAX
from acker.retries import (
    NO_REPLAY_TOPIC,
    REASON,
    REPLAYED,
    UNREADABLE_HEADERS,
    Backoff,
    Decision,
    RetryPolicy,
    decide,
    too_large,
    unread,
    unreadable_headers,
    without_detail,
)
from acker.topics import PROGRESS_TOPIC_CONFIG
from acker.watermarks import acked_group
from acker.wire import OUTCOMES_PER_RECORD, encode_outcome_rows
from spark_jobs.checkpoint import run_id
from spark_jobs.commit_job import OutcomeSource, known_topic_max_bytes, start_dead_letters
from spark_jobs.outcomes import NACKS, outcome_rows
from spark_jobs.stopping import batch_function, interrupted

QUERY = "replays"  # the query's checkpoint: <checkpoint>/replays
log = logging.getLogger("spark_jobs.replay")

Fetch = Callable[[str, int, list[int]], dict[int, Message | None]]  # (topic, partition, offsets) → records
# (group, [(topic, partition)]) → the group's committed offsets (negative where none)
Committed = Callable[[str, list[tuple[str, int]]], dict[tuple[str, int], int]]
_FRAMING = 1024  # a record's framing in its batch, and the batch's, its headers' apart: more than enough
_KEPT_BYTES = 64 * 1024  # of a too-large record's value and key, in its dead letter (as the acker's own keep)
_WHOLE = 1 << 62  # the part of a progress record that says a whole micro-batch (after every part of it)
_MISSING_RECHECK_S = 60.0  # a replay topic found missing is looked up again after this (its spout may start)
_COUNT_RECHECK_S = 300.0  # a topic's partition count is looked up again after this (partitions may have been added)
_LIMIT_RECHECK_S = 60.0  # a topic whose size limit the broker did not tell is asked again after this


@dataclass(frozen=True)
class ReplayJobSettings:
    source: OutcomeSource
    checkpoint: str
    name: str = "acker-replay"  # names the transactional producer and the progress records: one per job
    trigger_s: float = 1.0
    max_attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    replay_prefix: str = "acker.replay."
    dead_letter_topic: str = "acker.replay.dlq"
    progress_topic: str = "acker.replay.progress"
    dlq_topic: str = "acker.outcomes.dlq"  # malformed outcome records, when ``dead_letter_malformed``
    dead_letter_trigger_s: float = 10.0
    # The commit job dead-letters the malformed outcome records; this job only when told (run without a commit job,
    # or reading spouts none reads). Both did: every malformed record was dead-lettered twice, and each job read
    # every outcome record a second time for it.
    dead_letter_malformed: bool = False
    dedupe_window: str = "1 hour"
    groups: Mapping[str, str] = field(default_factory=dict)  # spout → its consumer group (default: the spout's name)
    # Outcome records per micro-batch, at most: the driver holds a row per nack of a batch (a burst of nacks after an
    # outage would otherwise be one batch, too large for it, failing at every run).
    max_records: int = 1_000
    nacks_per_transaction: int = 20_000  # a part of a micro-batch: fetched, then published in one transaction
    # Of the topics the job creates when missing (`acker.topics.spark_job_topics`); -1: the broker's default.
    replication_factor: int = -1

    def identity(self, run_id: str) -> str:
        """The job's transactional id and the key of its progress records: its name and the id of its checkpoint
        (`spark_jobs.checkpoint.run_id`). A restart from the same checkpoint fences its predecessor and finds its
        progress; a job started on a new or wiped checkpoint (whose micro-batch ids start again at 0) or another job
        beside it shares neither."""
        return f"{self.name}-{run_id[:12]}"

    def watermark_group(self, spout: str) -> str:
        return acked_group(self.groups.get(spout, spout))

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.backoff, self.replay_prefix, self.dead_letter_topic)


def nacks(outcomes: DataFrame) -> DataFrame:
    """The nacks of records: ``spout, msg_id, reason, topic, partition, offset, timestamp, outcome_topic,
    outcome_partition, detail`` (where the nack was read, and where its resolution goes; why the tree failed, if it
    was said)."""
    return outcomes.where(F.col("outcome").isin(*NACKS) & F.col("source_topic").isNotNull()).select(
        "spout",
        "msg_id",
        F.col("outcome").alias("reason"),
        F.col("source_topic").alias("topic"),
        F.col("source_partition").alias("partition"),
        F.col("source_offset").alias("offset"),
        "timestamp",
        "outcome_topic",
        "outcome_partition",
        "detail",
    )


class TopicLimits:
    """The largest record a topic takes from the job's producer: the producer's ``message.max.bytes`` and the
    topic's ``max.message.bytes``, asked once (``ask``). Where the broker does not say (a topic just created, or no
    right to describe its configuration), the producer's alone, asked again after `_LIMIT_RECHECK_S`: not at every
    record, as each question may wait seconds for its answer, and a publication's transaction has a timeout."""

    def __init__(
        self, own_max: int, ask: Callable[[str], int | None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._own_max, self._ask, self._clock = own_max, ask, clock
        self._known: dict[str, int] = {}
        self._untold: dict[str, float] = {}  # topics the broker did not say about, until when that stands

    def __call__(self, topic: str) -> int:
        known = self._known.get(topic)
        if known is not None:
            return known
        if self._clock() < self._untold.get(topic, 0.0):
            return self._own_max
        told = self._ask(topic)
        if told is None:
            self._untold[topic] = self._clock() + _LIMIT_RECHECK_S
            return self._own_max
        self._known[topic] = min(self._own_max, told)
        return self._known[topic]


class _UnansweredCommitError(AckerError):
    """A transaction's commit not answered in time (`_Publisher._commit`)."""


class _Publisher:
    """The driver's transactional producer and its progress marker (one per job name)."""

    def __init__(self, settings: ReplayJobSettings, identity: str) -> None:
        self.settings, self.policy, self.identity = settings, settings.policy, identity
        client = dict(settings.source.client)
        self._open_wait_s = open_transaction_wait_s(client)  # a nacked record past a transaction still open
        factor = settings.replication_factor
        self._dead_letters = TopicSpec(settings.dead_letter_topic, 1, factor)
        ensure_topics(
            client, [TopicSpec(settings.progress_topic, 1, factor, PROGRESS_TOPIC_CONFIG), self._dead_letters]
        )
        producer = without_consumer_settings(client)
        self.producer = Producer({**producer, "transactional.id": identity, "linger.ms": 5})
        self.producer.init_transactions(30)  # fences a previous instance of the same job, aborts its open transaction
        # A transaction whose abort failed unanswered (Kafka away): its close would wait for Kafka without end.
        self.unsettled = False
        _publishers.append(self)
        self._partitions: dict[str, tuple[int, float]] = {}  # topic -> its partition count, and until when kept
        self._missing: dict[str, float] = {}  # topics found missing, until when they are taken as missing
        self._own_max = int(client.get("message.max.bytes", PRODUCER_MAX_BYTES))  # the producer's bound on a record
        self.limit = TopicLimits(self._own_max, lambda topic: known_topic_max_bytes(self.settings.source.client, topic))
        self._batch_max = min(int(client.get("batch.size", PRODUCER_MAX_BYTES)), self._own_max)  # and on a batch
        # Then kept here: this instance is the only one publishing for it.
        self.last, self.last_done, self.last_key = self._last_published()
        self.handled: Counter[str] = Counter()  # the last batch's nacks published: REPLAYED, or a dead letter's reason

    def _last_published(self) -> tuple[int, int | None, tuple[str, str] | None]:
        """The id of the last micro-batch published (committed) by this job, -1 if none, how many of its nacks were,
        None when all of them, and the (spout, message id) of the last one published (None: all of them, or a
        progress record that does not say): the progress topic read to its end as written (`AsWritten`, which raises
        rather than take a slow read for the end).

        Not to its end as a read_committed consumer sees it now: another job's transaction open on the topic (its
        driver died mid-batch) holds that view below this job's last record until the broker aborts it, and a restart
        that missed its last batch would publish that batch again. This job's own transactions are all settled
        (`init_transactions`); the read waits for the others', up to their timeout."""
        key = self.identity.encode()
        last: tuple[int, int, tuple[str, str] | None] = (-1, _WHOLE, None)
        with AsWritten(self.settings.source.client, f"{self.settings.name}-{uuid.uuid4().hex[:8]}") as reading:
            low, high = reading.bounds(TopicPartition(self.settings.progress_topic, 0))
            for record in reading.read(TopicPartition(self.settings.progress_topic, 0, low), high):
                found = _progress(record.value() or b"-1") if record.key() == key else None
                if found is not None and found[0] >= last[0]:  # a batch's latest record: a run after a crash may
                    last = found  # record fewer nacks than the one before it did (rows deleted by retention)
        return last[0], None if last[1] == _WHOLE else last[1], None if last[1] == _WHOLE else last[2]

    def partitions(self, topic: str, *, recheck: bool = False) -> int:
        """The partitions of ``topic``, 0 when it does not exist: a replay topic is its spout's, created by the spout
        (made here, a topic no spout reads would take the copies, and their originals count as done); one found
        missing is looked up again after `_MISSING_RECHECK_S`. The job's dead-letter topic is made when missing.

        Missing means missing twice, `CONFIRM_S` apart: a broker's metadata may lack a topic for a moment (just
        restarted, behind the controller), and on one answer every nack of the spout was dead-lettered for a minute,
        its remaining attempts unused.

        A count known is kept; with ``recheck`` (before a transaction, never within one, whose timeout a lookup would
        eat into) one older than `_COUNT_RECHECK_S` is looked up again (`_grown`): partitions added to a replay topic
        take replays (they stayed empty until the job restarted)."""
        known = self._partitions.get(topic)
        if known is not None:
            if recheck and time.monotonic() >= known[1]:
                return self._grown(topic, known[0])
            return known[0]
        if time.monotonic() < self._missing.get(topic, 0.0):
            return 0
        client = dict(self.settings.source.client)
        for attempt in range(2):
            if attempt:
                time.sleep(CONFIRM_S)
            try:
                return self._known(topic, partition_count(client, topic))
            except KafkaClientError as error:
                if error.code != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
            # Out of the except block (`acker.kafka.clients`): the creation's look-ups may raise and be caught.
            if topic == self._dead_letters.name:  # the job's own (deleted since it started): made again
                ensure_topics(client, [self._dead_letters], timeout_s=10.0)  # within an open transaction: short
                return self._known(topic, self._dead_letters.partitions)
        self._missing[topic] = time.monotonic() + _MISSING_RECHECK_S
        return 0

    def _known(self, topic: str, count: int, for_s: float = _COUNT_RECHECK_S) -> int:
        self._partitions[topic] = (count, time.monotonic() + for_s)
        return count

    def _grown(self, topic: str, count: int) -> int:
        """``topic``'s partition count looked up again and kept: more than ``count`` once a lookup and this job's
        producer both see the partitions added (a producer refuses a partition it does not know, and by itself looks
        again only every 5 minutes; its lookup updates what it knows), else ``count``. A lookup that fails, or finds
        the topic missing (a broker's metadata behind), keeps ``count``: a known topic is never taken for missing
        again (one deleted fails the transaction that replays to it, which says so: `_raise_if_deleted`).
        Partitions the producer does not see yet are asked about again after `_MISSING_RECHECK_S`."""
        try:
            found = partition_count(self.settings.source.client, topic)
            if found <= count:
                return self._known(topic, count)
            seen = len(topic_partitions(self.producer, topic, 10.0))  # it exists: a producer's lookup makes nothing
        except (KafkaClientError, KafkaException) as error:
            log.warning("partitions of %s not looked up again (%s): %d kept", topic, error, count)
            return self._known(topic, count)
        if seen < found:
            return self._known(topic, max(count, seen), _MISSING_RECHECK_S)
        return self._known(topic, found)

    def _asked_before(self, rows: list[Any]) -> set[str]:
        """The sizes and limits of the topics ``rows`` are published to, asked before their transaction, whose
        timeout a slow answer would eat into; the replay topics they may go to."""
        replay_topics = {t for row in rows if self._may_replay_to(t := self.policy.replay_topic(row.spout))}
        for topic in replay_topics | {self.policy.dead_letter_topic}:
            if self.partitions(topic, recheck=True):
                self.limit(topic)
        read_from: dict[str, int] = {}  # outcome topic -> the highest partition a nack of ``rows`` was read from
        for row in rows:
            read_from[row.outcome_topic] = max(read_from.get(row.outcome_topic, 0), int(row.outcome_partition))
        for topic, highest in read_from.items():  # the resolutions' (it was read: it exists)
            self.limit(topic)
            known = self.partitions(topic, recheck=True)
            if 0 < known <= highest:  # partitions added since the count was kept: looked up now, not at the recheck
                self._grown(topic, known)
        return replay_topics

    def _cut(self, value: bytes | None, key: bytes | None, letter: Decision) -> tuple[bytes | None, bytes | None]:
        """As much of a too-large record's value, then key, as its dead letter can hold: at most 64 KB of each."""
        room = self.limit(letter.topic) - record_size(None, None, letter.headers) - _FRAMING
        value = value[: max(0, min(_KEPT_BYTES, room))] if value else value
        key = key[: max(0, min(_KEPT_BYTES, room - len(value or b"")))] if key else key
        return value, key

    def publish(self, batch_id: int, rows: Iterable[Any], fetch: Fetch, committed: Committed | None = None) -> int:
        """Publish a micro-batch's nacks, in parts of at most ``nacks_per_transaction``, in `_key` order; return how
        many were published now (not those of the parts published before a restart, nor those skipped:
        `_undecided`). ``rows``: a list (sorted here), or an iterable already in that order (`in_order`; checked),
        read a part at a time. ``committed``: the spouts' watermarks, asked of Kafka (None: nothing is skipped)."""
        if batch_id < self.last or (batch_id == self.last and self.last_done is None):
            log.info("batch %d was published before a restart: skipped", batch_id)
            return 0
        self.handled.clear()
        size = max(1, self.settings.nacks_per_transaction)
        ordered = iter(sorted(rows, key=_key)) if isinstance(rows, list) else _checked_order(rows)
        done, ordered = self._published_before(batch_id, ordered)
        published = 0
        for part, end, whole in _parts(ordered, size, done):
            undecided = self._undecided(part, committed)
            last = None if whole else _key(part[-1])
            progress = f"{batch_id}" if last is None else f"{batch_id}/{end}/{last[0]}/{last[1]}"
            published += self._publish_part(undecided, fetch, progress)
            self.last, self.last_done, self.last_key = batch_id, None if whole else end, last
        return published

    def _published_before(self, batch_id: int, ordered: Iterator[Any]) -> tuple[int, Iterator[Any]]:
        """How many of the batch's ``ordered`` nacks were published by an earlier run of it (those up to the last one
        its progress names, or, a progress record of the older form, its first ``last_done``), read past; and the
        others."""
        if batch_id != self.last or self.last_done is None:
            return 0, ordered
        done = 0
        for row in ordered:
            if (done >= self.last_done) if self.last_key is None else (_key(row) > self.last_key):
                ordered = itertools.chain([row], ordered)
                break
            done += 1
        if done != self.last_done:  # rows the source no longer finds: their outcome records deleted by retention
            log.warning("batch %d: %d of its nacks were published before a restart, %d of those it has now (the "
                        "others' outcome records deleted since)", batch_id, self.last_done, done)  # fmt: skip
        elif done:
            log.info("batch %d: its first %d nacks were published before a restart", batch_id, done)
        return done, ordered

    def _undecided(self, rows: list[Any], committed: Committed | None) -> list[Any]:
        """``rows`` without the nacks of records their spout's watermark has passed, each by its own spout's (two
        spouts reading one topic pass its offsets at their own pace). Done within a part (the parts are cut from
        every row of the batch, the same at every run of it); a watermark Kafka does not tell now skips nothing: a
        record replayed twice, never one lost."""
        if committed is None:
            return rows
        keyed = [(row, self.settings.watermark_group(row.spout), (row.topic, int(row.partition))) for row in rows]
        wanted: dict[str, set[tuple[str, int]]] = defaultdict(set)
        for _, group, partition in keyed:
            wanted[group].add(partition)
        marks: dict[str, dict[tuple[str, int], int]] = {}
        for group, partitions in wanted.items():
            try:
                marks[group] = committed(group, sorted(partitions))
            except (KafkaException, KafkaClientError) as error:
                log.warning("the watermarks of %s are not known now (%s): its nacks are all replayed", group, error)
        undecided = [row for row, group, at in keyed if int(row.offset) >= marks.get(group, {}).get(at, -1)]
        if len(undecided) < len(rows):
            log.info("%d nack(s) of records their watermark has passed skipped: late copies of nacks handled before, "
                     "or of records deleted before they were done (the commit job says so)",
                     len(rows) - len(undecided))  # fmt: skip
        return undecided

    def _may_replay_to(self, topic: str) -> bool:
        """Whether ``topic`` can be a spout's replay topic: a name Kafka takes, and none of this job's own. A spout
        refuses a name that would give it another (`acker.topics.check_spout_name`), but an outcome record may name
        any spout: its copies went to the progress topic (refused there, a record without a key: the batch failed at
        every run), or to the dead-letter topic as replays, or a name too long failed the batch's lookups."""
        own = {self.settings.progress_topic, self.policy.dead_letter_topic, self.settings.dlq_topic}
        return len(topic) <= TOPIC_NAME_MAX and topic not in own

    def _decision(
        self, row: Any, record: Message | None, headers: HeaderList | None, now_ms: int, unread_topics: set[str]
    ) -> Decision:
        """Where the nacked ``record`` (None: it no longer exists) goes, given its ``headers`` (None: not readable,
        `read_headers`); ``unread_topics``: the replay topics found missing in this part, said once."""
        if record is not None and headers is None:  # a header name that is not UTF-8
            log.warning("%s: its headers cannot be read (a header name is not UTF-8): dead-lettered as %s",
                        row.msg_id, UNREADABLE_HEADERS)  # fmt: skip
            return unreadable_headers(self.policy, row.spout, row.msg_id, row.reason, row.detail)
        decision = decide(self.policy, row.spout, row.msg_id, row.reason, headers=headers, now_ms=now_ms,
                          detail=row.detail)  # fmt: skip
        if decision.resolution == REPLAYED and not self._may_replay_to(decision.topic):
            if decision.topic not in unread_topics:
                unread_topics.add(decision.topic)
                log.error("spout %.80r cannot have a replay topic (%.80s... is too long, or one of this job's own): "
                          "no spout reads it; its nacks are dead-lettered (%s)", row.spout, decision.topic,
                          NO_REPLAY_TOPIC)  # fmt: skip
            decision = unread(self.policy, decision, row.msg_id, row.reason)
        elif decision.resolution == REPLAYED and not self.partitions(decision.topic):
            if decision.topic not in unread_topics:
                unread_topics.add(decision.topic)
                log.error("replay topic %s does not exist: no spout reads it (is the replay prefix %r the spouts'?); "
                          "its nacks are dead-lettered (%s)", decision.topic, self.policy.replay_prefix,
                          NO_REPLAY_TOPIC)  # fmt: skip
            decision = unread(self.policy, decision, row.msg_id, row.reason)
        return decision

    def _publish_part(self, rows: list[Any], fetch: Fetch, progress: str) -> int:
        """Publish ``rows`` in one transaction, with ``progress`` as its progress record."""
        # Every nacked record is read first, outside the transaction (which a long read could outlive), a partition
        # at a time. A read Kafka does not answer raises (LookupError): the batch fails and nothing is published,
        # rather than a record being taken for deleted and dead-lettered without its data.
        wanted: dict[tuple[str, int], list[int]] = defaultdict(list)
        for row in rows:
            wanted[(row.topic, int(row.partition))].append(int(row.offset))
        found = {(t, p, o): r for (t, p), offsets in wanted.items()
                 for o, r in _fetch(fetch, t, p, offsets, open_wait_s=self._open_wait_s).items()}  # fmt: skip
        # Read once for all the nacks of a record (several spouts may read its topic): a second read of headers that
        # could not be read finds none (`read_headers`), and the record was replayed without them.
        headers_of = {at: read_headers(record) for at, record in found.items() if record is not None}
        now_ms = int(time.time() * 1000)
        # By the topic the nack was read from (not a prefix and its spout field: a job reading a pattern of topics of
        # another prefix must resolve the nacks where the commit job reads them).
        # (outcome topic, partition, spout) -> its rows: each nack is resolved in the partition it was read from
        resolutions: dict[tuple[str, int, str], list[tuple[str, int, str, int]]] = defaultdict(list)
        handled: Counter[str] = Counter()
        queued: dict[tuple[str, int], int] = {}  # bytes produced to each partition since the last flush
        unread_topics: set[str] = set()
        replay_topics = self._asked_before(rows)
        self.producer.begin_transaction()
        try:
            for row in rows:
                at = (row.topic, int(row.partition), int(row.offset))
                record = found[at]
                decision = self._decision(row, record, headers_of.get(at), now_ms, unread_topics)
                value, key = (None, None) if record is None else (record.value(), record.key())
                size = record_size(value, key, decision.headers)
                if size + _FRAMING > self.limit(decision.topic) and row.detail:  # not for want of a diagnosis
                    lighter = without_detail(decision)
                    lighter_size = record_size(value, key, lighter.headers)
                    if lighter_size + _FRAMING <= self.limit(lighter.topic):  # else its dead letter keeps the detail
                        decision, size = lighter, lighter_size
                if size + _FRAMING > self.limit(decision.topic):
                    # Refused, it would abort the transaction at every run of the batch: no nack would be replayed.
                    log.warning("%s is too large to publish to %s (%d bytes): dead-lettered", row.msg_id,
                                decision.topic, size)  # fmt: skip
                    decision = too_large(self.policy, decision, row.msg_id, row.reason, size)
                    value, key = self._cut(value, key, decision)
                    size = record_size(value, key, decision.headers)
                partition = int(row.partition) % self.partitions(decision.topic)
                self._send(queued, decision.topic, partition, value, key=key, headers=decision.headers, size=size)
                where = (row.outcome_topic, int(row.outcome_partition), row.spout)
                resolutions[where].append((decision.resolution, 0, row.msg_id, 0))
                handled[decision.resolution if decision.resolution == REPLAYED else _reason(decision)] += 1
            for (outcome_topic, partition, spout), outcome_rows_ in resolutions.items():
                # After the nack in the partition it was read from: a spout, which reads its outcome partitions each
                # at its own pace, reads the nack before its resolution (`Spout._resolved`: DEAD_LETTERED told). But
                # for a partition the producer does not see yet (added, and its metadata not refreshed): it refuses
                # one it does not know, which failed the transaction at every run of the batch. Partition 0 takes
                # those, where the spout may read a resolution before its nack (and not tell DEAD_LETTERED).
                to = partition if partition < self.partitions(outcome_topic) else 0
                for value in self._resolution_records(spout, outcome_rows_, self.limit(outcome_topic)):
                    size = record_size(value, b"replay", [])
                    self._send(queued, outcome_topic, to, value, key=b"replay", headers=None, size=size)
            # Partition 0, where it is read (`_last_published`), whatever the topic's partitions.
            produce(self.producer, self.settings.progress_topic, progress.encode(), key=self.identity.encode(),
                    partition=0)  # fmt: skip
            self._commit()
        except BaseException as error:
            failed = error
        else:
            self.handled.update(handled)
            return len(rows)
        # Out of the except block: a Kafka call that raises (the abort, the lookups) while an exception is being
        # handled keeps that exception alive for good (`acker.kafka.clients`), and with it every frame of its
        # traceback: this one, the batch's caller and its rows.
        with after_failure(failed):
            self._abort()
            refused = failed.__cause__ if isinstance(failed, _UnansweredCommitError) else failed
            if isinstance(refused, KafkaException):
                # A topic deleted under the transaction is said as such, also when its commit was not answered.
                written = {t for t in replay_topics if t in self._partitions} | {row.outcome_topic for row in rows}
                self._raise_if_deleted(written | {self.policy.dead_letter_topic, self.settings.progress_topic}, failed)
        raise failed

    def _commit(self) -> None:
        """Commit the open transaction. One not answered within a minute (a broker away) is past the transaction's
        timeout too, which the broker aborts once back: the batch fails then, saying so and that the job's next start
        (whose `init_transactions` settles it: `spark_jobs.restarts`) publishes the batch again, rather than with
        librdkafka's "retry call to resume", which the job cannot do."""
        try:
            self.producer.commit_transaction(60)
        except KafkaException as error:
            cause = kafka_error(error)
            if cause is None or not cause.retriable():
                raise
            raise _UnansweredCommitError(
                f"a transaction of the replay job was not committed within 60 s ({cause.str()}): a broker away? "
                "Started again once Kafka answers, the job publishes the batch again, each nack once"
            ) from error

    def _abort(self) -> None:
        """Abort the open transaction. An abort that fails too (the producer failed for good) is logged, not raised:
        raised, it took the place of the error that failed the transaction, and the job stopped saying only "Failed
        to end transaction: ... invalid state"."""
        try:
            self.producer.abort_transaction(30)
        except KafkaException as error:
            cause = kafka_error(error)
            self.unsettled = cause is None or not fatal(cause)  # fenced, say: its close returns at once
            log.warning("the failed transaction could not be aborted either (%s)", cause.str() if cause else error)

    def _raise_if_deleted(self, topics: Iterable[str], failed: BaseException) -> None:
        """`AckerError` (caused by ``failed``) naming the ``topics`` a failed transaction wrote to that no longer exist,
        as the lookups confirm it (`KafkaLookups.missing`): deleted while the job ran (the transaction was refused
        "unknown topic or partition", which librdkafka logs without the topic's name)."""
        kafka = lookups(self.settings.source.client)
        with kafka.lock:
            gone = [topic for topic in sorted(topics) if kafka.missing(topic)]
        for topic in gone:  # looked up again, should this publisher be used again
            self._partitions.pop(topic, None)
        if gone:
            spouts = [topic for topic in gone if topic.startswith(self.policy.replay_prefix)]
            then = (f"a spout makes its replay topic again when it starts, and a job restarted before that "
                    f"dead-letters the spout's nacks ({NO_REPLAY_TOPIC}: `acker dlq redrive` sends them again)"
                    if spouts else "the job started again goes on once it is back")  # fmt: skip
            raise AckerError(f"topic {', '.join(gone)} was deleted while the replay job ran (its transaction was "
                             f"refused, and the batch fails): {then}") from failed  # fmt: skip

    def _send(
        self,
        queued: dict[tuple[str, int], int],
        topic: str,
        partition: int,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: HeaderList | None,
        size: int,
    ) -> None:
        """Produce a record of ``size`` bytes in the open transaction. A topic's limit is of a whole batch of
        records, which the broker refuses whole, aborting the transaction at every run of the micro-batch. Where the
        limit is below the producer's own bound on a batch, a batch that would pass it is sent first (``queued``: the
        bytes produced to each partition since the last flush)."""
        if self.limit(topic) < self._batch_max:
            batched = queued.get((topic, partition), 0) + size + _FRAMING
            if batched > self.limit(topic):
                self.producer.flush(60)
                queued.clear()
                batched = size + _FRAMING
            queued[(topic, partition)] = batched
        produce(self.producer, topic, value, key=key, partition=partition, headers=headers)

    @staticmethod
    def _resolution_records(spout: str, rows: list[tuple[str, int, str, int]], limit: int) -> list[bytes]:
        """Outcome records of ``rows`` (``REPLAYED``, ``DEAD_LETTERED``) of at most `OUTCOMES_PER_RECORD` rows, as the
        acker writes them, each halved until it fits ``limit`` (the outcome topic's) with its framing."""
        parts = [rows[start : start + OUTCOMES_PER_RECORD] for start in range(0, len(rows), OUTCOMES_PER_RECORD)]
        records: list[bytes] = []
        while parts:
            part = parts.pop(0)
            value = encode_outcome_rows(spout, part)
            if len(value) + _FRAMING > limit and len(part) > 1:
                parts[:0] = [part[: len(part) // 2], part[len(part) // 2 :]]
            else:
                records.append(value)
        return records


def _key(row: Any) -> tuple[str, str]:
    """A nack's place in its micro-batch: its spout and message id, unique in a batch (deduplicated)."""
    return (row.spout, row.msg_id)


def _checked_order(rows: Iterable[Any]) -> Iterator[Any]:
    """``rows``, which must come in `_key` order (a part's progress names its last key: the parts of a batch must be
    cut the same at every run of it); `ValueError` at the first that does not."""
    before: tuple[str, str] | None = None
    for row in rows:
        key = _key(row)
        if before is not None and key <= before:
            raise ValueError(f"nacks out of order: {key} after {before}")
        before = key
        yield row


def _parts(rows: Iterator[Any], size: int, start: int) -> Iterator[tuple[list[Any], int, bool]]:
    """``rows`` in lists of ``size`` (the last shorter), each with the count of rows up to its end (from ``start``)
    and whether it is the last; one empty part when there are none: it still ends the batch."""
    part = list(itertools.islice(rows, size))
    end = start
    while True:
        following = list(itertools.islice(rows, size))
        end += len(part)
        yield part, end, not following
        if not following:
            return
        part = following


def in_order(batch: DataFrame, size: int) -> Iterator[Any]:
    """A micro-batch's nacks in `_key` order, on the driver a part (``size`` nacks) at a time or so: an outcome record
    holds up to 16,384 nacks (a mass timeout writes them full), and ``max_records`` of them collected at once, as
    Python rows, ran the driver out of memory, again at every run of the batch. A batch of one part is collected
    whole; a larger one is sorted by the executors in ranges of about a part, brought in one range at a time.
    ``batch`` is read several times: persist it."""
    head = batch.limit(size + 1).collect()
    if len(head) <= size:
        return iter(sorted(head, key=_key))
    ranges = max(1, -(-batch.count() // size))
    return batch.repartitionByRange(ranges, "spout", "msg_id").sortWithinPartitions("spout", "msg_id").toLocalIterator()


def _progress(value: bytes) -> tuple[int, int, tuple[str, str] | None]:
    """A progress record's micro-batch, how many of its nacks were published (`_WHOLE`: all) and the last of them
    (None when not said): ``<batch>``, ``<batch>/<n>`` or ``<batch>/<n>/<spout>/<msg_id>`` (a spout's name has no
    ``/``; a message id may)."""
    fields = value.decode().split("/", 3)
    done = int(fields[1]) if len(fields) > 1 else _WHOLE
    return int(fields[0]), done, (fields[2], fields[3]) if len(fields) == 4 else None


def _reason(decision: Decision) -> str:
    """A dead letter's reason (`acker.retries.REASON`)."""
    return text(decision.headers, REASON) or "unknown"


def handled_said(handled: Mapping[str, int]) -> str:
    """``handled`` (`_Publisher.handled`) in words: "3 replayed, 4 dead-lettered (source-missing 3, ...)"."""
    letters = {reason: n for reason, n in sorted(handled.items()) if reason != REPLAYED}
    said = f"{handled.get(REPLAYED, 0)} replayed, {sum(letters.values())} dead-lettered"
    return said + f" ({', '.join(f'{reason} {n}' for reason, n in letters.items())})" if letters else said


def _fetch(
    fetch: Fetch, topic: str, partition: int, offsets: list[int], *, tries: int = 3, open_wait_s: float = 0.0
) -> dict[int, Message | None]:
    """``fetch``, tried again while Kafka does not answer (`LookupError`); the last try's error propagates. A record
    past a transaction still open (`OpenTransactionError`) is waited for up to ``open_wait_s``, as the other reads
    of records to a partition's end as written wait (`open_transaction_wait_s`: until the broker aborts a transaction
    whose writer died), asked again every second."""
    attempt, waiting_since = 1, None
    while True:
        try:
            return fetch(topic, partition, offsets)
        except OpenTransactionError as error:
            now = time.monotonic()
            waiting_since = now if waiting_since is None else waiting_since
            if now - waiting_since >= open_wait_s or interrupted():  # given up at once when the job stops
                raise
            if waiting_since == now:
                log.warning("reading nacked records of %s[%d]: %s; waiting for it (%g s at most)", topic, partition,
                            error, open_wait_s)  # fmt: skip
            time.sleep(1.0)
        except LookupError as error:
            if attempt >= tries:
                raise
            log.warning("reading nacked records of %s[%d] (try %d of %d): %s", topic, partition, attempt, tries, error)
            time.sleep(attempt)  # a broker that did not answer is given a moment
            attempt += 1


_publishers: list[_Publisher] = []  # of this process's jobs, for `close_publishers`


CLOSE_WAIT_S = 10.0  # for a replay producer to close (`close_publishers`)


def close_publishers() -> None:
    """Close the producers of this process's replay jobs, once their queries have stopped (`session.stop`), each
    within `CLOSE_WAIT_S`: `Producer.close` aborts an open transaction and flushes without a bound, and with Kafka
    away it waited for Kafka's return (a job that ignored SIGTERM and Ctrl-C until its supervisor killed it). One
    whose transaction could not be aborted for want of an answer (`_Publisher._abort`) is not closed, nor waited for
    past the bound: its transaction is aborted by the broker after its timeout, or by the job's next start
    (`init_transactions`). A producer that failed for good (fenced) raises its error again on closing, or warns (a
    `RuntimeWarning`, its transaction not aborted): logged, either."""
    while _publishers:
        publisher = _publishers.pop()
        if publisher.unsettled:
            log.warning("a replay producer whose transaction could not be aborted is left unclosed: the broker aborts "
                        "the transaction after its timeout, or the job's next start does")  # fmt: skip
            continue
        closing = threading.Thread(target=_close, args=(publisher.producer,), name="replay-close", daemon=True)
        closing.start()
        closing.join(CLOSE_WAIT_S)
        if closing.is_alive():
            log.warning("a replay producer did not close within %g s (Kafka away?): left closing; an open "
                        "transaction of it is aborted by the broker after its timeout, or by the job's next start",
                        CLOSE_WAIT_S)  # fmt: skip


def _close(producer: Producer) -> None:
    """Close ``producer``, saying its error or warning, also after `close_publishers` has stopped waiting."""
    with warnings.catch_warnings(record=True) as warned:  # process-wide while it runs: another thread's too
        warnings.simplefilter("always")
        try:
            producer.close()
        except KafkaException as error:
            cause = kafka_error(error)
            log.warning("a replay producer closed with its error: %s", cause.str() if cause else error)
    for warning in warned:
        log.warning("a replay producer closed: %s", warning.message)


def start(spark: SparkSession, settings: ReplayJobSettings) -> list[StreamingQuery]:
    """Start the job's queries: the replays, and the dead letters of malformed outcome records when
    ``dead_letter_malformed``."""
    raw = settings.source.read(spark, exclude=(settings.dlq_topic,), max_records=settings.max_records, headers=True)
    trigger = f"{settings.trigger_s} seconds"
    # Deduplicated within a window of processing time, not of the outcome records' timestamps: those come from the
    # clocks of the acker and spout hosts, and a nack stamped far behind the others must still be replayed.
    deduplicated = (
        nacks(outcome_rows(raw))
        .withColumn("seen", F.current_timestamp())
        .withWatermark("seen", settings.dedupe_window)
        .dropDuplicatesWithinWatermark(["spout", "msg_id"])
        .drop("seen")
    )
    publisher: list[_Publisher] = []  # created on the first batch, on the driver

    def sink(batch: DataFrame, batch_id: int) -> None:
        if not publisher:
            publisher.append(_Publisher(settings, settings.identity(run_id(spark, settings.checkpoint, QUERY))))
        client = dict(settings.source.client)
        kafka = lookups(client)

        def fetch(topic: str, partition: int, offsets: list[int]) -> dict[int, Message | None]:
            with kafka.lock:
                return kafka.fetch(topic, partition, offsets)

        def committed(group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            with kafka.lock:
                return kafka.committed(group, partitions)

        batch.persist()  # read more than once (`in_order`)
        try:
            rows = in_order(batch, max(1, settings.nacks_per_transaction))
            first = next(rows, None)
            if first is not None:
                count = publisher[0].publish(batch_id, itertools.chain([first], rows), fetch, committed)
                log.info("batch %d: %d nack(s) handled: %s", batch_id, count, handled_said(publisher[0].handled))
        finally:
            batch.unpersist()

    main = (
        deduplicated.writeStream.queryName("acker-replay")
        .outputMode("append")
        .foreachBatch(batch_function(sink))
        .option("checkpointLocation", f"{settings.checkpoint}/{QUERY}")
        .trigger(processingTime=trigger)
        .start()
    )
    if not settings.dead_letter_malformed:
        return [main]
    letters = start_dead_letters(
        raw, settings.source, settings.dlq_topic, settings.checkpoint, settings.dead_letter_trigger_s
    )
    return [main, letters]
