"""Reads held by a transaction that stays open: what a stream consumer says of it.

A consumer of committed records (``isolation.level=read_committed``: librdkafka's default, the stages') reads
a partition up to its last stable offset (LSO), where the first transaction still open on it begins. The records
after it, committed or not, wait until that transaction ends: its producer commits or aborts it, or the broker
aborts it past its ``transaction.timeout.ms``. A transaction Kafka left hanging (README, "A transaction that does not
end") never ends, and the reader waits for good without a word: its lag, counted to the LSO, is nil.

librdkafka's statistics say, per partition fetched, where the fetcher stands, the LSO and the high watermark (the
log's end), as of the last fetch. `HeldReads`, the pure core, decides from them which partitions an open transaction
has held longer than a limit, and which it let go; `WatchedConsumer`, the edge, is a consumer that reads its
statistics (``stats_cb``) and logs those decisions: once per held partition, a warning, and once it moves on, a line.

A partition paused, or whose leader is away, is not fetched, and its statistics stay as they were: they are not
taken for news (`WatchedConsumer.pause`). A consumer reading uncommitted records sees no LSO, and says nothing.
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
    watermark; ``fresh``: whether these are being kept up to date (fetched, from a broker that is up)."""

    fetching: int
    stable: int
    end: int
    fresh: bool = True

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


# Fetch states of a partition not assigned (any more): the others are assigned, fetched ("active") or on the way.
_UNASSIGNED = frozenset({"none", "stopping", "stopped"})


def partition_ends(stats: str) -> dict[Key, Ends]:
    """The partitions assigned in librdkafka's statistics JSON ``stats``, with their offsets; fresh those fetched
    (fetch state ``active``) from a leader that is up (a broker away, the fetcher backs off, and the offsets stay as
    they were). `ValueError` for a document that is not such JSON."""
    document = json.loads(stats)
    if not isinstance(document, dict):
        raise ValueError("librdkafka's statistics are not a JSON object")
    up = {b.get("nodeid") for b in (document.get("brokers") or {}).values() if b.get("state") == "UP"}
    found: dict[Key, Ends] = {}
    for topic, data in (document.get("topics") or {}).items():
        for number, p in ((data or {}).get("partitions") or {}).items():
            partition, state = int(number), p.get("fetch_state")
            if partition < 0 or state in _UNASSIGNED:  # -1: librdkafka's unassigned-partition queue
                continue
            fresh = state == "active" and p.get("leader") in up
            found[(topic, partition)] = Ends(int(p["next_offset"]), int(p["ls_offset"]), int(p["hi_offset"]), fresh)
    return found


class HeldReads:
    """Per consumer, the partitions an open transaction holds, from its statistics. Pure: the caller gives the time.

    Invariant: a partition's entry in ``_since`` is the LSO its reads were seen held at, and the time they were
    first seen held there. The same LSO means the same transaction (one opened after it ended would begin further
    on), so the entry stands through statistics that are not fresh (a pause, a broker away, a fetch restarting: they
    say what was), through an LSO seen lower (a new leader behind) and a fetcher sent back (a seek): only an LSO
    further on says that transaction ended. An entry goes when its partition is no longer assigned."""

    def __init__(self, warn_after_s: float) -> None:
        self.warn_after_s = warn_after_s
        self._since: dict[Key, tuple[int, float]] = {}  # held partition -> (its LSO, since when)
        self._warned: set[Key] = set()  # of those, the ones said held (`observe`)
        self._paused: set[Key] = set()
        self._resumed: set[Key] = set()  # resumed since the last statistics, which may be from before

    @property
    def said(self) -> int:
        """The partitions said held (`observe`) and not said released since: read by another thread (metrics)."""
        return len(self._warned)

    def pause(self, keys: Iterable[Key]) -> None:
        self._paused.update(keys)

    def resume(self, keys: Iterable[Key]) -> None:
        resumed = self._paused.intersection(keys)
        self._paused -= resumed
        self._resumed |= resumed

    def observe(self, now: float, ends: Mapping[Key, Ends]) -> tuple[list[Held], list[Held]]:
        """Given each assigned partition's ``ends`` at ``now``: the partitions held for ``warn_after_s`` or more,
        not said yet; and those said held whose LSO has moved on past that offset since (``held_s``: from when
        they were first seen held to ``now``)."""
        held, released = [], []
        stale, self._resumed = self._resumed, set()
        for key in [k for k in self._since if k not in ends]:  # no longer assigned here: nothing to say
            del self._since[key]
            self._warned.discard(key)
        for key, e in ends.items():
            if not e.fresh or key in self._paused or key in stale:
                continue
            tracked = self._since.get(key)
            if tracked is not None and e.stable <= tracked[0]:  # the same transaction (or a stale view of it)
                if (
                    key not in self._warned
                    and e.held
                    and e.stable == tracked[0]
                    and now - tracked[1] >= self.warn_after_s
                ):
                    self._warned.add(key)
                    held.append(Held(*key, e.stable, e.end, now - tracked[1]))
                continue
            if tracked is not None:  # that transaction ended: the LSO is further on
                del self._since[key]
                if key in self._warned:
                    self._warned.discard(key)
                    released.append(Held(*key, tracked[0], e.end, now - tracked[1]))
            if e.held:
                self._since[key] = (e.stable, now)
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
            held, released = self.held.observe(time.monotonic(), ends)
        except Exception as error:
            if not self._unreadable:
                self._unreadable = True
                log.warning("%s: librdkafka's statistics could not be read (%r): reads held by an open transaction "
                            "go unsaid", self.label, error)  # fmt: skip
            return
        for h in held:
            log.warning("%s: its reads of %s [%d] have stood at offset %d for at least %.0f s, where a transaction "
                        "still open begins: the records after it (the log goes on to offset %d) wait until it ends. "
                        "Kafka aborts a transaction past its producer's transaction.timeout.ms (the broker's "
                        "transaction.max.timeout.ms at most, 15 min by default); one open longer is hanging: see %s",
                        self.label, h.topic, h.partition, h.offset, h.held_s, h.end, SECTION)  # fmt: skip
        for h in released:
            log.info("%s: its reads of %s [%d] move on past offset %d, where a transaction held them about %.0f s",
                     self.label, h.topic, h.partition, h.offset, h.held_s)  # fmt: skip


class WatchedConsumer(Consumer):
    """A consumer that says when a transaction open on a partition it reads holds its reads for ``warn_after_s`` or
    more (0: it says nothing), from librdkafka's statistics: every `STATS_INTERVAL_MS` unless ``settings`` say
    otherwise (``statistics.interval.ms``; 0: never). Its group names it in the lines logged."""

    def __init__(self, settings: Mapping[str, Any], warn_after_s: float) -> None:
        label = str(settings.get("group.id", "a consumer"))
        if settings.get("client.id"):  # the service's instances share a group: their client ids tell them apart
            label += f" ({settings['client.id']})"
        self._watch = _Watch(label, warn_after_s)
        watching = {"statistics.interval.ms": STATS_INTERVAL_MS, **settings, "stats_cb": self._watch}
        super().__init__(watching if warn_after_s > 0 else dict(settings))

    @property
    def reads_held(self) -> int:
        """The partitions whose reads an open transaction has held past the limit, as last said (0 unwatched)."""
        return self._watch.held.said

    def pause(self, partitions: list[TopicPartition]) -> None:
        super().pause(partitions)
        self._watch.held.pause((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        super().resume(partitions)
        self._watch.held.resume((tp.topic, tp.partition) for tp in partitions)
