"""A re-drive of every dead letter sends one letter per record (`acker.dlq.those_that_can_go_back`): the same record
dead-lettered twice (read again after a restart) was re-driven twice, and replayed twice. Kafka's answers at the
edge: the replay topic exists, and `in_flight` says which letters have a copy in it."""

from __future__ import annotations

from typing import Any

import pytest

from acker import dlq
from acker.config import ServiceConfig
from acker.dlq import COPY, IN_FLIGHT, DeadLetter, DlqError, refuse_copies, those_that_can_go_back
from acker.headers import HeaderList
from acker.retries import ATTEMPT, LAST, ORIGIN, REASON, REDRIVEN, SPOUT


def _letter(offset: int, last: str = "acker.replay.src/1/7", **extra: str) -> DeadLetter:
    headers: HeaderList = [(ATTEMPT, b"3"), (ORIGIN, b"src/1/42"), (REASON, b"FAILED"), (SPOUT, b"src")]
    headers.append((LAST, last.encode()))
    headers += [(name, value.encode()) for name, value in extra.items()]
    return DeadLetter("acker.replay.dlq", 0, offset, 1_000 + offset, b"k", b"value", headers)


@pytest.fixture
def flying(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The letters `in_flight` finds a copy of in their replay topic (none unless a test adds some)."""
    found: set[str] = set()

    def in_flight(_config: Any, letters: list[DeadLetter], *_: Any) -> dict[str, str]:
        return {letter.coordinates: "acker.replay.src/1/99" for letter in letters if letter.coordinates in found}

    monkeypatch.setattr(dlq, "_target_counts", lambda _c, ds: ({d.topic: 4 for d in ds}, []))
    monkeypatch.setattr(dlq, "in_flight", in_flight)
    return found


def _going(letters: list[DeadLetter]) -> tuple[list[str], dict[str, int]]:
    kept, decisions, refused = those_that_can_go_back(ServiceConfig(), letters)
    assert len(kept) == len(decisions)
    return [letter.coordinates for letter in kept], dict(refused)


def test_a_record_dead_lettered_twice_goes_back_once(flying: set[str]) -> None:
    other = _letter(12, last="acker.replay.src/1/8")  # the same record's later round: not a copy
    assert _going([_letter(10), _letter(11), other]) == (["acker.replay.dlq/0/10", "acker.replay.dlq/0/12"], {COPY: 1})


def test_a_record_whose_copy_was_re_driven_by_name_does_not_go_back_again(flying: set[str]) -> None:
    flying.add("acker.replay.dlq/0/11")  # `dlq redrive 0/11` before: its copy is in the replay topic
    assert _going([_letter(10), _letter(11)]) == ([], {COPY: 1, IN_FLIGHT: 1})


def test_a_record_whose_copy_was_dead_lettered_again_goes_back_by_its_later_letter(flying: set[str]) -> None:
    later = _letter(12, last="acker.replay.src/1/9", **{REDRIVEN: "acker.replay.dlq/0/11"})
    kept, refused = _going([_letter(10), _letter(11), later])
    assert kept == ["acker.replay.dlq/0/12"] and refused[COPY] == 1 and sum(refused.values()) == 2


def test_naming_two_letters_of_one_record_is_refused() -> None:
    refuse_copies([_letter(10), _letter(12, last="acker.replay.src/1/8")])  # two rounds: both may go
    with pytest.raises(DlqError, match=r"acker.replay.dlq/0/11 \(a copy of acker.replay.dlq/0/10\)"):
        refuse_copies([_letter(10), _letter(11)])


def test_a_letter_named_after_its_copy_went_back_is_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--all` sent the record's first letter; its copy, named later, was not found in flight (the copy in the
    replay topic names the first letter), and the record started a second round. Another spout's letter of the same
    source record is another record: it goes back."""
    first, named, other_spout = _letter(10), _letter(11), _letter(12)
    other_spout.headers[3] = (SPOUT, b"other")
    copy: HeaderList = [(ORIGIN, b"src/1/42"), (SPOUT, b"src"), (REDRIVEN, first.coordinates.encode())]

    def headers_since(_config: Any, topic: str, _since: int) -> Any:
        if topic == "acker.replay.dlq":  # the dead letters, headers alone
            return iter([(letter.coordinates, letter.headers) for letter in (first, named, other_spout)])
        return iter([(f"{topic}/1/99", copy)])

    monkeypatch.setattr(dlq, "_replay_topics", lambda _config: {"acker.replay.src", "acker.replay.other"})
    monkeypatch.setattr(dlq, "_headers_since", headers_since)
    config = ServiceConfig()
    with pytest.raises(DlqError, match=r"acker\.replay\.dlq/0/11 \(copy at acker\.replay\.\w+/1/99\)"):
        dlq.refuse_in_flight(config, "acker.replay.dlq", [named], dlq.plan(config, [named]))
    dlq.refuse_in_flight(config, "acker.replay.dlq", [other_spout], dlq.plan(config, [other_spout]))
    ended = {first.coordinates: "src/1/42"}  # that round over: a later dead letter names the first letter
    copies = {first.coordinates: named.coordinates}
    assert dlq.in_flight(config, [named], dlq.plan(config, [named]), ended, copies) == {}
