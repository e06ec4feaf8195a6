"""RotatingMap: a map whose entries expire after a fixed number of rotations (Storm's RotatingMap).

Storm keeps ``buckets`` hash maps and moves an entry to the newest one on every put, so a lookup probes every
bucket. This map keeps a single dict instead and stamps each entry with the *generation* (the number of
rotations so far) at which it was last inserted. Python dicts keep insertion order and re-inserting a key moves
it to the end, so the dict is always ordered by generation; a rotation expires entries from the front until it
meets a younger one. Lookup is one dict probe whatever the number of buckets.

Invariants:
- ``buckets >= 2`` (checked in the constructor).
- An entry expires on the ``buckets``-th rotation after it was inserted or last relocated (`put` / `touch`).
  With one rotation every ``T / (buckets - 1)`` seconds, an entry therefore lives between ``T`` and
  ``T * (1 + 1 / (buckets - 1))`` seconds: the bound Storm documents.
- Generations in the dict never decrease from front to back.
- Not thread-safe.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from acker.errors import ConfigError


class Aging(Protocol):
    """A value that carries the generation the map stamped on it."""

    generation: int


K = TypeVar("K")
V = TypeVar("V", bound=Aging)


class RotatingMap(Generic[K, V]):
    __slots__ = ("_entries", "_generation", "buckets")

    def __init__(self, buckets: int = 3) -> None:
        if buckets < 2:
            raise ConfigError(f"a RotatingMap needs at least 2 buckets, got {buckets}")
        self.buckets = buckets
        self._entries: dict[K, V] = {}
        self._generation = 0

    @property
    def generation(self) -> int:
        """Rotations so far."""
        return self._generation

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        """Insert or replace ``key`` in the newest bucket (its expiry clock starts again)."""
        entries = self._entries
        entries.pop(key, None)
        value.generation = self._generation
        entries[key] = value

    def touch(self, key: K) -> bool:
        """Move an existing entry to the newest bucket; False when ``key`` is absent."""
        value = self._entries.pop(key, None)
        if value is None:
            return False
        value.generation = self._generation
        self._entries[key] = value
        return True

    def remove(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def rotate(self) -> list[tuple[K, V]]:
        """Advance one generation and return the entries that expired, oldest first."""
        self._generation += 1
        limit = self._generation - self.buckets
        expired: list[tuple[K, V]] = []
        for item in self._entries.items():
            if item[1].generation > limit:
                break
            expired.append(item)
        entries = self._entries
        for key, _ in expired:
            del entries[key]
        return expired

    def expiring_on(self, key: K) -> int | None:
        """The generation on which ``key`` will expire unless it is relocated first."""
        value = self._entries.get(key)
        return None if value is None else value.generation + self.buckets
