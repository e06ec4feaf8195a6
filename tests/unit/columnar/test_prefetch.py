"""The prefetch intrinsic: compiles for the index shapes the tracker uses, emits a prefetch, changes nothing; and
when the tracker prefetches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numba import njit

from acker.columnar import BlockTracker, MessageBlock
from acker.columnar import _kernels as k
from acker.columnar._prefetch import prefetch
from acker.core import Ack, Init, Message


@njit(cache=False)
def _sum_loading_ahead(flat: Any, grid: Any) -> int:
    total = 0
    for i in range(flat.shape[0]):
        prefetch(flat, (i + 7) % flat.shape[0])
        prefetch(grid, (i % grid.shape[0], i % grid.shape[1]))
        total += flat[i]
    return int(total)


def test_prefetch_reads_nothing_and_changes_nothing() -> None:
    flat = np.arange(100, dtype=np.int64)
    grid = np.zeros((3, 10), np.int64)
    assert _sum_loading_ahead(flat, grid) == 4950
    assert np.array_equal(flat, np.arange(100)) and not grid.any()


@njit(cache=False)
def _prefetch_out_of_range(flat: Any, grid: Any) -> None:
    for far in (flat.shape[0], -1, 2**40, -(2**40)):
        prefetch(flat, far)
        prefetch(grid, (far, far))


def test_an_index_out_of_range_is_never_read() -> None:
    """A hint, not a load: an address past the array, or far outside this process's memory, does not fault."""
    flat, grid = np.arange(4, dtype=np.int64), np.zeros((2, 2), np.int64)
    _prefetch_out_of_range(flat, grid)
    assert np.array_equal(flat, np.arange(4)) and not grid.any()


def test_prefetch_is_an_instruction() -> None:
    flat = np.arange(10, dtype=np.int64)
    _sum_loading_ahead(flat, np.zeros((2, 2), np.int64))
    asm = next(iter(_sum_loading_ahead.inspect_asm().values())).lower()
    # The instruction, not the function's name (which says prefetch too): x86-64 or AArch64.
    assert "prefetcht0" in asm or "prfm" in asm


@njit(cache=False)
def _mixed(grid: Any, row: Any, column: Any) -> int:
    prefetch(grid, (row, column))
    return int(grid[row, column])


def test_indices_of_mixed_integer_types_are_widened() -> None:
    grid = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert _mixed(grid, np.int32(2), np.int64(3)) == 11


def test_the_prefetch_distance_is_a_bounded_count_of_messages() -> None:
    for wrong in (-1, 1 << 20):
        with pytest.raises(ValueError, match="prefetch_ahead"):
            BlockTracker(prefetch_ahead=wrong)


def test_the_loop_prefetches_once_the_table_and_the_sets_outgrow_the_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below `PREFETCH_FROM_BYTES` (here: what a fresh tracker holds, and one byte) the prefetch only costs."""
    given: list[int] = []
    loop = k.process

    def spy(*args: Any) -> int:
        given.append(args[10])  # ahead
        return int(loop(*args))

    monkeypatch.setattr(k, "process", spy)
    tracker = BlockTracker(prefetch_from_bytes=BlockTracker().table_bytes() + 1)
    inits: list[Message] = [Init(i, "s", f"t/0/{i}", i) for i in range(1, 5001)]
    tracker.process(MessageBlock.from_messages(inits[:1]))
    tracker.process(MessageBlock.from_messages(inits[1:]))  # the table grown
    tracker.process(MessageBlock.from_messages([Ack(1, 1)]))
    assert given[0] == 0 and given[-1] == k.AHEAD
