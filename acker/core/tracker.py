"""The tracker: Storm's XOR acker as a pure state machine that returns its decisions.

Feed it protocol messages (`acker.core.messages`); it returns outcomes (`acker.core.outcomes`) and sends
nothing. There is no clock and no randomness inside: time advances only with `Tick` messages, so the same
sequence of messages always produces the same decisions, and replaying a captured acker partition rebuilds the
exact state and outcomes.

Per tree it keeps one 64-bit XOR word, whether the init was seen, the spout and message id, a failed flag and
the tick of its birth, in a `RotatingMap` keyed by anchor.

Rules (each holds for any arrival order of the messages of a tree):
- Complete ⇔ the init was seen and the XOR word is zero → `Acked`. With combined acks the word cannot reach zero
  while any tuple is unfinished, except by a 2⁻⁶⁴ accident per update (Storm's "false zero", not guarded).
- The init alone never completes a tree: an init that opens a tree with value 0 (FsShelter's Track, whose root
  edges follow as `Anchor` messages) waits for its updates. A spout that emitted nothing for a record has no
  tree to track and sends no init.
- Acks, anchors, oks and fails that arrive before the init open the entry; the init completes it.
- Fail wins: a fail nacks the tree at once (``failed``), or as soon as its init arrives.
- A tree still pending on the ``buckets``-th tick after its entry was created (or last reset, or, in
  relocate-on-update mode, last updated) is nacked ``timeout``; without an init it expires silently and is
  counted (``expired_without_init``): there is no spout to tell.
- High-water mark ``H``: an init that would open a new tree while ``H`` trees are pending is nacked
  ``overload`` at once and not tracked.
- A second init for a tree whose init was seen is a root-id collision: counted, the first tree is kept.
- A finished tree (acked or nacked) stays as a tombstone for ``buckets`` ticks, so the rest of its messages
  (late duplicates, acks of a failed tree's other branches) are ignored and counted (``late``) instead of
  opening an init-less entry. After that a late ack, fail or reset looks like a new init-less tree and expires
  silently, but a late init (one sent again) opens a new tree, which times out: the source record gets a second
  outcome, a ``TIMEOUT`` after its first.
- Within the outcomes of one tick, the order is the order of the entries' last (re)insertion; consumers must
  not rely on it.

Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import assert_never

from acker.core.messages import Ack, Anchor, Fail, Init, Message, Ok, ResetTimeout, Tick
from acker.core.outcomes import Acked, Nacked, NackReason, Outcome
from acker.core.rotating_map import RotatingMap
from acker.errors import ConfigError

_NONE: tuple[Outcome, ...] = ()
MAX_BUCKETS = (1 << 15) - 1  # the columnar tracker keeps tick stamps in 16 bits, read as distances up to this


@dataclass(frozen=True, slots=True)
class TrackerConfig:
    """How a tracker expires and limits trees.

    buckets: entries expire on the ``buckets``-th tick after creation or reset (2 to `MAX_BUCKETS`; Storm's
        default 3).
    high_water: pending trees at which new inits are nacked ``overload``; None = no limit.
    relocate_on_update: every update restarts the entry's timeout (Storm's RotatingMap ``put`` semantics),
        instead of only `ResetTimeout` doing so.
    """

    buckets: int = 3
    high_water: int | None = None
    relocate_on_update: bool = False

    def __post_init__(self) -> None:
        if not 2 <= self.buckets <= MAX_BUCKETS:
            raise ConfigError(f"buckets must be between 2 and {MAX_BUCKETS}, got {self.buckets}")
        if self.high_water is not None and self.high_water < 1:
            raise ConfigError(f"high_water must be positive or None, got {self.high_water}")


@dataclass(slots=True)
class Counters:
    """Everything a tracker has decided or noticed, since it was created."""

    acked: int = 0
    nacked_failed: int = 0
    nacked_timeout: int = 0
    nacked_overload: int = 0
    expired_without_init: int = 0
    collisions: int = 0
    late: int = 0
    unknown_resets: int = 0
    ticks: int = 0
    messages: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True, eq=False)
class _Tree:
    """The ledger of one tree. ``spout is None`` ⇔ the init has not been seen."""

    value: int
    spout: str | None = None
    msg_id: str = ""
    failed: bool = False
    done: bool = False
    born_tick: int = 0
    generation: int = 0  # stamped by the RotatingMap


class Tracker:
    __slots__ = ("_map", "_pending", "config", "counters")

    def __init__(self, config: TrackerConfig | None = None) -> None:
        self.config = config or TrackerConfig()
        self.counters = Counters()
        self._map: RotatingMap[int, _Tree] = RotatingMap(self.config.buckets)
        self._pending = 0  # entries that are not tombstones

    @property
    def pending(self) -> int:
        """Trees opened and not finished (with or without their init)."""
        return self._pending

    @property
    def tick_count(self) -> int:
        return self._map.generation

    def ledger(self, anchor: int) -> int | None:
        """The XOR word of a pending tree (None when the tree is unknown or finished), for inspection."""
        tree = self._map.get(anchor)
        return None if tree is None or tree.done else tree.value

    def handle(self, message: Message) -> tuple[Outcome, ...]:
        """Apply one message; return the outcomes it decided (most often none)."""
        self.counters.messages += 1
        match message:
            case Ack(anchor, value):
                return self._xor(anchor, value)
            case Anchor(anchor, tuple_id) | Ok(anchor, tuple_id):
                return self._xor(anchor, tuple_id)
            case Init():
                return self._init(message)
            case Fail(anchor):
                return self._fail(anchor)
            case ResetTimeout(anchor):
                self._reset(anchor)
                return _NONE
            case Tick():
                return self._tick()
            case _:
                assert_never(message)

    def handle_all(self, messages: Iterable[Message]) -> list[Outcome]:
        out: list[Outcome] = []
        for message in messages:
            decided = self.handle(message)
            if decided:
                out.extend(decided)
        return out

    # -- one method per message kind -------------------------------------------------------------------------

    def _xor(self, anchor: int, value: int) -> tuple[Outcome, ...]:
        tree = self._map.get(anchor)
        if tree is None:
            self._open(anchor, _Tree(value))
            return _NONE
        if tree.done:
            self.counters.late += 1
            return _NONE
        tree.value ^= value
        if tree.value == 0 and tree.spout is not None:
            return (self._ack(anchor, tree),)
        if self.config.relocate_on_update:
            self._map.touch(anchor)
        return _NONE

    def _init(self, init: Init) -> tuple[Outcome, ...]:
        anchor = init.anchor
        tree = self._map.get(anchor)
        if tree is None:
            high_water = self.config.high_water
            if high_water is not None and self._pending >= high_water:
                self.counters.nacked_overload += 1
                self._map.put(anchor, _Tree(0, done=True))
                return (Nacked(anchor, init.spout, init.msg_id, NackReason.OVERLOAD, 0),)
            self._open(anchor, _Tree(init.value, init.spout, init.msg_id))
            return _NONE
        if tree.done:
            self.counters.late += 1
            return _NONE
        if tree.spout is not None:
            self.counters.collisions += 1
            return _NONE
        # The entry was opened by updates or a fail that arrived before the init.
        tree.spout, tree.msg_id, tree.born_tick = init.spout, init.msg_id, self._map.generation
        tree.value ^= init.value
        if self.config.relocate_on_update:
            self._map.touch(anchor)
        if tree.failed:
            return (self._nack_failed(anchor, tree),)
        if tree.value == 0:
            return (self._ack(anchor, tree),)
        return _NONE

    def _fail(self, anchor: int) -> tuple[Outcome, ...]:
        tree = self._map.get(anchor)
        if tree is None:
            self._open(anchor, _Tree(0, failed=True))
            return _NONE
        if tree.done:
            self.counters.late += 1
            return _NONE
        if tree.spout is None:
            tree.failed = True
            return _NONE
        return (self._nack_failed(anchor, tree),)

    def _reset(self, anchor: int) -> None:
        tree = self._map.get(anchor)
        if tree is None:
            self.counters.unknown_resets += 1
        elif tree.done:
            self.counters.late += 1
        else:
            self._map.touch(anchor)

    def _tick(self) -> tuple[Outcome, ...]:
        self.counters.ticks += 1
        out: list[Outcome] = []
        for anchor, tree in self._map.rotate():
            if tree.done:
                continue  # a tombstone's watch is over
            if tree.spout is None:
                self._pending -= 1
                self.counters.expired_without_init += 1
                continue  # nobody to tell; a late init opens a new tree, which times out in turn
            self.counters.nacked_timeout += 1
            now = self._map.generation
            out.append(Nacked(anchor, tree.spout, tree.msg_id, NackReason.TIMEOUT, now - tree.born_tick))
            self._finish(anchor, tree)
        return tuple(out)

    # -- transitions ----------------------------------------------------------------------------------------

    def _open(self, anchor: int, tree: _Tree) -> None:
        tree.born_tick = self._map.generation
        self._map.put(anchor, tree)
        self._pending += 1

    def _finish(self, anchor: int, tree: _Tree) -> None:
        """Turn the entry into a tombstone that lives for one full timeout from now."""
        tree.done = True
        tree.msg_id = ""
        self._pending -= 1
        self._map.put(anchor, tree)

    def _ack(self, anchor: int, tree: _Tree) -> Acked:
        assert tree.spout is not None
        self.counters.acked += 1
        acked = Acked(anchor, tree.spout, tree.msg_id, self._map.generation - tree.born_tick)
        self._finish(anchor, tree)
        return acked

    def _nack_failed(self, anchor: int, tree: _Tree) -> Nacked:
        assert tree.spout is not None
        self.counters.nacked_failed += 1
        nacked = Nacked(anchor, tree.spout, tree.msg_id, NackReason.FAILED, self._map.generation - tree.born_tick)
        self._finish(anchor, tree)
        return nacked
