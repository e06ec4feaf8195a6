"""The acker protocol: the closed set of messages a tracker accepts.

Every message but `Tick` names the tree it belongs to by its anchor (root) id. Each message updates that tree's
ledger, a single 64-bit XOR word:

- `Init` (Storm's ACKER_INIT, FsShelter's Track): the spout started a tree for ``msg_id``; ``value`` is the XOR
  of the edge ids of the root tuples it emitted. An init of value 0 (FsShelter's Track, whose root edges follow as
  `Anchor` messages) never completes a tree by itself; a spout that emitted nothing sends no init at all.
- `Ack` (Storm's combined ACKER_ACK): a tuple was processed; ``value`` is its own edge id XOR the edge ids of
  every child it emitted. Creation and completion travel together, so the tree cannot complete early whatever
  order messages from different producers arrive in. This is the form the clients send.
- `Anchor` / `Ok` (FsShelter's separate form): a tuple was created / completed. Both are XOR updates, accepted
  for compatibility; a producer using them must make each child's `Anchor` durable before its parent's `Ok`.
- `Fail`: a tuple failed; the tree is nacked at once with reason ``failed`` (fail wins).
- `ResetTimeout`: slow work in progress; the tree's timeout starts again.
- `Tick`: one step of the timeout clock; entries expire only when ticks are processed, so the same sequence of
  messages always yields the same decisions.

Invariant: anchor and tuple ids are non-zero signed 64-bit integers (checked on construction); XOR values are
signed 64-bit integers and may be zero. (An ack of value 0 is refused at the service's edge, `acker.wire.check_block`:
no client sends one, and it would complete a tree whose init of value 0 waits for its anchors.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from acker.core.ids import check_id, check_int64


@dataclass(frozen=True, slots=True)
class Init:
    anchor: int
    spout: str
    msg_id: str
    value: int

    def __post_init__(self) -> None:
        check_id(self.anchor, "anchor")
        check_int64(self.value, "init value")


@dataclass(frozen=True, slots=True)
class Ack:
    anchor: int
    value: int

    def __post_init__(self) -> None:
        check_id(self.anchor, "anchor")
        check_int64(self.value, "ack value")


@dataclass(frozen=True, slots=True)
class _TupleUpdate:
    anchor: int
    tuple_id: int

    def __post_init__(self) -> None:
        check_id(self.anchor, "anchor")
        check_id(self.tuple_id, "tuple id")


@dataclass(frozen=True, slots=True)
class Anchor(_TupleUpdate):
    """A tuple was created in the tree (FsShelter's form)."""


@dataclass(frozen=True, slots=True)
class Ok(_TupleUpdate):
    """A tuple of the tree completed (FsShelter's form)."""


@dataclass(frozen=True, slots=True)
class _TreeSignal:
    anchor: int

    def __post_init__(self) -> None:
        check_id(self.anchor, "anchor")


@dataclass(frozen=True, slots=True)
class Fail(_TreeSignal):
    """A tuple of the tree failed."""


@dataclass(frozen=True, slots=True)
class ResetTimeout(_TreeSignal):
    """The tree's timeout starts again."""


@dataclass(frozen=True, slots=True)
class Tick:
    pass


TICK = Tick()

TreeMessage: TypeAlias = Init | Ack | Anchor | Ok | Fail | ResetTimeout
"""A message about one tree: it goes to the acker partition of its anchor."""

Message: TypeAlias = TreeMessage | Tick
"""Everything a tracker accepts."""
