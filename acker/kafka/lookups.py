"""What the spouts and the Spark jobs ask Kafka directly (besides Spark's Kafka source and sink): where records
exist, the record at given coordinates, and the fully-processed watermarks in the ``<group>.acked`` groups.

Clients are created once per Python process (driver or Spark worker) and per configuration, and reused.
"""

from __future__ import annotations

import bisect
import enum
import logging
import threading
import time
import uuid
from collections.abc import Container, Mapping
from typing import Any, Literal, NamedTuple

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined] # documented location
    AdminClient,
    OffsetSpec,
)
from confluent_kafka.cimpl import KafkaError

from acker.config import without_consumer_settings
from acker.errors import AckerError
from acker.kafka.client_log import serve_log_lines
from acker.kafka.clients import after_failure, kafka_error, log_bounds, timed_out

log = logging.getLogger("acker.kafka.lookups")
_LOOKUP_TIMEOUT_S = 10.0
# How long what one read saw of a partition answers `next_existing` without another read: records that existed may
# be deleted meanwhile (retention, compaction), and a mark that waits on one asks again after `RECHECK_S` (60 s).
SEEN_FOR_S = 10.0
_SEEN_KEPT = 1024  # partitions past which what was seen of them, or said of them gone, is pruned
_READ_GAP = 500  # offsets to fetch this close are read in one pass rather than sought one by one
_CONSUME_WAIT_S = 0.005  # how long one consume of a read waits for its batch to fill (`KafkaLookups._read`)
CONFIRM_S = 1.0  # a topic or partition found missing is looked for again after this before it is taken as gone
# One confirmed missing is taken as missing, without a second look, for this long: short, since a topic deleted and
# created again (or partitions added) within it would have its new records taken as gone too.
MISSING_KEPT_S = 10.0
# A topic or partition the cluster does not have (librdkafka's local error when its metadata lacks the partition).
_MISSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC})
_OFFSET_READERS = 32  # consumers kept for the groups whose committed offsets are asked (`KafkaLookups._offset_reader`)


def confirmed_absent(
    consumer: Consumer, topic: str, partition: int, timeout_s: float = _LOOKUP_TIMEOUT_S
) -> Literal["topic", "partition"] | None:
    """What the cluster's metadata lacks of ``topic``'s ``partition`` in two answers `CONFIRM_S` apart: the topic (it
    has no partitions at all), the partition, or None (it is there). One broker's metadata may lag behind a topic
    just made or partitions just added, or be stale for a moment after a restart, and what a caller does with the
    answer is not undone: a nacked record dead-lettered ``source-missing``, a watermark moved over offsets, a previous
    owner's outcomes not read back (its trees decided again). Only an answer that Kafka does not know the topic or the
    partition counts: another error (no leader for a moment, not authorized) says nothing of it being missing (None).
    Through a consumer handle, whose lookups create nothing. `KafkaException` when the cluster does not answer."""
    for attempt in range(2):
        if attempt:
            time.sleep(CONFIRM_S)
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if found is not None and found.error is not None and found.error.code() not in _MISSING:
            return None
        if found is not None and found.error is None and partition in found.partitions:
            return None
    return "partition" if found is not None and found.error is None and found.partitions else "topic"


class WatermarkCommitError(AckerError):
    """A watermark could not be published; ``failures`` maps (topic, partition) to Kafka's error."""

    def __init__(self, group: str, failures: dict[tuple[str, int], str]) -> None:
        # A group with live members: something consumes with it, and every commit of the job would be refused.
        self.members = any("UNKNOWN_MEMBER_ID" in e or "REBALANCE" in e for e in failures.values())
        hint = (
            f" (group {group!r} has live members: nothing may consume with a watermark group)" if self.members else ""
        )
        super().__init__(f"could not commit the watermarks of group {group!r}: {failures}{hint}")
        self.group, self.failures = group, failures


class Commits(enum.Enum):
    """Which watermarks `KafkaLookups.advance` commits, against the offset the group has for the partition."""

    AHEAD = "ahead"  # only ahead of it: a watermark never goes back (a replayed micro-batch, a late job)
    AHEAD_OR_SAME = "ahead or same"  # also equal to it: the commit renewed before Kafka's offset retention deletes it
    # Only equal to it: offsets read from the group, renewed as they are, and none where the group has none now (its
    # topic deleted since, maybe created again, which must not get the old topic's offset).
    SAME = "same"

    def wanted(self, mark: int, current: int | None) -> bool:
        """Whether ``mark`` is committed where the group has ``current`` (None: nothing)."""
        if self is Commits.SAME:
            return mark == current
        return mark > (-1 if current is None else current) or (self is Commits.AHEAD_OR_SAME and mark == current)


class _Seen(NamedTuple):
    """What a read of a partition saw: from ``first`` to ``end``, the offsets of every record a read_committed
    consumer reads there (none at the others); it answers until ``until`` (`SEEN_FOR_S`)."""

    first: int
    offsets: list[int]
    end: int
    until: float


class _Noting:
    """A ``keep`` for `KafkaLookups._read` that notes the offsets ``keep`` holds and keeps no record: a read of tens of
    thousands of records not done held every one's payload, where their offsets were all that was asked."""

    def __init__(self, keep: Container[int]) -> None:
        self._keep = keep
        self.offsets: list[int] = []

    def __contains__(self, offset: object) -> bool:
        if isinstance(offset, int) and offset in self._keep:
            self.offsets.append(offset)
        return False


class OpenTransactionError(LookupError):
    """An offset past a transaction still open on its partition: its record, if any, is not readable until the
    transaction ends (committed, or aborted: by the broker after its timeout when its writer died, or by an operator
    when it hangs)."""

    def __init__(self, topic: str, partition: int, offset: int, open_from: int) -> None:
        super().__init__(f"{topic}[{partition}]: offset {offset} lies past a transaction open from offset {open_from}, "
                         "not readable until it ends (one that hangs, which the broker never aborts, is listed by "
                         "Kafka's kafka-transactions.sh find-hanging and ended by its abort)")  # fmt: skip
        self.open_from = open_from


class KafkaLookups:
    """Not thread-safe by itself; `lookups` hands out one per configuration, guarded by a lock."""

    def __init__(self, client: Mapping[str, Any]) -> None:
        self._client = dict(client)
        self._consumer = Consumer(
            {
                **self._client,
                "group.id": f"acker-lookups-{uuid.uuid4().hex[:8]}",  # never joins: assign() only
                "enable.auto.commit": False,
                "isolation.level": "read_committed",  # what the spouts read
                "fetch.wait.max.ms": 10,
                "enable.partition.eof": True,  # the readable end is an answer ("nothing more"), not a wait
                "auto.offset.reset": "earliest",  # an offset deleted meanwhile: read on from what is left
            }
        )
        self._admin: AdminClient | None = AdminClient(without_consumer_settings(self._client))
        self._offset_readers: dict[str, Consumer] = {}  # per group asked: `_offset_reader`
        self.lock = threading.Lock()
        self._gone: set[tuple[str, int]] = set()  # partitions found gone, said once
        self._silent: set[tuple[str, int]] = set()  # partitions Kafka did not answer about at the last question
        self._seen: dict[tuple[str, int], _Seen] = {}  # per partition, what the last read of `next_existing` saw
        self._missing_until: dict[tuple[str, int], float] = {}  # partitions confirmed missing, until when trusted

    def close(self) -> None:
        """Close the consumer and let the admin client go (it has no close: librdkafka destroys it when it is
        freed), so that neither outlives its cluster, logging connection errors, while a job still holds this."""
        self._consumer.close()
        for reader in self._offset_readers.values():
            reader.close()
        self._offset_readers.clear()
        self._admin = None

    def _renew_after(self, error: KafkaException, *, coordinator: bool = False) -> None:
        """A new admin client for the next requests when ``error`` is a timeout, or any error of a request to a
        group's coordinator (``coordinator``). librdkafka 2.16's, once a request timed out while its broker was away,
        never answered a question of group offsets again when the broker came back (each timed out; the commit job
        stopped, the replay job replayed every nack for good); and one kept after a failed coordinator request (a
        connection dropped under it, ``_TRANSPORT``) aborted the process within two broker restarts in a stress run
        (`_offset_reader` says which assertion), where one renewed after every failure came through thirty. A fresh one
        answers at once."""
        if self._admin is not None and (coordinator or timed_out(error)):
            log.info("Kafka lookups: a request failed (%s): the next ones go through a new admin client", error)
            self._admin = AdminClient(without_consumer_settings(self._client))

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            raise RuntimeError("these Kafka lookups are closed")
        serve_log_lines(self._admin)  # nothing else polls it: the log lines queued since the last request
        return self._admin

    def next_existing(self, topic: str, partition: int, offset: int) -> int | None:
        """The offset of the first record at or after ``offset`` that a read_committed consumer reads; None when
        Kafka cannot tell now (an open transaction holds the readable end at ``offset``, nothing written there yet, a
        slow broker): the caller asks again later, and never skips an offset that might hold a record.

        A read takes what the broker hands over (up to a thousand records), not only the first record: the offsets
        without records between those it saw (transaction markers, aborted records) answer the next questions about
        that stretch for `SEEN_FOR_S`, without asking Kafka. A mark crossing a transactional partition stops at
        every marker; each was a read of its own (a few milliseconds under the job's lock), more than a source
        committing transactions many times a second leaves time for."""
        seen = self._seen.get((topic, partition))
        if seen is not None and time.monotonic() >= seen.until:  # answers nothing more (up to 36 KB each)
            del self._seen[(topic, partition)]
        elif seen is not None and seen.first <= offset < seen.end:
            at = bisect.bisect_left(seen.offsets, offset)
            return seen.offsets[at] if at < len(seen.offsets) else seen.end  # none in [offset, end): the readable end
        try:
            ends = self._ends(topic, partition)
        except KafkaException as error:  # no leader now (an election, a broker restarting), a timeout: asked again
            self._unanswered(topic, partition, f"its offsets ({error})")
            return None
        if ends is None:  # the topic or partition is gone: its watermark has nowhere to go
            self._say_gone(topic, partition, f"its watermark stays below offset {offset}")
            return None
        low, high = ends
        if offset < low:  # deleted: nobody can process those records any more
            log.warning("%s[%d]: offsets %d to %d were deleted (retention, or records deleted by hand) before their "
                        "outcomes were all in: the watermark passes them, and a record of theirs not done is lost (the "
                        "replay job skips a nack of it, as decided before)",
                        topic, partition, offset, low - 1)  # fmt: skip
            return low
        if offset >= high:
            return None
        try:
            found = self._read(topic, partition, offset, offset, whole_batch=True)
        except KafkaException as error:
            self._unanswered(topic, partition, f"offset {offset} ({error})")
            return None
        if found is None:
            return None
        self._silent.discard((topic, partition))
        records, end = found
        if end > offset:
            offsets = [int(record.offset() or 0) for record in records]
            if len(self._seen) >= _SEEN_KEPT:  # partitions not asked about since (topics deleted, marks moved on)
                now = time.monotonic()
                self._seen = {key: kept for key, kept in self._seen.items() if kept.until > now}
            self._seen[(topic, partition)] = _Seen(offset, offsets, end, time.monotonic() + SEEN_FOR_S)
        if records:
            return int(records[0].offset() or 0)
        return end if end > offset else None

    def record_offsets(
        self, topic: str, partition: int, first: int, last: int, keep: Container[int]
    ) -> tuple[list[int], int] | None:
        """The offsets in ``keep`` of the records a read_committed consumer reads from ``first`` until it has passed
        ``last``, and the offset it reached: no other offset from ``first`` to it holds a record such a consumer reads
        (those deleted since hold none: the read goes on from the partition's first offset). One pass, however many
        offsets of ``keep`` lie between: `next_existing` reads at each. None when Kafka gives nothing in time or
        refuses the read (a topic deleted, a leader lost: said as `next_existing` says it)."""
        noted = _Noting(keep)
        try:
            found = self._read(topic, partition, first, last, noted)
        except KafkaException as error:
            self._unanswered(topic, partition, f"offsets {first} to {last} ({error})")
            return None
        if found is None:
            self._unanswered(topic, partition, f"offsets {first} to {last} (nothing read in time)")
            return None
        self._silent.discard((topic, partition))
        return noted.offsets, found[1]

    def _unanswered(self, topic: str, partition: int, what: str) -> None:
        """Said as a warning the first time in a row (a lasting refusal, e.g. not authorized, freezes a watermark),
        then at INFO."""
        first = (topic, partition) not in self._silent
        self._silent.add((topic, partition))
        log.log(logging.WARNING if first else logging.INFO, "%s[%d]: no answer about %s; asked again later",
                topic, partition, what)  # fmt: skip

    def _say_gone(self, topic: str, partition: int, consequence: str) -> None:
        if (topic, partition) not in self._gone:
            if len(self._gone) >= _SEEN_KEPT:  # topics deleted long ago: said again, at worst
                self._gone.clear()
            self._gone.add((topic, partition))
            log.warning("%s[%d] no longer exists: %s", topic, partition, consequence)

    def topic_ids(self, topics: list[str]) -> dict[str, tuple[str, int] | None]:
        """Each topic's id (Kafka's, which a topic deleted and created again under its name does not keep) and
        partition count; None for a topic that does not exist. `KafkaException` when Kafka does not answer."""
        if not topics:
            return {}
        futures = self._admin_client().describe_topics(TopicCollection(topics), request_timeout=_LOOKUP_TIMEOUT_S)
        ids: dict[str, tuple[str, int] | None] = {}
        for topic, future in futures.items():
            try:
                described = future.result()
                ids[topic] = (str(described.topic_id), len(described.partitions))
            except KafkaException as error:
                cause = kafka_error(error)
                if cause is None or cause.code() not in _MISSING:
                    self._renew_after(error)
                    raise
                ids[topic] = None
        return ids

    def fetch(self, topic: str, partition: int, offsets: list[int]) -> dict[int, Message | None]:
        """The records at these offsets of one partition; None for an offset that certainly holds none (deleted by
        retention, past the end as written, or not a record a read_committed consumer reads). `LookupError` when Kafka
        cannot tell in time, or refuses a read, or the offset lies past a transaction still open (its record, if any,
        is not readable until the transaction ends): an unanswered read must not be taken for a missing record.

        Offsets close together are read in one pass from the first to the last of them; a topic or partition that no
        longer exists holds none of them.
        """
        wanted = sorted(set(offsets))
        out: dict[int, Message | None] = {}
        try:
            ends = self._ends(topic, partition)
        except KafkaException as error:  # not an answer: asked again, rather than taken for "gone"
            raise LookupError(f"{topic}[{partition}]: no answer for its offsets ({error})") from error
        if ends is None:
            return dict.fromkeys(wanted)
        low, high = ends  # ``high``: where the first transaction still open begins, if one is (read_committed)
        if wanted and wanted[-1] >= high:
            try:
                written = self._written_end(topic, partition)
            except KafkaException as error:
                raise LookupError(f"{topic}[{partition}]: no answer for its end ({error})") from error
            if held := [o for o in wanted if high <= o < written]:  # records may be there, not readable yet
                raise OpenTransactionError(topic, partition, held[0], high)
        for offset in wanted:
            if offset < low or offset >= high:
                out[offset] = None  # deleted, or (truncated) never there: past the end as written too
        pending = [o for o in wanted if o not in out]
        while pending:
            first, last = pending[0], pending[0]
            for o in pending[1:]:
                if o - last > _READ_GAP:
                    break
                last = o
            try:
                found = self._read(topic, partition, first, last, keep=set(pending))
            except KafkaException as error:  # a read refused (the topic deleted meanwhile, a leader lost): asked again
                raise LookupError(f"{topic}[{partition}]: no answer for offsets {first}..{last} ({error})") from error
            if found is None:
                raise LookupError(f"{topic}[{partition}]: no answer for offsets {first}..{last}")
            records, end = found
            by_offset = {r.offset(): r for r in records}
            for o in pending:
                if o > last:
                    break
                if o in by_offset:
                    out[o] = by_offset[o]
                elif o < end:
                    out[o] = None  # read past it without seeing it: not a record a consumer reads
                else:  # an open transaction holds the readable end below it
                    raise OpenTransactionError(topic, partition, o, end)
            pending = [o for o in pending if o > last]
        return out

    def _written_end(self, topic: str, partition: int) -> int:
        """The partition's end as written (read_uncommitted: the records of transactions still open counted), which
        the lookups' consumer does not say (its end is where the first open transaction begins). `KafkaException`
        when Kafka does not answer."""
        where = TopicPartition(topic, partition)
        futures = self._admin_client().list_offsets(
            {where: OffsetSpec.latest()},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
            request_timeout=_LOOKUP_TIMEOUT_S,
        )
        try:
            return int(futures[where].result().offset)
        except KafkaException as error:
            self._renew_after(error)
            raise

    def _ends(self, topic: str, partition: int) -> tuple[int, int] | None:
        """The first and the end offset of a partition; None when the topic or the partition certainly does not
        exist (deleted, or never there: a nack can name anything), as the cluster's metadata says when asked again.
        `KafkaException` when Kafka does not answer."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=_LOOKUP_TIMEOUT_S
            )
            return int(low), int(high)
        except KafkaException as error:
            failed = error
        cause = kafka_error(failed)
        with after_failure(failed):  # looked up out of the except block (`acker.kafka.clients`)
            missing = cause is not None and cause.code() in _MISSING and self._missing(topic, partition)
        if not missing:
            raise failed
        return None

    def missing(self, topic: str, partition: int = 0) -> bool:
        """Whether the cluster's metadata lacks the topic or the partition, confirmed as `_missing` confirms it; False
        when Kafka does not answer (that says nothing of it)."""
        try:
            return self._missing(topic, partition)
        except KafkaException:
            return False

    def _missing(self, topic: str, partition: int) -> bool:
        """Whether the cluster's metadata lacks the topic or the partition, asked now and again `CONFIRM_S` later.
        What a caller does with the answer cannot be undone (a nacked record dead-lettered ``source-missing``, a
        watermark moved over offsets), and one broker's metadata may lag behind partitions just added or a topic
        just made, or be stale for a moment after a restart: one answer dead-lettered records that existed. Once
        confirmed, trusted for `MISSING_KEPT_S`: the nacks of a deleted topic keep coming for a while, and each
        look waited `CONFIRM_S` (under the lookups' lock)."""
        key = (topic, partition)
        if time.monotonic() < self._missing_until.get(key, 0.0):
            return True
        if confirmed_absent(self._consumer, topic, partition) is None:
            return False
        if len(self._missing_until) > 10_000:  # partitions of topics deleted long ago
            self._missing_until = {k: t for k, t in self._missing_until.items() if t > time.monotonic()}
        self._missing_until[key] = time.monotonic() + MISSING_KEPT_S
        return True

    def _read(
        self,
        topic: str,
        partition: int,
        first: int,
        last: int,
        keep: Container[int] | None = None,
        *,
        whole_batch: bool = False,
    ) -> tuple[list[Message], int] | None:
        """The records a read_committed consumer reads from ``first`` until it has passed ``last`` (or the readable
        end), only those at offsets in ``keep`` if given, and the position reached; None if Kafka gives nothing for
        the lookup timeout (however long the whole read takes: a long stretch is read while records come). With
        ``whole_batch``, also the records after ``last`` that came with it (the position is after the last)."""
        self._consumer.assign([TopicPartition(topic, partition, first)])
        records: list[Message] = []
        deadline = time.monotonic() + _LOOKUP_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                # A consume returns when it has 1,000 records or its time is up, not at the end of the partition:
                # at 0.5 s, each read that ended within 1,000 records of the end waited the whole of it.
                batch = self._consumer.consume(1000, timeout=_CONSUME_WAIT_S)
                if batch:
                    deadline = time.monotonic() + _LOOKUP_TIMEOUT_S
                for index, record in enumerate(batch):
                    error = record.error()
                    if error is None:
                        if keep is None or record.offset() in keep:
                            records.append(record)
                        if (record.offset() or 0) >= last:
                            position = (record.offset() or 0) + 1
                            if whole_batch:  # up to the first event (the end of the partition, an error), if any
                                for later in batch[index + 1 :]:
                                    if later.error() is not None:
                                        break
                                    if keep is None or later.offset() in keep:
                                        records.append(later)
                                    position = (later.offset() or 0) + 1
                            return records, position
                    elif error.code() == KafkaError._PARTITION_EOF:
                        return records, int(record.offset() or 0)
                    else:
                        raise KafkaException(error)
            return None
        finally:
            self._consumer.unassign()

    def start_mark(self, group: str, topic: str, partition: int) -> tuple[int, bool]:
        """Where the watermark of a partition starts, and whether ``group`` had it: its committed offset in ``group``,
        else the first offset that exists (the spout commits its starting point there before it reads, see
        `acker.spout`). Asked again for up to 30 s while the partition has no leader (`log_bounds`)."""
        committed = self.committed(group, [(topic, partition)])
        if committed.get((topic, partition), -1) >= 0:
            return committed[(topic, partition)], True
        return log_bounds(self._consumer, TopicPartition(topic, partition))[0], False

    def committed(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The committed offsets of ``group`` (negative where none): asked through a consumer of the group's, not the
        admin client (`_offset_reader`). `KafkaException` when Kafka does not answer in time, or answers a
        partition with an error (see `committed_offsets`)."""
        offsets, refused = self._committed(group, partitions)
        if refused:
            raise KafkaException(next(iter(refused.values())))
        return offsets

    def _committed(
        self, group: str, partitions: list[tuple[str, int]]
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], KafkaError]]:
        """`committed`, the partitions Kafka answered with an error apart: their offset (-1001) is no answer."""
        if not partitions:
            return {}, {}
        reader = self._offset_reader(group)
        try:
            found = reader.committed([TopicPartition(t, p) for t, p in partitions], timeout=_LOOKUP_TIMEOUT_S)
        except KafkaException as error:
            if timed_out(error):
                # As the admin client's (`_renew_after`): a new one for the next question, rather than trusting one
                # whose question is still waiting on a coordinator that went away.
                del self._offset_readers[group]
                reader.close()
            raise
        offsets = {(tp.topic, tp.partition): tp.offset for tp in found if tp.error is None}
        return offsets, {(tp.topic, tp.partition): tp.error for tp in found if tp.error is not None}

    def _offset_reader(self, group: str) -> Consumer:
        """A consumer of ``group`` that only asks for its committed offsets (it never subscribes, so never joins the
        group nor commits): the group's coordinator is asked through the consumer's own coordinator connection. The
        admin client's ListConsumerGroupOffsets goes through librdkafka's coordinator requests, whose error path on a
        connection dropped at the wrong moment (a broker restarting) frees what it still uses and aborts the process
        (librdkafka 2.16: "rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed", upstream pull
        request #5397, not merged): every spout's first assignment, every commit job batch and every replay job batch
        asked that way."""
        reader = self._offset_readers.get(group)
        if reader is None:
            if len(self._offset_readers) >= _OFFSET_READERS:  # groups asked about once (`acker` commands, patterns)
                oldest = next(iter(self._offset_readers))
                self._offset_readers.pop(oldest).close()
            reader = Consumer({**self._client, "group.id": group, "enable.auto.commit": False})
            self._offset_readers[group] = reader
        serve_log_lines(reader)  # never polled otherwise: the log lines queued since the last question
        return reader

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every offset ``group`` has committed. Through the admin client (a consumer asks for given partitions only),
        as `advance` commits: a coordinator request, renewed after a failure (`_renew_after`); the commit job asks
        once per renewal (`CommitJobSettings.refresh_s`), not per batch."""
        request = ConsumerGroupTopicPartitions(group)
        # Within the lookups' timeout, as every other lookup here: librdkafka's own is 60 s, and the lock is held.
        listed = self._admin_client().list_consumer_group_offsets([request], request_timeout=_LOOKUP_TIMEOUT_S)
        try:
            result = listed[group].result()
        except KafkaException as error:
            self._renew_after(error, coordinator=True)
            raise
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def advance(
        self, group: str, marks: dict[tuple[str, int], int], commits: Commits = Commits.AHEAD
    ) -> dict[tuple[str, int], int]:
        """Commit those of ``marks`` to ``group`` that ``commits`` wants against what it has (by default, where they
        are ahead); return what was committed.

        A watermark never goes back: a replayed micro-batch or a late job commits nothing older. Every
        partition's error is checked (the admin call reports them per partition without raising), and any
        failure raises `WatermarkCommitError`, but for a partition that no longer exists (its topic deleted): its
        watermark has nowhere to be, which is said once. A partition whose committed offset Kafka answered with an
        error is not committed (against an offset not known, its watermark could go back) and is a failure; the
        others are committed all the same.
        """
        current, refused = self._committed(group, list(marks))
        ahead = {tp: m for tp, m in marks.items() if tp not in refused and commits.wanted(m, current.get(tp))}
        failures = {tp: f"its committed offset not read: {error}" for tp, error in refused.items()}
        if ahead:
            failures |= self._alter(group, ahead)  # those it could not commit leave ``ahead``
        if failures:
            raise WatermarkCommitError(group, failures)
        return ahead

    def _alter(self, group: str, ahead: dict[tuple[str, int], int]) -> dict[tuple[str, int], str]:
        """Commit ``ahead`` to ``group``; return the failures, each partition's (those removed from ``ahead``)."""
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, m) for (t, p), m in ahead.items()])
        try:
            altered = self._admin_client().alter_consumer_group_offsets([request], request_timeout=_LOOKUP_TIMEOUT_S)
            result = altered[group].result()
        except KafkaException as error:
            self._renew_after(error, coordinator=True)
            raise WatermarkCommitError(group, {tp: str(error) for tp in ahead}) from error
        failures = {}
        for tp in result.topic_partitions:
            if tp.error is None:
                continue
            del ahead[(tp.topic, tp.partition)]
            if tp.error.code() in _MISSING and self._missing(tp.topic, tp.partition):
                self._say_gone(tp.topic, tp.partition, f"its watermark in {group} is not committed")
            else:
                failures[(tp.topic, tp.partition)] = str(tp.error)
        return failures


_lookups: dict[tuple[tuple[str, str], ...], KafkaLookups] = {}
_lookups_lock = threading.Lock()


def lookups(client: Mapping[str, Any]) -> KafkaLookups:
    """The process's `KafkaLookups` for this client configuration."""
    key = tuple(sorted((k, str(v)) for k, v in client.items() if k != "logger"))  # a Python object, not a setting
    with _lookups_lock:
        if key not in _lookups:
            _lookups[key] = KafkaLookups(client)
        return _lookups[key]


def close_all() -> None:
    """Close the process's `KafkaLookups` (before its cluster goes away, say); the next `lookups` makes new ones."""
    with _lookups_lock:
        for kafka in _lookups.values():
            with kafka.lock:
                kafka.close()
        _lookups.clear()
