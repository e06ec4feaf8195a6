"""One acker partition owned by this instance: its tracker, its tick chain and its recovery offset. Pure.

The service feeds it the records of the partition in offset order and asks it three questions: what was
decided (`apply`), whether to append a tick now (`tick_due`), and from which offset a new owner must replay to
rebuild exactly this state (`recovery_offset`).

Ticks form a chain. A tick record's value carries the offset of the tick record its writer had last read (-1 for
none); a tick is applied only if that link names the last tick applied here (or when none has been read yet, at
the start of a replay). Two writers that both think they own the partition (a rebalance in progress, a stale
instance) therefore append ticks that are ignored rather than doubled, and every reader of the same log applies
the same ticks: expiry stays a function of the log.

Recovery: ``recovery_offset`` starts from the offset of the oldest record that opened a tree still pending or
decided within the last ``buckets`` ticks (or the next offset to read when there is none), and goes back to the
last tick applied at or before it. Replaying from there replays every message of every such tree, starting with a
tick this instance applied, so the new owner follows the same tick chain, rebuilds the same pending trees with the
same expiry, and decides the recent ones exactly as they were decided: no tree is nacked early, and none gets a
different outcome. Outcomes decided after that offset are emitted a second time (the same outcomes): downstream
is idempotent by (spout, message id).

Trees cut in two by that offset: a tree already forgotten (its tombstone dropped) whose records straddle the offset,
because an older tree still holds the offset back. Its records before the offset are not replayed: if one of them
came before its init (an ack racing the spout's init across a tick), the replay alone would see the init without it
and time the tree out, or ack what was failed: a second, contradictory outcome. Holding the offset back for such
trees cannot work (at any rate some tree straddles every tick, and the offset would never advance). Instead the new
owner learns what was decided: the service reads back the outcomes published for this partition from ``buckets``
ticks before the offset (`readback_from`; where they start is kept in the commit's metadata: a tree decided before
the offset may have had a tombstone at a record after it, where an init sent again was late) and hands their anchors
to `recover`. Their messages are late
until ``buckets`` ticks after the replay has passed the last record that decided one of them, as if tombstones of
that tick. No outcome depends on that end being exact: a tree's messages after its tombstone expired open an entry
without an init, which expires silently.
So such a tree gets no second outcome, and the trees decided after the offset are not published twice either. Those
trees leave no tombstone in the new owner, so its own recovery offset is held at or before the lowest acker offset
their outcome records name until they are forgotten: a third owner is told of them as well (`recover`). What
remains: an outcome decided just before a crash and not yet delivered is not read back, and its tree is decided
again by the replay alone (a straddler there may get a different outcome); and an init-less entry that expired
silently, straddling the offset, counts towards ``high_water`` for a different while. Such an entry (acks more than a
timeout before their init) also leaves no tombstone and holds the offset back for nothing: the replay may join acks
the old owner had let expire with the init in one entry, as old as those acks, and time the tree out up to
``buckets - 1`` ticks early (or ack it where the old owner timed it out). Only a tree whose init came that late.
"""

from __future__ import annotations

import bisect
from collections import deque

import numpy as np

from acker import fail_reasons
from acker.columnar.block import Kind, MessageBlock, OutcomeBlock, RecordSpans
from acker.columnar.tracker import BlockTracker
from acker.core.tracker import TrackerConfig
from acker.wire import encode_batch

NO_TICK = -1


def continues_chain(after: int, offset: int, last_tick_offset: int | None) -> bool:
    """Whether a tick in the record at ``offset`` whose link is ``after`` is applied, the last tick applied being
    the one at ``last_tick_offset`` (None: none yet, as at the start of a replay).

    One tick a record at most, linked to an earlier record: the service writes each alone. A record of many ticks,
    each linked to the one before (or to its own offset), moved the clock as many steps and timed out every pending
    tree at once."""
    return after < offset and (last_tick_offset is None or after == last_tick_offset)


def encode_tick(after: int) -> bytes:
    """The value of a tick record that continues the chain after the tick record at offset ``after``."""
    return encode_batch(
        MessageBlock(
            np.array([Kind.TICK], np.uint8),
            np.zeros(1, np.int64),
            np.array([after], np.int64),
            np.zeros(0, np.int32),
            np.zeros(0, np.int64),
        )
    )


class PartitionState:
    """Not thread-safe; the service calls it from its poll loop only.

    The tick schedule's times (``now_ms`` here, in `tick_due` and `tick_sent`, and ``read_ms``) are this instance's
    own steady clock (the service's: monotonic), and a tick applied counts from when it was read, by that clock,
    whoever wrote it, never from its record's timestamp (a wall clock stepped forward brought the next tick at once,
    and a tree opened just before the last one timed out after one interval, not `timeout`) nor from when this
    instance sent it (it may reach the log much later). Consecutive ticks of the chain are therefore written at
    least an interval apart, whoever writes them: a tree is in the log before the first tick after it, and expires
    at the ``buckets``-th, at least ``timeout`` later. Only without ``read_ms`` (a replay of a log, offline) are the
    records' timestamps the clock."""

    __slots__ = (
        "_began",
        "_decided_expiry",
        "_decided_since",
        "_decided_until",
        "_tick_written_at",
        "_told_from",
        "_told_until",
        "applied_ticks",
        "ignored_ticks",
        "last_tick_ms",
        "last_tick_offset",
        "partition",
        "position",
        "reasons",
        "stand_ins",
        "started_ms",
        "tick_in_flight",
        "tick_interval_ms",
        "tracker",
        "unread_tick_offset",
    )

    def __init__(self, partition: int, config: TrackerConfig, tick_interval_ms: int, now_ms: int) -> None:
        self.partition = partition
        self.tracker = BlockTracker(config)
        self.tick_interval_ms = tick_interval_ms
        self.started_ms = now_ms
        self.position: int | None = None  # next offset to read
        self.reasons = fail_reasons.Kept()  # why trees not decided yet failed, read beside their fails
        self.last_tick_offset: int | None = None  # offset of the last tick record applied
        self.last_tick_ms: int | None = None  # its timestamp
        self.tick_in_flight = False  # a tick we produced has no delivery report yet
        self.unread_tick_offset: int | None = None  # a tick we produced, delivered, not read back yet
        self._tick_written_at = 0
        self.ignored_ticks = 0
        self.stand_ins = 0  # messages applied in place of records rejected (`acker.service.failing_inits`): not read
        # Offsets of the ticks applied, back to ``buckets`` ticks before the one the recovery offset goes back to.
        self.applied_ticks: deque[int] = deque()
        self._decided_until: int | None = None  # offset of the last record that decided a tree given to `recover`
        self._decided_since: int | None = None  # the lowest; while those trees are known, not passed (`recover`)
        self._decided_expiry: int | None = None  # the tick count at which those trees are forgotten
        self._told_from: int | None = None  # ``since`` as `recover` was given it: what it was told of starts there
        self._told_until: int | None = None  # the offset of the record at which those trees were forgotten
        self._began: int | None = None  # the first offset this owner read

    def recover(self, decided: np.ndarray, until: int, since: int) -> None:
        """Before the first record: the anchors of the trees a previous owner decided (and published) after the
        offset this replay starts from; ``since`` and ``until``, the lowest and the highest acker offsets their
        outcome records name (each, the acker record that decided its last outcome).

        They hold no tombstone here, so nothing else holds the recovery offset at or before ``since`` while their
        messages are late: it is held there (never below this replay's start) until they are forgotten, so that the
        next owner is told of them too (it reads back the outcome records from `readback_from` on).
        Otherwise a message of theirs that the previous owner would have taken as late, after the offset committed
        here (an init sent again by a spout whose delivery report said failed, though the record was written), would
        open a new tree there: timed out, a spurious replay."""
        assert self.position is None, "recover before replaying"
        if len(decided):
            self.tracker.set_decided(decided)
            self._decided_until, self._decided_since, self._told_from = until, since, since

    def apply(self, offset: int, timestamp_ms: int, block: MessageBlock, read_ms: int | None = None) -> OutcomeBlock:
        """Apply the record at ``offset``; return what it decided. Records must come in offset order."""
        return self.apply_records(block, RecordSpans.single(len(block), offset, timestamp_ms), read_ms)

    def apply_records(self, block: MessageBlock, records: RecordSpans, read_ms: int | None = None) -> OutcomeBlock:
        """Apply the messages of several records at once (``records`` says which came from where); return what
        they decided (``index`` into ``block``, ignored ticks included). Records must come in offset order, here and
        from one call to the next. ``read_ms``: when they were read, by this instance's clock (the earliest moment
        the next tick may count from after another writer's tick)."""
        if not len(records.offsets):
            return self.tracker.process_records(block, records)
        self._read_from(int(records.offsets[0]))
        ticks = np.flatnonzero(block.kinds == Kind.TICK)
        kept = None  # positions in the block as given of the messages applied, when ignored ticks were taken out
        if len(ticks):
            keep = np.ones(len(block), bool)
            for i in ticks.tolist():
                r = records.record_of(i)
                offset, timestamp_ms = int(records.offsets[r]), int(records.timestamps_ms[r])
                after = int(block.values[i])
                if continues_chain(after, offset, self.last_tick_offset):
                    if read_ms is not None:
                        # From when we read it, by our clock, whoever wrote it: the log has it from some moment
                        # between then and when its writer sent it. Another writer's is stamped by a clock that may
                        # be behind ours (a previous owner still writing after it lost the partition appends ticks
                        # the chain takes). Ours, dated from when we sent it, counted from before it was in the log
                        # when the broker took long to append it (retried, a leader change): a tree written in
                        # between expired that much before `timeout`. And while ours is in flight, a tick read may
                        # be another writer's, written after ours: both link to the last tick applied.
                        timestamp_ms = read_ms
                    elif self.tick_in_flight or offset == self.unread_tick_offset:
                        timestamp_ms = max(timestamp_ms, self._tick_written_at)  # offline: the records' clock
                    self.last_tick_offset, self.last_tick_ms = offset, timestamp_ms
                    self.applied_ticks.append(offset)
                else:
                    keep[i] = False
                    self.ignored_ticks += 1
            if not keep.all():
                kept = np.flatnonzero(keep)
                block, records = _without(block, records, keep)
        self._passed(int(records.offsets[-1]))
        if self._decided_until is None and self._decided_expiry is None:
            outcomes = self.tracker.process_records(block, records)
        else:
            outcomes = self._counting_down(block, records)
        if kept is not None:
            outcomes.index = kept[outcomes.index]
        return outcomes

    def _counting_down(self, block: MessageBlock, records: RecordSpans) -> OutcomeBlock:
        """Apply the records while the trees told of by `recover` are known: that knowledge begins its countdown
        after the record that passes the last one deciding them, and ends after the tick that completes it, each at
        that record, not at the end of the call. Counted per call, how long they were known depended on how many
        records a poll returned: an init sent again was late (ignored) or opened a tree (timed out, replayed), as
        the same log was read in more or fewer calls."""
        parts: list[OutcomeBlock] = []
        starts: list[int] = []
        first, count = 0, len(records.offsets)
        while first < count:
            start, end = records.start_of(first), count
            if self._decided_until is not None:  # up to the first record at or past it
                past = np.flatnonzero(records.offsets[first:] >= self._decided_until)
                end = first + int(past[0]) + 1 if len(past) else count
            elif self._decided_expiry is not None:  # up to the record of the tick that completes the countdown
                ticks = np.flatnonzero(block.kinds[start:] == Kind.TICK) + start
                due = self._decided_expiry - self.tracker.tick_count
                end = records.record_of(int(ticks[due - 1])) + 1 if 0 < due <= len(ticks) else count
            part = block.slice(start, records.start_of(end))  # the last record ends where the block does
            parts.append(self.tracker.process_records(part, records.slice(first, end)))
            starts.append(start)
            if self._decided_until is not None and int(records.offsets[end - 1]) >= self._decided_until:
                # Past where they were decided: remembered as long as tombstones made now.
                self._decided_expiry = self.tracker.tick_count + self.tracker.config.buckets
                self._decided_until = None
            if self._decided_expiry is not None and self.tracker.tick_count >= self._decided_expiry:
                self.tracker.clear_decided()
                self._decided_expiry = self._decided_since = None
                self._told_until = int(records.offsets[end - 1])
            first = end
        return parts[0] if len(parts) == 1 and starts[0] == 0 else OutcomeBlock.concat(parts, starts)

    def skip(self, offset: int) -> None:
        """A record that was not applied (dead-lettered); reading goes on after it."""
        self._read_from(offset)
        self._passed(offset)

    def _read_from(self, offset: int) -> None:
        """``offset`` read (applied or skipped): if it is this replay's first, the trees told of by `recover` hold
        the recovery offset no lower than it. Outcome records of another acker topic's partition of the same number
        may share an outcome topic (same spout name), naming any offset; held below this replay's start, a commit
        would go back before it (also when the first record is dead-lettered: `skip`)."""
        if self.position is None:
            self._began = offset if self._began is None else self._began
            if self._decided_since is not None:
                self._decided_since = max(self._decided_since, offset)

    def _passed(self, offset: int) -> None:
        """Reading goes on after ``offset``."""
        self.position = offset + 1 if self.position is None else max(self.position, offset + 1)
        if self.unread_tick_offset is not None and offset >= self.unread_tick_offset:
            self.unread_tick_offset = None

    def tick_due(self, now_ms: int) -> int | None:
        """The chain link to write in a tick record if one is due now, else None.

        One tick at a time: the next is written only after the previous one was read back, so a lagging
        instance stretches the ticks of the log rather than piling them up.
        """
        if self.tick_in_flight:
            return None
        # This instance's own times, ahead of now: its clock was stepped back (NTP, a resumed VM). Taken as now, as a
        # tick's timestamp ahead is below: kept, no tick would be due until the clock passed them again.
        self.started_ms, self._tick_written_at = min(self.started_ms, now_ms), min(self._tick_written_at, now_ms)
        if self.unread_tick_offset is not None:
            if now_ms - self._tick_written_at < 3 * self.tick_interval_ms:
                return None
            self.unread_tick_offset = None  # never read back (truncated?): ticking must not stop for good
        # From the last tick applied, when this instance read it (by its own clock; offline, by its timestamp), but
        # never from before it took the partition: a timestamp from a clock behind this one (a previous owner's, or
        # the broker's under LogAppendTime) would bring the next tick, and expiries, early. Late is safe: trees live a
        # little longer. A time ahead of now (a clock stepped back) is taken as now: kept as it is, no tick would be
        # due until that time, and no tree would expire meanwhile.
        if self.last_tick_ms is not None and self.last_tick_ms > now_ms:
            self.last_tick_ms = now_ms
        since = max(self.started_ms, self.last_tick_ms or 0)
        if now_ms - since < self.tick_interval_ms:
            return None
        return self.last_tick_offset if self.last_tick_offset is not None else NO_TICK

    def tick_sent(self, now_ms: int) -> None:
        self.tick_in_flight = True
        self._tick_written_at = now_ms

    def tick_delivered(self, offset: int | None) -> None:
        """Delivery report of our tick: its offset, or None if it failed (it will be written again)."""
        self.tick_in_flight = False
        if offset is not None and (self.position is None or offset >= self.position):
            self.unread_tick_offset = offset

    def recovery_offset(self) -> int | None:
        """The offset to commit: where a new owner must start to rebuild this state (None: nothing read)."""
        if self.position is None:
            return None
        needed = self.tracker.oldest_needed(self.position)
        if self._decided_since is not None:
            needed = min(needed, self._decided_since)
        ticks, kept = self.applied_ticks, self.tracker.config.buckets + 1
        while len(ticks) > kept and ticks[kept] <= needed:
            ticks.popleft()  # older ticks can no longer anchor a replay, nor start a read-back (`readback_from`)
        at = bisect.bisect_right(ticks, needed) - 1
        return ticks[at] if at >= 0 else needed

    def readback_from(self, recovery: int) -> int:
        """The acker offset from which the trees decided must be told to a new owner replaying from ``recovery``
        (`recovery_offset`): the tick applied ``buckets`` ticks before it. A tree decided after that tick may have had
        a tombstone at a record at or after ``recovery``, where a message of it (an init sent again) was late; told
        only of the trees decided after ``recovery``, the new owner opened a tree with that message and timed it out.
        While this owner has applied fewer ticks than that since it began, the first record it read; and while a
        record at or after ``recovery`` was read with the trees it was told of (`recover`) known, no later than where
        those begin: a message of theirs there was late too."""
        ticks = self.applied_ticks
        at = bisect.bisect_right(ticks, recovery) - 1
        buckets = self.tracker.config.buckets
        if at >= buckets:
            start = ticks[at - buckets]
        else:
            start = recovery if self._began is None else min(self._began, recovery)
        if self._told_from is not None and (self._told_until is None or recovery <= self._told_until):
            return min(start, self._told_from)
        return start


def _without(block: MessageBlock, records: RecordSpans, keep: np.ndarray) -> tuple[MessageBlock, RecordSpans]:
    """The block without the messages where ``keep`` is False (ticks only: inits keep their columns)."""
    dropped_before = np.concatenate([[0], np.cumsum(~keep)])
    return (
        MessageBlock(
            block.kinds[keep],
            block.anchors[keep],
            block.values[keep],
            block.init_source,
            block.init_offset,
            block.sources,
        ),
        RecordSpans(records.ends - dropped_before[records.ends], records.offsets, records.timestamps_ms),
    )
