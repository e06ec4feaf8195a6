"""Offline replay: protocol messages as JSON lines in, outcomes as JSON lines out (`acker replay`).

Input, one object a line (ids are signed 64-bit integers)::

    {"type":"init","anchor":A,"spout":"S","msg_id":"M","value":V}
    {"type":"ack","anchor":A,"value":V}
    {"type":"anchor","anchor":A,"tuple":T}      {"type":"ok","anchor":A,"tuple":T}
    {"type":"fail","anchor":A}   {"type":"reset","anchor":A}   {"type":"tick"}

Output, in decision order::

    {"outcome":"ack","anchor":A,"spout":"S","msg_id":"M"}
    {"outcome":"nack","anchor":A,"spout":"S","msg_id":"M","reason":"failed"|"timeout"|"overload"}

A line that is not a valid message is reported with its line number and skipped; it never stops the replay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from acker.columnar import BlockTracker, MessageBlock
from acker.core.messages import TICK, Ack, Anchor, Fail, Init, Message, Ok, ResetTimeout, Tick
from acker.core.outcomes import Acked, Nacked, Outcome
from acker.core.tracker import Tracker
from acker.errors import AckerError, ReplayInputError
from acker.wire import spout_answerable


def _field(obj: dict[str, Any], key: str) -> object:
    if key not in obj:  # said apart from a null given
        raise ReplayInputError(f"missing field {key!r}")
    return obj[key]


def _int(obj: dict[str, Any], key: str) -> int:
    value = _field(obj, key)
    if type(value) is not int:
        raise ReplayInputError(f"field {key!r} must be an integer, got {value!r}")
    return value


def _str(obj: dict[str, Any], key: str) -> str:
    value = _field(obj, key)
    if not isinstance(value, str):
        raise ReplayInputError(f"field {key!r} must be a string, got {value!r}")
    return value


def _ack(obj: dict[str, Any]) -> Ack:
    """An ack, refused with value 0 as the service refuses it (`acker.wire.check_block`): it would complete a tree
    whose init of value 0 waits for its anchors."""
    value = _int(obj, "value")
    if value == 0:
        raise ReplayInputError("an ack's value is 0: no client sends one (an edge XOR its children's edges)")
    return Ack(_int(obj, "anchor"), value)


def _init(obj: dict[str, Any]) -> Init:
    """An init, refused with a spout the service cannot answer (a name that cannot name its outcome topic, or a
    reserved one), as the service dead-letters its record (`acker.wire.check_block`, ``bad-spout``)."""
    spout = _str(obj, "spout")
    if not spout_answerable(spout):
        raise ReplayInputError(f"an init's spout {spout[:80]!r} cannot name an outcome topic, or is reserved")
    return Init(_int(obj, "anchor"), spout, _str(obj, "msg_id"), _int(obj, "value"))


_PARSERS: dict[str, Callable[[dict[str, Any]], Message]] = {
    "init": _init,
    "ack": _ack,
    "anchor": lambda o: Anchor(_int(o, "anchor"), _int(o, "tuple")),
    "ok": lambda o: Ok(_int(o, "anchor"), _int(o, "tuple")),
    "fail": lambda o: Fail(_int(o, "anchor")),
    "reset": lambda o: ResetTimeout(_int(o, "anchor")),
    "tick": lambda o: TICK,
}


def parse_message(line: str) -> Message:
    """One JSON line → one message; `ReplayInputError` (an `AckerError`) says what is wrong."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as error:
        raise ReplayInputError(f"not JSON: {error.msg}") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's advice to raise its limit is not ours)
        raise ReplayInputError("not JSON this reads: a number of more than 4,300 digits") from None
    except RecursionError:
        raise ReplayInputError("not JSON this reads: nested too deeply") from None
    if not isinstance(obj, dict):
        raise ReplayInputError("not a JSON object")
    kind = obj.get("type")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise ReplayInputError(f"unknown message type {kind!r}; expected one of {sorted(_PARSERS)}")
    try:
        return parser(obj)
    except ReplayInputError:
        raise
    except AckerError as error:  # zero or out-of-range ids
        raise ReplayInputError(str(error)) from None


def format_message(message: Message) -> str:
    """The JSON line of a message (the inverse of `parse_message`)."""
    obj: dict[str, Any]
    match message:
        case Init(anchor, spout, msg_id, value):
            obj = {"type": "init", "anchor": anchor, "spout": spout, "msg_id": msg_id, "value": value}
        case Ack(anchor, value):
            obj = {"type": "ack", "anchor": anchor, "value": value}
        case Anchor(anchor, tuple_id):
            obj = {"type": "anchor", "anchor": anchor, "tuple": tuple_id}
        case Ok(anchor, tuple_id):
            obj = {"type": "ok", "anchor": anchor, "tuple": tuple_id}
        case Fail(anchor):
            obj = {"type": "fail", "anchor": anchor}
        case ResetTimeout(anchor):
            obj = {"type": "reset", "anchor": anchor}
        case Tick():
            obj = {"type": "tick"}
    return json.dumps(obj, separators=(",", ":"))


def format_outcome(outcome: Outcome) -> str:
    obj: dict[str, Any]
    match outcome:
        case Acked(anchor, spout, msg_id, _):
            obj = {"outcome": "ack", "anchor": anchor, "spout": spout, "msg_id": msg_id}
        case Nacked(anchor, spout, msg_id, reason, _):
            obj = {
                "outcome": "nack",
                "anchor": anchor,
                "spout": spout,
                "msg_id": msg_id,
                "reason": reason.value,
            }
    return json.dumps(obj, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class BadLine:
    number: int
    reason: str


def read_messages(lines: Iterable[str], bad: list[BadLine]) -> Iterator[Message]:
    """The messages of ``lines`` in order; malformed lines are appended to ``bad`` and skipped.

    Blank lines are ignored.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            line.encode("utf-8")  # a file read with errors="surrogateescape" holds its bytes that are not UTF-8 so
        except UnicodeEncodeError:
            bad.append(BadLine(number, "not UTF-8 text"))
            continue
        try:
            yield parse_message(line)
        except ReplayInputError as error:
            bad.append(BadLine(number, str(error)))


BLOCK_MESSAGES = 8192  # messages of a block the offline tools give the columnar engine (`acker replay`, `simulate`)


def message_blocks(messages: Iterable[Message]) -> Iterator[MessageBlock]:
    """``messages`` in blocks of `BLOCK_MESSAGES`, as the columnar engine takes them."""
    for batch in _batches(messages, BLOCK_MESSAGES):
        yield MessageBlock.from_messages(batch)


def _batches(messages: Iterable[Message], size: int) -> Iterator[list[Message]]:
    batch: list[Message] = []
    for message in messages:
        batch.append(message)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def replay(tracker: Tracker | BlockTracker, lines: Iterable[str], out: TextIO, err: TextIO) -> int:
    """Run ``lines`` through ``tracker``, writing outcomes to ``out`` and bad lines to ``err``.

    With a `BlockTracker` the messages go through in blocks of `BLOCK_MESSAGES` (the outcomes of one tick then come
    in table order). Returns the number of bad lines.
    """
    bad: list[BadLine] = []
    reported = 0
    for batch in _batches(read_messages(lines, bad), 1 if isinstance(tracker, Tracker) else BLOCK_MESSAGES):
        if isinstance(tracker, Tracker):
            outcomes: Iterable[Outcome] = tracker.handle(batch[0])
        else:
            outcomes = tracker.process(MessageBlock.from_messages(batch)).to_outcomes()
        for outcome in outcomes:
            out.write(format_outcome(outcome) + "\n")
        while reported < len(bad):  # report as we go, so stderr interleaves sensibly with the outcomes
            err.write(f"line {bad[reported].number}: {bad[reported].reason}\n")
            reported += 1
    for line in bad[reported:]:
        err.write(f"line {line.number}: {line.reason}\n")
    return len(bad)
