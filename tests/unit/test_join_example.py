"""The join example's function: an order is joined with its payment only, a copy of a held side is the same record,
and a side held until its tree may have expired is failed, never joined (a stand-in collector records the calls)."""

from __future__ import annotations

import json
import time
from typing import Any

from acker.bolt import BoltInput
from acker.core.ids import IdGenerator
from acker.core.tuple_tree import InputTuple, trusted_ids
from acker.examples.join import SIDE, join_bolt

HOLD_S = 10.0


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def emit(self, topic: str, value: bytes, key: bytes | None = None, anchors: Any = ()) -> None:
        self.calls.append(("emit", (json.loads(value), [a.offset for a in anchors])))

    def ack(self, message: BoltInput) -> None:
        self.calls.append(("ack", message.offset))

    def fail(self, message: BoltInput) -> None:
        self.calls.append(("fail", message.offset))


def message(offset: int, side: bytes | None, row: dict[str, Any], age_s: float = 0.0) -> BoltInput:
    headers: list[tuple[str, str | bytes | None]] = [] if side is None else [(SIDE, side)]
    ids = InputTuple(trusted_ids(((offset + 1, 7),)), IdGenerator(offset))
    written_ms = int((time.time() - age_s) * 1000)
    return BoltInput(json.dumps(row).encode(), row["order"].encode(), headers, "to-join", 0, offset, ids, written_ms)


ORDER = {"order": "o1", "amount": 30}
PAYMENT = {"order": "o1", "paid": 30}


def run(*messages: BoltInput) -> list[tuple[str, Any]]:
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    for m in messages:
        join(m, collector)
    return collector.calls


def test_an_order_is_joined_with_its_payment_and_both_are_acked() -> None:
    assert run(message(0, b"order", ORDER), message(1, b"payment", PAYMENT)) == [
        ("emit", ({"order": "o1", "amount": 30, "paid": 30}, [0, 1])),
        ("ack", 0),
        ("ack", 1),
    ]


def test_a_copy_of_a_held_side_is_acked_and_never_joined_with_it() -> None:
    """A replayed or re-read order must not pop its own original: the held copy carries the record, and the
    payment is joined with it."""
    calls = run(message(0, b"order", ORDER), message(1, b"order", ORDER), message(2, b"payment", PAYMENT))
    assert calls == [("ack", 1), ("emit", ({"order": "o1", "amount": 30, "paid": 30}, [0, 2])), ("ack", 0), ("ack", 2)]


def test_another_record_under_the_same_order_and_side_is_failed() -> None:
    calls = run(message(0, b"order", ORDER), message(1, b"order", {"order": "o1", "amount": 99}))
    assert calls == [("fail", 1)]


def test_a_side_held_until_its_tree_may_have_expired_is_failed_not_joined() -> None:
    """Joined, the payment would be acked while the order is nacked timeout, and the order's replay would then wait
    for a payment used already, at every attempt."""
    calls = run(message(0, b"order", ORDER, age_s=HOLD_S + 1), message(1, b"payment", PAYMENT))
    assert calls == [("fail", 0)]  # failed as too old on arrival; the payment waits for the order's replay
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    old = message(0, b"order", ORDER)
    join(old, collector)
    old.timestamp_ms = int((time.time() - HOLD_S - 1) * 1000)  # time passes while it is held
    join(message(1, b"payment", {"order": "o2", "paid": 5}), collector)
    join(message(2, b"payment", PAYMENT), collector)
    assert collector.calls == [("fail", 0)]  # failed and forgotten at the next message; o1's payment is held


def test_a_message_without_a_side_is_failed() -> None:
    assert run(message(0, None, ORDER), message(1, b"refund", ORDER)) == [("fail", 0), ("fail", 1)]


def test_a_stale_side_behind_a_fresh_one_is_failed_when_its_copy_arrives_not_taken_for_it() -> None:
    """Arrival order is not timestamp order: an expired held order behind a fresher one outlived the housekeeping,
    and its replayed copy was acked as "carried" by it; the order then never met its payment."""
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    join(message(0, b"order", {"order": "x", "amount": 1}), collector)  # fresh, first in arrival order
    stale = message(1, b"order", ORDER, age_s=HOLD_S - 3)
    join(stale, collector)
    stale.timestamp_ms = int((time.time() - HOLD_S - 1) * 1000)  # its tree may have expired since
    join(message(2, b"order", ORDER), collector)  # its replayed copy
    join(message(3, b"payment", PAYMENT), collector)
    assert collector.calls == [
        ("fail", 1),
        ("emit", ({"order": "o1", "amount": 30, "paid": 30}, [2, 3])),
        ("ack", 2),
        ("ack", 3),
    ]
