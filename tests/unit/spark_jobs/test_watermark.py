"""The watermark: the end of the contiguous fully-processed prefix of the existing records, never beyond it."""

from __future__ import annotations

from collections.abc import Container
from unittest.mock import patch

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs import watermark
from spark_jobs.watermark import RECHECK_S, PartitionMark


def _next_existing(existing: set[int], calls: list[int]) -> object:
    def lookup(offset: int) -> int:
        calls.append(offset)
        return min((e for e in existing if e >= offset), default=max(existing, default=offset) + 1)

    return lookup


def _expected(start: int, existing: set[int], done: set[int]) -> int:
    """The first existing offset not done, if something above it is done; else just past the last done one."""
    if not done:
        return start
    waiting = [e for e in existing if e >= start and e not in done and e < max(done)]
    return min(waiting) if waiting else max(start, max(done) + 1)


@given(
    st.integers(0, 5),
    st.lists(st.booleans(), min_size=1, max_size=40),
    st.data(),
)
def test_the_mark_is_the_end_of_the_done_prefix_of_existing_records(
    start: int, present: list[bool], data: st.DataObject
) -> None:
    existing = {start + i for i, p in enumerate(present) if p}
    order = data.draw(st.permutations(sorted(existing)))
    acked = order[: data.draw(st.integers(0, len(order)))]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(acked)), max_size=5)))
    mark = PartitionMark(start)
    done: set[int] = set()
    previous = start
    for lo, hi in zip([0, *cuts], [*cuts, len(acked)], strict=True):
        batch = acked[lo:hi] + acked[lo:hi][:1]  # with a duplicate
        mark.add(batch)
        done |= set(batch)
        calls: list[int] = []
        got = mark.advance(_next_existing(existing, calls))  # type: ignore[arg-type]
        assert got == _expected(start, existing, done)
        assert got >= previous
        previous = got
        # Kafka is asked about each waiting offset once, not at every batch.
        assert len(calls) == len(set(calls))


def test_a_waiting_record_is_looked_up_once() -> None:
    mark = PartitionMark(10)
    calls: list[int] = []
    lookup = _next_existing({10, 11, 12}, calls)
    mark.add([11])
    assert mark.advance(lookup) == 10  # type: ignore[arg-type]
    mark.add([12])
    assert mark.advance(lookup) == 10  # type: ignore[arg-type]
    assert calls == [10]
    mark.add([10])
    assert mark.advance(lookup) == 13  # type: ignore[arg-type]
    assert mark.runs == [] and mark.done_above == 0


def test_offsets_without_records_do_not_hold_the_mark() -> None:
    mark = PartitionMark(0)
    mark.add([0, 1, 5])  # 2-4: a transaction marker and an aborted transaction
    calls: list[int] = []
    assert mark.advance(_next_existing({0, 1, 5, 6}, calls)) == 6  # type: ignore[arg-type]
    assert calls == [2]


def test_an_unanswered_lookup_holds_the_mark_and_is_asked_again() -> None:
    """Kafka could not tell (an open transaction, a slow broker): the mark waits, and the question is not remembered
    as an answer; the next batch asks again and moves on once the offset turns out to hold no record."""
    mark = PartitionMark(0)
    mark.add([0, 1, 3])
    answers: list[int | None] = [None, 3]
    assert mark.advance(lambda offset: answers.pop(0)) == 2
    assert mark.verified != 2
    assert mark.advance(lambda offset: answers.pop(0)) == 4


def test_a_waiting_record_deleted_later_does_not_hold_the_mark_for_good() -> None:
    """The record the mark waits on is never done (its tree was lost before its init) and retention deletes it: the
    mark asks again once the answer is RECHECK_S old, and moves past it."""
    mark = PartitionMark(0)
    existing = {0, 1, 2, 3}
    calls: list[int] = []
    lookup = _next_existing(existing, calls)
    mark.add([1])
    assert mark.advance(lookup, now_s=1000.0) == 0  # type: ignore[arg-type]
    existing.discard(0)  # retention
    mark.add([2, 3])
    assert mark.advance(lookup, now_s=1000.0 + RECHECK_S / 2) == 0  # type: ignore[arg-type]
    assert calls == [0]  # trusted for a while
    assert mark.waiting(1000.0 + RECHECK_S / 2) and not mark.waiting(1000.0 + RECHECK_S)
    assert mark.advance(lookup, now_s=1000.0 + RECHECK_S) == 4  # type: ignore[arg-type]


def test_a_mark_moved_ahead_outside_gives_up_what_is_below_and_keeps_what_is_above() -> None:
    mark = PartitionMark(2, [(3, 4), (5, 7), (9, 10)], verified=2)
    mark.skip_to(6)  # into a run: the run's rest continues the mark
    assert (mark.mark, mark.runs, mark.verified) == (7, [(9, 10)], -1)
    mark.skip_to(4)  # behind: nothing changes
    assert (mark.mark, mark.runs) == (7, [(9, 10)])
    mark.skip_to(8)  # just below a run: the run stays above the mark
    assert (mark.mark, mark.runs) == (8, [(9, 10)])
    calls: list[int] = []
    assert mark.advance(_next_existing({8, 9, 10}, calls)) == 8  # type: ignore[arg-type]  # 8 exists, not done


def _kafka_partition(existing: set[int], end: int, calls: list[int]) -> object:
    """``next_existing`` as Kafka answers it: the first record at or after an offset, else the readable end; None at
    or past the end (nothing written there yet)."""

    def lookup(offset: int) -> int | None:
        calls.append(offset)
        return min((e for e in existing if e >= offset), default=end if end > offset else None)

    return lookup


@given(
    st.integers(0, 5),
    st.lists(st.booleans(), min_size=1, max_size=40),
    st.integers(0, 3),
    st.data(),
)
def test_to_the_end_the_mark_also_passes_offsets_without_records_after_the_last_done_one(
    start: int, present: list[bool], tail: int, data: st.DataObject
) -> None:
    """``to_end``: the mark is the first existing record not done, else the partition's end, past the offsets without
    records that close it (a transaction's marker, an aborted transaction). Never past a record not done."""
    existing = {start + i for i, p in enumerate(present) if p}
    end = start + len(present) + tail
    order = data.draw(st.permutations(sorted(existing)))
    acked = order[: data.draw(st.integers(0, len(order)))]
    mark = PartitionMark(start)
    mark.add(acked)
    calls: list[int] = []
    got = mark.advance(_kafka_partition(existing, end, calls), to_end=True)  # type: ignore[arg-type]
    waiting = [e for e in existing if e not in set(acked)]
    assert got == (min(waiting) if waiting else end)
    assert not mark.runs or mark.runs[0][0] > got


def test_a_transactional_partition_done_to_its_last_record_reaches_its_end_on_request() -> None:
    """Records 0-9 written in one transaction: its commit marker is offset 10, the end 11. Every record done: the
    runs end at 10, and only a question asked with nothing done above the mark finds that 10 holds no record."""
    mark = PartitionMark(0)
    mark.add(range(10))
    calls: list[int] = []
    lookup = _kafka_partition(set(range(10)), 11, calls)
    assert mark.advance(lookup) == 10 and calls == []  # type: ignore[arg-type]  # a micro-batch does not ask
    assert mark.advance(lookup, to_end=True) == 11 and calls == [10]  # type: ignore[arg-type]
    assert mark.advance(lookup, to_end=True) == 11 and calls == [10, 11]  # type: ignore[arg-type]  # the end: stays
    mark.add([12])  # a record at 11 not done yet, 12 done: a record waits at the mark
    assert mark.advance(_kafka_partition({11, 12}, 13, calls), to_end=True) == 11  # type: ignore[arg-type]
    assert mark.verified == 11


@given(
    mark=st.integers(0, 40),
    batches=st.lists(st.lists(st.tuples(st.integers(0, 80), st.integers(0, 12)), max_size=8), max_size=5),
)
def test_runs_added_in_any_order_keep_the_runs_sorted_disjoint_and_exactly_the_done_offsets_above_the_mark(
    mark: int, batches: list[list[tuple[int, int]]]
) -> None:
    """The commit job adds a micro-batch's done offsets as runs (one bitmap of Spark's per 32,768 offsets): what the
    runs cover is the union of what was added, above the mark, however the runs overlap, touch or repeat."""
    partition = PartitionMark(mark)
    done: set[int] = set()
    for batch in batches:
        starts = np.array([start for start, _ in batch], np.int64)
        ends = np.array([start + length for start, length in batch], np.int64)
        partition.add_runs(starts, ends)
        done |= {o for start, length in batch for o in range(start, start + length) if o >= mark}
    covered = [o for start, end in partition.runs for o in range(start, end)]
    assert covered == sorted(done)
    runs = partition.runs
    assert all(runs[i][1] < runs[i + 1][0] for i in range(len(runs) - 1))  # not even touching
    assert all(start < end for start, end in partition.runs)


def _kafka_reads(
    existing: set[int], end: int, firsts: list[int], done: set[int] | None = None, cuts: list[int] | None = None
) -> object:
    """``records(first, last, keep)`` as a read_committed consumer reads the partition: from ``first`` until a record
    at or past ``last``, else to the end; a read stops short of that after ``cuts[i]`` offsets (the i-th read), or
    with a cut of 0 reaches nothing past ``first`` and gives records below it (a read from past the end, which the
    consumer takes from the first offset: it ends at the end, below ``first``). The records kept are none of
    ``done``; a read spans at most `READ_AT_MOST` offsets."""

    def records(first: int, last: int, keep: Container[int]) -> tuple[list[int], int]:
        cut = cuts[len(firsts)] if cuts and len(firsts) < len(cuts) else None
        firsts.append(first)
        assert last - first < watermark.READ_AT_MOST
        assert not any(e in keep for e in done or () if e >= first)
        if cut == 0:
            return [e for e in existing if e < first and e in keep], first
        passed = min((e for e in existing if e >= last), default=None)
        reached = end if passed is None else passed + 1
        reached = reached if cut is None else min(reached, first + cut)
        return [e for e in existing if first <= e < reached and e in keep], reached

    return records


@given(
    st.integers(0, 5),
    st.lists(st.sampled_from(["done", "pending", "none", "none"]), min_size=1, max_size=80),
    st.lists(st.integers(0, 4), max_size=12),
    st.tuples(st.integers(1, 12), st.integers(2, 40), st.lists(st.integers(0, 10), max_size=6)),
)
def test_the_stretches_without_records_between_done_runs_merge_them_and_only_records_not_done_part_them(
    start: int, kinds: list[str], budgets: list[int], reads: tuple[int, int, list[int]]
) -> None:
    """A partition of records done, records not done and offsets without records (markers, aborted records), its
    mark waiting on the first record not done. The walk, cut short after a few reads and gone on from where it
    stopped, finds only offsets without records; once through, the runs above the mark are parted by records not
    done only. The mark never passes a record not done. Gaps read together or apart alike, and reads that stop short
    go on from where they stopped."""
    read_through, read_at_most, cuts = reads  # how far apart gaps are read apart, a read's span, reads cut short
    existing = {start + i for i, kind in enumerate(kinds) if kind != "none"}
    done = {start + i for i, kind in enumerate(kinds) if kind == "done"}
    end = start + len(kinds)
    mark = PartitionMark(start)
    mark.add(sorted(done))
    mark.advance(_kafka_partition(existing, end, []))  # type: ignore[arg-type]
    firsts: list[int] = []
    records = _kafka_reads(existing, end, firsts, done, cuts)
    resume: int | None = 0
    with patch.multiple(watermark, READ_THROUGH=read_through, READ_AT_MOST=read_at_most):
        # The last walks are not cut short by the budget; a read that reaches nothing (a cut of 0) ends one, so
        # that there are as many as cuts, and one more.
        for budget in [*budgets, *[-1] * (len(cuts) + 1)]:
            if budget < 0 and resume is None:
                break
            before = len(firsts)

            def go_on(budget: int = budget, before: int = before) -> bool:
                return budget < 0 or len(firsts) - before < budget

            free, resume = mark.record_free(records, resume or 0, go_on)  # type: ignore[arg-type]
            assert all(not existing & set(range(s, e)) for s, e in free)
            assert all(s < e for s, e in free)
            if free:
                mark.add_spans(free)
    assert resume is None
    waiting = sorted(existing - done)
    assert not waiting or mark.mark <= waiting[0]
    for (_, gap_start), (gap_end, _) in zip(mark.runs, mark.runs[1:], strict=False):
        assert (existing - done) & set(range(gap_start, gap_end))  # a record not done parts them
    covered = {o for s, e in mark.runs for o in range(s, e)}
    assert covered & existing <= done


def test_gaps_close_together_are_read_in_one_pass_and_far_apart_each_from_its_start() -> None:
    """Markers every 3 offsets up to 300, then every 10,000: the first hundred gaps in one read, the others a read
    each (reading the 10,000 done records between two would cost more than a read of its own)."""
    far = [300 + 10_000 * k for k in range(1, 4)]
    existing = {o for o in range(1, 300) if o % 3 != 2} | {o for o in range(300, far[-1] + 1) if o not in far}
    mark = PartitionMark(0, verified=0)
    mark.add(sorted(existing))
    firsts: list[int] = []
    free, stopped = mark.record_free(_kafka_reads(existing | {0}, far[-1] + 1, firsts))  # type: ignore[arg-type]
    assert stopped is None and firsts == [2, *far[:-1]]
    assert free == [*((o, o + 1) for o in range(2, 300, 3)), *((o, o + 1) for o in far[:-1])]


def test_a_read_that_reaches_nothing_past_where_it_started_ends_the_walk_there() -> None:
    """The readable end at the read's start (a transaction still open there, which no gap below done records has; or
    a read from past the end, taken from the first offset): asked again and again, it would take the recheck's whole
    budget."""
    mark = PartitionMark(0, [(1, 2), (3, 4), (6, 7)], verified=0)
    firsts: list[int] = []

    def at_the_end(first: int, _last: int, _keep: Container[int]) -> tuple[list[int], int]:
        firsts.append(first)
        return [], first

    assert mark.record_free(at_the_end) == ([], 2) and firsts == [2]
