"""Storm's streaming word count over Kafka: sentences → spout → split → count, each stage its own process(es).

    <prefix>.sentences  --spout "<prefix>.sentences"-->  <prefix>.split  --split bolt-->  <prefix>.words (key = word)
                        --count bolt-->  <prefix>.counts (running count per word, written out: the sink)

The words topic is keyed by word, so every count of a word lands on one partition and one count-bolt process:
Storm's fields grouping. Failure injection, for demos and tests:

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

import os
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from confluent_kafka import Message

from acker.bolt import BasicCollector, BasicFunction, BoltInput, Collector, ExplicitFunction
from acker.headers import HeaderValue, first, read_headers, text
from acker.retries import ORIGIN
from acker.spout import Emitter

SENTENCE = "wc.sentence"  # header: the source record a message comes from (tracing)
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
            os._exit(17)  # a crash, not a shutdown: nothing is flushed or committed
        yield None


def traced_sentences(output: str) -> Callable[[Message, Emitter], None]:
    """The spout's emit function with tracing: each record forwarded with its origin in header ``wc.sentence``."""

    def emit(record: Message, emitter: Emitter) -> None:
        headers = read_headers(record) or []  # the spout fails a record whose headers cannot be read before this
        origin = text(headers, ORIGIN) or f"{record.topic()}/{record.partition()}/{record.offset()}"
        emitter.emit(output, record.value(), record.key(), [*headers, (SENTENCE, origin.encode())])

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
) -> ExplicitFunction:
    rng = random.Random(seed)
    crash = _crasher(crash_after, crash_marker)

    def count(message: BoltInput, collector: Collector) -> None:
        next(crash)
        word = message.value or b""
        if word == LOST or rng.random() < drop_rate:
            return  # dropped silently: never acked, the tree times out
        counts[word] += 1
        headers = _trace(message) if trace else None
        # The sink: the word's tree completes once its count is written (a count that cannot be written fails it).
        collector.write(topics.counts, str(counts[word]).encode(), key=word, headers=headers, anchors=[message])
        collector.ack(message)

    return count
