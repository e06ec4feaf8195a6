"""`acker.fail_reasons`: the reason a fail gives, carried in headers beside the protocol. Bounded, and never an
error: a header that cannot be read is no reason at all."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acker.fail_reasons import (
    HEADER_MAX_BYTES,
    KEPT,
    PER_RECORD,
    READ_MAX_BYTES,
    REASON_MAX_CHARS,
    Kept,
    by_anchor,
    cut,
    decode,
    encode,
    fits,
    reason_of,
)

int64s = st.integers(-(2**63), 2**63 - 1).filter(bool)


@given(st.dictionaries(int64s, st.text(st.characters(codec="utf-8"), max_size=50), max_size=PER_RECORD))
def test_reasons_by_anchor_read_back_as_written(reasons: dict[int, str]) -> None:
    assert by_anchor(encode(reasons)) == reasons


@given(st.dictionaries(int64s, st.text(st.characters(exclude_categories=()), max_size=REASON_MAX_CHARS)))
def test_any_text_can_be_a_reason_within_the_bounds(reasons: dict[int, str]) -> None:
    """Lone surrogates (an exception's message made of undecodable bytes) included: an encode that raised would
    lose the batch it was to go with and stop the stage, at every replay of the record."""
    raw = encode(reasons)
    assert raw is None or len(raw) <= HEADER_MAX_BYTES
    assert set(by_anchor(raw)) <= set(reasons)


def test_a_header_is_json_that_standard_tools_show() -> None:
    raw = encode({-5: "bolt count: KeyError: 'é'"})
    assert raw is not None and json.loads(raw) == {"-5": "bolt count: KeyError: 'é'"}
    assert encode({}) is None  # no header without a reason
    assert encode({1: "\ud800 bad"}) == b'{"1": "\\\\ud800 bad"}'  # a lone surrogate, escaped


def _large() -> bytes:
    return json.dumps({str(i): "x" * 400 for i in range(1, READ_MAX_BYTES // 400 + 2)}).encode()


def test_what_cannot_be_read_is_no_reason() -> None:
    """Never an error: the service reads headers any producer may write, and must not stop on one."""
    for raw in (None, b"", b'{"1": "\xff"}', b"not json", b"[1, 2]", b'"text"', b"{", b"[" * 100_000, _large()):
        assert decode(raw) == {} and by_anchor(raw) == {}
    escaped = decode(b'{"5": "\\ud800 bad"}')  # valid JSON naming a lone surrogate: made text a header can carry
    assert escaped == {"5": "\\ud800 bad"} and escaped["5"].encode()
    mixed = json.dumps({"1": "ok", "2": 3, "x": "not an anchor", "0": "no tree", str(2**63): "past int64"})
    assert by_anchor(mixed.encode()) == {1: "ok"}
    assert decode(mixed.encode()) == {"1": "ok", "x": "not an anchor", "0": "no tree", str(2**63): "past int64"}


def test_a_header_from_another_writer_is_read_within_our_bounds_and_by_decimal_anchors() -> None:
    """5,000 short reasons in one header (50 KB, within `READ_MAX_BYTES`) pushed out every reason a partition kept
    for trees not decided yet; and keys ``int`` takes but no writer writes gave a reason to another tree."""
    flood = json.dumps({str(i): "" for i in range(1000, 6000)}).encode()
    assert len(flood) < READ_MAX_BYTES and len(decode(flood)) == len(by_anchor(flood)) == PER_RECORD
    kept = Kept()
    kept.add({7: "bolt x: ValueError: boom"})
    kept.add(by_anchor(flood))
    assert kept.take([7]) == {7: "bolt x: ValueError: boom"}
    loose = {" 7": "a", "+9": "b", "1_0": "c", "\u0661\u0662": "d", "-3": "e", "12": "f"}
    assert by_anchor(json.dumps(loose).encode()) == {-3: "e", 12: "f"}


def test_reasons_are_bounded_in_length_in_number_and_in_bytes() -> None:
    long = "x" * (REASON_MAX_CHARS * 3)
    assert len(cut(long)) == REASON_MAX_CHARS and cut("short") == "short"
    raw = encode(dict.fromkeys(range(1, PER_RECORD * 2), long))
    assert raw is not None and len(raw) <= HEADER_MAX_BYTES
    read = by_anchor(raw)
    assert list(read) == list(range(1, len(read) + 1)) and len(read) >= 30  # the first ones, within the bytes
    assert all(len(r) == REASON_MAX_CHARS for r in read.values())
    assert len(by_anchor(encode(dict.fromkeys(range(1, PER_RECORD * 2), "short")))) == PER_RECORD
    assert len(decode(json.dumps({"1": long}).encode())["1"]) == REASON_MAX_CHARS  # a writer that did not cut


def test_the_reason_of_an_exception_names_where_and_what() -> None:
    assert reason_of(ValueError("bad word"), "bolt split") == "bolt split: ValueError: bad word"
    assert reason_of(KeyError()) == "KeyError"
    assert len(reason_of(RuntimeError("y" * 10_000))) == REASON_MAX_CHARS


class _NoMessageError(Exception):
    def __str__(self) -> str:
        raise LookupError("a field the input lacks")


def test_the_reason_of_an_exception_whose_message_cannot_be_made_names_its_type_and_why() -> None:
    """Made in the handler of a user function's exception: raising there would stop the stage instead of failing."""
    reason = reason_of(_NoMessageError(), "spout s")
    assert reason == "spout s: _NoMessageError: <its message could not be made: LookupError>"


def test_a_partition_keeps_the_first_reasons_of_the_newest_trees_and_hands_each_over_once() -> None:
    kept = Kept()
    kept.add({anchor: f"r{anchor}" for anchor in range(1, KEPT + 11)})
    assert len(kept) == KEPT
    assert kept.take([1, 10, 11, KEPT + 10]) == {11: "r11", KEPT + 10: f"r{KEPT + 10}"}  # the 10 oldest forgotten
    assert kept.take([11]) == {}  # taken once
    kept.add({12: "again"})  # a second fail of a tree: its first decided it
    assert kept.take([12]) == {12: "r12"}
    assert Kept().take([1]) == {}


@pytest.mark.parametrize("width", [140, 153, 160, 175])
def test_a_header_holds_as_many_reasons_as_its_bytes_allow_and_never_more(width: int) -> None:
    """Each entry was taken to add one byte for its separator, which is two (", "): 100 reasons of 153 characters
    made a header of 16,400 bytes."""
    reasons = dict.fromkeys(range(100, 100 + PER_RECORD), "x" * width)
    raw = encode(reasons)
    assert raw is not None and len(raw) <= HEADER_MAX_BYTES
    kept = len(by_anchor(raw))
    if kept < len(reasons):  # the next one would not have fitted
        assert len(json.dumps({str(k): v for k, v in list(reasons.items())[: kept + 1]})) > HEADER_MAX_BYTES


def test_fits_says_whether_one_header_holds_every_reason() -> None:
    """Writers cut their records by it: `encode` keeps the first `PER_RECORD` reasons within `HEADER_MAX_BYTES`."""
    short = {str(i): "bolt b: ValueError: x" for i in range(PER_RECORD)}
    assert fits(short) and fits({}) and decode(encode(short)) == short
    assert not fits({**short, "more": "bolt b: ValueError: x"})
    long = {str(i): "é\x01" * REASON_MAX_CHARS for i in range(20)}  # 8 bytes a pair: é, then \u0001 escaped
    assert not fits(long) and len(decode(encode(long))) < len(long)
    assert fits(decode(encode(long)))  # what the header kept
    one = {"t" * 249 + "/2147483647/9223372036854775807": "\x01" * REASON_MAX_CHARS}
    assert fits(one)  # a record of one fail is never cut
