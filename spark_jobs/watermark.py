"""The fully-processed watermark of one source partition. Pure: no Spark, no Kafka.

State: ``mark``, the first offset not known to be done (every existing offset below it is done), and the done
offsets above it as sorted, disjoint, non-adjacent half-open runs ``[start, end)``. Out-of-order acks are the
normal case: they add runs; the mark advances only through a run that starts at it.

An offset below the first done run that is not done itself holds the mark back only if a record exists there.
Kafka has offsets without records (transaction markers, aborted transactions under read_committed, compacted or
deleted records): the caller passes ``next_existing(offset)``, the offset of the first record at or after
``offset`` that a consumer reads, and the mark jumps over the offsets without records. ``verified`` remembers an
offset already found to exist (and not done), so that a mark waiting on a slow tree asks Kafka once per
``RECHECK_S``, not at every batch: asked again, because retention or compaction may delete a record that will never
be done (its tree was lost before its init), and a deleted record must not hold the mark for good. Offsets without
records after the last done one (the marker that ends a transaction) are stepped over on request (``to_end``).

Invariants: ``mark`` never decreases; every run starts above ``mark``; a duplicated done offset changes nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

NONE = -1
RECHECK_S = 60.0  # how long a record found waiting is trusted to still exist
READ_THROUGH = 4_096  # gaps closer than this are read in one pass by `PartitionMark.record_free`, farther ones sought
READ_AT_MOST = 65_536  # offsets one read of `record_free` spans at most (Kafka's lock is held while it reads)
# ``records(first, last, keep)`` of `PartitionMark.record_free`: the offsets in ``keep`` of the records read from
# ``first`` until the read passed ``last`` (or stopped short), and the offset reached; None when Kafka cannot tell now.
RecordsRead = Callable[[int, int, Container[int]], tuple[list[int], int] | None]


@dataclass
class PartitionMark:
    mark: int
    runs: list[tuple[int, int]] = field(default_factory=list)  # sorted, disjoint, non-adjacent, all above mark
    verified: int = NONE  # an offset >= mark known to hold a record that is not done yet
    verified_at: float = field(default=0.0, compare=False)  # when (seconds; not saved: a restart asks again)

    def waiting(self, now_s: float) -> bool:
        """True while the mark waits on a record known to exist, found less than ``RECHECK_S`` ago."""
        return self.verified == self.mark and now_s - self.verified_at < RECHECK_S

    def add(self, offsets: Iterable[int] | npt.NDArray[np.int64]) -> None:
        """Record done offsets (any order, duplicates allowed; those below the mark are ignored)."""
        fresh = np.unique(np.fromiter(offsets, np.int64) if not isinstance(offsets, np.ndarray) else offsets)
        if not len(fresh):
            return
        breaks = np.flatnonzero(np.diff(fresh) != 1) + 1
        self.add_runs(fresh[np.r_[0, breaks]], fresh[np.r_[breaks - 1, len(fresh) - 1]] + 1)

    def add_spans(self, spans: Iterable[tuple[int, int]]) -> None:
        """`add_runs` of ``(start, end)`` pairs (the stretches `record_free` finds)."""
        pairs = np.array(list(spans), np.int64).reshape(-1, 2)
        self.add_runs(pairs[:, 0], pairs[:, 1])

    def add_runs(self, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> None:
        """Record done runs ``[starts[i], ends[i])`` (any order; overlapping, adjacent and empty ones allowed; the
        parts below the mark are ignored)."""
        keep = (ends > starts) & (ends > self.mark)
        starts, ends = np.maximum(starts[keep], self.mark), ends[keep]
        if not len(starts):
            return
        if self.runs:
            old = np.array(self.runs, np.int64)
            starts, ends = np.r_[starts, old[:, 0]], np.r_[ends, old[:, 1]]
        order = np.argsort(starts, kind="stable")
        starts, reach = starts[order], np.maximum.accumulate(ends[order])
        first = np.r_[True, starts[1:] > reach[:-1]]  # a run that neither overlaps nor touches the ones before
        last = np.r_[np.flatnonzero(first)[1:] - 1, len(starts) - 1]
        self.runs = list(zip(starts[first].tolist(), reach[last].tolist(), strict=True))

    def advance(self, next_existing: Callable[[int], int | None], now_s: float = 0.0, *, to_end: bool = False) -> int:
        """Move the mark as far as the done runs and the existing records allow; return it.

        ``next_existing(offset)`` is called when some offset above the mark is done (so a record exists at or after
        ``offset``, unless it was deleted since: then the deleted offsets count as records that do not exist, which
        nobody can process any more), and with ``to_end`` also when none is. None means Kafka cannot tell now: the
        mark stays, and the question is asked again at the next call (never remembered as an answer).

        ``to_end``: step over offsets without records that follow the last done one, up to the next record or the
        partition's readable end. A partition written in transactions ends with a transaction marker (and perhaps an
        aborted transaction), which no done offset ever comes after while the partition is idle: without this its
        mark would stay below the end for good. The commit job asks it now and then (`Marks.recheck`), not at every
        micro-batch: in a stream the record at the mark is usually in flight, and finding that out costs a read.
        """
        while self.runs or to_end:
            if self.runs and self.runs[0][0] <= self.mark:
                self.mark = max(self.mark, self.runs.pop(0)[1])
                continue
            if self.waiting(now_s):
                break  # a record is there and not done: wait for it
            existing = next_existing(self.mark)
            if existing is None:
                break
            if existing <= self.mark:
                self.verified, self.verified_at = self.mark, now_s
                break
            if not self.runs:  # no records in [mark, existing): existing is the readable end, or a record not done
                self.mark = existing
                break
            self.mark = min(existing, self.runs[0][0])  # no records in [mark, existing): nothing to wait for
        return self.mark

    def record_free(
        self, records: RecordsRead, start: int = 0, go_on: Callable[[], bool] = lambda: True
    ) -> tuple[list[tuple[int, int]], int | None]:
        """The stretches between done runs, from ``start`` on, that hold no record a consumer reads (transaction
        markers, aborted records); and where the walk stopped, None when it went through every gap.

        A mark that waits on one record while the offsets above it are done collects a run per stretch without records:
        a transactional source leaves a marker after each transaction, and the runs above a mark stuck for a day
        (its record nacked with no replay job running) grew without bound, each saved and merged again at every
        micro-batch. Those stretches, added as done (`add_runs`), merge the runs around them: what remains above the
        mark is parted by records not done only. Such a stretch holds no record for good (Kafka never writes below an
        offset it has handed out), so the answer holds however the mark moves meanwhile, on the same topic.

        Gaps less than `READ_THROUGH` apart are read in one pass (up to `READ_AT_MOST` offsets, a wide gap in parts:
        the done records between them are passed over, 1-2 microseconds each), farther ones each from its start (a
        read's own cost is some milliseconds). ``records(first, last, keep)``: the offsets in ``keep`` of the records
        from ``first`` until the read has passed ``last`` (or stopped short of it), and the offset it reached (offsets
        deleted since hold no record, as for `advance`); None when Kafka cannot tell now. The walk stops there, where a
        read reaches nothing past ``first`` (the readable end: an open transaction's start), or where ``go_on()`` says
        so before a read, and may start there again later."""
        gaps = [
            (max(gap_start, start), gap_end)
            for (_, gap_start), (gap_end, _) in zip(self.runs, self.runs[1:], strict=False)
            if gap_end > max(gap_start, start)
        ]
        not_done = _NotDone(self.runs)
        found: list[tuple[int, int]] = []
        at = 0  # the first gap not read through
        while at < len(gaps):
            first = gaps[at][0]
            last = at
            while (
                last + 1 < len(gaps)
                and gaps[last + 1][0] - gaps[last][1] < READ_THROUGH
                and gaps[last + 1][1] - first <= READ_AT_MOST
            ):
                last += 1
            # A gap wider than a read's span is read in parts (the rest from where the read reached).
            read = records(first, min(gaps[last][1], first + READ_AT_MOST) - 1, not_done) if go_on() else None
            if read is None or read[1] <= first:
                return found, first
            kept, reached = sorted(read[0]), read[1]
            while at < len(gaps) and gaps[at][0] < reached:
                gap_start, gap_end = gaps[at]
                free_from = gap_start
                for offset in kept[
                    bisect.bisect_left(kept, gap_start) : bisect.bisect_left(kept, min(gap_end, reached))
                ]:
                    if offset > free_from:
                        found.append((free_from, offset))
                    free_from = offset + 1
                if min(gap_end, reached) > free_from:
                    found.append((free_from, min(gap_end, reached)))
                if reached < gap_end:  # read in part (a gap wider than a read, a read stopped short): the rest next
                    gaps[at] = (reached, gap_end)
                    break
                at += 1
        return found, None

    def skip_to(self, offset: int) -> None:
        """Move the mark up to ``offset`` (nothing if it is not ahead): the offsets below it are given up, done or
        not, and the done runs below it are dropped."""
        if offset <= self.mark:
            return
        self.mark = offset
        self.runs = [(max(start, offset), end) for start, end in self.runs if end > offset]
        if self.runs and self.runs[0][0] == offset:  # a run that reached past the new mark continues it
            self.mark = self.runs.pop(0)[1]
        if self.verified < self.mark:
            self.verified = NONE

    @property
    def done_above(self) -> int:
        """How many done offsets wait above the mark."""
        return sum(end - start for start, end in self.runs)


class _NotDone:
    """The offsets none of ``runs`` holds (`Container`), as `PartitionMark.record_free` keeps records of a read."""

    def __init__(self, runs: list[tuple[int, int]]) -> None:
        self._runs = runs
        self._starts = [start for start, _ in runs]

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        at = bisect.bisect_right(self._starts, offset) - 1
        return at < 0 or offset >= self._runs[at][1]
