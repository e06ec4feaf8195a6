"""The demo's books: what was written, what the system said about it, and whether it kept its promise. Pure.

The demo feeds it every source record written, every outcome (with its record's timestamp), every replayed copy
and dead letter, every count the count bolt published, and samples of the published watermarks; `Ledger.report`
then answers:

- **lost**: source records that are neither acked (directly, or through a replayed copy that was acked) nor
  dead-lettered. Must be none.
- **committed early**: a watermark sample at time t that passes a record (of the source or of the replay topic)
  whose first "done" outcome (ACK, REPLAYED or DEAD_LETTERED) was written after t. Must be none. The check is sound
  (no false alarm: the watermark was published before it was read at t) and misses only a commit that preceded
  the outcome by less than the sampling interval.
- **acked early**: a good sentence acked (itself or a replayed copy) before each of its words had a count record
  written for it (traced counts, with their timestamps): its tree completed while a word of it was still to count,
  the bug the acker exists to rule out (a watermark committed on that ack passes a record not fully processed). Must
  be none. Sound: a count record is written before its word is acked, its tree decided, and the outcome written.
- **dead letters**: the poison records (they fail at every attempt) once each of their attempts (the record and its
  ``max_attempts`` replayed copies) was nacked, and any other only if each of its attempts was nacked too: injected
  failures are random, and a good sentence can draw them at every attempt. Any other dead letter is reported, and so
  are more such good ones than the injected rates make plausible (a fault that fails trees, whatever their
  sentence, is not bad luck): about ``p ** (max_attempts + 1)`` a sentence, ``p`` the chance that one attempt draws
  a fail or a drop of one of its words, with room (``spare``) for the few trees a crash, a kill or a failover times
  out: `SPARE_BAD_LUCK`, and one more for each kill the run deals.
- **words**: every word of every good sentence not dead-lettered is counted at least once; counts beyond that are
  duplicates (at-least-once processing: a replayed sentence is counted again). Counts that name their sentence
  (the word count's tracing) are checked sentence by sentence; without it, word by word over all sentences, where
  a word counted twice for one sentence hides the same word missing from another. Where every count is traced
  (``traced``: the demo's), one that does not name its sentence and time is reported: the checks of acks before
  counts and of words by sentence would pass over it (and, with none traced, were skipped without a word).
- **other dead letters**: records the acker could not read (its dead-letter topic) and outcome records the Spark
  jobs could not (theirs): the demo writes none. Must be none.
- **counts below**: words whose last published count (the last record of the word in the counts topic) is below the
  number of times the word was counted (its count records): a count process that started a word again at 1 (a
  partition moved to it) lost counts, however many words it counted. Must be none.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from collections.abc import KeysView
from dataclasses import dataclass, field

DONE = ("ACK", "REPLAYED", "DEAD_LETTERED")
NACKS = ("FAILED", "TIMEOUT", "OVERLOAD")
Partition = tuple[str, int]
SPARE_BAD_LUCK = 2  # good records failed at every attempt beyond the rates' share: trees a crash or failover timed out


def coordinates(topic: str, partition: int, offset: int) -> str:
    return f"{topic}/{partition}/{offset}"


@dataclass
class Report:
    source_records: int
    acked_first_time: int
    replays: int
    acked_after_replay: int
    dead_lettered: list[str]
    poison: list[str]
    failed_every_attempt: list[str]  # good records dead-lettered after a nack at each attempt: bad luck, not a break
    failed_every_attempt_expected: float  # how many the injected rates make likely
    lost: list[str]
    acked_early: list[str]  # good records acked before every word of theirs was counted (traced counts)
    poison_not_replayed: list[str]  # poison records dead-lettered before a nack at each of their attempts
    other_dead_letters: dict[str, int]  # the acker's and the Spark jobs' dead-letter topics → records there
    committed_early: list[str]
    watermarks: dict[str, tuple[int, int]]  # "topic/partition" → (watermark, end)
    copies_behind: dict[str, tuple[int, int]]  # replay-topic "topic/partition" → (watermark, past its last copy)
    nacks: dict[str, int]
    duplicate_outcomes: int
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    words_expected: int
    words_counted: int
    words_lost: int
    counts_below: dict[str, tuple[int, int]]  # word → (its last published count, the times it was counted)
    dead_letter_details: dict[str, str]  # origin → why its tree failed (`acker.replay.detail`), where said
    spare: int = SPARE_BAD_LUCK  # good records failed at every attempt allowed beyond the rates' share
    # Count records without their sentence or time where every count is traced (the demo's): the acked-early and the
    # sentence-by-sentence word checks pass over them, and with none traced were skipped without a word.
    untraced_counts: int = 0

    @property
    def unexpected_dead_letters(self) -> list[str]:
        return sorted(set(self.dead_lettered) - set(self.poison) - set(self.failed_every_attempt))

    @property
    def poison_not_dead_lettered(self) -> list[str]:
        return sorted(set(self.poison) - set(self.dead_lettered))

    @property
    def watermarks_at_end(self) -> bool:
        return all(mark == end for mark, end in self.watermarks.values())

    @property
    def duplicate_words(self) -> int:
        return max(0, self.words_counted - self.words_expected)

    @property
    def failures(self) -> list[str]:
        """What broke the promise (empty: it was kept)."""
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} source record(s) lost, e.g. {self.lost[:3]}")
        if self.acked_early:
            out.append(f"acked before every word was counted: {self.acked_early[:3]}")
        if self.untraced_counts:
            out.append(f"{self.untraced_counts} count record(s) without their sentence's trace (wc.sentence) or time: "
                       "the checks of acks before counts and of words by sentence cannot be made of them")  # fmt: skip
        if self.committed_early:
            out.append(f"committed before fully processed: {self.committed_early[:3]}")
        if not self.watermarks_at_end:
            behind = {p: m for p, m in self.watermarks.items() if m[0] != m[1]}
            out.append(f"watermark not at the end offset: {behind}")
        if self.copies_behind:
            out.append(f"replay-topic watermark not past every replayed copy: {self.copies_behind}")
        expected = self.failed_every_attempt_expected
        if len(self.failed_every_attempt) > expected + 5 * math.sqrt(expected) + self.spare:
            out.append(f"{len(self.failed_every_attempt)} good record(s) nacked at every attempt, against about "
                       f"{expected:.1f} that the injected fail and drop rates explain")  # fmt: skip
        if self.unexpected_dead_letters:
            out.append(f"dead-lettered but not poison: {self.unexpected_dead_letters[:3]}")
        if self.poison_not_dead_lettered:
            out.append(f"poison records not dead-lettered: {self.poison_not_dead_lettered[:3]}")
        if self.poison_not_replayed:
            out.append(f"poison records dead-lettered before their replays: {self.poison_not_replayed[:3]}")
        if any(self.other_dead_letters.values()):
            out.append(f"dead letters of records nobody could read: {self.other_dead_letters}")
        if self.words_lost:
            out.append(f"{self.words_lost} word(s) of good sentences never counted")
        if self.counts_below:
            shown = dict(list(self.counts_below.items())[:3])
            out.append(f"{len(self.counts_below)} word(s) whose last count is below the times they were counted "
                       f"(last count, times counted): {shown}")  # fmt: skip
        return out


@dataclass
class Ledger:
    max_attempts: int = 3  # replays of a record before its next nack dead-letters it
    fail_rate: float = 0.0  # injected: the share of sentences the split bolts fail
    drop_rate: float = 0.0  # injected: the share of words the count bolts drop
    spare: int = SPARE_BAD_LUCK  # good records failed at every attempt allowed beyond the rates' share (`Report`)
    traced: bool = False  # every count names its sentence and has a time (the count bolts run with tracing)
    untraced_counts: int = 0  # counts that did not, where they all should
    sources: dict[str, bytes] = field(default_factory=dict)  # coordinates → sentence
    poison: set[str] = field(default_factory=set)
    ends: dict[Partition, int] = field(default_factory=dict)  # of the source topic, once written
    done_at: dict[str, int] = field(default_factory=dict)  # msg_id → ms of its first done outcome
    acked_at: dict[str, int] = field(default_factory=dict)  # msg_id → ms of its first ACK (those acked)
    outcome_events: Counter[tuple[str, str]] = field(default_factory=Counter)
    latencies: list[int] = field(default_factory=list)
    copies: dict[str, str] = field(default_factory=dict)  # replayed copy's coordinates → origin
    copy_offsets: dict[Partition, list[int]] = field(default_factory=lambda: defaultdict(list))
    dead_letters: set[str] = field(default_factory=set)  # origins
    details: dict[str, str] = field(default_factory=dict)  # origin → why its tree failed, as its dead letter says
    counted: Counter[bytes] = field(default_factory=Counter)
    counted_in: Counter[tuple[str, bytes]] = field(default_factory=Counter)  # (sentence's origin, word), traced
    last_count: dict[bytes, int] = field(default_factory=dict)  # word → the count its last count record says
    counted_at: dict[tuple[str, bytes], list[int]] = field(default_factory=lambda: defaultdict(list))  # traced, ms
    unreadable: Counter[str] = field(default_factory=Counter)  # dead-letter topic → records of nobody could read
    samples: list[tuple[int, dict[Partition, int]]] = field(default_factory=list)

    def written(self, topic: str, partition: int, offset: int, sentence: bytes, *, poison: bool) -> None:
        msg_id = coordinates(topic, partition, offset)
        self.sources[msg_id] = sentence
        if poison:
            self.poison.add(msg_id)
        self.ends[(topic, partition)] = max(self.ends.get((topic, partition), 0), offset + 1)

    def outcome(self, msg_id: str, outcome: str, latency_ms: int, *, by_acker: bool, at_ms: int) -> None:
        self.outcome_events[(msg_id, outcome)] += 1
        if outcome in DONE and (msg_id not in self.done_at or at_ms < self.done_at[msg_id]):
            self.done_at[msg_id] = at_ms
        # The first decision only: one re-made by a new owner after a failover is not a latency.
        if outcome == "ACK" and by_acker and msg_id not in self.acked_at:
            self.latencies.append(latency_ms)
        if outcome == "ACK" and at_ms < self.acked_at.get(msg_id, at_ms + 1):
            self.acked_at[msg_id] = at_ms

    @property
    def acked(self) -> KeysView[str]:
        """The message ids acked."""
        return self.acked_at.keys()

    def copy(self, topic: str, partition: int, offset: int, origin: str) -> None:
        self.copies[coordinates(topic, partition, offset)] = origin
        bisect.insort(self.copy_offsets[(topic, partition)], offset)

    def dead_letter(self, origin: str, detail: str | None = None) -> None:
        self.dead_letters.add(origin)
        if detail is not None:
            self.details[origin] = detail

    def count(
        self, word: bytes, sentence: str | None = None, value: int | None = None, at_ms: int | None = None
    ) -> None:
        """A count of ``word``, of the source record ``sentence`` (its origin) when the count says; ``value``: the
        count the record says (None when it says none); ``at_ms``: when its record was written. Given in the order of
        the counts topic's partition (a word's records are all in one: keyed by word)."""
        self.counted[word] += 1
        if self.traced and (sentence is None or at_ms is None):
            self.untraced_counts += 1
        if sentence is not None:
            self.counted_in[(sentence, word)] += 1
            if at_ms is not None:
                self.counted_at[(sentence, word)].append(at_ms)
        if value is not None:
            self.last_count[word] = value

    def unreadable_letter(self, topic: str) -> None:
        """A record in ``topic``, the acker's or the Spark jobs' dead-letter topic: one nobody could read."""
        self.unreadable[topic] += 1

    def watermarks(self, at_ms: int, marks: dict[Partition, int]) -> None:
        self.samples.append((at_ms, dict(marks)))

    def latest_watermarks(self) -> dict[Partition, int]:
        return self.samples[-1][1] if self.samples else {}

    # -- questions ------------------------------------------------------------------------------------------------

    def origins_acked(self) -> set[str]:
        """Source records whose replayed copy was acked (every copy names the first record as its origin)."""
        return {origin for copy, origin in self.copies.items() if copy in self.acked}

    def unresolved(self) -> list[str]:
        """Source records neither acked (directly or through a copy) nor dead-lettered, in coordinate order."""
        resolved = self.acked | self.dead_letters | self.origins_acked()
        return sorted(m for m in self.sources if m not in resolved)

    def _nacked_attempts(self) -> tuple[Counter[str], set[str]]:
        """Of each dead-lettered record: how many of its attempts (itself, its copies) were nacked; and those of them
        with an attempt acked."""
        nacked: Counter[str] = Counter()
        acked: set[str] = set()
        for copy, origin in [*((m, m) for m in self.dead_letters), *self.copies.items()]:
            if origin not in self.dead_letters:
                continue
            if any(self.outcome_events[(copy, reason)] for reason in NACKS):
                nacked[origin] += 1
            if copy in self.acked:
                acked.add(origin)
        return nacked, acked

    def failed_every_attempt(self) -> list[str]:
        """Dead-lettered good records that were nacked at every attempt and never acked."""
        nacked, acked = self._nacked_attempts()
        return sorted(m for m, n in nacked.items() if n > self.max_attempts and m not in acked and m not in self.poison)

    def poison_not_replayed(self) -> list[str]:
        """Poison records dead-lettered without a nack at each of their attempts (a replay job that gave up early)."""
        nacked, _ = self._nacked_attempts()
        return sorted(m for m in self.poison & self.dead_letters if nacked[m] <= self.max_attempts)

    def acked_early(self, good: dict[str, bytes]) -> list[str]:
        """Of the ``good`` records (coordinates → sentence), those acked (themselves or through a copy) before each of
        their words had a count record written for them; only where counts are traced and dated."""
        if not self.counted_at:
            return []
        first_ack: dict[str, int] = {}
        for msg_id, origin in [*((m, m) for m in good), *self.copies.items()]:
            at = self.acked_at.get(msg_id)
            if origin in good and at is not None and at < first_ack.get(origin, at + 1):
                first_ack[origin] = at
        early = []
        for origin, at in sorted(first_ack.items()):
            for word, times in Counter(good[origin].split()).items():
                written = sum(1 for when in self.counted_at.get((origin, word), ()) if when <= at)
                if written < times:
                    early.append(f"{origin} (acked at {at}; {word.decode(errors='replace')!r} counted {written} of "
                                 f"{times} time(s) by then)")  # fmt: skip
                    break
        return early

    def expected_failed_every_attempt(self) -> float:
        """How many good records the injected rates fail at every attempt, on average."""
        total = 0.0
        for msg_id, sentence in self.sources.items():
            if msg_id not in self.poison:
                kept = (1 - self.fail_rate) * (1 - self.drop_rate) ** len(sentence.split())
                total += (1 - kept) ** (self.max_attempts + 1)
        return total

    def _existing(self, partition: Partition, below: int) -> list[int]:
        if partition in self.ends:
            return list(range(min(below, self.ends[partition])))
        offsets = self.copy_offsets.get(partition, [])
        return offsets[: bisect.bisect_left(offsets, below)]

    def committed_early(self) -> list[str]:
        """Records a watermark sample passed before their first done outcome was written."""
        early: list[str] = []
        checked: dict[Partition, int] = {}  # offsets below this were checked against an earlier sample
        for at_ms, marks in self.samples:
            for (topic, partition), mark in marks.items():
                start = checked.get((topic, partition), 0)
                if mark <= start:
                    continue
                for offset in self._existing((topic, partition), mark):
                    if offset < start:
                        continue
                    msg_id = coordinates(topic, partition, offset)
                    if self.done_at.get(msg_id, at_ms + 1) > at_ms:
                        early.append(f"{msg_id} (watermark {mark} at {at_ms})")
                checked[(topic, partition)] = mark
        return early

    def report(self) -> Report:
        origins_acked = self.origins_acked()
        failed_every_attempt = self.failed_every_attempt()
        dropped = self.poison.union(failed_every_attempt)
        good = {m: s for m, s in self.sources.items() if m not in dropped}
        expected = Counter(word for sentence in good.values() for word in sentence.split())
        if self.counted_in:  # traced: sentence by sentence
            words_lost = sum(
                max(0, n - self.counted_in[(m, w)]) for m, s in good.items() for w, n in Counter(s.split()).items()
            )
        else:
            words_lost = sum(max(0, n - self.counted[w]) for w, n in expected.items())
        latencies = sorted(self.latencies)

        def percentile(q: float) -> float | None:
            return float(latencies[min(len(latencies) - 1, int(q * len(latencies)))]) if latencies else None

        marks = self.latest_watermarks()
        return Report(
            source_records=len(self.sources),
            acked_first_time=sum(1 for m in self.sources if m in self.acked),
            replays=len(self.copies),
            acked_after_replay=sum(1 for m in self.sources if m not in self.acked and m in origins_acked),
            dead_lettered=sorted(self.dead_letters),
            poison=sorted(self.poison),
            failed_every_attempt=failed_every_attempt,
            failed_every_attempt_expected=self.expected_failed_every_attempt(),
            lost=self.unresolved(),
            acked_early=self.acked_early(good),
            poison_not_replayed=self.poison_not_replayed(),
            other_dead_letters=dict(self.unreadable),
            committed_early=self.committed_early(),
            watermarks={f"{t}/{p}": (marks.get((t, p), -1), end) for (t, p), end in sorted(self.ends.items())},
            copies_behind={
                f"{t}/{p}": (marks.get((t, p), -1), offsets[-1] + 1)
                for (t, p), offsets in sorted(self.copy_offsets.items())
                if offsets and marks.get((t, p), -1) <= offsets[-1]
            },
            nacks={reason: sum(n > 0 for (_, o), n in self.outcome_events.items() if o == reason) for reason in NACKS},
            duplicate_outcomes=sum(n - 1 for n in self.outcome_events.values()),
            latency_p50_ms=percentile(0.50),
            latency_p99_ms=percentile(0.99),
            words_expected=sum(expected.values()),
            words_counted=sum(self.counted.values()),
            words_lost=words_lost,
            counts_below={
                w.decode(errors="replace"): (last, self.counted[w])
                for w, last in sorted(self.last_count.items())
                if last < self.counted[w]
            },
            dead_letter_details=dict(sorted(self.details.items())),
            spare=self.spare,
            untraced_counts=self.untraced_counts,
        )
