"""A dead letter's copy of a record too large for its topic (`acker.dlq.cut_copy`), and how a letter's bytes are
shown (`acker.dlq.preview`)."""

from __future__ import annotations

from acker.dlq import DLQ_KEY_TRUNCATED, DLQ_TRUNCATED, cut_copy, preview


def test_only_what_is_longer_than_kept_is_cut_and_each_cut_part_says_its_whole_length() -> None:
    assert cut_copy(b"v" * 10, b"k" * 4, 4) == (b"v" * 4, b"k" * 4, [(DLQ_TRUNCATED, b"10")])  # a key of 4: whole
    assert cut_copy(b"v" * 4, b"k" * 9, 4) == (b"v" * 4, b"k" * 4, [(DLQ_KEY_TRUNCATED, b"9")])
    assert cut_copy(b"v" * 5, b"k" * 6, 4) == (b"vvvv", b"kkkk", [(DLQ_TRUNCATED, b"5"), (DLQ_KEY_TRUNCATED, b"6")])
    assert cut_copy(None, None, 4) == (None, None, [])  # a tombstone, no key: none made up
    assert cut_copy(b"", b"", 0) == (b"", b"", [])


def test_a_preview_is_text_cut_to_its_limit_or_whole_at_limit_0() -> None:
    assert preview(b"x" * 5, limit=5) == "xxxxx"  # at the limit: whole
    assert preview(b"x" * 6, limit=5) == "xxxx…"  # one over: the limit's characters, the ellipsis one of them
    assert preview(b"x" * 500, limit=0) == "x" * 500
    assert preview(None) is None


def test_a_preview_shows_bytes_that_are_not_utf8_as_hex_and_escapes_what_a_terminal_acts_on() -> None:
    assert preview(b"\xff\x00") == "0xff00"
    assert preview(b"a\x1b[2Jb\n") == "a\\x1b[2Jb\\n"


def test_a_preview_of_empty_bytes_is_empty_text_and_hex_is_cut_to_the_limit_as_text_is() -> None:
    """An empty key or value is shown as one, not as missing (a tombstone's None); bytes shown as hex are cut as text
    is; the default limit is 200 characters."""
    assert preview(b"") == ""
    assert preview(b"\xff" * 300, limit=7) == "0xffff…"
    assert preview(b"x" * 201) == "x" * 199 + "…"
    assert preview(b"x" * 200) == "x" * 200
