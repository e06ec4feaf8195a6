"""What a tracker decides: the closed set of outcomes it returns (it never sends them itself).

An outcome always names the spout and message id given by the tree's `Init`, because only a tree whose init was
seen has someone to tell. ``latency_ticks`` is the number of ticks between the init and the decision; wall-clock
latency is the service's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias


class NackReason(StrEnum):
    FAILED = "failed"  # an explicit fail of any tuple of the tree (also one that arrived before the init)
    TIMEOUT = "timeout"  # the tree did not complete within its timeout
    OVERLOAD = "overload"  # the init arrived while the high-water mark of pending trees was reached


@dataclass(frozen=True, slots=True)
class Acked:
    anchor: int
    spout: str
    msg_id: str
    latency_ticks: int


@dataclass(frozen=True, slots=True)
class Nacked:
    anchor: int
    spout: str
    msg_id: str
    reason: NackReason
    latency_ticks: int


Outcome: TypeAlias = Acked | Nacked
