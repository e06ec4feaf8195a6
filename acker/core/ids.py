"""Ids of tuple trees and the partition function of an anchor.

Invariants:
- Every anchor id and edge (tuple) id is a non-zero signed 64-bit integer. Zero is excluded because
  ``x ^ 0 == x``: a zero edge would be invisible to the XOR ledger and a tree could complete while that tuple
  is still being processed.
- The acker partition of an anchor is ``partition_of(anchor, n) == |anchor| mod n``: the seeds' (and Storm's)
  ``abs(anchor % n)`` with a truncating remainder, which is Java's ``Math.abs(anchor % n)``, C's
  ``llabs(anchor % n)`` and numpy's ``np.abs(np.fmod(anchor, n))``. Python's own ``%`` floors, so it would give
  another partition for negative anchors: never use it for this. This function is the one place the mapping is
  defined; every producer of acker traffic calls it. The service's compiled check of a record (`acker.wire._scan`)
  computes it again inside its loop, where a Python call cannot go; a test holds the two equal for every sign and
  both extremes.
"""

from __future__ import annotations

import os
import random
import weakref

from acker.errors import ProtocolError

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_UINT64_MASK = (1 << 64) - 1


def is_valid_id(value: int) -> bool:
    """True for a non-zero signed 64-bit integer."""
    return value != 0 and INT64_MIN <= value <= INT64_MAX


def check_id(value: int, what: str) -> int:
    """Return ``value`` or raise `ProtocolError` naming ``what`` when it is not a valid id."""
    if type(value) is not int or not is_valid_id(value):  # bool is not an id
        raise ProtocolError(f"{what} must be a non-zero signed 64-bit integer, got {value!r}")
    return value


def check_int64(value: int, what: str) -> int:
    """Return ``value`` or raise `ProtocolError` when it is not a signed 64-bit integer (zero allowed)."""
    if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
        raise ProtocolError(f"{what} must be a signed 64-bit integer, got {value!r}")
    return value


def partition_of(anchor: int, partitions: int) -> int:
    """The acker partition that owns every message of the tree rooted at ``anchor``."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return abs(anchor) % partitions


# The unseeded generators' sources, seeded again from the operating system in a child process after a fork: a copy
# would draw the parent's sequence, ids its parent draws too (a tree's edges cancelling each other, anchors shared).
_UNSEEDED: weakref.WeakSet[random.Random] = weakref.WeakSet()


def _seed_again_after_fork() -> None:
    for source in list(_UNSEEDED):
        source.seed()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_seed_again_after_fork)


class IdGenerator:
    """Random non-zero signed 64-bit ids; pass ``seed`` for a reproducible sequence.

    Not thread-safe: give each thread (or process) its own generator. Without a seed the generator is seeded
    from the operating system, so two processes never share a sequence: not even a child forked from a process that
    made it, which is seeded again (`_UNSEEDED`).
    """

    __slots__ = ("_bits",)

    def __init__(self, seed: int | None = None) -> None:
        source = random.Random(seed)
        if seed is None:
            _UNSEEDED.add(source)
        self._bits = source.getrandbits

    def __call__(self) -> int:
        bits = self._bits
        while True:
            raw = bits(64)
            if raw:
                return raw - (1 << 64) if raw > INT64_MAX else raw


def to_unsigned(value: int) -> int:
    """The two's-complement unsigned form of a signed 64-bit id (for hex display and packing)."""
    return value & _UINT64_MASK
