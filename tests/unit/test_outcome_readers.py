"""The two readers of an outcome record agree on the fields they both read (the compiled one reads no further than
the anchors: a record broken after them is its reader's alone to refuse).

`decode_outcome_anchors` (compiled, reads no further than the anchors) is what a new owner of an acker partition
trusts on failover read-back to count trees as decided; `decode_outcomes` (fastavro) is what spouts read, and Spark's
Avro reader refuses what it refuses. A record the first accepted and the second refused had its trees counted as
decided though no spout could read their outcomes. Where fastavro is more lenient than the Avro specification and
Java's reader (a long of more than 10 bytes, an int of more than 5; an array block of -2⁶³ items, which it reads as
empty), the spouts' reader refuses what the compiled one refuses, up to the anchors, and what Java's refuses after
them: a record a spout took and Spark refused had its trees taken off the spout's pending, never timed out.
"""

from __future__ import annotations

import io
import json
from importlib.resources import files
from typing import Any

import fastavro
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from acker import avro_longs, wire
from acker.wire import (
    _PREFIX_OUTCOMES,
    OUTCOME_SYMBOLS,
    WireError,
    decode_outcome_anchors,
    decode_outcomes,
    encode_outcome_rows,
    spout_name_valid,
)
from spark_jobs import session as spark_session


def _raw_schema() -> Any:
    """The OutcomeBatch schema with the same encoding and no checks: the spout as bytes, the ints as longs, the
    outcomes as their enum indices. It writes what no writer of ours would."""
    schema = json.loads(files("acker.schemas").joinpath("outcome_batch.avsc").read_text("utf-8"))
    raw = {"spout": "bytes", "acker_partition": "long", "outcomes": {"type": "array", "items": "long"},
           "source_index": {"type": "array", "items": "long"}}  # fmt: skip
    for field in schema["fields"]:
        field["type"] = raw.get(field["name"], field["type"])
    return fastavro.parse_schema(schema)


RAW = _raw_schema()
HEAD = fastavro.parse_schema({**RAW, "fields": RAW["fields"][:5]})  # spout … anchors: what both readers read
LONGS = st.integers(-(1 << 63), (1 << 63) - 1)


def _write(schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    return out.getvalue()


def _tail(rows: int) -> bytes:
    """The columns after the anchors, valid for ``rows`` outcomes."""
    tail = RAW["fields"][5:]
    return _write({**RAW, "fields": tail}, {"sources": ["t/0"], "source_index": [0] * rows, "offsets": [1] * rows,
                                            "latency_ms": [0] * rows})  # fmt: skip


@st.composite
def heads(draw: st.DrawFn) -> dict[str, Any]:
    """The fields both readers read, valid: a spout name, the acker partition and offset, outcomes and anchors."""
    rows = draw(st.lists(st.tuples(st.integers(0, len(OUTCOME_SYMBOLS) - 1), LONGS), max_size=8))
    return {
        "spout": draw(st.from_regex(r"[a-z0-9._-]{1,12}", fullmatch=True)).encode(),
        "acker_partition": draw(st.integers(-1, 1 << 20)),
        "acker_offset": draw(st.integers(-1, 1 << 62)),
        "outcomes": [code for code, _ in rows],
        "anchors": [anchor for _, anchor in rows],
    }


# Ints in 5 bytes past 32 bits (Java's reader reads their low 32 bits), some of which are enum indices then
PAST_32_BITS = st.integers(0, 7).map(lambda low: (1 << 32) + low) | st.integers(1 << 31, (1 << 34) - 1)


def _java_reads(value: int) -> int | None:
    """The int Java's reader reads where ``value`` is written as a varint; None for more than 5 bytes, which it
    refuses."""
    zigzag = value << 1 if value >= 0 else (-value << 1) - 1
    return wire.java_int(value) if zigzag < 1 << 35 else None


def _read_both(value: bytes) -> tuple[object, object]:
    """What each reader makes of ``value``: (acker_partition, acker_offset, anchors), or None when refused."""
    try:
        record = decode_outcomes(value)
        full: object = (record.acker_partition, record.acker_offset, record.anchors)
    except WireError:
        full = None
    try:
        partition, offset, anchors = decode_outcome_anchors(value)
        fast: object = (partition, offset, anchors.tolist())
    except WireError:
        fast = None
    return full, fast


def _record(head: bytes) -> bytes:
    """An outcome record of the Avro ``head`` (spout … anchors, maybe malformed) and a tail valid for as many rows as
    fastavro reads outcomes in it: whether it is refused depends on the head alone."""
    stream = io.BytesIO(head)
    try:
        read: Any = fastavro.schemaless_reader(stream, HEAD, None)
    except Exception:  # fastavro raises many types on malformed input: any tail is as good
        return _PREFIX_OUTCOMES + head + _tail(0)
    return _PREFIX_OUTCOMES + head[: stream.tell()] + _tail(len(read["outcomes"]))


@given(
    heads(),
    st.one_of(st.none(), st.binary(max_size=8)),
    st.lists(st.tuples(st.integers(0, 7), st.one_of(st.integers(-8, 8), PAST_32_BITS, LONGS)), max_size=2),
    st.lists(st.integers(0, 7), max_size=1),
    st.one_of(st.none(), PAST_32_BITS, LONGS),
)
def test_a_record_with_any_value_in_the_fields_read_is_accepted_by_both_readers_or_by_neither(
    head: dict[str, Any],
    spout: bytes | None,
    codes: list[tuple[int, int]],
    dropped: list[int],
    partition: int | None,
) -> None:
    """Fields set to values no writer of ours writes: a spout name that is not UTF-8 or cannot name a topic, enum
    indices outside the symbols (negative ones included: fastavro reads -1 as the last symbol), an anchor more or less
    than outcomes, an acker partition past an int (Java's reader takes one of 5 bytes, wrapped, and refuses more)."""
    if spout is not None:
        head["spout"] = spout
    for i, code in codes:
        if i < len(head["outcomes"]):
            head["outcomes"][i] = code
    for i in dropped:
        del head["anchors"][i : i + 1]
    if partition is not None:
        head["acker_partition"] = partition
    full, fast = _read_both(_record(_write(HEAD, head)))
    assert full == fast
    valid = len(head["outcomes"]) == len(head["anchors"]) and all(
        _java_reads(c) in range(len(OUTCOME_SYMBOLS)) for c in head["outcomes"]
    )
    try:
        valid = valid and spout_name_valid(head["spout"].decode("utf-8"))
    except UnicodeDecodeError:
        valid = False
    valid = valid and _java_reads(head["acker_partition"]) is not None
    assert (full is not None) == valid


@given(
    heads(), st.lists(st.tuples(st.integers(0, 200), st.binary(max_size=3), st.integers(0, 3)), min_size=1, max_size=4)
)
@example(  # the anchor -2⁶³ read as a block count (fastavro: an empty block)
    {"spout": b"0", "acker_partition": 0, "acker_offset": 0, "outcomes": [0, 0, 0], "anchors": [0, -(1 << 63), 0]},
    [(10, b"\x00\x00", 0)],
)
def test_a_mutated_record_is_accepted_by_both_readers_or_by_neither(
    head: dict[str, Any], edits: list[tuple[int, bytes, int]]
) -> None:
    """Bytes of a valid head replaced, inserted or deleted (each edit: at a position, put some bytes in place of some),
    then a valid tail: both readers accept the record or both refuse it, and when both accept they read the same
    values. (An anchor of -2⁶³ moved to where a block count is read was one fastavro read as an empty block.)"""
    raw = bytearray(_write(HEAD, head))
    for at, put, remove in edits:
        raw[at : at + remove] = put  # past the end: appended
    full, fast = _read_both(_record(bytes(raw)))
    assert full == fast


@pytest.mark.parametrize(
    ("spout", "code"),
    [(b"s", len(OUTCOME_SYMBOLS)), (b"s", 100), (b"s", -1), (b"s", -len(OUTCOME_SYMBOLS) - 1), (b"\xff", 0),
     (b"\xed\xa0\x80", 0), (b"s\xc0\xaf", 0)],  # a surrogate, an overlong '/'
)  # fmt: skip
def test_what_a_spout_cannot_read_is_not_counted_as_decided(spout: bytes, code: int) -> None:
    value = _record(_write(HEAD, {"spout": spout, "acker_partition": 0, "acker_offset": 0, "outcomes": [0, code],
                                  "anchors": [5, 6]}))  # fmt: skip
    with pytest.raises(WireError):
        decode_outcomes(value)
    with pytest.raises(WireError):
        decode_outcome_anchors(value)


def test_ints_of_more_than_5_bytes_which_javas_reader_refuses_are_refused() -> None:
    """An enum index or an int of 6 bytes: Spark dead-letters the record ("Invalid int encoding"). The spouts'
    reader refuses it wherever it is; the read-back, up to its anchors."""
    valid = _write(HEAD, {"spout": b"s", "acker_partition": 0, "acker_offset": 0, "outcomes": [0], "anchors": [7]})
    assert decode_outcome_anchors(_record(valid))[2].tolist() == [7]
    six = b"\x80" * 5 + b"\x00"  # 0 in 6 bytes
    partition = valid[:2] + six + valid[3:]
    outcome = valid[:-5] + six + valid[-4:]  # the head ends: [1 item] [the enum index] [0]; [1] [the anchor] [0]
    assert fastavro.schemaless_reader(io.BytesIO(outcome), HEAD, None)["outcomes"] == [0]  # type: ignore[index,call-overload]
    for value in (partition, outcome):
        with pytest.raises(WireError):
            decode_outcomes(_record(value))
        with pytest.raises(WireError):
            decode_outcome_anchors(_record(value))
    tail = _write({**RAW, "fields": RAW["fields"][5:]}, {"sources": ["t/0"], "source_index": [0], "offsets": [1],
                                                        "latency_ms": [0]})  # fmt: skip
    assert decode_outcomes(_PREFIX_OUTCOMES + valid + tail).msg_ids == ["t/0/1"]
    at = tail.index(b"t/0") + 3  # sources end; source_index: [1 item] [0] [0]
    assert tail[at : at + 4] == b"\x00\x02\x00\x00"
    index, latency = tail[: at + 2] + six + tail[at + 3 :], tail[:-2] + b"\x80" * 10 + tail[-2:]  # 0 in 6 and 11 bytes
    for overlong in (index, latency):
        with pytest.raises(WireError, match="undecodable"):
            decode_outcomes(_PREFIX_OUTCOMES + valid + overlong)
        assert decode_outcome_anchors(_PREFIX_OUTCOMES + valid + overlong)[2].tolist() == [7]  # read to its anchors


def test_avro_only_fastavro_reads_is_refused_by_both_readers() -> None:
    """A varint of more than 10 bytes (the Avro specification's limit, `acker.avro_longs._read_long`), and an array
    block of -2⁶³ items (which cannot be negated: fastavro read it as empty, Java's reader refuses it)."""
    valid = _write(HEAD, {"spout": b"s", "acker_partition": 0, "acker_offset": 0, "outcomes": [], "anchors": []})
    overlong = valid[:2] + b"\x80" * 10 + b"\x00" + valid[3:]  # the acker partition, 0 in 11 bytes
    smallest = valid[:-1] + b"\xff" * 9 + b"\x01\x00\x00"  # the anchors: a block of -2⁶³ items, its size 0, the end
    lenient: Any = fastavro.schemaless_reader(io.BytesIO(smallest), HEAD, None)
    assert lenient["anchors"] == []  # fastavro's reading
    for value in (overlong, smallest):
        with pytest.raises(WireError):
            decode_outcomes(_record(value))
        with pytest.raises(WireError):
            decode_outcome_anchors(_record(value))
    assert decode_outcome_anchors(_record(valid))[2].dtype == np.int64


def test_an_array_or_a_string_longer_than_the_spark_jobs_take_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs start Avro's Java reader with limits (`spark_jobs.session.AVRO_LIMITS`, from `acker.wire`): a record
    past them is dead-lettered there, and a spout that took its trees off its pending list never timed them out.
    (Lowered here: a record past the real ones takes megabytes.)"""
    monkeypatch.setattr(wire, "AVRO_ARRAY_MAX_ITEMS", 3)
    monkeypatch.setattr(wire, "AVRO_STRING_MAX_BYTES", 40)
    rows = [("ACK", anchor, f"t/0/{anchor}", 0) for anchor in (1, 2, 3)]
    assert decode_outcomes(encode_outcome_rows("s", rows)).anchors == [1, 2, 3]
    too_many = encode_outcome_rows("s", [*rows, ("ACK", 4, "t/0/4", 0)])
    too_long = encode_outcome_rows("s", [("ACK", 1, "t" * 50, 0)])  # not coordinates: the id is its own source
    for value in (too_many, too_long):
        with pytest.raises(WireError, match="the Spark jobs' limit"):
            decode_outcomes(value)
    with pytest.raises(WireError, match="the Spark jobs' limit"):
        decode_outcome_anchors(too_many)
    assert spark_session.AVRO_LIMITS["org.apache.avro.limits.collectionItems.maxLength"] == str(1 << 20)


def ints_past_32_bits() -> tuple[bytes, bytes]:
    """Two records with ints written in 5 bytes past 32 bits, which Java's reader (Spark's) reads as their low 32
    bits: an acker partition 2³²+3 (3), an enum index 2³²+1 (FAILED), a source index 2³²+1 (1); and a source index
    -2³²-1 (-1: outside the sources)."""
    record = {"spout": b"sp", "acker_partition": (1 << 32) + 3, "acker_offset": 0, "outcomes": [(1 << 32) + 1, 0],
              "anchors": [5, 6], "sources": ["t/0", "t/1"], "source_index": [(1 << 32) + 1, 0], "offsets": [7, 8],
              "latency_ms": [1, 2]}  # fmt: skip
    return _PREFIX_OUTCOMES + _write(RAW, record), _PREFIX_OUTCOMES + _write(RAW, {**record, "source_index": [
        -(1 << 32) - 1, 0]})  # fmt: skip


def test_an_int_past_32_bits_in_5_bytes_is_read_as_javas_reader_reads_it() -> None:
    """Its low 32 bits, by both readers (fastavro read it whole: a record Spark took, and the spouts refused)."""
    wrapped, negative = ints_past_32_bits()
    assert len(avro_longs.long((1 << 32) + 1)) == 5  # written in 5 bytes, as ints are
    read = decode_outcomes(wrapped)
    assert (read.acker_partition, read.outcomes, read.msg_ids) == (3, ["FAILED", "ACK"], ["t/1/7", "t/0/8"])
    assert _read_both(wrapped) == ((3, 0, [5, 6]),) * 2
    with pytest.raises(WireError, match="inconsistent-columns"):
        decode_outcomes(negative)
    assert [wire.java_int(v) for v in (1 << 31, (1 << 31) + 5, -(1 << 31) - 1, (1 << 32) + 1, -(1 << 32) - 1)] == [
        0, 5, -1, 1, -1,  # the low 32 bits of the zigzag forms 2³², 2³²+10, 2³²+1, 2³³+2, 2³³+1
    ]  # fmt: skip
    assert [wire.java_int(v) for v in (0, -1, (1 << 31) - 1, -(1 << 31))] == [0, -1, (1 << 31) - 1, -(1 << 31)]


def test_bytes_after_an_outcome_record_are_ignored_as_javas_reader_ignores_them() -> None:
    """(Not after an acker batch, the acker's own format, read by the service alone: tests/unit/test_wire.py.)"""
    value = encode_outcome_rows("sp", [("ACK", 9, "t/0/3", 4)])
    assert decode_outcomes(value + b"\x00\x07") == decode_outcomes(value)
    assert _read_both(value + b"\x00\x07") == _read_both(value) != (None, None)
