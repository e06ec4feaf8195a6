"""Storm's streaming word count over Kafka: sentences → spout → split → count, each stage its own process(es).

    <prefix>.sentences  --spout "sentences"-->  <prefix>.split  --split bolt-->  <prefix>.words (key = word)
                        --count bolt-->  <prefix>.counts (running count per word, unanchored: the sink)

The words topic is keyed by word, so every count of a word lands on one partition and one count-bolt process:
Storm's fields grouping. Failure injection, for demos and tests:

- ``fail_rate``: the split bolt fails a sentence (raises) with this probability; a sentence containing the word
  ``poison`` always fails (a poison record: every replay fails again).
- ``drop_rate``: the count bolt silently drops a word (never acks it) with this probability; the word ``lost`` is
  always dropped. The tree then times out.
- ``crash_after``: a bolt process exits abruptly after that many messages (run it as a process, not a thread).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from acker.bolt import BasicCollector, BasicFunction, BoltInput, Collector, ExplicitFunction

SPOUT = "sentences"
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


class InjectedFailureError(Exception):
    """Raised by the split bolt to fail a sentence on purpose."""


def sentences(n: int, seed: int = 0, words: tuple[int, int] = (3, 9)) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(n):
        yield " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(*words))).encode()


def _crasher(crash_after: int | None) -> Iterator[None]:
    seen = 0
    while True:
        seen += 1
        if crash_after is not None and seen > crash_after:
            os._exit(17)  # a crash, not a shutdown: nothing is flushed or committed
        yield None


def split_function(
    topics: Topics, fail_rate: float = 0.0, seed: int = 0, crash_after: int | None = None
) -> BasicFunction:
    rng = random.Random(seed)
    crash = _crasher(crash_after)

    def split(message: BoltInput, collector: BasicCollector) -> None:
        next(crash)
        words = (message.value or b"").split()
        if POISON in words or rng.random() < fail_rate:
            raise InjectedFailureError("injected failure")
        for word in words:
            collector.emit(topics.words, word, key=word)

    return split


def count_function(
    topics: Topics, counts: Counter[bytes], drop_rate: float = 0.0, seed: int = 0, crash_after: int | None = None
) -> ExplicitFunction:
    rng = random.Random(seed)
    crash = _crasher(crash_after)

    def count(message: BoltInput, collector: Collector) -> None:
        next(crash)
        word = message.value or b""
        if word == LOST or rng.random() < drop_rate:
            return  # dropped silently: never acked, the tree times out
        counts[word] += 1
        collector.emit(topics.counts, str(counts[word]).encode(), key=word)  # unanchored: the sink
        collector.ack(message)

    return count
