"""Columnar blocks: many acker messages (or outcomes) as numpy columns.

A `MessageBlock` holds ``n`` messages in arrival order:

- ``kinds[i]``: uint8 message kind (`Kind`); ``anchors[i]``: int64 anchor (0 for a tick);
  ``values[i]``: int64 init value, ack value or tuple id (0 for fail, reset and tick).
- For the k-th init of the block (in order): ``init_source[k]`` indexes ``sources`` (the init's spout and the
  message id's *source*) and ``init_offset[k]`` is the message id's *offset*.

Message ids: a spout's message id is the record's coordinates ``"<topic>/<partition>/<offset>"``. It is split at
its last ``/`` into a source (``"<topic>/<partition>"``, shared by every record of that partition) and an integer
offset, so a tree costs 12 bytes of message id instead of a string. An id not of that form (no ``/``, or a suffix
that is not a canonical non-negative integer) is kept whole as its own source with offset -1; it round-trips
exactly either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from acker.core.messages import TICK, Ack, Anchor, Fail, Init, Message, Ok, ResetTimeout, Tick
from acker.core.outcomes import Acked, Nacked, NackReason, Outcome

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]


class Kind(IntEnum):
    INIT = 0
    ACK = 1
    ANCHOR = 2
    OK = 3
    FAIL = 4
    RESET = 5
    TICK = 6


class Code(IntEnum):
    """Outcome codes of an `OutcomeBlock`."""

    ACK = 0
    FAILED = 1
    TIMEOUT = 2
    OVERLOAD = 3


_REASON = {Code.FAILED: NackReason.FAILED, Code.TIMEOUT: NackReason.TIMEOUT, Code.OVERLOAD: NackReason.OVERLOAD}
Source = tuple[str, str]  # (spout, message-id source)


MAX_OFFSET = 10**18  # an offset a message id carries is below this: at most 18 digits, which any int64 holds
_OFFSET_DIGITS = len(str(MAX_OFFSET))  # 19: one more than an offset has


def split_msg_id(msg_id: str) -> tuple[str, int]:
    """``"topic/3/42"`` → ``("topic/3", 42)``; an id without a canonical integer suffix (of at most 18 digits:
    `MAX_OFFSET`) → ``(msg_id, -1)``."""
    head, sep, tail = msg_id.rpartition("/")
    if sep and tail.isdigit() and tail.isascii() and (tail == "0" or tail[0] != "0") and len(tail) < _OFFSET_DIGITS:
        return head, int(tail)
    return msg_id, -1


def join_msg_id(source: str, offset: int) -> str:
    return source if offset < 0 else f"{source}/{offset}"


@dataclass(slots=True)
class MessageBlock:
    kinds: U8
    anchors: I64
    values: I64
    init_source: I32
    init_offset: I64
    sources: list[Source] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kinds)

    @classmethod
    def concat(cls, blocks: list[MessageBlock]) -> MessageBlock:
        """The messages of ``blocks`` in order, as one block (fresh, writable, native-order columns)."""
        base = np.cumsum([0] + [len(b.sources) for b in blocks[:-1]], dtype=np.int32)
        return cls(
            np.concatenate([b.kinds for b in blocks]).astype(np.uint8, copy=False),
            np.concatenate([b.anchors for b in blocks]).astype(np.int64, copy=False),
            np.concatenate([b.values for b in blocks]).astype(np.int64, copy=False),
            np.concatenate([b.init_source + base[i] for i, b in enumerate(blocks)]).astype(np.int32, copy=False),
            np.concatenate([b.init_offset for b in blocks]).astype(np.int64, copy=False),
            [source for b in blocks for source in b.sources],
        )

    @classmethod
    def from_messages(cls, messages: list[Message]) -> MessageBlock:
        """Encode messages (already validated by their constructors) as a block."""
        n = len(messages)
        kinds = np.empty(n, np.uint8)
        anchors = np.zeros(n, np.int64)
        values = np.zeros(n, np.int64)
        init_source: list[int] = []
        init_offset: list[int] = []
        sources: dict[Source, int] = {}
        for i, message in enumerate(messages):
            match message:
                case Ack(anchor, value):
                    kinds[i], anchors[i], values[i] = Kind.ACK, anchor, value
                case Anchor(anchor, tuple_id):
                    kinds[i], anchors[i], values[i] = Kind.ANCHOR, anchor, tuple_id
                case Ok(anchor, tuple_id):
                    kinds[i], anchors[i], values[i] = Kind.OK, anchor, tuple_id
                case Init(anchor, spout, msg_id, value):
                    kinds[i], anchors[i], values[i] = Kind.INIT, anchor, value
                    source, offset = split_msg_id(msg_id)
                    init_source.append(sources.setdefault((spout, source), len(sources)))
                    init_offset.append(offset)
                case Fail(anchor):
                    kinds[i], anchors[i] = Kind.FAIL, anchor
                case ResetTimeout(anchor):
                    kinds[i], anchors[i] = Kind.RESET, anchor
                case Tick():
                    kinds[i] = Kind.TICK
        return cls(
            kinds, anchors, values, np.array(init_source, np.int32), np.array(init_offset, np.int64), list(sources)
        )

    def slice(self, start: int, end: int) -> MessageBlock:
        """Messages ``start`` up to ``end`` of the block (the inits' columns with them; the same sources)."""
        is_init = self.kinds == Kind.INIT
        first = int(np.count_nonzero(is_init[:start]))
        last = first + int(np.count_nonzero(is_init[start:end]))
        return MessageBlock(
            self.kinds[start:end],
            self.anchors[start:end],
            self.values[start:end],
            self.init_source[first:last],
            self.init_offset[first:last],
            self.sources,
        )

    def to_messages(self) -> list[Message]:
        """Decode the block (the inverse of `from_messages`)."""
        out: list[Message] = []
        k = 0
        for kind, anchor, value in zip(self.kinds.tolist(), self.anchors.tolist(), self.values.tolist(), strict=True):
            if kind == Kind.INIT:
                spout, source = self.sources[int(self.init_source[k])]
                out.append(Init(anchor, spout, join_msg_id(source, int(self.init_offset[k])), value))
                k += 1
            elif kind == Kind.ACK:
                out.append(Ack(anchor, value))
            elif kind == Kind.ANCHOR:
                out.append(Anchor(anchor, value))
            elif kind == Kind.OK:
                out.append(Ok(anchor, value))
            elif kind == Kind.FAIL:
                out.append(Fail(anchor))
            elif kind == Kind.RESET:
                out.append(ResetTimeout(anchor))
            elif kind == Kind.TICK:
                out.append(TICK)
            else:
                raise ValueError(f"unknown message kind {kind}")
        return out


@dataclass(frozen=True, slots=True)
class RecordSpans:
    """The Kafka records a block's messages came from, in order: record ``r`` carried messages
    ``ends[r - 1]`` (0 for the first) up to ``ends[r]``, sits at ``offsets[r]`` and was written at
    ``timestamps_ms[r]``. Invariant: ``ends`` is non-decreasing and its last value is the block's length."""

    ends: I64
    offsets: I64
    timestamps_ms: I64

    @classmethod
    def single(cls, messages: int, offset: int = 0, timestamp_ms: int = 0) -> RecordSpans:
        """One record carrying all ``messages``."""
        return cls(np.array([messages], np.int64), np.array([offset], np.int64), np.array([timestamp_ms], np.int64))

    @classmethod
    def of(cls, lengths: list[int], offsets: list[int], timestamps_ms: list[int]) -> RecordSpans:
        return cls(np.cumsum(lengths, dtype=np.int64), np.array(offsets, np.int64), np.array(timestamps_ms, np.int64))

    def record_of(self, message: int) -> int:
        """The index of the record that carried message ``message`` of the block."""
        return int(np.searchsorted(self.ends, message, side="right"))

    def start_of(self, record: int) -> int:
        """The position in the block of record ``record``'s first message."""
        return int(self.ends[record - 1]) if record else 0

    def slice(self, first: int, end: int) -> RecordSpans:
        """Records ``first`` up to ``end``, spanning messages from `start_of` ``first`` (as position 0)."""
        return RecordSpans(self.ends[first:end] - self.start_of(first), self.offsets[first:end],
                           self.timestamps_ms[first:end])  # fmt: skip


@dataclass(slots=True)
class OutcomeBlock:
    """Outcomes in decision order; ``index[j]`` is the position in the block of the message that decided it."""

    index: I64
    code: U8
    anchor: I64
    source: I32  # into `sources`
    offset: I64
    latency_ticks: I64
    latency_ms: I64  # from the init record's timestamp to the deciding record's
    sources: list[Source]

    def __len__(self) -> int:
        return len(self.code)

    @classmethod
    def concat(cls, blocks: list[OutcomeBlock], starts: list[int]) -> OutcomeBlock:
        """The outcomes of ``blocks`` in order, as one block; the messages of block ``i`` began at ``starts[i]``."""
        names: dict[Source, int] = {}
        local = [np.array([names.setdefault(n, len(names)) for n in b.sources], np.int32) for b in blocks]
        return cls(
            np.concatenate([b.index + start for b, start in zip(blocks, starts, strict=True)]).astype(np.int64),
            np.concatenate([b.code for b in blocks]).astype(np.uint8),
            np.concatenate([b.anchor for b in blocks]).astype(np.int64),
            np.concatenate([m[b.source] for b, m in zip(blocks, local, strict=True)]).astype(np.int32),
            np.concatenate([b.offset for b in blocks]).astype(np.int64),
            np.concatenate([b.latency_ticks for b in blocks]).astype(np.int64),
            np.concatenate([b.latency_ms for b in blocks]).astype(np.int64),
            list(names),
        )

    def to_outcomes(self) -> list[Outcome]:
        out: list[Outcome] = []
        for code, anchor, source, offset, latency in zip(
            self.code.tolist(),
            self.anchor.tolist(),
            self.source.tolist(),
            self.offset.tolist(),
            self.latency_ticks.tolist(),
            strict=True,
        ):
            spout, prefix = self.sources[source]
            msg_id = join_msg_id(prefix, offset)
            if code == Code.ACK:
                out.append(Acked(anchor, spout, msg_id, latency))
            else:
                out.append(Nacked(anchor, spout, msg_id, _REASON[Code(code)], latency))
        return out
