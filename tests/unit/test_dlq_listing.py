"""How `acker dlq redrive` names the records of a partial failure: each when they are few, runs when many (a
re-drive of 150,000 letters named every one of them in its error); and which letters `acker dlq list` calls copies."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from acker import dlq
from acker.config import ServiceConfig
from acker.dlq import DeadLetter, _listed, repeats
from acker.headers import HeaderList
from acker.retries import DETAIL, REASON


def test_a_few_records_are_named_each() -> None:
    assert _listed(["d/0/3", "d/0/4"]) == "['d/0/3', 'd/0/4']"
    assert _listed([]) == ""


def test_many_records_are_named_as_runs_of_one_partition_and_reason() -> None:
    delivered = ["d/1/8", "d/1/5", "d/1/7"] + [f"d/0/{i}" for i in range(1, 150_000, 2)]  # as reported: per target
    delivered += [f"d/0/{i}" for i in range(0, 150_000, 2)]  # partition, not in the letters' order
    assert _listed(delivered) == "150003 records: d/0/0 .. d/0/149999; d/1/5; d/1/7 .. d/1/8"
    refused = [f"d/0/{i}: too large" for i in range(25)] + ["d/0/25: refused", "d/0/26: too large"]
    assert _listed(refused) == "27 records: d/0/0 .. d/0/24: too large; d/0/25: refused; d/0/26: too large"


def _letter(offset: int, value: bytes, **headers: str) -> DeadLetter:
    return DeadLetter("dlq", 0, offset, 0, None, value, [(k.replace("_", "."), v.encode()) for k, v in headers.items()])


def test_a_copy_is_the_same_bytes_of_the_same_record_for_the_same_spout() -> None:
    """Told apart: outcome records refused in halves (one place, other bytes), two spouts' letters of one source
    record; a copy nacked for another reason the second time is a copy all the same."""
    acker_dlq = {"acker.dlq.topic": "acker", "acker.dlq.partition": "0", "acker.dlq.offset": "7"}
    letters = [
        _letter(0, b"bad", **acker_dlq),
        _letter(1, b"half", **acker_dlq),  # another record refused with the same coordinates
        _letter(2, b"bad", **acker_dlq),  # read again by the next owner
        _letter(3, b"r", acker_replay_origin="src/0/1", acker_replay_spout="a", acker_replay_reason="FAILED"),
        _letter(4, b"r", acker_replay_origin="src/0/1", acker_replay_spout="b", acker_replay_reason="FAILED"),
        _letter(5, b"r", acker_replay_origin="src/0/1", acker_replay_spout="a", acker_replay_reason="TIMEOUT"),
        _letter(6, b"bad"),  # written by hand: nothing says what it stands for
        _letter(7, b"bad"),
    ]
    assert repeats(letters) == {2: "dlq/0/0", 5: "dlq/0/3"}


def test_a_letters_origin_is_its_writers_not_one_in_the_record_it_keeps() -> None:
    """The acker's and a coordinated step's headers come first, then the record's own, which may be a dead letter's
    (one copied back by hand): its ``acker.dlq.origin`` was shown as the acker's letter's origin."""
    service: HeaderList = [("acker.dlq.reason", b"bad-magic"), ("acker.dlq.topic", b"acker"),
                           ("acker.dlq.partition", b"3"), ("acker.dlq.offset", b"120")]  # fmt: skip
    step: HeaderList = [("acker.dlq.reason", b"raised: x"), ("acker.dlq.origin", b"words/1/9")]
    kept: HeaderList = [("acker.dlq.origin", b"orders/0/5"), ("acker.dlq.topic", b"other"),
                        ("acker.dlq.partition", b"0"), ("acker.dlq.offset", b"1")]  # fmt: skip
    assert DeadLetter("d", 0, 1, 0, None, b"x", [*service, *kept]).origin == "acker/3/120"
    assert DeadLetter("d", 0, 2, 0, None, b"x", [*step, *kept]).origin == "words/1/9"
    assert DeadLetter("d", 0, 3, 0, None, b"x", service).origin == "acker/3/120"
    assert DeadLetter("d", 0, 4, 0, None, b"x", [("acker.dlq.reason", b"?")]).origin == "?"


def test_a_listing_shows_why_the_last_nack_failed_where_the_acker_gave_no_detail() -> None:
    replayed = DeadLetter("d", 0, 1, 0, None, b"r", [(DETAIL, b"bolt split: ValueError: x"), (REASON, b"FAILED")])
    assert replayed.summary()["detail"] == "bolt split: ValueError: x"
    rejected = DeadLetter("d", 0, 2, 0, None, b"x", [("acker.dlq.reason", b"undecodable"), ("acker.dlq.detail", b"d")])
    assert rejected.summary()["detail"] == "d"
    assert DeadLetter("d", 0, 3, 0, None, b"x", []).summary()["detail"] is None


def _stored(offset: int) -> Any:
    return SimpleNamespace(topic=lambda: "d", partition=lambda: 0, offset=lambda: offset, timestamp=lambda: (1, 5),
                           key=lambda: None, value=lambda: b"v", headers=lambda: [])  # fmt: skip


class _Partition:
    """A dead-letter partition as `AsWritten` reads it: letters at offsets 3..8, a marker at 9, its end 10."""

    def __enter__(self) -> _Partition:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def bounds(self, _tp: Any) -> tuple[int, int]:
        return 0, 10

    def read(self, start: Any, end: int) -> Any:
        return (_stored(o) for o in range(max(3, start.offset), min(9, end)))


@pytest.mark.parametrize(("newest", "shown", "unread"), [(None, 6, 0), (10, 6, 0), (4, 4, 2 + 2), (2, 2, 1 + 6)])
def test_a_listing_counts_the_letters_it_left_out_and_the_offsets_it_did_not_read(
    monkeypatch: pytest.MonkeyPatch, newest: int | None, shown: int, unread: int
) -> None:
    """Offsets before the first letter (an aborted transaction and its marker, which a committed read passes over)
    were counted as letters not shown: `dlq list --limit 0` said "up to 3 older record(s) not shown" after all.
    Read back to the first offset, the count is exact; else it counts the offsets not read, at most letters."""
    monkeypatch.setattr(dlq, "_partitions", lambda _c, _t: 1)
    monkeypatch.setattr(dlq, "_as_written", lambda _c: _Partition())
    found = dlq.read_newest(ServiceConfig(), "d", newest)
    assert found is not None and (len(found[0]), found[1]) == (shown, unread)
