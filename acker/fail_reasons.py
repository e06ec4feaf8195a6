"""Why a tree failed: the reason a stage gives with a fail, carried beside the protocol to the record's dead letter.

A fail decides a tree ``FAILED`` at once; the XOR protocol has no room for why. The reason travels in a Kafka header
beside it, so that an operator reading a dead letter sees the exception that failed its record rather than searching
the logs of every process of the stage:

- on an **acker record** (`acker.kafka.acker_client.AckerClient`, a bolt's or a spout's fails): ``acker.fail-reasons``,
  a JSON object from anchor (a signed 64-bit integer, as a decimal string) to the reason of that tree's fail;
- on an **outcome record** (the acker service, for the ``FAILED`` outcomes it decided; a spout, for those it decided
  itself): ``acker.fail-reasons``, a JSON object from message id to reason;
- on a **replayed copy or a dead letter** (the replay job, `acker.retries`): ``acker.replay.detail``, the reason of the
  nack that sent it there, when it had one.

JSON, so that standard Kafka tools show it and Spark reads it (``from_json``). Readers of earlier versions ignore the
header: nothing of the protocol changes, and the header can be written before every reader knows it.

Invariant: a reason never changes what is decided, and never stops a process. A header that cannot be read (not
JSON, nested too deep, over `READ_MAX_BYTES`) is ignored: its trees fail as they would without it. A reason is at most
`REASON_MAX_CHARS` characters of text that encodes as UTF-8 (what does not, a lone surrogate, is escaped); a header
holds at most `PER_RECORD` of them (and is read so) and `HEADER_MAX_BYTES` (its writer cuts a record failing more
trees, `fits`); a service keeps at most `KEPT` reasons per partition whose trees are not decided yet (a fail read before
its tree's init), the oldest forgotten first, and the first reason of a tree (its first fail decided it).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

HEADER = "acker.fail-reasons"
REASON_MAX_CHARS = 500
PER_RECORD = 100
HEADER_MAX_BYTES = 16 * 1024  # written; a record's size limit is 1 MB by default
READ_MAX_BYTES = 64 * 1024  # read: a larger header is not this project's
KEPT = 4096
_DECIMAL = re.compile(r"-?[0-9]{1,20}")


def reason_of(error: BaseException, where: str = "") -> str:
    """A reason for a fail caused by ``error``: its type and message (``where``, e.g. the stage, first), cut to
    `REASON_MAX_CHARS`. Never raises: it is made inside the handler of a user function's exception, and one whose
    message cannot be made (a ``__str__`` that formats a field the input lacks) must still fail its input, not stop
    the stage on that input at every restart."""
    name = type(error).__name__
    try:
        message = str(error)
    except Exception as unprintable:  # whatever a user's __str__ raises
        message = f"<its message could not be made: {type(unprintable).__name__}>"
    text = f"{name}: {message}" if message else name
    return cut(f"{where}: {text}" if where else text)


def cut(reason: str) -> str:
    """``reason`` as text a header can carry: at most `REASON_MAX_CHARS` characters, what UTF-8 cannot encode (a
    lone surrogate: an exception's message made of undecodable bytes) escaped."""
    return _encodable(reason if len(reason) <= REASON_MAX_CHARS else reason[: REASON_MAX_CHARS - 1] + "…")


def _encodable(text: str) -> str:
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _entries(reasons: Mapping[int, str] | Mapping[str, str]) -> Iterator[tuple[str, str, int]]:
    """The first `PER_RECORD` entries of ``reasons`` as a header holds them, and the bytes each takes there."""
    for key, reason in itertools.islice(reasons.items(), PER_RECORD):
        entry = {_encodable(str(key)): cut(reason)}
        # Its two braces stand for the ", " before it, or, for the first, the header's own: the size is exact (it
        # took one byte for ", ", and the header could be up to 98 bytes over).
        [(name, text)] = entry.items()
        yield name, text, len(json.dumps(entry, ensure_ascii=False).encode())


def encode(reasons: Mapping[int, str] | Mapping[str, str]) -> bytes | None:
    """The header's value for ``reasons`` (by anchor or by message id): the first `PER_RECORD`, within
    `HEADER_MAX_BYTES`; None when empty. Writers cut their records so that it holds them all (`fits`)."""
    if not reasons:
        return None
    kept: dict[str, str] = {}
    size = 0
    for name, text, taken in _entries(reasons):
        size += taken
        if size > HEADER_MAX_BYTES:
            break
        kept[name] = text
    return json.dumps(kept, ensure_ascii=False).encode() if kept else None


def fits(reasons: Mapping[int, str] | Mapping[str, str]) -> bool:
    """Whether one header holds every reason of ``reasons`` (`encode` keeps the first ones): a record failing more
    trees is cut by its writer (an acker record, an outcome record), else a burst of fails left the reasons past the
    first `PER_RECORD` out, and their records' dead letters said none. One reason always fits."""
    return len(reasons) <= PER_RECORD and sum(taken for *_, taken in _entries(reasons)) <= HEADER_MAX_BYTES


def as_headers(reasons: Mapping[int, str] | Mapping[str, str]) -> dict[str, Any]:
    """``produce`` arguments for a record with the header of ``reasons``: none at all when there are none (the
    common case, a record without headers)."""
    raw = encode(reasons)
    return {} if raw is None else {"headers": [(HEADER, raw)]}


def decode(raw: bytes | str | None) -> dict[str, str]:
    """The reasons of a header's value, by its keys as written: of its first `PER_RECORD` entries, as many as a
    writer puts in one (thousands from another writer pushed out every reason a service kept, `Kept`); empty when it
    is not a JSON object of strings (or is over `READ_MAX_BYTES`)."""
    if not raw or len(raw) > READ_MAX_BYTES:
        return {}
    try:
        found = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError); nested too deep
        return {}
    if not isinstance(found, dict):
        return {}
    return {_encodable(k): cut(v) for k, v in itertools.islice(found.items(), PER_RECORD) if isinstance(v, str)}


def by_anchor(raw: bytes | str | None) -> dict[int, str]:
    """An acker record's reasons, by anchor; keys that are not non-zero 64-bit integers in ASCII decimal are left out
    (``int`` takes " 7", "+9", "1_0" and other scripts' digits: a reason could go to another tree)."""
    out = {}
    for key, reason in decode(raw).items():
        if not _DECIMAL.fullmatch(key):
            continue
        anchor = int(key)
        if anchor and -(1 << 63) <= anchor < (1 << 63):
            out[anchor] = reason
    return out


class Kept:
    """The reasons a service has read for trees of one partition it has not decided yet, by anchor: at most `KEPT`,
    the oldest forgotten first (a fail for a tree decided before, or whose init never comes, is never taken)."""

    __slots__ = ("_reasons",)

    def __init__(self) -> None:
        self._reasons: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._reasons)

    def add(self, reasons: Mapping[int, str]) -> None:
        kept = self._reasons
        for anchor, reason in reasons.items():
            kept.setdefault(anchor, reason)  # a tree's first fail decides it: its reason is the one given
        while len(kept) > KEPT:
            del kept[next(iter(kept))]

    def take(self, anchors: Iterable[int]) -> dict[int, str]:
        """The reasons of ``anchors`` (trees just decided), forgotten here."""
        kept = self._reasons
        if not kept:
            return {}
        return {anchor: kept.pop(anchor) for anchor in anchors if anchor in kept}
