"""The anchor header: round trip, and every malformed form is treated as unanchored."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acker.core.tuple_tree import UNTRACKED, TupleIds
from acker.headers import HEADER, decimal, decode, encode, read_headers, split, with_ids
from tests.strategies import ids64


@given(st.lists(st.tuples(ids64, ids64), min_size=1, max_size=5, unique_by=lambda edge: edge[0]))
def test_round_trip(edges: list[tuple[int, int]]) -> None:
    ids = TupleIds(tuple(edges))
    assert decode(encode(ids)) == ids
    assert len(encode(ids)) == 16 * len(edges)


def test_malformed_headers_are_none() -> None:
    assert decode(None) is None
    assert decode(b"") is None
    assert decode(b"\x01" * 15) is None
    assert decode(bytes(16)) is None  # zero anchor
    assert decode(bytes([5]) + bytes(15)) is None  # zero edge: invisible to the XOR ledger
    assert decode(bytes([5]) + bytes(7) + bytes([7]) + bytes(7) + bytes([6]) + bytes(15)) is None  # in a second root
    twice = struct.pack("<6q", 5, 7, 6, 8, 5, 9)  # root 5 named twice: a child's two edges in it would cancel
    assert decode(twice) is None


@pytest.mark.parametrize(
    ("value", "number"),
    [(b"12", 12), ("12", 12), ("9" * 18, 10**18 - 1), ("9" * 19, None), ("9" * 5000, None), ("²", None),
     ("١٢", None), ("+1", None), (" 1", None), ("1_0", None), (b"", None), (None, None)],
)  # fmt: skip
def test_a_number_in_a_header_is_ascii_digits_that_fit_64_bits(value: str | bytes | None, number: int | None) -> None:
    assert decimal(value) == number  # int() would raise on 4,301 digits or more, and take signs, spaces and "١٢"


def test_split_and_with_ids() -> None:
    ids = TupleIds(((5, 7),))
    headers = with_ids([("trace", b"x"), (HEADER, b"stale")], ids)
    assert headers == [("trace", b"x"), (HEADER, encode(ids))]
    assert split(headers) == (ids, [("trace", b"x")], False)
    assert split([(HEADER, b"bad")]) == (UNTRACKED, [], True)
    assert split(None) == (UNTRACKED, [], False)
    assert split({"trace": "y"}) == (UNTRACKED, [("trace", "y")], False)
    assert with_ids(None, UNTRACKED) == []


@given(st.lists(st.tuples(ids64, ids64), min_size=1, max_size=3, unique_by=lambda edge: edge[0]), st.booleans())
def test_split_decodes_the_lone_header_as_any_other(edges: list[tuple[int, int]], alone: bool) -> None:
    """A message whose only header is the anchor header takes a shorter path; the answer must not change."""
    raw = encode(TupleIds(tuple(edges)))
    headers = [(HEADER, raw)] if alone else [(HEADER, raw), ("trace", b"x")]
    assert split(headers) == (decode(raw), [] if alone else [("trace", b"x")], False)
    for bad in (bytes(16), bytes([5]) + bytes(15), bytes([5]) * 15):  # zero anchor, zero edge, wrong length
        assert split([(HEADER, bad)]) == (UNTRACKED, [], True)
    assert split([(HEADER, raw.decode("latin-1"))])[0] == decode(raw)  # a client that hands over text


def test_a_text_header_that_cannot_stand_for_bytes_is_invalid_not_a_crash() -> None:
    assert split([(HEADER, "\u20ac" * 16)]) == (UNTRACKED, [], True)


def test_two_anchor_headers_or_a_valid_and_an_invalid_one_make_an_unanchored_input_counted_as_invalid() -> None:
    """Neither header is taken over the other: the input is processed as unanchored and counted, as with one invalid
    header (it used to keep the last valid one, silently, and count an input it processed as anchored)."""
    first, second = struct.pack("<qq", 5, 7), struct.pack("<qq", 9, 11)
    for headers in (
        [(HEADER, first), (HEADER, second)],
        [(HEADER, first), (HEADER, b"junk")],
        [(HEADER, b"junk"), (HEADER, first)],
    ):
        ids, rest, invalid = split([*headers, ("other", b"x")])
        assert (ids.tracked, rest, invalid) == (False, [("other", b"x")], True)


class _Record:
    """A consumed record as the client gives it: ``headers()`` answers ``given``, or raises as confluent-kafka does on
    a header name that is not UTF-8, after which it answers a list with a hole (here: a marker)."""

    def __init__(self, given: object = None, *, unreadable: bool = False) -> None:
        self.given, self.unreadable = given, unreadable

    def headers(self) -> object:
        if self.unreadable:
            self.unreadable, self.given = False, [("<NULL>", b"v")]
            raise SystemError("<method 'headers'> returned a result with an exception set")
        return self.given

    def set_headers(self, headers: object) -> None:
        self.given = headers


def test_a_records_headers_are_read_once_and_unreadable_ones_are_none_then_empty() -> None:
    mine = [("a", b"1")]
    assert read_headers(_Record(mine)) is mine  # the client's own list, not a copy
    assert read_headers(_Record(None)) == []
    assert read_headers(_Record({"a": b"1"})) == [("a", b"1")]
    record = _Record(unreadable=True)
    assert read_headers(record) is None
    assert record.headers() == []  # not the list with the hole: a later reader cannot crash on it
