"""Compiled loops of the columnar tracker (numba). Every rule mirrors `acker.core.tracker`; read that first.

The table is open addressing with linear probing over parallel arrays, slot ``i`` holding one tree:

    keys[i]   int64  anchor (0 = empty slot: anchors are never zero)
    vals[i]   int64  XOR word
    gens[i]   int32  generation (tick count) of the last (re)insertion: the entry expires on tick gens + buckets
    borns[i]  int32  tick of birth (the init's arrival), for latency in ticks
    flags[i]  uint8  INIT_SEEN | FAILED | DONE (DONE = a tombstone that ignores late messages)
    srcs[i]   int32  source index of the message id (spout and source), -1 before the init
    offs[i]   int64  offset part of the message id

37 bytes a slot. Deletion shifts the following run back (no deleted markers), so probes stay short. Expiry scans
the table once per tick: ticks are rare and a scan of a million slots takes a few milliseconds, which buys an
O(1) relocation (only ``gens`` changes) and no per-bucket lists.

``state`` holds: [0] entries in the table (pending + tombstones), [1] pending trees, [2] generation.
``counters`` follows the field order of `acker.core.tracker.Counters`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
from numba import njit

F = TypeVar("F", bound=Callable[..., Any])
Array = npt.NDArray[Any]
Table = tuple[Array, Array, Array, Array, Array, Array, Array]  # keys, vals, gens, borns, flags, srcs, offs


def _compiled(fn: F) -> F:
    """numba's ``njit`` (cached on disk), typed as the function it compiles."""
    return cast(F, njit(cache=True)(fn))


INIT_SEEN = 1
FAILED = 2
DONE = 4

K_INIT, K_ACK, K_ANCHOR, K_OK, K_FAIL, K_RESET, K_TICK = 0, 1, 2, 3, 4, 5, 6
O_ACK, O_FAILED, O_TIMEOUT, O_OVERLOAD = 0, 1, 2, 3  # acker.columnar.block.Code
# Counters, in the order of acker.core.tracker.Counters.
C_ACKED, C_FAILED, C_TIMEOUT, C_OVERLOAD, C_NO_INIT, C_COLLISIONS, C_LATE, C_UNKNOWN_RESETS, C_TICKS, C_MESSAGES = (
    range(10)
)
S_ENTRIES, S_PENDING, S_GENERATION = 0, 1, 2

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@_compiled
def _home(anchor: int, shift: int) -> int:
    return np.int64((np.uint64(anchor) * _GOLDEN) >> np.uint64(shift))  # type: ignore[return-value]


@_compiled
def _find(keys: Array, shift: int, mask: int, anchor: int) -> int:
    """Slot of ``anchor``, or of the empty slot where it would go."""
    i = _home(anchor, shift)
    while True:
        k = keys[i]
        if k == anchor or k == 0:
            return i
        i = (i + 1) & mask


@_compiled
def _delete(
    keys: Array,
    vals: Array,
    gens: Array,
    borns: Array,
    flags: Array,
    srcs: Array,
    offs: Array,
    shift: int,
    mask: int,
    i: int,
) -> None:
    """Empty slot ``i`` and shift back the entries of the run after it (Knuth's algorithm R)."""
    j = i
    while True:
        j = (j + 1) & mask
        k = keys[j]
        if k == 0:
            break
        h = _home(k, shift)
        # The entry at j may move to i unless its home lies cyclically in (i, j].
        if (i <= j and (h <= i or h > j)) or (i > j and h <= i and h > j):
            keys[i], vals[i], gens[i], borns[i] = k, vals[j], gens[j], borns[j]
            flags[i], srcs[i], offs[i] = flags[j], srcs[j], offs[j]
            i = j
    keys[i] = 0


@_compiled
def rehash(
    keys: Array, vals: Array, gens: Array, borns: Array, flags: Array, srcs: Array, offs: Array, new_shift: int
) -> Table:
    """Copy every entry into tables of capacity ``2 ** (64 - new_shift)``."""
    cap = 1 << (64 - new_shift)
    mask = cap - 1
    nk = np.zeros(cap, np.int64)
    nv = np.zeros(cap, np.int64)
    ng = np.zeros(cap, np.int32)
    nb = np.zeros(cap, np.int32)
    nf = np.zeros(cap, np.uint8)
    ns = np.zeros(cap, np.int32)
    no = np.zeros(cap, np.int64)
    for i in range(keys.shape[0]):
        k = keys[i]
        if k != 0:
            j = _find(nk, new_shift, mask, k)
            nk[j], nv[j], ng[j], nb[j], nf[j], ns[j], no[j] = k, vals[i], gens[i], borns[i], flags[i], srcs[i], offs[i]
    return nk, nv, ng, nb, nf, ns, no


@_compiled
def _decide(out: Array, n: int, m: int, code: int, anchor: int, src: int, off: int, latency: int) -> int:
    """Write one outcome row (message index, code, anchor, source, offset, latency); return the new count."""
    out[n, 0], out[n, 1], out[n, 2], out[n, 3], out[n, 4], out[n, 5] = m, code, anchor, src, off, latency
    return n + 1


@_compiled
def _open(
    keys: Array,
    vals: Array,
    gens: Array,
    borns: Array,
    flags: Array,
    srcs: Array,
    offs: Array,
    i: int,
    anchor: int,
    value: int,
    gen: int,
    flag: int,
    src: int,
    off: int,
) -> None:
    keys[i], vals[i], gens[i], borns[i], flags[i], srcs[i], offs[i] = anchor, value, gen, gen, flag, src, off


@_compiled
def process(  # noqa: PLR0915 - one loop, one branch per message kind, as in the reference
    keys: Array,
    vals: Array,
    gens: Array,
    borns: Array,
    flags: Array,
    srcs: Array,
    offs: Array,
    shift: int,
    state: Array,
    counters: Array,
    buckets: int,
    high_water: int,
    relocate: bool,
    kinds: Array,
    anchors: Array,
    values: Array,
    init_source: Array,
    init_offset: Array,
    source_map: Array,
    out: Array,
) -> int:
    """Apply a block of messages; write outcome rows into ``out`` and return how many.

    The caller guarantees room: the table has capacity for every message opening an entry, and ``out`` has a row
    for every message deciding an outcome plus every pending tree expiring on the block's ticks.
    Finishing a tree (any outcome) turns its slot into a tombstone stamped with the current generation.
    """
    mask = keys.shape[0] - 1
    n = 0
    k_init = 0
    for m in range(kinds.shape[0]):
        counters[C_MESSAGES] += 1
        kind = kinds[m]
        gen = state[S_GENERATION]
        if kind == K_TICK:
            counters[C_TICKS] += 1
            gen += 1
            state[S_GENERATION] = gen
            limit = gen - buckets
            # Collect first: deleting shifts entries, which would make a single pass skip or revisit some.
            expired = np.empty(state[S_ENTRIES], np.int64)
            n_exp = 0
            for i in range(keys.shape[0]):
                if keys[i] != 0 and gens[i] <= limit:
                    expired[n_exp] = keys[i]
                    n_exp += 1
            for e in range(n_exp):
                i = _find(keys, shift, mask, expired[e])
                f = flags[i]
                if f & INIT_SEEN and not f & DONE:
                    counters[C_TIMEOUT] += 1
                    n = _decide(out, n, m, O_TIMEOUT, keys[i], srcs[i], offs[i], gen - borns[i])
                    flags[i], gens[i] = f | DONE, gen
                    state[S_PENDING] -= 1
                    continue
                if not f & DONE:
                    counters[C_NO_INIT] += 1
                    state[S_PENDING] -= 1
                _delete(keys, vals, gens, borns, flags, srcs, offs, shift, mask, i)
                state[S_ENTRIES] -= 1
            continue

        anchor = anchors[m]
        i = _find(keys, shift, mask, anchor)
        present = keys[i] != 0
        f = flags[i] if present else np.uint8(0)
        src, off = -1, 0
        if kind == K_INIT:
            src, off = source_map[init_source[k_init]], init_offset[k_init]
            k_init += 1
        if f & DONE:
            counters[C_LATE] += 1
            continue
        if not present:
            if kind == K_RESET:
                counters[C_UNKNOWN_RESETS] += 1
                continue
            if kind == K_INIT and high_water > 0 and state[S_PENDING] >= high_water:
                counters[C_OVERLOAD] += 1
                n = _decide(out, n, m, O_OVERLOAD, anchor, src, off, 0)
                _open(keys, vals, gens, borns, flags, srcs, offs, i, anchor, 0, gen, DONE, -1, 0)
                state[S_ENTRIES] += 1
                continue
            flag = INIT_SEEN if kind == K_INIT else FAILED if kind == K_FAIL else 0
            _open(keys, vals, gens, borns, flags, srcs, offs, i, anchor, values[m], gen, flag, src, off)
            state[S_ENTRIES] += 1
            state[S_PENDING] += 1
            continue

        code = -1
        if kind == K_RESET:
            gens[i] = gen
        elif kind == K_FAIL:
            if f & INIT_SEEN:
                code = O_FAILED
            else:
                flags[i] = f | FAILED
        elif kind == K_INIT:
            if f & INIT_SEEN:
                counters[C_COLLISIONS] += 1
                continue
            # The entry was opened by updates or a fail that arrived before the init.
            vals[i] ^= values[m]
            borns[i], srcs[i], offs[i] = gen, src, off
            f |= INIT_SEEN
            flags[i] = f
            if f & FAILED:
                code = O_FAILED
            elif vals[i] == 0:
                code = O_ACK
            elif relocate:
                gens[i] = gen
        else:  # ack, anchor, ok: an XOR update
            vals[i] ^= values[m]
            if vals[i] == 0 and f & INIT_SEEN:
                code = O_ACK
            elif relocate:
                gens[i] = gen
        if code >= 0:
            counters[C_ACKED if code == O_ACK else C_FAILED] += 1
            n = _decide(out, n, m, code, anchor, srcs[i], offs[i], gen - borns[i])
            flags[i], gens[i] = flags[i] | DONE, gen
            state[S_PENDING] -= 1
    return n
