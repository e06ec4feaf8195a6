"""Client-side tuple-tree bookkeeping: what spouts and bolts attach to messages and send to the acker.

Pure: ids come from an injected generator (`acker.core.ids.IdGenerator`); the functions return the protocol
messages to send and the ids to attach, and the caller sends them.

Storm's scheme, which these helpers follow:
- A message carries `TupleIds`: for each root (anchor) whose tree it belongs to, its edge id in that tree.
- A spout tree starts with a random anchor; each root tuple emitted gets a fresh edge; the `Init` carries the
  XOR of those edges. The spout may send the init before or after the tuples: the acker accepts any order.
- A bolt emitting a child anchored to an input draws a fresh edge per anchoring input and XORs it into that
  input's running ack value; the child's edge in a root is the XOR of the edges it got from every input of that
  root. One edge per (child, input) rather than one per child keeps diamonds correct: a child anchored to two
  inputs of the same tree must not cancel its own creation.
- Acking an input sends, per root, one combined `Ack` of (its edge in that root) XOR (its running ack value):
  its completion and its children's creation in one message, so the tree cannot complete early.
- Unanchored children carry no ids and untracked spout messages start no tree: at-most-once, no acker traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from acker.core.ids import check_id
from acker.core.messages import Ack, Fail, Init, ResetTimeout
from acker.errors import ProtocolError

NextId = Callable[[], int]
P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class TupleIds:
    """Per root: (anchor, this message's edge id in that root's tree). Empty = untracked.

    Invariant: each anchor is non-zero and named once. A root named twice gets each child's one edge in it twice
    (`anchored`), which cancels: the child's edge in that root would be 0, invisible to the XOR ledger, and the input's
    ack would carry it twice, so the tree could complete while the child is still being processed. Merge the ids of
    several inputs with `anchored`, never by concatenating their ``edges``: `ProtocolError`."""

    edges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        edges = self.edges
        for anchor, _ in edges:
            if not anchor:  # ids come from IdGenerator or a decoded header, both checked; zero is the one trap
                check_id(anchor, "anchor")
        if len(edges) > 1 and len({anchor for anchor, _ in edges}) < len(edges):  # one root, the common case: no set
            raise ProtocolError(f"a message names a root twice (its edges in it would cancel): {edges!r}")

    @property
    def tracked(self) -> bool:
        return bool(self.edges)

    @property
    def roots(self) -> tuple[int, ...]:
        return tuple(anchor for anchor, _ in self.edges)


UNTRACKED = TupleIds()
_new, _set = object.__new__, object.__setattr__


def trusted_ids(edges: tuple[tuple[int, int], ...]) -> TupleIds:
    """`TupleIds` of ``edges`` whose anchors are known to be non-zero and distinct (drawn by `IdGenerator`, taken
    from another `TupleIds`, or checked by the caller), without the checks and the frozen dataclass's ``__init__``: the
    hot paths build one per message, and this costs about half. Every caller gives one root, or the distinct keys of a
    dict (`anchored`); build ids of several roots from elsewhere with `TupleIds`, which checks them."""
    ids = _new(TupleIds)
    _set(ids, "edges", edges)
    return ids


class SpoutTree:
    """One source message's tree, from the spout's side."""

    __slots__ = ("_next_id", "_sealed", "_value", "anchor", "msg_id", "spout")

    def __init__(self, spout: str, msg_id: str, next_id: NextId) -> None:
        self.spout, self.msg_id = spout, msg_id
        self._next_id = next_id
        self.anchor = check_id(next_id(), "anchor")
        self._value = 0
        self._sealed = False

    def emit(self) -> TupleIds:
        """Ids for one root tuple of this tree (call once per downstream message, before `init`).

        Invariant: every root's edge is in the init. A root emitted after it would be outside the tree, which could
        then be acked while that message is still being processed: `ProtocolError`."""
        if self._sealed:
            raise ProtocolError("cannot emit a root tuple of a tree whose init was sent")
        edge = check_id(self._next_id(), "edge id")
        self._value ^= edge
        return trusted_ids(((self.anchor, edge),))

    @property
    def empty(self) -> bool:
        """Whether no root tuple was emitted (or their edges cancel, with probability 2⁻⁶⁴): no tree to start."""
        return self._value == 0

    def init(self) -> Init:
        """The init message: the XOR of every root tuple's edge emitted so far (call it after emitting).

        A record that emitted nothing is complete at once and has no tree: asking for its init is an error.
        """
        if self._value == 0:
            raise ProtocolError("emit at least one root tuple before the init; a record that emits nothing is done")
        self._sealed = True
        return Init(self.anchor, self.spout, self.msg_id, self._value)


class InputTuple:
    """A message a bolt received, being processed: collects its children, then acks or fails once.

    Invariant: exactly one of `ack` / `fail` per input; a second one raises `ProtocolError`, because a second
    ack would put the input's edge back into the ledger and the tree could never complete.
    """

    __slots__ = ("_ack_val", "_finished", "_next_id", "ids")

    def __init__(self, ids: TupleIds, next_id: NextId) -> None:
        self.ids = ids
        self._next_id = next_id
        self._ack_val = 0
        self._finished = False

    def _child_edge(self) -> int:
        if self._finished:
            raise ProtocolError("cannot anchor a new message to an input that was already acked or failed")
        edge = self._next_id()
        if not edge:
            check_id(edge, "edge id")
        self._ack_val ^= edge
        return edge

    @property
    def finished(self) -> bool:
        """Whether this input was acked or failed."""
        return self._finished

    def _finish(self) -> None:
        if self._finished:
            raise ProtocolError("an input can be acked or failed only once")
        self._finished = True

    def ack(self) -> list[Ack]:
        """One combined ack per root: this input's edge XOR the edges of every child anchored to it."""
        return [Ack(anchor, value) for anchor, value in self.ack_values()]

    def ack_values(self) -> list[tuple[int, int]]:
        """`ack` as (anchor, value) pairs, without building messages (for a runtime's hot path)."""
        self._finish()
        ack_val, edges = self._ack_val, self.ids.edges
        if len(edges) == 1:  # the common case, one root
            anchor, edge = edges[0]
            return [(anchor, edge ^ ack_val)]
        return [(anchor, edge ^ ack_val) for anchor, edge in edges]

    def fail(self) -> list[Fail]:
        self._finish()
        return [Fail(anchor) for anchor, _ in self.ids.edges]

    def reset_timeout(self) -> list[ResetTimeout]:
        return [ResetTimeout(anchor) for anchor, _ in self.ids.edges]


def anchored(inputs: Iterable[InputTuple]) -> TupleIds:
    """Ids for a child anchored to every input given (multi-anchoring: it joins every root of every input).

    Invariant: the child's edge in each root is never 0. It is the XOR of one fresh edge per input in that root, each
    input naming the root once (`TupleIds`); fresh random edges cancel with probability 2⁻⁶⁴ (as a false zero), and
    when they do (or ``next_id`` repeats itself) no edge is kept and `ProtocolError` is raised."""
    if isinstance(inputs, list | tuple) and len(inputs) == 1 and len(inputs[0].ids.edges) == 1:
        source = inputs[0]  # the common case: one input in one tree
        edge = source._child_edge()
        return trusted_ids(((source.ids.edges[0][0], edge),))
    sources = [source for source in inputs if source.ids.tracked]
    if any(source._finished for source in sources):  # before drawing any edge: a child is anchored to all or none
        raise ProtocolError("cannot anchor a new message to an input that was already acked or failed")
    drawn = [(source, source._child_edge()) for source in sources]
    edges: dict[int, int] = {}
    for source, edge in drawn:
        for anchor, _ in source.ids.edges:
            edges[anchor] = edges.get(anchor, 0) ^ edge
    if 0 in edges.values():  # two inputs of one root drew the same edge: the child would be invisible in it
        for source, edge in drawn:  # anchored to none: the inputs' acks as if it had never been asked for
            source._ack_val ^= edge
        raise ProtocolError("a child's edge in a root cancelled to 0 (two inputs of that root drew the same edge)")
    return trusted_ids(tuple(edges.items()))  # the keys of a dict: distinct roots, each from a `TupleIds`


@dataclass(slots=True)
class BasicResult(Generic[P]):
    """What the basic-bolt pattern decided: children to send, acker messages to send, and any error."""

    children: list[tuple[TupleIds, P]] = field(default_factory=list)
    acker_messages: Sequence[Ack | Fail] = ()
    error: BaseException | None = None


def run_basic(ids: TupleIds, next_id: NextId, function: Callable[[Callable[[P], None]], None]) -> BasicResult[P]:
    """Storm's BasicBolt: children auto-anchored to the input, ack after ``function`` returns, fail if it raises.

    ``function`` receives an ``emit(payload)`` callable. On an exception the children emitted so far are
    discarded (their creation never reaches the acker, and the input's fail nacks the tree anyway).
    """
    source = InputTuple(ids, next_id)
    result: BasicResult[P] = BasicResult()

    def emit(payload: P) -> None:
        result.children.append((anchored((source,)), payload))

    try:
        function(emit)
    except Exception as error:
        result.children.clear()
        result.acker_messages = source.fail()
        result.error = error
    else:
        result.acker_messages = source.ack()
    return result
