"""The RotatingMap against a simple model: Storm's list of buckets, probed one by one."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acker.core.rotating_map import RotatingMap
from acker.errors import ConfigError


@dataclass
class Item:
    name: int
    generation: int = 0


class StormModel:
    """Storm's RotatingMap: ``buckets`` dicts, put relocates to the newest, rotate drops the oldest."""

    def __init__(self, buckets: int) -> None:
        self.buckets: list[dict[int, int]] = [{} for _ in range(buckets)]

    def put(self, key: int, value: int) -> None:
        for bucket in self.buckets:
            bucket.pop(key, None)
        self.buckets[0][key] = value

    def touch(self, key: int) -> None:
        for bucket in self.buckets:
            if key in bucket:
                self.put(key, bucket[key])
                return

    def remove(self, key: int) -> None:
        for bucket in self.buckets:
            bucket.pop(key, None)

    def get(self, key: int) -> int | None:
        for bucket in self.buckets:
            if key in bucket:
                return bucket[key]
        return None

    def rotate(self) -> dict[int, int]:
        dead = self.buckets.pop()
        self.buckets.insert(0, {})
        return dead


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 20), st.integers()),
        st.tuples(st.just("touch"), st.integers(0, 20), st.none()),
        st.tuples(st.just("remove"), st.integers(0, 20), st.none()),
        st.tuples(st.just("rotate"), st.none(), st.none()),
    ),
    max_size=200,
)


@given(st.integers(2, 6), ops)
def test_behaves_like_storms_rotating_map(buckets: int, operations: list[tuple[str, int, int]]) -> None:
    rmap: RotatingMap[int, Item] = RotatingMap(buckets)
    model = StormModel(buckets)
    for op, key, value in operations:
        if op == "put":
            rmap.put(key, Item(value))
            model.put(key, value)
        elif op == "touch":
            assert rmap.touch(key) == (model.get(key) is not None)
            model.touch(key)
        elif op == "remove":
            removed = rmap.remove(key)
            assert (removed.name if removed else None) == model.get(key)
            model.remove(key)
        else:
            expired = rmap.rotate()
            assert {k: v.name for k, v in expired} == model.rotate()
        for probe in range(21):
            got = rmap.get(probe)
            assert (got.name if got else None) == model.get(probe)
        assert len(rmap) == sum(len(b) for b in model.buckets)


def test_expires_on_the_buckets_th_rotation() -> None:
    rmap: RotatingMap[str, Item] = RotatingMap(3)
    rmap.put("k", Item(1))
    assert rmap.expiring_on("k") == 3
    assert rmap.rotate() == [] and rmap.rotate() == []
    assert [k for k, _ in rmap.rotate()] == ["k"]


def test_needs_two_buckets() -> None:
    with pytest.raises(ConfigError):
        RotatingMap(1)
