"""Where one acker partition's outcome records lie in the outcome topics. Pure.

A new owner of an acker partition replays it from the committed offset, and must learn which trees were decided
after that offset (`acker.partition` says why). The outcome records of acker partition ``p`` go to one partition of
each outcome topic (``p mod n``, or where they went already: `AckerService._send_outcomes`), so in each outcome topic
they all lie in one partition, in the order they were decided. The owner keeps,
per outcome topic, the offset of each record it delivered next to the acker offset of the record that decided its
last outcome; each commit carries in its metadata where the records deciding at or after an offset start
(`metadata`): the committed offset less ``buckets`` ticks (`acker.partition.PartitionState.readback_from`), and the
next owner reads them back from there (`acker.kafka.decided`).

Records still in flight land after every record delivered to the same partition, so the metadata may be taken at
any moment, except while a topic has records in flight and none delivered yet: its partition is not known then
(the partitioner picks it), and `metadata` says so rather than leave the topic out. The service avoids that case by
choosing the partition itself and declaring a topic (`expect`) before its first record, with the partition's end
offset then as the start: a topic first written after the last commit is then named in a commit before any of its
records can be delivered (`AckerService._cover`).

A topic with nothing to read back (no record deciding at or after the offset a commit starts from, none in flight)
for `FORGET_IDLE_S` is forgotten: left in, a spout renamed or retired (a name made per run) stayed in every commit
for as long as the instance owned the partition, and past about 50 such topics the metadata's bytes left out the live
ones, whose outcomes a new owner then published again. Written to again, a forgotten topic is a first one
(`written`: False), declared and covered again before its record. The time is the injected clock's (monotonic).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("acker.outcome_log")

METADATA_VERSION = 1
# Brokers refuse commit metadata over offset.metadata.max.bytes (4096 by default): stay well under it.
MAX_METADATA_BYTES = 3000
FORGET_IDLE_S = 900.0  # a topic with nothing to read back for this long is forgotten: one cover again when written

Starts = dict[str, tuple[int, int]]  # outcome topic → (its partition, offset) where a read-back starts


_UNKNOWN = -1  # the partition of a topic none of whose records was delivered yet


@dataclass(slots=True)
class _Stream:
    partition: int = _UNKNOWN
    records: deque[tuple[int, int]] = field(default_factory=deque)  # (deciding acker offset, outcome offset)
    end: int = 0  # the offset after the last record delivered (or the partition's end before any; -1: not known)
    in_flight: int = 0  # records produced, no delivery report yet
    idle_since: float | None = None  # when `starts` first found nothing of it to read back (None: not idle)

    def placed(self) -> bool:
        """Whether where its records start is known: a partition, and a record delivered there or its end before."""
        return self.partition != _UNKNOWN and (self.end != _UNKNOWN or bool(self.records))


class OutcomeLog:
    """Not thread-safe: fed by delivery reports, which the service's loop serves."""

    __slots__ = ("_clock", "_streams")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._streams: dict[str, _Stream] = {}
        self._clock = clock

    def sent(self, topic: str) -> None:
        """An outcome record was handed to the producer; `delivered` or `failed` follows."""
        self._streams.setdefault(topic, _Stream()).in_flight += 1

    def failed(self, topic: str) -> None:
        stream = self._streams.get(topic)
        if stream is not None:
            stream.in_flight = max(0, stream.in_flight - 1)

    def delivered(self, topic: str, partition: int, offset: int, acker_offset: int) -> None:
        """An outcome record landed at ``offset``; the last of its outcomes was decided by the acker record at
        ``acker_offset``. Reports of one topic come in offset order (an idempotent producer)."""
        stream = self._streams.setdefault(topic, _Stream())
        stream.in_flight = max(0, stream.in_flight - 1)
        if stream.partition != partition:  # the first report, or the topic's partitions were changed: start over
            stream.partition, stream.records, stream.end = partition, deque(), 0
        stream.records.append((acker_offset, offset))
        stream.end = max(stream.end, offset + 1)

    def expect(self, topic: str, partition: int, end: int | None) -> None:
        """The records of ``topic`` go to ``partition`` from now on, which ends at offset ``end`` now (None: not
        known): they will all land at or after it. A topic is known so before its first record is even produced (and
        its place is in every metadata from then on; with ``end`` None, once a record is delivered there); a change
        of partition starts it over, as a delivery there would."""
        stream = self._streams.setdefault(topic, _Stream())
        if stream.partition != partition:
            stream.partition, stream.records, stream.end = partition, deque(), _UNKNOWN if end is None else end

    def written(self, topic: str) -> bool:
        """Whether records of ``topic`` go somewhere already: a partition delivered to, read back or `expect`-ed, or
        records in flight (by key) whose delivery will tell it."""
        stream = self._streams.get(topic)
        return stream is not None and (stream.partition != _UNKNOWN or stream.in_flight > 0)

    def partition(self, topic: str) -> int | None:
        """The partition the records of ``topic`` go to (delivered there, read back there, or `expect`-ed); None
        while not known."""
        stream = self._streams.get(topic)
        return None if stream is None or stream.partition == _UNKNOWN else stream.partition

    def starts(self, replay_from: int) -> Starts | None:
        """Per outcome topic, where the records deciding at or after acker offset ``replay_from`` start (records
        still in flight land after every delivered one); None while a topic's partition is not known yet, with nothing
        forgotten. Otherwise forgets the records before, and the topics with nothing to read back for `FORGET_IDLE_S`
        (those of whose records none was ever delivered, at once: they tell nothing): offsets to commit only grow
        (an offset whose commit fails is taken as committed: a later commit is of it or after it)."""
        if any(stream.in_flight and not stream.placed() for stream in self._streams.values()):
            return None  # before anything is forgotten: this offset will not be committed now
        starts, idle, now = {}, [], self._clock()
        for topic, stream in self._streams.items():
            while stream.records and stream.records[0][0] < replay_from:
                stream.records.popleft()
            if stream.records or stream.in_flight:
                stream.idle_since = None
            elif stream.partition == _UNKNOWN:  # refused or failed, never delivered: it tells nothing
                idle.append(topic)
                continue
            elif stream.idle_since is None:
                stream.idle_since = now
            elif now - stream.idle_since >= FORGET_IDLE_S:
                idle.append(topic)
                continue
            if stream.placed():  # else nothing ever delivered there
                starts[topic] = (stream.partition, stream.records[0][1] if stream.records else stream.end)
        for topic in idle:
            del self._streams[topic]
        return starts

    def metadata(self, replay_from: int) -> str | None:
        """The commit metadata for committed offset ``replay_from`` (see `parse_metadata`); None while it cannot
        be told (see the module's note): commit later."""
        starts = self.starts(replay_from)
        if starts is None:
            return None
        kept: Starts = {}
        size = 32
        for topic, where in sorted(starts.items()):
            size += len(json.dumps(topic)) + 30
            if size > MAX_METADATA_BYTES:
                left = len(starts) - len(kept)
                log.warning("commit metadata full: the outcomes of %d of %d topics will not be read back", left,
                            len(starts))  # fmt: skip
                break
            kept[topic] = where
        return json.dumps({"v": METADATA_VERSION, "outcomes": {t: list(w) for t, w in kept.items()}})


def parse_metadata(text: str | None) -> Starts:
    """Where to read back from, out of a commit's metadata; nothing when it holds none (committed by an earlier
    version, by another tool) or cannot be read. Every partition and offset is a JSON integer of 0 or more, as
    `OutcomeLog.metadata` writes them, or none is taken: ``1e999`` (read as infinity) made ``int`` raise
    OverflowError, which stopped the service at every start while that commit stood; ``"12"`` was read as (1, 2)."""
    if not text:
        return {}
    try:
        obj = json.loads(text)
        if obj.get("v") != METADATA_VERSION:
            return {}
        starts = {str(t): (p, o) for t, (p, o) in obj["outcomes"].items()}
        if all(_count(p) and _count(o) for p, o in starts.values()):
            return starts
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # JSON nested past Python's stack
        pass
    log.warning("commit metadata not understood, nothing read back: %.200r", text)
    return {}


def _count(value: object) -> bool:
    return type(value) is int and value >= 0  # not a bool, nor a float
