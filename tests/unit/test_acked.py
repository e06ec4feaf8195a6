"""`acker.acked.Acked.holds`: whether a dead letter is of the record now at its origin's place."""

from __future__ import annotations

from acker.acked import CLOCK_SKEW_S, Acked

WRITTEN_MS = 1_700_000_000_000
FOUND = Acked(written={"t/0/4": WRITTEN_MS}, values={"t/0/4": b"v"})


def test_a_letter_written_after_its_record_with_its_value_holds_it() -> None:
    assert FOUND.holds("t/0/4", WRITTEN_MS + 60_000, b"v")
    assert FOUND.holds("t/0/4", WRITTEN_MS - int(CLOCK_SKEW_S * 1000), b"v")  # hosts' clocks differ


def test_a_letter_older_than_the_record_or_of_another_value_is_of_a_record_once_there() -> None:
    assert not FOUND.holds("t/0/4", WRITTEN_MS - int(CLOCK_SKEW_S * 1000) - 1, b"v")
    assert not FOUND.holds("t/0/4", WRITTEN_MS + 1, b"w")
    assert not FOUND.holds("t/0/4", WRITTEN_MS + 1, None)


def test_a_record_not_known_is_held_by_no_letter() -> None:
    assert not FOUND.holds("t/0/5", WRITTEN_MS + 1, b"v")
