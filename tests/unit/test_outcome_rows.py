"""`acker outcomes`' reading of an outcome record, at its edge: who decided each row, and a FAILED's reason."""

from __future__ import annotations

from confluent_kafka import Message

from acker import fail_reasons
from acker.outcomes_cli import _rows, _Unreadable, rows_of
from acker.wire import encode_outcome_rows


def _record(value: bytes, headers: list[tuple[str, str | bytes | None]] | None = None, offset: int = 7) -> Message:
    return Message(topic="o", partition=1, offset=offset, value=value, headers=headers, timestamp=(1, 1_700_000_000_5))


def test_each_row_says_who_decided_it_and_a_failed_one_why() -> None:
    rows = [("ACK", 11, "src/0/1", 5), ("FAILED", 12, "src/0/2", 9), ("FAILED", 13, "src/0/3", 4)]
    why = fail_reasons.as_headers({"src/0/2": "bolt split: ValueError: x"})["headers"]
    acker = rows_of(_record(encode_outcome_rows("s", rows, acker_partition=3, acker_offset=40), why))
    assert [(r.msg_id, r.outcome, r.latency_ms, r.decided_by, r.reason) for r in acker] == [
        ("src/0/1", "ACK", 5, "acker 3", None),
        ("src/0/2", "FAILED", 9, "acker 3", "bolt split: ValueError: x"),
        ("src/0/3", "FAILED", 4, "acker 3", None),  # its stage said nothing
    ]
    assert (acker[0].place, acker[0].time_ms, acker[0].replay_of) == ("1/7", 1_700_000_000_5, None)
    own = rows_of(_record(encode_outcome_rows("s", [("FAILED", 14, "src/0/4", 0)])))  # the spout's: an init lost
    resolved = rows_of(
        _record(encode_outcome_rows("s", [("REPLAYED", 0, "src/0/2", 0), ("DEAD_LETTERED", 0, "r/0/1", 0)]))
    )
    assert [r.decided_by for r in own + resolved] == ["spout", "replay job", "replay job"]


def test_a_record_that_is_not_an_outcome_record_is_counted_where_it_lies_and_the_others_read() -> None:
    unreadable = _Unreadable()
    records = [
        _record(b"not ours", offset=3),
        _record(encode_outcome_rows("s", [("ACK", 1, "t/0/1", 0)])),
        _record(b""),
    ]
    rows = _rows(records, unreadable, {"t/0/1": None})
    assert [r.msg_id for r in rows] == ["t/0/1"] and unreadable.count == 2
    assert unreadable.first.startswith("1/3: ")
