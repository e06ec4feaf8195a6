"""The anchor header: how a message carries its place in its tuple trees across Kafka topics.

Header ``acker.ids``: for each root (tree) the message belongs to, its anchor and this message's edge id in that
tree, as little-endian signed 64-bit pairs: ``anchor₁ edge₁ anchor₂ edge₂ …`` (16 bytes a root). A message without
the header is unanchored (untracked). A header that is not a whole number of pairs, or that has a zero anchor, is
invalid: the message is processed as unanchored and counted, never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from acker.core.tuple_tree import UNTRACKED, TupleIds

HEADER = "acker.ids"
_PAIR = np.dtype("<i8")


def encode(ids: TupleIds) -> bytes:
    return np.array(ids.edges, _PAIR).tobytes() if ids.edges else b""


def decode(raw: bytes | None) -> TupleIds | None:
    """The ids of a header value; None when it is not a valid one."""
    if raw is None or len(raw) == 0 or len(raw) % 16:
        return None
    pairs = np.frombuffer(raw, _PAIR).reshape(-1, 2)
    if np.any(pairs[:, 0] == 0):
        return None
    return TupleIds(tuple((int(a), int(e)) for a, e in pairs.tolist()))


HeaderValue = str | bytes | None
Headers = Sequence[tuple[str, HeaderValue]] | Mapping[str, HeaderValue]
HeaderList = list[tuple[str, HeaderValue]]


def _pairs(headers: Headers | None) -> list[tuple[str, HeaderValue]]:
    if headers is None:
        return []
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def split(headers: Headers | None) -> tuple[TupleIds, HeaderList, bool]:
    """(the ids, the other headers, whether an acker header was present but invalid)."""
    ids: TupleIds = UNTRACKED
    rest: HeaderList = []
    invalid = False
    for key, value in _pairs(headers):
        if key == HEADER:
            decoded = decode(value.encode("latin-1") if isinstance(value, str) else value)
            if decoded is None:
                invalid = True
            else:
                ids = decoded
        else:
            rest.append((key, value))
    return ids, rest, invalid


def with_ids(headers: Headers | None, ids: TupleIds) -> HeaderList:
    """``headers`` without any acker header, plus the header of ``ids`` when they are tracked."""
    out = [(k, v) for k, v in _pairs(headers) if k != HEADER]
    if ids.tracked:
        out.append((HEADER, encode(ids)))
    return out
