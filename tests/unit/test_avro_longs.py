"""The compiled Avro array encoder writes exactly what fastavro reads (and writes)."""

from __future__ import annotations

import io
import random
from typing import Any

import fastavro
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from acker import avro_longs

LONGS = fastavro.parse_schema({"type": "array", "items": "long"})
STRINGS = fastavro.parse_schema({"type": "array", "items": "string"})


def _read(schema: Any, data: bytes) -> object:
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


OUTCOME_DTYPES = (np.uint8, np.int64, np.int64, np.int64)  # code, anchor, offset, latency


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(-(1 << 63), (1 << 63) - 1),
            st.integers(-1, 1 << 62),
            st.integers(0, 1 << 40),
        ),
        max_size=40,
    ),
    st.randoms(use_true_random=False),
)
def test_outcome_columns_are_the_arrays_of_the_rows(outcomes: list[tuple[int, ...]], rng: random.Random) -> None:
    """One compiled pass writes what the arrays written one by one would."""
    code, anchor, offset, latency = (
        np.array([o[c] for o in outcomes], dtype) for c, dtype in enumerate(OUTCOME_DTYPES)
    )
    rows = np.array(sorted(rng.sample(range(len(outcomes)), rng.randint(0, len(outcomes)))), np.int64)
    local = np.array([rng.randint(0, 3) for _ in rows], np.int64)
    head, tail = avro_longs.outcome_columns(code, anchor, offset, latency, rows=rows, source_index=local)
    assert head == avro_longs.array(code[rows]) + avro_longs.array(anchor[rows])
    assert tail == b"".join(avro_longs.array(column) for column in (local, offset[rows], latency[rows]))


def test_outcome_columns_refuse_rows_outside_the_columns() -> None:
    column = np.arange(3, dtype=np.int64)
    for rows, index in (([0, 3], [0, 0]), ([-1], [0]), ([0, 1], [0])):
        with pytest.raises(ValueError, match="rows must index the columns"):
            avro_longs.outcome_columns(
                column, column, column, column, rows=np.array(rows, np.int64), source_index=np.array(index, np.int64)
            )
