"""The compiled Avro array encoder writes exactly what fastavro reads (and writes)."""

from __future__ import annotations

import io

import fastavro
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from acker import avro_longs

LONGS = fastavro.parse_schema({"type": "array", "items": "long"})
STRINGS = fastavro.parse_schema({"type": "array", "items": "string"})


def _read(schema: object, data: bytes) -> object:
    stream = io.BytesIO(data)
    value = fastavro.schemaless_reader(stream, schema, None)
    assert stream.tell() == len(data)
    return value


@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=50))
def test_long_arrays_read_back(values: list[int]) -> None:
    encoded = avro_longs.array(np.array(values, np.int64))
    assert _read(LONGS, encoded) == values
    out = io.BytesIO()
    fastavro.schemaless_writer(out, LONGS, values)
    if values:
        assert encoded == out.getvalue()  # byte for byte (fastavro writes one block too)


@given(st.lists(st.text(max_size=8), max_size=5))
def test_string_arrays_read_back(texts: list[str]) -> None:
    assert _read(STRINGS, avro_longs.strings(texts)) == texts


def test_extremes() -> None:
    for value in (0, -1, 1, 63, -64, 64, (1 << 63) - 1, -(1 << 63)):
        assert _read(fastavro.parse_schema("long"), avro_longs.long(value)) == value
