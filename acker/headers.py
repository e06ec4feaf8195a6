"""The anchor header: how a message carries its place in its tuple trees across Kafka topics.

Header ``acker.ids``: for each root (tree) the message belongs to, its anchor and this message's edge id in that
tree, as little-endian signed 64-bit pairs: ``anchor₁ edge₁ anchor₂ edge₂ …`` (16 bytes a root). A message without
the header is unanchored (untracked). A header is invalid when it is not a whole number of pairs, when it has a zero
anchor, when it names a root twice (a child anchored to it would get that root's edge twice, which cancels: the
child would go untracked while its input's ack still counted its creation), or when it has a zero edge id (a tuple
whose edge is zero is invisible to the XOR ledger: its tree could complete while it is being processed; ids are
drawn non-zero, and a child's edge, a XOR of distinct random edges, is zero with probability 2⁻⁶⁴). A message with
an invalid header, or with more than one, is processed as unanchored and counted, never a crash (its trees time
out and are replayed).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from acker.core.tuple_tree import UNTRACKED, TupleIds, trusted_ids

HEADER = "acker.ids"


_ONE = struct.Struct("<qq")  # the common case, one root, without a loop


def encode(ids: TupleIds) -> bytes:
    edges = ids.edges
    if len(edges) == 1:
        return _ONE.pack(*edges[0])
    return struct.pack(f"<{2 * len(edges)}q", *(x for pair in edges for x in pair))


def decode(raw: bytes | None) -> TupleIds | None:
    """The ids of a header value; None when it is not a valid one."""
    if not raw or len(raw) % 16:
        return None
    if len(raw) == 16:  # the common case, one root
        pair = _ONE.unpack(raw)
        return trusted_ids((pair,)) if pair[0] and pair[1] else None
    pairs = tuple(_ONE.iter_unpack(raw))
    if any(anchor == 0 or edge == 0 for anchor, edge in pairs) or len({anchor for anchor, _ in pairs}) < len(pairs):
        return None
    return trusted_ids(pairs)  # checked above: non-zero, distinct roots


HeaderValue = str | bytes | None
Headers = Sequence[tuple[str, HeaderValue]] | Mapping[str, HeaderValue]
HeaderList = list[tuple[str, HeaderValue]]


def pairs(headers: Headers | None) -> HeaderList:
    """Headers as a list of (key, value) pairs, however a client gave them (a list, a mapping, or None)."""
    if headers is None:
        return []
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


class Record(Protocol):
    """What `read` needs of a consumed record (confluent-kafka's ``Message``)."""

    def headers(self) -> Any: ...

    def set_headers(self, headers: Any) -> None: ...


_HEADERS = operator.methodcaller("headers")


def read_headers(record: Record) -> HeaderList | None:
    """The headers of a consumed record as a list (empty when it has none), or None when the client cannot read them.

    Kafka takes any bytes as a header's name and librdkafka writes them as given (a Go or C producer, ``kcat -H``);
    confluent-kafka decodes names as UTF-8 and, on one that is not, raises ``SystemError`` and keeps a list with a
    hole, which a second ``headers()`` returns (touching it crashes the process). So a record's headers are read here
    once, before anything else reads them; a record whose headers cannot be read is given none (``set_headers``), so
    that a later reader gets an empty list rather than the hole. Each caller says what such a record means to it.

    The call goes through `operator.methodcaller`, whose C call checks the result: CPython 3.11 specializes a
    ``record.headers()`` call site run often into a direct call that does not, and hands back the list with the hole
    as if nothing had happened, the decoding error left pending (seen: a bolt crashed on the hole)."""
    try:
        found = _HEADERS(record)
    except (SystemError, UnicodeDecodeError):
        record.set_headers([])
        return None
    if type(found) is list:  # the client's own list (not to be changed): the common case, without a copy
        return found
    return pairs(found)


HEADER_FRAMING = 10  # a header's name and value lengths, varints of at most 5 bytes each


def record_size(value: bytes | None, key: bytes | None, headers: Sequence[tuple[str, HeaderValue]]) -> int:
    """A record's bytes: value, key, and its headers, each with the two lengths that frame it (varints of at most 5
    bytes each, as librdkafka and the broker count them): a thousand tiny headers are kilobytes more than their
    names and values, and a record that passed a check without them was refused inside a transaction."""
    named = sum(len(k.encode()) + len(v.encode() if isinstance(v, str) else v or b"") for k, v in headers)
    return len(value or b"") + len(key or b"") + named + HEADER_FRAMING * len(headers)


def first(headers: Headers | None, name: str) -> HeaderValue:
    """The value of header ``name`` as it is (the first one with a value), None when absent."""
    return next((value for key, value in pairs(headers) if key == name and value is not None), None)


def text(headers: Headers | None, name: str) -> str | None:
    """The value of header ``name`` as text (the first one), None when absent."""
    value = first(headers, name)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def decimal(value: HeaderValue) -> int | None:
    """The number a header value spells in ASCII decimal digits (at most 18: any such number fits a signed 64-bit
    field), None for anything else. A header is anybody's input: ``int()`` also takes signs, spaces, underscores and
    non-ASCII digits, and raises on 4,301 digits or more."""
    if value is None or len(value) > 18 or not value.isascii() or not value.isdigit():
        return None
    return int(value)


def split(headers: Headers | None) -> tuple[TupleIds, HeaderList, bool]:
    """(the ids, the other headers, whether an acker header was present but invalid)."""
    ids: TupleIds = UNTRACKED
    rest: HeaderList = []
    invalid = False
    if not headers:
        return ids, rest, invalid
    if type(headers) is list and len(headers) == 1:  # the common case: the anchor header alone, one root
        key, value = headers[0]
        if key == HEADER and type(value) is bytes:
            decoded = decode(value)
            return (ids, rest, True) if decoded is None else (decoded, rest, False)
    found = 0
    for key, value in headers if type(headers) is list else pairs(headers):
        if key == HEADER:
            found += 1
            try:
                decoded = decode(value.encode("latin-1") if isinstance(value, str) else value)
            except UnicodeEncodeError:  # text that cannot stand for bytes: not an anchor header
                decoded = None
            if decoded is None:
                invalid = True
            else:
                ids = decoded
        else:
            rest.append((key, value))
    if invalid or found > 1:  # one of them invalid, or two (which roots? neither is taken over the other)
        return UNTRACKED, rest, True
    return ids, rest, invalid


def with_ids(headers: Headers | None, ids: TupleIds) -> HeaderList:
    """``headers`` without any acker header, plus the header of ``ids`` when they are tracked."""
    out = [(k, v) for k, v in pairs(headers) if k != HEADER] if headers else []
    if ids.tracked:
        out.append((HEADER, encode(ids)))
    return out
