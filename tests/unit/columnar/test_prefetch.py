"""The prefetch intrinsic: compiles for the index shapes the tracker uses, emits a prefetch, changes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from acker.columnar._prefetch import prefetch


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


def test_prefetch_is_an_instruction() -> None:
    flat = np.arange(10, dtype=np.int64)
    _sum_loading_ahead(flat, np.zeros((2, 2), np.int64))
    asm = next(iter(_sum_loading_ahead.inspect_asm().values())).lower()
    # The instruction, not the function's name (which says prefetch too): x86-64 or AArch64.
    assert "prefetcht0" in asm or "prfm" in asm
