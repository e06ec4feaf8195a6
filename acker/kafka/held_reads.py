"""Reads held by a transaction that stays open: what a stream consumer says of it.

A consumer of committed records (``isolation.level=read_committed``: librdkafka's default, and every stage's) reads
a partition up to its last stable offset (LSO), where the first transaction still open on it begins. The records
after it, committed or not, wait until that transaction ends: its producer commits or aborts it, or the broker
aborts it past its ``transaction.timeout.ms``. A transaction Kafka left hanging (README, "A transaction that does not
end") never ends, and the reader waits for good without a word: its lag, counted to the LSO, is nil.

librdkafka's statistics say, per partition fetched, where the fetcher stands, the LSO and the high watermark (the
log's end), as of the last fetch. `HeldReads`, the pure core, decides from them which partitions an open transaction
has held longer than a limit, and which it let go; `WatchedConsumer`, the edge, is a consumer that reads its
statistics (``stats_cb``) and logs those decisions: once per held partition, a warning, and once it moves on, a line.

A paused partition is not fetched, and its statistics stay as they were: it is left out until resumed
(`WatchedConsumer.pause`), so that a transaction open when the pause began is not taken for one open since.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

log = logging.getLogger("acker.kafka.held_reads")

# How often librdkafka hands over its statistics, unless the settings say otherwise (0 there: never, and nothing is
# watched). Each is a JSON document of the client's brokers and partitions, parsed here: a few milliseconds.
STATS_INTERVAL_MS = 15_000
SECTION = 'README, "A transaction that does not end"'

Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class Ends:
    """One partition as of its last fetch: the offset the fetcher asks for next, the last stable offset, the high
    watermark."""

    fetching: int
    stable: int
    end: int

    @property
    def held(self) -> bool:
        """Whether the fetcher has reached the LSO and records lie beyond it: an open transaction holds the reads."""
        return 0 <= self.stable < self.end and self.fetching >= self.stable


@dataclass(frozen=True, slots=True)
class Held:
    """A partition whose reads stood at ``offset`` (where a transaction open there begins) for ``held_s``, the log
    going on to ``end``."""

    topic: str
    partition: int
    offset: int
    end: int
    held_s: float


def partition_ends(stats: str) -> dict[Key, Ends]:
    """The partitions being fetched (fetch state ``active``) in librdkafka's statistics JSON ``stats``, with their
    offsets; `ValueError` for a document that is not such JSON."""
    document = json.loads(stats)
    if not isinstance(document, dict):
        raise ValueError("librdkafka's statistics are not a JSON object")
    found: dict[Key, Ends] = {}
    for topic, data in (document.get("topics") or {}).items():
        for number, p in ((data or {}).get("partitions") or {}).items():
            partition = int(number)
            if partition < 0 or p.get("fetch_state") != "active":  # -1: librdkafka's unassigned-partition queue
                continue
            found[(topic, partition)] = Ends(int(p["next_offset"]), int(p["ls_offset"]), int(p["hi_offset"]))
    return found


class HeldReads:
    """Per consumer, the partitions an open transaction holds, from its statistics. Pure: the caller gives the time.

    Invariant: a partition's entry in ``_since`` is the time its reads were first seen held at the LSO it still
    has. The same LSO means the same transaction: a transaction opened after it ended would begin further on. A
    partition not fetched (revoked, paused) loses its entry; it counts from its next statistics again."""

    def __init__(self, warn_after_s: float) -> None:
        self.warn_after_s = warn_after_s
        self._since: dict[Key, tuple[int, float]] = {}  # held partition -> (its LSO, since when)
        self._warned: dict[Key, tuple[int, float]] = {}  # of those, the ones said held -> as in `_since` then
        self._paused: set[Key] = set()

    def pause(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self._paused.add(key)
            self._since.pop(key, None)

    def resume(self, keys: Iterable[Key]) -> None:
        self._paused.difference_update(keys)

    def observe(self, now: float, ends: Mapping[Key, Ends]) -> tuple[list[Held], list[Held]]:
        """Given each fetched partition's ``ends`` at ``now``: the partitions held for ``warn_after_s`` or more,
        not said yet; and those said held whose reads have moved on past that offset since (``held_s``: from when
        they were first seen held to ``now``)."""
        held = []
        for key, e in ends.items():
            if key in self._paused or not e.held:
                self._since.pop(key, None)
                continue
            offset, since = self._since.get(key, (e.stable, now))
            if offset != e.stable:  # that transaction ended; another holds the reads further on
                since = now
            self._since[key] = (e.stable, since)
            if now - since >= self.warn_after_s and self._warned.get(key) != (e.stable, since):
                self._warned[key] = (e.stable, since)
                held.append(Held(*key, e.stable, e.end, now - since))
        for key in [k for k in self._since if k not in ends]:  # no longer fetched: revoked
            del self._since[key]
        released = []
        for key, (offset, since) in list(self._warned.items()):
            if self._since.get(key) != (offset, since):
                del self._warned[key]
                if key in ends and key not in self._paused:  # moved on: not merely gone from here, or paused
                    released.append(Held(*key, offset, ends[key].end, now - since))
        return held, released


class _Watch:
    """The statistics callback of one `WatchedConsumer`: apart from it, so that the consumer's callback does not
    hold the consumer."""

    def __init__(self, label: str, warn_after_s: float) -> None:
        self.label = label
        self.held = HeldReads(warn_after_s)
        self._unreadable = False

    def __call__(self, stats: str) -> None:
        # Called by the consumer's poll: whatever is raised here comes out of it, and would stop the stage.
        try:
            ends = partition_ends(stats)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            if not self._unreadable:
                self._unreadable = True
                log.warning("%s: librdkafka's statistics could not be read (%s): reads held by an open transaction "
                            "go unsaid", self.label, error)  # fmt: skip
            return
        held, released = self.held.observe(time.monotonic(), ends)
        for h in held:
            log.warning("%s: its reads of %s [%d] have stood at offset %d for %.0f s, where a transaction still open "
                        "begins: the records after it (the log goes on to offset %d) wait until it ends. Kafka aborts "
                        "a transaction past its producer's transaction.timeout.ms (the broker's "
                        "transaction.max.timeout.ms at most, 15 min by default); one open longer is hanging: see %s",
                        self.label, h.topic, h.partition, h.offset, h.held_s, h.end, SECTION)  # fmt: skip
        for h in released:
            log.info("%s: its reads of %s [%d] move on past offset %d, where a transaction held them %.0f s",
                     self.label, h.topic, h.partition, h.offset, h.held_s)  # fmt: skip


class WatchedConsumer(Consumer):
    """A consumer that says when a transaction open on a partition it reads holds its reads for ``warn_after_s`` or
    more (0: it says nothing), from librdkafka's statistics: every `STATS_INTERVAL_MS` unless ``settings`` say
    otherwise (``statistics.interval.ms``; 0: never). Its group names it in the lines logged."""

    def __init__(self, settings: Mapping[str, Any], warn_after_s: float) -> None:
        self._watch = _Watch(str(settings.get("group.id", "a consumer")), warn_after_s)
        watching = {"statistics.interval.ms": STATS_INTERVAL_MS, **settings, "stats_cb": self._watch}
        super().__init__(watching if warn_after_s > 0 else dict(settings))

    def pause(self, partitions: list[TopicPartition]) -> None:
        super().pause(partitions)
        self._watch.held.pause((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        super().resume(partitions)
        self._watch.held.resume((tp.topic, tp.partition) for tp in partitions)
