"""Storm's streaming word count over Kafka: sentences → spout → split → count, each stage its own process(es).

    <prefix>.sentences  --spout "<prefix>.sentences"-->  <prefix>.split  --split bolt-->  <prefix>.words (key = word)
                        --count bolt-->  <prefix>.counts (running count per word, written out: the sink)

The words topic is keyed by word, so every count of a word lands on one partition and one count-bolt process:
Storm's fields grouping. When a partition moves to another count process, that one goes on from the last count
written for each of its words (`WordCount`): counts may come out too high (a replayed sentence is counted again),
never too low. The counts topic is compacted (`COUNTS_TOPIC_CONFIG`): the last count of each word is what is read.
Not while the words topic's partition count changes under running split bolts: each sends a word to its new partition
once its own metadata shows the new count, and until all do, two count processes count the word each from its own
count (the README says so).
Failure injection, for demos and tests:

- ``fail_rate``: the split bolt fails a sentence (raises) with this probability; a sentence containing the word
  ``poison`` always fails (a poison record: every replay fails again).
- ``drop_rate``: the count bolt silently drops a word (never acks it) with this probability; the word ``lost`` is
  always dropped. The tree then times out.
- ``crash_after``: a bolt process exits abruptly after that many messages (run it as a process, not a thread); with
  ``crash_marker`` (a path), only the first of the processes given it to get there does (it creates the file), so
  that one crashes however the group spread the partitions over them.

Tracing, for the demo's books (`acker.examples.ledger`): with ``trace``, every message carries header
``wc.sentence``, the coordinates of the source record it comes from (a replayed copy's origin), from the spout
(`traced_sentences`) through the split bolt to each count, so that a count is told apart from another sentence's
count of the same word. Off by default: a header per message costs the pipeline (`benchmarks.stage_bench`).
"""

from __future__ import annotations

import logging
import os
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, Message, TopicPartition

from acker.bolt import BasicCollector, BasicFunction, Bolt, BoltInput, Collector
from acker.config import ServiceConfig
from acker.headers import HeaderValue, first, read_headers
from acker.kafka.clients import READ_TO_SETTINGS, log_bounds, read_to, topic_partitions
from acker.spout import Emitter

log = logging.getLogger("acker.wordcount")

SENTENCE = "wc.sentence"  # header: the source record a message comes from (tracing)
# The counts topic's settings: compacted, so that reading the last count of every word (`published_counts`) stays short.
COUNTS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(3_600_000)}
POISON = b"poison"
LOST = b"lost"
VOCABULARY = [
    "the",
    "cow",
    "jumped",
    "over",
    "the",
    "moon",
    "an",
    "apple",
    "a",
    "day",
    "keeps",
    "the",
    "doctor",
    "away",
    "four",
    "score",
    "and",
    "seven",
    "years",
    "ago",
    "snow",
    "white",
    "and",
    "the",
    "seven",
    "dwarfs",
    "i",
    "am",
    "at",
    "two",
    "with",
    "nature",
    "stream",
    "processing",
    "without",
    "losing",
    "records",
]


@dataclass(frozen=True)
class Topics:
    prefix: str = "wc"

    @property
    def sentences(self) -> str:
        return f"{self.prefix}.sentences"

    @property
    def split(self) -> str:
        return f"{self.prefix}.split"

    @property
    def words(self) -> str:
        return f"{self.prefix}.words"

    @property
    def counts(self) -> str:
        return f"{self.prefix}.counts"

    @property
    def spout(self) -> str:
        """The spout's name: its source topic's. A spout's name names its outcome and replay topics
        (``<outcome_prefix><spout>``, ``<replay_prefix><spout>``) on the acker settings it uses, so word counts of two
        prefixes on the same settings keep apart (one spout name for both, each processed the other's replays)."""
        return self.sentences

    @property
    def spout_group(self) -> str:
        """The spout's consumer group (its watermarks are in ``<group>.acked``: `SpoutSettings.watermark_group`)."""
        return f"{self.prefix}-spout"


class InjectedFailureError(Exception):
    """Raised by the split bolt to fail a sentence on purpose."""


def sentences(n: int, seed: int = 0, words: tuple[int, int] = (3, 9)) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(n):
        yield " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(*words))).encode()


def _crasher(crash_after: int | None, marker: str | None = None) -> Iterator[None]:
    seen = 0
    while True:
        seen += 1
        if crash_after is not None and seen > crash_after:
            if marker is not None:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:  # another process crashed first
                    crash_after = None
                    continue
                except OSError as error:  # raised here, it would end the generator: every later input would fail
                    log.warning("no crash: its marker %s cannot be made (%s)", marker, error)
                    crash_after = None
                    continue
            os._exit(17)  # a crash, not a shutdown: nothing is flushed or committed
        yield None


def traced_sentences(output: str) -> Callable[[Message, Emitter], None]:
    """The spout's emit function with tracing: each record forwarded with its origin in header ``wc.sentence``
    (`Emitter.source`: a replayed copy's origin, as the spout reads it from its own replay topic only; a source record
    copied from another pipeline's replay topic may carry one naming a record of that pipeline)."""

    def emit(record: Message, emitter: Emitter) -> None:
        headers = read_headers(record) or []  # the spout fails a record whose headers cannot be read before this
        emitter.emit(output, record.value(), record.key(), [*headers, (SENTENCE, emitter.source.encode())])

    return emit


def _trace(message: BoltInput) -> list[tuple[str, HeaderValue]] | None:
    """The ``wc.sentence`` header of ``message``, for its children; None when it has none."""
    value = first(message.headers, SENTENCE)
    return None if value is None else [(SENTENCE, value)]


def split_function(
    topics: Topics,
    fail_rate: float = 0.0,
    seed: int = 0,
    crash_after: int | None = None,
    *,
    trace: bool = False,
    crash_marker: str | None = None,
) -> BasicFunction:
    rng = random.Random(seed)
    crash = _crasher(crash_after, crash_marker)

    def split(message: BoltInput, collector: BasicCollector) -> None:
        next(crash)
        words = (message.value or b"").split()
        if POISON in words or rng.random() < fail_rate:
            raise InjectedFailureError("injected failure")
        headers = _trace(message) if trace else None
        for word in words:
            collector.emit(topics.words, word, key=word, headers=headers)

    return split


def count_function(
    topics: Topics,
    counts: Counter[bytes],
    drop_rate: float = 0.0,
    seed: int = 0,
    crash_after: int | None = None,
    *,
    trace: bool = False,
    crash_marker: str | None = None,
    published: Callable[[], Mapping[bytes, int]] | None = None,
) -> WordCount:
    """The count bolt's function, counting into ``counts`` (its bolt: `count_bolt`); ``published`` reads the last
    count written for each word (`published_counts`), None for a counts topic that no other process has written (a
    test's lone count bolt)."""
    return WordCount(
        topics, counts, published or dict, random.Random(seed), _crasher(crash_after, crash_marker), trace=trace,
        drop_rate=drop_rate,
    )  # fmt: skip


class WordCount:
    """The count bolt: a running count per word, each count written to ``<prefix>.counts`` (key = word, value = the
    count in decimal), the word's tree completed once it is written.

    A word's count goes on from the last one written for it, by whichever process of the stage. Its `words`
    partition moves between them (the second process joining at start-up, a crash, a restart), and a new owner that
    started its words at 1 wrote counts below the true ones, where at-least-once allows them too high (a replayed
    sentence is counted again), never too low. So before it counts an input that does not follow the last one it
    counted of that partition (the partition's first since it came here, or, a partition lost and given back, one
    past offsets another process may have counted), it reads the last count written for every word
    (``published``: the compacted counts topic, read to its end) and keeps, for each, the larger of that and its
    own. The larger, because one process at a time owns a word's partition and goes on from the last count written:
    the last count written is the highest, unless this process has counted the word since (its own count is then
    ahead: not delivered yet). A partition's previous owner writes its counts out before it gives the partition up
    (`acker.bolt`: the revoke commits only after a flush); a crashed one's undelivered counts were of inputs it had
    not committed, which the new owner counts again.

    A count not written when its partition goes (lost, or revoked with the flush before the commit timed out: a
    broker away) is dropped (`acker.bolt`), and one not written within its tree's life is given up
    (`ServiceConfig.sink_producer`): held through a broker's outage, it landed once the broker was back, after the new
    owner had read the published counts and gone on from them, and became the word's last count, below the times it
    was counted. Its tree fails instead, and its sentence is counted again.

    Not fenced: a process taken for dead while it lives on (paused past its session timeout: a stalled VM, a long
    garbage collection, SIGSTOP), or whose count, held through a broker's outage shorter than a tree's life, is
    delivered before the process learns that its session expired, may write counts of a partition after its new
    owner read the published ones, and a word's last count may then fall below the times it was counted
    (at-least-once still: no sentence is lost). Writing the counts and the input offsets in one Kafka transaction,
    with the group's metadata (KIP-447), would fence it; the example keeps the bolt's plain commits.

    `assigned` notes partitions that came here: one read of the published counts, made after they came, serves them
    all (a process taking over 8 partitions reads the counts topic once, not 8 times). A partition it was not told
    of (a bolt without ``on_assign``) reads them at its first input.
    `revoked` forgets a revoked partition: where it read to, and its words (those no partition still here counted).
    `lost` forgets where a lost partition was read to: given back, its next input reads the published counts first.
    """

    def __init__(
        self,
        topics: Topics,
        counts: Counter[bytes],
        published: Callable[[], Mapping[bytes, int]],
        rng: random.Random,
        crash: Iterator[None],
        *,
        trace: bool,
        drop_rate: float,
    ) -> None:
        self.topics, self.counts = topics, counts
        self._published, self._rng, self._crash = published, rng, crash
        self._trace, self._drop_rate = trace, drop_rate
        self._next: dict[tuple[str, int], int] = {}  # input partition -> the offset after the last input counted
        # Invariant: a partition is in `_current` only if the published counts were read after it last came here
        # (and it was not lost or revoked since); `_arrived` are those that came after the last read.
        self._current: set[tuple[str, int]] = set()
        self._arrived: set[tuple[str, int]] = set()
        self._words: dict[tuple[str, int], set[bytes]] = {}  # input partition -> the words counted from it
        self.rebuilds = 0  # reads of the published counts

    def __call__(self, message: BoltInput, collector: Collector) -> None:
        next(self._crash)
        partition = (message.topic, message.partition)
        expected = self._next.get(partition, message.offset)
        if partition not in self._current or expected != message.offset:  # another process may have counted its
            self._go_on_from_published(partition)  # words meanwhile (a gap: given back at another offset)
        self._next[partition] = message.offset + 1
        word = message.value or b""
        if word == LOST or self._rng.random() < self._drop_rate:
            return  # dropped silently: never acked, the tree times out
        self._words.setdefault(partition, set()).add(word)
        self.counts[word] += 1
        headers = _trace(message) if self._trace else None
        # The sink: the word's tree completes once its count is written (a count that cannot be written fails it).
        collector.write(
            self.topics.counts, str(self.counts[word]).encode(), key=word, headers=headers, anchors=[message]
        )
        collector.ack(message)

    def assigned(self, partitions: set[tuple[str, int]]) -> None:
        """`acker.bolt.AssignFunction`: these partitions came here; the next read of the published counts is theirs."""
        self._current -= partitions
        self._arrived |= partitions

    def lost(self, partitions: set[tuple[str, int]]) -> None:
        """`acker.bolt.LostFunction`: another process may be counting these partitions' words already. Given back,
        one may come back at the very offset this process would read next (its new owner counted only inputs below
        it that were not committed), with counts published since: its next input reads them first."""
        self._forget(partitions)

    def revoked(self, partitions: set[tuple[str, int]], _collector: Collector) -> None:
        """`acker.bolt.RevokeFunction`: these partitions' words are another process's to count from now on."""
        self._forget(partitions)
        for partition in partitions:
            gone = self._words.pop(partition, set())
            for word in gone.difference(*self._words.values()):
                del self.counts[word]

    def _forget(self, partitions: set[tuple[str, int]]) -> None:
        for partition in partitions:
            self._next.pop(partition, None)
        self._current -= partitions
        self._arrived -= partitions

    def _go_on_from_published(self, partition: tuple[str, int]) -> None:
        self.rebuilds += 1
        arrived = self._arrived | {partition}  # all came before this read
        published = self._published()  # may raise (Kafka not answering): then none of them is current
        for word, count in published.items():
            self.counts[word] = max(self.counts[word], count)
        self._current |= arrived
        self._arrived -= arrived


def count_bolt(config: ServiceConfig, function: WordCount, group: str) -> Bolt:
    """The count stage's bolt: explicit, and telling ``function`` of its input partitions' comings and goings."""
    return Bolt(config, function.topics.words, group, function, basic=False, on_revoke=function.revoked,
                on_lost=function.lost, on_assign=function.assigned, output_topics=[function.topics.counts])  # fmt: skip


def published_counts(config: ServiceConfig, topic: str) -> Callable[[], dict[bytes, int]]:
    """A reader of the last count written for each word in ``topic`` (the counts topic), read from its first offset
    to its end at each call (`WordCount`); a record whose value is not a count is passed over."""
    reader = Consumer(config.client(**{"group.id": f"{topic}.reader", "enable.auto.commit": False,
                                       **READ_TO_SETTINGS}))  # fmt: skip

    def read() -> dict[bytes, int]:
        latest: dict[bytes, int] = {}
        for partition in topic_partitions(reader, topic):
            first_offset, end = log_bounds(reader, TopicPartition(topic, partition))
            for record in read_to(reader, TopicPartition(topic, partition, first_offset), end):
                key, value = record.key(), record.value()
                if key is not None and value is not None and value.isdigit():
                    latest[key] = int(value)
        return latest

    return read
