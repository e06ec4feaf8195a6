"""Compiled loops of the columnar tracker (numba). Every rule mirrors `acker.core.tracker`; read that first.

The table is open addressing with linear probing over parallel arrays (a `Table` tuple), slot ``i`` holding one
tree:

    keys[i]    int64   anchor (0 = empty slot: anchors are never zero)
    vals[i]    int64   XOR word
    gens[i]    uint16  low 16 bits of the generation (tick count) of the last (re)insertion: the entry expires on
                       tick gens + buckets
    borns[i]   uint16  low 16 bits of the tick of birth (the init's arrival), for latency in ticks
    srcs[i]    int32   source index of the message id (spout and source) once the init is seen; before it,
                       NO_INIT, or FAILED_NO_INIT when a fail came first (so "init seen" is ``srcs[i] >= 0``)
    offs[i]    int64   offset part of the message id
    firsts[i]  uint32  low 32 bits of the offset of the record that opened the entry (for recovery)
    stamps[i]  uint32  low 32 bits of the init record's timestamp in ms (for complete latency)

40 bytes a slot, for pending trees only. The narrow columns are read as distances modulo their width: ``gens`` is
exact because every tick expires the entries ``buckets`` ticks old, so none is ever further behind (and
`TrackerConfig` keeps ``buckets`` < 2¹⁵); ``borns`` while a tree is younger than 65,536 ticks (11 days at the
default tick of 15 s); ``firsts`` and ``stamps`` while it is younger than 2³² records and 49 days.

The capacity need not be a power of two (the table grows by steps of 1.25 and fills to 4/5, see
`acker.columnar.tracker`): a hash's home slot is its high 32 bits scaled to the capacity (Lemire's multiply-shift
range reduction), and probes wrap at the capacity. Deletion shifts the following run back (no deleted markers),
so probes stay short. Expiry scans the table once per tick: ticks are rare and a scan of a million slots takes a
few milliseconds, which buys an O(1) relocation (only ``gens`` changes) and no per-bucket lists.

Finished trees (tombstones, which make late messages ``late`` for ``buckets`` ticks) live apart, in ``buckets + 1``
sets ringed by generation (``tombs[g % (buckets + 1)]`` holds the anchors finished at generation ``g``): 8 bytes a
slot, looked up only when an anchor is not pending, and expired a whole set at a time by one tick, with no
per-entry deletion. That keeps the main table, and so each tick's scan, the size of the pending trees. Recovery
needs of the tombstones only the oldest record that opened a tree of each set: ``tomb_oldest[r]``, a whole offset
(`NO_OFFSET` while the set is empty), so that finishing a tree writes one slot, and `oldest_needed` reads one number
a set instead of every tombstone.

All the sets share one capacity, so that a lookup hashes once for all of them. Laid out slot-major instead
(``tombs[i, r]``, slot ``i`` of every set in one cache line), a new tree's misses in the sets read one cache line
rather than one per set, but a set alone spreads over four times the memory: that ran 1.04× in the core benchmark
and no faster with three full sets of 470,000 tombstones (the CPU overlaps the sets' independent misses), and
slower after a restart, when one set fills while the others are empty.

``decided`` is a set of anchors (open addressing, 0 = empty) decided before this tracker existed, by a previous
owner of the partition, whose outcomes are published already: while it is set, their messages are ``late``, as if
tombstones (`acker.partition` explains when it is set and when it is dropped).

``state`` holds: [0] entries in the main table, [1] pending trees (the same number: kept apart for clarity),
[2] generation. ``tomb_counts[r]`` is the number of anchors in set ``r``, ``tomb_oldest[r]`` the lowest offset
of a record that opened one of their trees.
``counters`` follows the field order of `acker.core.tracker.Counters`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
from numba import njit

from acker.columnar._prefetch import prefetch

F = TypeVar("F", bound=Callable[..., Any])
Array = npt.NDArray[Any]
# keys, vals, gens, borns, srcs, offs, firsts, stamps
Table = tuple[Array, Array, Array, Array, Array, Array, Array, Array]
DTYPES = (np.int64, np.int64, np.uint16, np.uint16, np.int32, np.int64, np.uint32, np.uint32)


def _compiled(fn: F) -> F:
    """numba's ``njit`` (cached on disk), typed as the function it compiles. Without the GIL: trackers of different
    partitions run in parallel threads (`acker.service`)."""
    return cast(F, njit(cache=True, nogil=True)(fn))


def _inlined(fn: F) -> F:
    """A helper of the per-message loop, inlined into its callers: a call passes the table's eight arrays, and their
    reference counting cost more than the work itself (the tracker ran 2× slower with these as calls)."""
    return cast(F, njit(cache=True, nogil=True, inline="always")(fn))


NO_OFFSET = np.iinfo(np.int64).max  # tomb_oldest of an empty tombstone set
NO_INIT = -1  # srcs of an entry opened by updates before its init
FAILED_NO_INIT = -2  # srcs of an entry opened or marked by a fail before its init

K_INIT, K_ACK, K_ANCHOR, K_OK, K_FAIL, K_RESET, K_TICK = 0, 1, 2, 3, 4, 5, 6
O_ACK, O_FAILED, O_TIMEOUT, O_OVERLOAD = 0, 1, 2, 3  # acker.columnar.block.Code
# Counters, in the order of acker.core.tracker.Counters.
C_ACKED, C_FAILED, C_TIMEOUT, C_OVERLOAD, C_NO_INIT, C_COLLISIONS, C_LATE, C_UNKNOWN_RESETS, C_TICKS, C_MESSAGES = (
    range(10)
)
S_ENTRIES, S_PENDING, S_GENERATION = 0, 1, 2
OUT_COLUMNS = 7  # message index, code, anchor, source, offset, latency in ticks, latency in ms
_LOW32 = 0xFFFFFFFF
_HALF32 = 0x80000000
_LOW16 = 0xFFFF  # gens and borns: 16 bits, read as distances (`acker.core.tracker.MAX_BUCKETS` keeps gens exact)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


_HIGH = np.uint64(32)


@_inlined
def _home(anchor: int, capacity: int) -> int:
    """The home slot of ``anchor`` in a table of ``capacity`` slots (< 2³²): the high 32 bits of a Fibonacci hash,
    scaled to the capacity."""
    return np.int64((((np.uint64(anchor) * _GOLDEN) >> _HIGH) * np.uint64(capacity)) >> _HIGH)  # type: ignore[return-value]


@_inlined
def _find(keys: Array, anchor: int) -> int:
    """Slot of ``anchor``, or of the empty slot where it would go."""
    n = keys.shape[0]
    i = _home(anchor, n)
    while True:
        k = keys[i]
        if k == anchor or k == 0:
            return i
        i += 1
        if i == n:
            i = 0


@_inlined
def _move(t: Table, dst: int, src: int) -> None:
    keys, vals, gens, borns, srcs, offs, firsts, stamps = t
    keys[dst], vals[dst], gens[dst], borns[dst] = keys[src], vals[src], gens[src], borns[src]
    srcs[dst], offs[dst], firsts[dst], stamps[dst] = srcs[src], offs[src], firsts[src], stamps[src]


@_inlined
def _delete(t: Table, i: int) -> None:
    """Empty slot ``i`` and shift back the entries of the run after it (Knuth's algorithm R)."""
    keys = t[0]
    n = keys.shape[0]
    j = i
    while True:
        j += 1
        if j == n:
            j = 0
        k = keys[j]
        if k == 0:
            break
        h = _home(k, n)
        # The entry at j may move to i unless its home lies cyclically in (i, j].
        if (i <= j and (h <= i or h > j)) or (i > j and h <= i and h > j):
            _move(t, i, j)
            i = j
    keys[i] = 0


@_compiled
def _copy_into(t: Table, new: Table) -> None:
    keys = t[0]
    for i in range(keys.shape[0]):
        if keys[i] != 0:
            j = _find(new[0], keys[i])
            new[0][j], new[1][j], new[2][j], new[3][j] = keys[i], t[1][i], t[2][i], t[3][i]
            new[4][j], new[5][j], new[6][j], new[7][j] = t[4][i], t[5][i], t[6][i], t[7][i]


def empty_table(capacity: int) -> Table:
    return cast(Table, tuple(np.zeros(capacity, dtype) for dtype in DTYPES))


def rehash(t: Table, capacity: int) -> Table:
    """A copy of ``t`` with ``capacity`` slots."""
    new = empty_table(capacity)
    _copy_into(t, new)
    return new


@_inlined
def _opened(offset: int, first: int) -> int:
    """The whole offset of the record that opened an entry, from ``first``, its low 32 bits (``firsts``), and the
    offset of a later record: the entry is less than 2³² records old."""
    return int(offset - ((offset - np.int64(first)) & _LOW32))


@_compiled
def oldest_needed(t: Table, tomb_counts: Array, tomb_oldest: Array, position: int) -> int:
    """The lowest offset, at most ``position``, of a record that opened a pending tree or a tree finished in the
    last ``buckets`` ticks (a tombstone): replaying from there decides every such tree again from all of its
    messages, hence exactly as before."""
    keys, firsts = t[0], t[6]
    oldest = position
    for i in range(keys.shape[0]):
        if keys[i] != 0:
            oldest = min(oldest, _opened(position, firsts[i]))
    for r in range(tomb_counts.shape[0]):
        if tomb_counts[r]:
            oldest = min(oldest, tomb_oldest[r])
    return oldest


@_inlined
def _tomb_slot(tombs: Array, row: int, home: int, anchor: int) -> int:
    """Slot of ``anchor`` in tombstone set ``row``, or of the empty slot where it would go, probing from ``home``."""
    n = tombs.shape[1]
    i = home
    while True:
        k = tombs[row, i]
        if k == anchor or k == 0:
            return i
        i += 1
        if i == n:
            i = 0


@_inlined
def _is_tomb(tombs: Array, tomb_counts: Array, anchor: int) -> bool:
    """Whether ``anchor`` is in a tombstone set. Every set has one capacity: the home slot is hashed once, and the
    sets are probed in place (no row views)."""
    home = _home(anchor, tombs.shape[1])
    for r in range(tombs.shape[0]):  # noqa: SIM110 - a plain loop: numba compiles no generator into the kernel
        if tomb_counts[r] and tombs[r, _tomb_slot(tombs, r, home, anchor)] == anchor:
            return True
    return False


@_inlined
def _bury(tombs: Array, tomb_counts: Array, row: int, anchor: int) -> None:
    i = _tomb_slot(tombs, row, _home(anchor, tombs.shape[1]), anchor)
    if tombs[row, i] == 0:
        tombs[row, i] = anchor
        tomb_counts[row] += 1


@_compiled
def renumber(values: Array, n: int) -> tuple[Array, Array]:
    """``np.unique(values, return_inverse=True)`` for values in [0, ``n``), without sorting: the distinct values in
    increasing order, and the index of each value among them (how outcomes number the few sources they name). The
    caller guarantees the range: nothing is bounds-checked."""
    index = np.full(n, -1, np.int64)
    for v in values:
        index[v] = 0
    used = np.empty(n, np.int64)
    count = 0
    for v in range(n):
        if index[v] == 0:
            index[v], used[count] = count, v
            count += 1
    local = np.empty(values.shape[0], np.int64)
    for i in range(values.shape[0]):
        local[i] = index[values[i]]
    return used[:count], local


@_compiled
def anchor_set(anchors: Array, capacity: int) -> Array:
    """The distinct non-zero ``anchors`` as a set of ``capacity`` slots (more than there are anchors)."""
    keys = np.zeros(capacity, np.int64)
    for a in anchors:
        if a != 0:
            keys[_find(keys, a)] = a
    return keys


def rehash_tombs(tombs: Array, tomb_counts: Array, capacity: int) -> Array:
    """The tombstone sets copied into sets of ``capacity`` slots (same anchors, same counts).

    Allocated by numpy, whose zeroed memory the system provides as pages are first written: the sets still empty
    (all but one after a restart) cost nothing until they fill. Allocated in compiled code, every byte was written
    at once: three quarters of the time of a growth from 512k to 1M slots went to zeroing the empty sets."""
    new = np.zeros((tombs.shape[0], capacity), np.int64)
    _rebury(tombs, tomb_counts, new)
    return new


@_compiled
def _rebury(tombs: Array, tomb_counts: Array, new: Array) -> None:
    counts = np.zeros(tombs.shape[0], np.int64)
    for r in range(tombs.shape[0]):
        if tomb_counts[r]:
            for i in range(tombs.shape[1]):
                if tombs[r, i] != 0:
                    _bury(new, counts, r, tombs[r, i])


@_inlined
def _finish(t: Table, state: Array, tombs: Array, tomb_counts: Array, tomb_oldest: Array, i: int, offset: int) -> None:
    """The tree in slot ``i`` is decided, by the record at ``offset``: it leaves the table for the tombstones of the
    current generation."""
    row = state[S_GENERATION] % tombs.shape[0]
    _bury(tombs, tomb_counts, row, t[0][i])
    tomb_oldest[row] = min(tomb_oldest[row], _opened(offset, t[6][i]))
    _delete(t, i)
    state[S_ENTRIES] -= 1
    state[S_PENDING] -= 1


@_inlined
def _decide(out: Array, n: int, m: int, code: int, t: Table, i: int, gen: int, now_ms: int) -> int:
    """Write the outcome row of the tree in slot ``i``; return the new row count."""
    out[n, 0], out[n, 1], out[n, 2], out[n, 3], out[n, 4] = m, code, t[0][i], t[4][i], t[5][i]
    # Read modulo 2³² as a signed distance: the record that completes a tree may carry an earlier timestamp than
    # the init's (different producers, each with its own linger), and such a tree took no measurable time.
    ms = (now_ms - np.int64(t[7][i])) & _LOW32
    out[n, 5], out[n, 6] = (gen - np.int64(t[3][i])) & _LOW16, ms if ms < _HALF32 else 0
    return n + 1


@_inlined
def _open(t: Table, i: int, anchor: int, value: int, gen: int, src: int, off: int, first: int, ms: int) -> None:
    t[0][i], t[1][i], t[2][i], t[3][i] = anchor, value, gen & _LOW16, gen & _LOW16
    t[4][i], t[5][i], t[6][i], t[7][i] = src, off, first & _LOW32, ms & _LOW32


AHEAD = 16  # messages between a message's prefetch and its turn in the loop (see `_prefetch_slots`); 0: none


@_inlined
def _prefetch_slots(keys: Array, tombs: Array, tomb_counts: Array, anchor: int, init: bool) -> None:
    """Ask for the cache lines the loop will read for a message some places on (`process`'s ``ahead``): its home
    slot in the table and, for an init, in every non-empty tombstone set (where a new tree looks itself up, and is
    buried when it finishes soon after). In sets of megabytes, that line is a miss on which the loop would otherwise
    wait, tree after tree (`benchmarks.steady_bench` measures it). Prefetching also the current set's slot of every
    other message, for the burial of the tree it may finish, was slower: most of those lines are never read."""
    prefetch(keys, _home(anchor, keys.shape[0]))
    if init:
        home = _home(anchor, tombs.shape[1])
        for r in range(tombs.shape[0]):
            if tomb_counts[r]:
                prefetch(tombs, (r, home))


@_compiled
def process(  # noqa: PLR0915 - one loop, one branch per message kind, as in the reference
    t: Table,
    tombs: Array,
    tomb_counts: Array,
    tomb_oldest: Array,
    decided: Array,
    state: Array,
    counters: Array,
    buckets: int,
    high_water: int,
    relocate: bool,
    ahead: int,
    kinds: Array,
    anchors: Array,
    values: Array,
    init_source: Array,
    init_offset: Array,
    source_map: Array,
    record_ends: Array,
    record_offsets: Array,
    record_stamps: Array,
    out: Array,
    limit: int,
    cursor: Array,
) -> int:
    """Apply a block of messages carried by Kafka records: record ``r`` ends before message ``record_ends[r]``
    (non-decreasing, the last one the block's length), sits at ``record_offsets[r]`` and was written at
    ``record_stamps[r]`` (ms). Before each message, prefetches the slots of the message ``ahead`` places on (0:
    none; `_prefetch_slots`).

    Resumes where ``cursor`` says (message, inits, records and outcome rows before it; zeros at first) and goes on
    to the end of the block, or stops before a message that could open an entry while the table holds ``limit``
    entries (the caller grows the table and calls again). Writes outcome rows into ``out``, its position into
    ``cursor``, and returns the message it stopped at. The caller guarantees the rest of the room: ``limit`` is
    below the table's capacity, the tombstone sets have capacity for every message of the block finishing an entry,
    and ``out`` has a row for every message deciding an outcome plus every pending tree expiring on the block's ticks.
    """
    keys, vals, gens, borns, srcs, offs, _, stamps = t
    start, k_init, r, n = cursor[0], cursor[1], cursor[2], cursor[3]
    stop = kinds.shape[0]
    # The record's fields are read at its first message (an empty block may come with no record at all).
    record_end, record_offset, timestamp_ms = -1, 0, 0
    gen = state[S_GENERATION]  # kept here, and in ``state`` at each tick
    for m in range(start, kinds.shape[0]):
        if m >= record_end:  # the next record (the loads once a record, not once a message)
            while m >= record_ends[r]:
                r += 1
            record_end = record_ends[r]
            record_offset, timestamp_ms = record_offsets[r], record_stamps[r]
        later = m + ahead
        if ahead and later < stop:
            _prefetch_slots(keys, tombs, tomb_counts, anchors[later], kinds[later] == K_INIT)
        kind = kinds[m]
        if kind == K_TICK:
            counters[C_TICKS] += 1
            gen += 1
            state[S_GENERATION] = gen
            # The tombstones of generation gen - buckets have watched long enough: drop the whole set.
            expired_row = (gen - buckets) % tombs.shape[0]
            if tomb_counts[expired_row]:
                tombs[expired_row, :] = 0
                tomb_counts[expired_row] = 0
                tomb_oldest[expired_row] = NO_OFFSET
            # Collect first: deleting shifts entries, which would make a single pass skip or revisit some.
            expired = np.empty(state[S_ENTRIES], np.int64)
            n_exp = 0
            for i in range(keys.shape[0]):
                if keys[i] != 0 and (gen - np.int64(gens[i])) & _LOW16 >= buckets:
                    expired[n_exp] = keys[i]
                    n_exp += 1
            for e in range(n_exp):
                i = _find(keys, expired[e])
                if srcs[i] >= 0:
                    counters[C_TIMEOUT] += 1
                    n = _decide(out, n, m, O_TIMEOUT, t, i, gen, timestamp_ms)
                    _finish(t, state, tombs, tomb_counts, tomb_oldest, i, record_offset)
                else:  # nobody to tell; a late init opens a new tree, which times out in turn
                    counters[C_NO_INIT] += 1
                    _delete(t, i)
                    state[S_ENTRIES] -= 1
                    state[S_PENDING] -= 1
            continue

        anchor = anchors[m]
        i = _find(keys, anchor)
        present = keys[i] != 0
        if not present and state[S_ENTRIES] >= limit:  # it may open an entry, and the table is full: grown first
            stop = m
            break
        src, off = -1, 0
        if kind == K_INIT:
            src, off = source_map[init_source[k_init]], init_offset[k_init]
            k_init += 1
        if not present:
            if _is_tomb(tombs, tomb_counts, anchor) or decided[_find(decided, anchor)] == anchor:
                counters[C_LATE] += 1
                continue
            if kind == K_RESET:
                counters[C_UNKNOWN_RESETS] += 1
                continue
            if kind == K_INIT and high_water > 0 and state[S_PENDING] >= high_water:
                counters[C_OVERLOAD] += 1
                _open(t, i, anchor, 0, gen, src, off, record_offset, timestamp_ms)
                n = _decide(out, n, m, O_OVERLOAD, t, i, gen, timestamp_ms)
                state[S_ENTRIES] += 1
                state[S_PENDING] += 1
                _finish(t, state, tombs, tomb_counts, tomb_oldest, i, record_offset)
                continue
            if kind != K_INIT:
                src = FAILED_NO_INIT if kind == K_FAIL else NO_INIT
            _open(t, i, anchor, values[m], gen, src, off, record_offset, timestamp_ms)
            state[S_ENTRIES] += 1
            state[S_PENDING] += 1
            continue

        s = srcs[i]
        code = -1
        if kind == K_RESET:
            gens[i] = gen & _LOW16
        elif kind == K_FAIL:
            if s >= 0:
                code = O_FAILED
            else:
                srcs[i] = FAILED_NO_INIT
        elif kind == K_INIT:
            if s >= 0:
                counters[C_COLLISIONS] += 1
                continue
            # The entry was opened by updates or a fail that arrived before the init.
            vals[i] ^= values[m]
            borns[i], srcs[i], offs[i], stamps[i] = gen & _LOW16, src, off, timestamp_ms & _LOW32
            if s == FAILED_NO_INIT:
                code = O_FAILED
            elif vals[i] == 0:
                code = O_ACK
            elif relocate:
                gens[i] = gen & _LOW16
        else:  # ack, anchor, ok: an XOR update
            vals[i] ^= values[m]
            if vals[i] == 0 and s >= 0:
                code = O_ACK
            elif relocate:
                gens[i] = gen & _LOW16
        if code >= 0:
            counters[C_ACKED if code == O_ACK else C_FAILED] += 1
            n = _decide(out, n, m, code, t, i, gen, timestamp_ms)
            _finish(t, state, tombs, tomb_counts, tomb_oldest, i, record_offset)
    counters[C_MESSAGES] += stop - start  # every message counts, whatever becomes of it
    cursor[0], cursor[1], cursor[2], cursor[3] = stop, k_init, r, n
    return int(stop)
