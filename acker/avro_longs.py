"""Avro's binary encoding of integer arrays, compiled: the outcome records' hot path.

fastavro spends about a microsecond per array item building outcome batches; this writes the same bytes from a
numpy array in a compiled loop, and reads back the head and the anchors of an outcome record (`outcome_anchors`),
which a new owner of an acker partition does for every outcome decided after its committed offset. Avro encodes an
int or a long as its zigzag form ``(n << 1) ^ (n >> 63)`` in little-endian base-128 varint bytes, and an array as
blocks: an item count (negative when the block's byte size follows it), the items, and a 0 count to end it (this
writes one block). Tests check every output against fastavro, and the reader against fastavro's reading of the same
fields (`acker.wire.decode_outcomes`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from numba import njit


def _compile(fn: Any) -> Any:
    return njit(cache=True, nogil=True)(fn)  # outcome records are encoded in the service's deciding threads


@_compile
def _long_into(value: int, out: Any, pos: int) -> int:
    """Write one int or long at ``pos`` (at most 10 bytes); the position after it."""
    v = np.int64(value)
    z = (np.uint64(v) << np.uint64(1)) ^ np.uint64(v >> np.int64(63))
    while z >= np.uint64(0x80):
        out[pos] = np.uint8((z & np.uint64(0x7F)) | np.uint64(0x80))
        pos += 1
        z >>= np.uint64(7)
    out[pos] = np.uint8(z)
    return pos + 1


@_compile
def _varints(values: Any, out: Any, pos: int) -> int:
    for i in range(values.shape[0]):
        pos = _long_into(values[i], out, pos)
    return pos


def long(value: int) -> bytes:
    """One int or long."""
    return array_items(np.array([value], np.int64))


def array_items(values: npt.NDArray[Any]) -> bytes:
    """The items alone, varint after varint."""
    out = np.empty(len(values) * 10, np.uint8)
    return out[: _varints(values.astype(np.int64, copy=False), out, 0)].tobytes()


def array(values: npt.NDArray[Any]) -> bytes:
    """An Avro array of ints or longs (also of enum symbols given by their index)."""
    if len(values) == 0:
        return b"\x00"
    return long(len(values)) + array_items(values) + b"\x00"


def string(text: str) -> bytes:
    data = text.encode("utf-8")
    return long(len(data)) + data


def strings(texts: list[str]) -> bytes:
    """An Avro array of strings."""
    if not texts:
        return b"\x00"
    return long(len(texts)) + b"".join(string(t) for t in texts) + b"\x00"


_BAD = -1  # position returned by the readers below for bytes that are not what they expect


_LONG_LAST_SHIFT = 63  # the shift of a long's 10th byte, its last
_INT_LAST_SHIFT = 28  # the shift of an int's 5th byte, its last


@_compile
def _read_varint(buf: Any, pos: int, last_shift: int) -> tuple[np.uint64, int]:
    """The varint at ``pos``, in its zigzag form, and the position after it (``_BAD`` when truncated or longer than
    its type takes)."""
    z = np.uint64(0)
    shift = 0
    while True:
        if pos >= buf.shape[0] or shift > last_shift:
            return np.uint64(0), _BAD
        b = buf[pos]
        pos += 1
        z |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            break
        shift += 7
    return z, pos


@_compile
def _unzigzag(z: np.uint64) -> int:
    return int(np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1)))


@_compile
def _read_long(buf: Any, pos: int) -> tuple[int, int]:
    """The long at ``pos`` and the position after it (``_BAD`` when truncated or over 10 bytes).

    10 bytes is the most a long takes (the Avro specification; Java's reader refuses more). fastavro is more lenient:
    it reads a varint of any length (bits past the 64th wrap around), so a record with a longer one, which no writer
    writes, is one that fastavro reads and this does not. Avro's block counts and string lengths are longs."""
    z, after = _read_varint(buf, pos, _LONG_LAST_SHIFT)
    return _unzigzag(z), after


@_compile
def _read_int(buf: Any, pos: int) -> tuple[int, int]:
    """The int (or enum symbol index) at ``pos`` and the position after it (``_BAD`` when truncated or over 5 bytes,
    which Java's reader, Spark's, refuses: "Invalid int encoding"; fastavro reads it). Of a varint past 32 bits (5
    bytes carry 35), the low 32 are read, as Java's reader reads them (`acker.wire.java_int`)."""
    z, after = _read_varint(buf, pos, _INT_LAST_SHIFT)
    return _unzigzag(z & np.uint64(0xFFFFFFFF)), after


@_compile
def _read_block_count(buf: Any, pos: int) -> tuple[int, int]:
    """The item count of an array's block at ``pos`` (0: the array ends) and the position of its first item. A block
    with a negative count carries its byte size, which is read and not needed; ``_BAD`` for a count of -2⁶³, which
    cannot be negated (fastavro read it as an empty block, Java's reader refuses it)."""
    count, pos = _read_long(buf, pos)
    if pos == _BAD or count >= 0:
        return count, pos
    count = -count
    _, pos = _read_long(buf, pos)
    if pos == _BAD or count < 0:
        return 0, _BAD
    return count, pos


@_compile
def _read_array(buf: Any, pos: int, out: Any, ints: bool) -> tuple[int, int]:
    """The array of longs, or of ints (``ints``: `_read_int`), at ``pos`` into ``out`` (room for one item per
    remaining byte): (items, position after it)."""
    n = 0
    while True:
        count, pos = _read_block_count(buf, pos)
        if pos == _BAD:
            return 0, _BAD
        if count == 0:
            return n, pos
        if count > out.shape[0] - n:
            return 0, _BAD
        for _ in range(count):
            out[n], pos = _read_int(buf, pos) if ints else _read_long(buf, pos)
            if pos == _BAD:
                return 0, _BAD
            n += 1


@_compile
def _bytes_at(buf: Any, pos: int) -> tuple[int, int]:
    """Where the bytes or string at ``pos`` start and end (the position after them); end ``_BAD`` when its length is
    negative or runs past the end."""
    size, at = _read_long(buf, pos)
    if at == _BAD or size < 0 or size > buf.shape[0] - at:  # not at + size: a huge size would overflow
        return at, _BAD
    end: int = at + size
    return at, end


@_compile
def _skip_bytes(buf: Any, pos: int) -> int:
    """The position after the bytes or string at ``pos``; ``_BAD`` when its length is negative or runs past the
    end."""
    end: int = _bytes_at(buf, pos)[1]
    return end


@_compile
def _outcome_head(buf: Any, pos: int, anchors: Any) -> tuple[int, int, int, int, int, int, int, int, int]:
    """(spout's first byte, its end, acker_partition, acker_offset, lowest and highest outcome symbol index, outcomes
    read, anchors read, position after them) of the OutcomeBatch at ``pos``; the position is ``_BAD`` when the bytes
    cannot be one."""
    spout, pos = _bytes_at(buf, pos)
    if pos == _BAD:
        return 0, 0, 0, 0, 0, 0, 0, 0, _BAD
    spout_end = pos
    partition, pos = _read_int(buf, pos)
    if pos == _BAD:
        return 0, 0, 0, 0, 0, 0, 0, 0, _BAD
    offset, pos = _read_long(buf, pos)
    if pos == _BAD:
        return 0, 0, 0, 0, 0, 0, 0, 0, _BAD
    outcomes, pos = _read_array(buf, pos, anchors, True)  # read into the room of the anchors, for their range
    if pos == _BAD:
        return 0, 0, 0, 0, 0, 0, 0, 0, _BAD
    lowest, highest = 0, -1  # an empty range when there are none
    if outcomes:
        lowest = highest = anchors[0]
        for i in range(1, outcomes):
            lowest = min(lowest, anchors[i])
            highest = max(highest, anchors[i])
    n, pos = _read_array(buf, pos, anchors, False)
    return spout, spout_end, partition, offset, lowest, highest, outcomes, n, pos


@_compile
def _outcome_tail(buf: Any, pos: int, room: Any) -> int:
    """The position after the columns that follow an OutcomeBatch's anchors at ``pos`` (sources, source_index,
    offsets, latency_ms), read as Java's reader reads them, into ``room`` (one item per remaining byte); ``_BAD``
    when it refuses them. Their values are fastavro's to read and check."""
    while True:  # sources: blocks of strings
        count, pos = _read_block_count(buf, pos)
        if pos == _BAD:
            return _BAD
        if count == 0:
            break
        for _ in range(count):
            pos = _skip_bytes(buf, pos)
            if pos == _BAD:
                return _BAD
    _, pos = _read_array(buf, pos, room, True)  # source_index
    if pos == _BAD:
        return _BAD
    _, pos = _read_array(buf, pos, room, False)  # offsets
    if pos == _BAD:
        return _BAD
    _, pos = _read_array(buf, pos, room, False)  # latency_ms
    return pos


@_compile
def _acker_batch_counts(buf: Any, pos: int, init_kind: int) -> tuple[int, int, bool]:
    """(inits in ``kinds``, items ``sources`` claims, whether the sources were read to their end) of the AckerBatch
    at ``pos``, however the bytes after its kinds end (cut short, or a block claiming more items than the bytes left
    could hold: each takes 2 bytes at least); inits -1 when its kinds cannot be read."""
    kinds, pos = _bytes_at(buf, pos)  # a byte a message
    if pos == _BAD:
        return -1, 0, False
    inits = 0
    for i in range(kinds, pos):
        if buf[i] == init_kind:
            inits += 1
    pos = _skip_bytes(buf, pos)  # anchors
    if pos != _BAD:
        pos = _skip_bytes(buf, pos)  # values
    sources = 0
    while pos != _BAD:  # sources: blocks of (spout, source) strings
        count, pos = _read_block_count(buf, pos)
        if pos == _BAD:
            break
        if count == 0:
            return inits, sources, True
        if count > (buf.shape[0] - pos) // 2:  # claimed, not there: no sum past 64 bits (sources < 2⁶² before)
            return inits, sources + min(count, 1 << 62), False
        sources += count  # claimed, whether its items are all there or not
        for _ in range(2 * count):
            pos = _skip_bytes(buf, pos)
            if pos == _BAD:
                break
    return inits, sources, False


class BatchCounts(NamedTuple):
    inits: int
    sources: int  # those the record claims, read or not
    # Whether the record was read to the end of its sources as Java's reader reads it. When not, it is cut short
    # there, or holds what Avro's specification never writes and fastavro reads (a long over 10 bytes, a block
    # count of -2⁶³, a negative length): either way no record, and fastavro is not to read it (the counts, that
    # guard it, are not whole).
    whole: bool


def acker_batch_counts(data: bytes, start: int, init_kind: int) -> BatchCounts | None:
    """How many inits (messages of kind ``init_kind``) and sources the Avro AckerBatch at ``start`` in ``data``
    carries, read before fastavro reads it; None when its kinds cannot be read. fastavro builds a dict, two strings
    and a tuple for each source, about 200 bytes of memory at its peak for one that takes 2 bytes of the record,
    before it finds a record cut short: the caller holds the count against the inits, which take 29 bytes each."""
    inits, sources, whole = _acker_batch_counts(np.frombuffer(data, np.uint8), start, init_kind)
    return None if inits < 0 else BatchCounts(int(inits), int(sources), bool(whole))


class OutcomeHead(NamedTuple):
    spout: str
    acker_partition: int
    acker_offset: int
    anchors: npt.NDArray[np.int64]
    # The lowest and highest index of an outcome's enum symbol (0 and -1 when there are none), for the caller to hold
    # against the symbols of its schema: a reader of the record (fastavro, Java's) refuses an index outside them.
    lowest_outcome: int
    highest_outcome: int
    outcomes: int  # how many: a record of more or fewer anchors is not a valid one, which is the caller's to say


def outcome_anchors(data: bytes, start: int, *, whole: bool = False) -> OutcomeHead | None:
    """The spout, acker partition, acker offset, anchors, range of outcome symbol indices and count of outcomes of the
    Avro OutcomeBatch at ``start`` in ``data``, reading no further than its anchors unless ``whole``; None when the
    bytes cannot be such a record, or Java's reader (Spark's) refuses them: malformed or truncated, a long over 10
    bytes (`_read_long`) or an int or enum index over 5 (`_read_int`), a spout name that is not UTF-8."""
    buf = np.frombuffer(data, np.uint8)
    anchors = np.empty(max(0, len(data) - start), np.int64)
    spout_at, spout_end, partition, offset, lowest, highest, outcomes, n, pos = _outcome_head(buf, start, anchors)
    if pos == _BAD:
        return None
    try:
        spout = data[spout_at:spout_end].decode("utf-8")  # a name, short: as strict as fastavro's reading of it
    except UnicodeDecodeError:
        return None
    read = anchors[:n].copy()
    if whole and _outcome_tail(buf, pos, anchors) == _BAD:
        return None
    return OutcomeHead(spout, int(partition), int(offset), read, int(lowest), int(highest), int(outcomes))


@_compile
def _array_into(column: Any, rows: Any, out: Any, pos: int) -> int:
    """`array` of ``column[rows]``, written at ``pos``; the position after it."""
    if rows.shape[0]:
        pos = _long_into(rows.shape[0], out, pos)
        for r in rows:
            pos = _long_into(column[r], out, pos)
    out[pos] = 0
    return pos + 1


@_compile
def _outcome_columns(
    code: Any, anchor: Any, local: Any, offset: Any, latency: Any, rows: Any, out: Any
) -> tuple[int, int]:
    pos = _array_into(code, rows, out, 0)
    middle = _array_into(anchor, rows, out, pos)
    pos = _array_into(local, np.arange(rows.shape[0]), out, middle)
    pos = _array_into(offset, rows, out, pos)
    pos = _array_into(latency, rows, out, pos)
    return middle, pos


def outcome_columns(
    code: npt.NDArray[Any],
    anchor: npt.NDArray[Any],
    offset: npt.NDArray[Any],
    latency: npt.NDArray[Any],
    *,
    rows: npt.NDArray[Any],
    source_index: npt.NDArray[Any],
) -> tuple[bytes, bytes]:
    """The column arrays of an OutcomeBatch for the outcomes ``rows`` of an `OutcomeBlock`'s columns, in one
    compiled pass: (the outcomes and anchors arrays; the ``source_index`` (one per row), offsets and latencies
    arrays). The source names, an array of strings, go between the two."""
    if len(source_index) != len(rows) or (len(rows) and not 0 <= rows.min() <= rows.max() < len(code)):
        raise ValueError("rows must index the columns, one source index a row")  # the compiled loop checks no bounds
    out = np.empty(rows.shape[0] * 50 + 64, np.uint8)  # 5 columns of at most 10 bytes, 5 counts and ends
    middle, end = _outcome_columns(code, anchor, source_index, offset, latency, rows.astype(np.int64), out)
    return out[:middle].tobytes(), out[middle:end].tobytes()


@_compile
def _acker_batch_layout(buf: Any, pos: int, spans: Any, names: Any) -> int:
    """Where the fields of the AckerBatch at ``pos`` lie, for a record read to the end of ``buf`` with nothing
    irregular: ``spans`` gets (start, end) of kinds, anchors, values, init_sources and init_offsets, ``names`` those
    of each source's spout and source, in a row. The number of sources, or -1 for anything else (cut short, bytes
    after it, a long over 10 bytes, more sources than ``names`` has rows for): the caller then reads it with
    fastavro, which says why."""
    sources = 0
    for field in range(5):
        if field == 3:  # sources: blocks of (spout, source) strings, between values and init_sources
            while True:
                count, pos = _read_block_count(buf, pos)
                if pos == _BAD or count > names.shape[0] - sources:
                    return -1
                if count == 0:
                    break
                for i in range(sources, sources + count):
                    for j in range(0, 4, 2):
                        names[i, j], pos = _bytes_at(buf, pos)
                        if pos == _BAD:
                            return -1
                        names[i, j + 1] = pos
                sources += count
        spans[field, 0], pos = _bytes_at(buf, pos)
        if pos == _BAD:
            return -1
        spans[field, 1] = pos
    return sources if pos == buf.shape[0] else -1


def acker_batch_layout(
    data: bytes, start: int, sources: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """(spans, names) of `_acker_batch_layout` for the AckerBatch at ``start`` in ``data`` claiming ``sources``
    sources (`acker_batch_counts`); None when it is not a regular one of them."""
    spans = np.empty((5, 2), np.int64)
    names = np.empty((sources, 4), np.int64)
    n = _acker_batch_layout(np.frombuffer(data, np.uint8), start, spans, names)
    return None if n != sources else (spans, names)
