"""The join example's function: an order is joined with its payment only, a copy of a held side is the same record,
and a side held until its tree may have expired is failed, never joined (a stand-in collector records the calls)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from acker.bolt import BoltInput
from acker.config import ServiceConfig
from acker.core.ids import IdGenerator
from acker.core.tracker import Tracker, TrackerConfig
from acker.core.tuple_tree import InputTuple, SpoutTree, TupleIds, anchored, trusted_ids
from acker.examples import join as join_module
from acker.examples import wordcount_cli
from acker.examples.join import SIDE, join_bolt

HOLD_S = 10.0


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.reasons: list[str] = []

    def emit(self, topic: str, value: bytes | None, key: bytes | None = None, *, anchors: Sequence[BoltInput]) -> None:
        self.calls.append(("emit", (json.loads(value or b""), [a.offset for a in anchors])))

    def ack(self, message: BoltInput) -> None:
        self.calls.append(("ack", message.offset))

    def fail(self, message: BoltInput, reason: str | None = None) -> None:
        assert reason and reason.startswith("join: ")  # each fail says why
        self.calls.append(("fail", message.offset))
        self.reasons.append(reason)


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


def test_copies_of_a_held_side_are_held_with_it_and_the_joined_message_is_anchored_to_every_one() -> None:
    """A replayed or re-read order must not pop its own original, and must not be acked at once: the original's tree
    may be decided already (its init nacked overload), and acked, the copy would leave the order's fate behind."""
    calls = run(message(0, b"order", ORDER), message(1, b"order", ORDER), message(2, b"payment", PAYMENT))
    joined = {"order": "o1", "amount": 30, "paid": 30}
    assert calls == [("emit", (joined, [0, 1, 2])), ("ack", 0), ("ack", 1), ("ack", 2)]


def test_a_copy_of_a_joined_side_is_joined_again_with_the_same_partner() -> None:
    """A side joined while its own tree was decided already is replayed; its copy must not wait for a partner that
    was used (it would time out at every attempt, then be dead-lettered)."""
    calls = run(message(0, b"order", ORDER), message(1, b"payment", PAYMENT), message(2, b"order", ORDER),
                message(3, b"payment", {"order": "o1", "paid": 99}))  # fmt: skip
    joined = {"order": "o1", "amount": 30, "paid": 30}
    assert calls == [
        ("emit", (joined, [0, 1])),
        ("ack", 0),
        ("ack", 1),
        ("emit", (joined, [2])),
        ("ack", 2),
        ("fail", 3),
    ]


def test_a_joined_pair_is_forgotten_after_remember_s() -> None:
    join, collector = join_bolt("paid", hold_s=HOLD_S, remember_s=0.0), Recorder()
    for m in (message(0, b"order", ORDER), message(1, b"payment", PAYMENT), message(2, b"order", ORDER)):
        join(m, collector)
    assert [name for name, _ in collector.calls] == ["emit", "ack", "ack"]  # the second order held, waiting


def test_each_source_record_gets_the_fate_of_its_join_when_a_held_trees_init_was_nacked_overload() -> None:
    """Through the reference tracker (high water 1), replays by hand: an order's first tree is nacked overload while
    its message is held by the join, then its replayed copy comes, then an underpaid payment. The order must be
    nacked failed: before, the copy was acked at once ("the held copy carries it") and the order taken as done. And
    a replay of a side joined already is joined again (before, it waited for a partner used already)."""
    ids, tracker = IdGenerator(1), Tracker(TrackerConfig(high_water=1))
    outcomes: list[tuple[str, str]] = []
    checks: list[tuple[dict[str, Any], TupleIds]] = []

    def decide(messages: list[Any]) -> None:
        outcomes.extend((o.msg_id, getattr(o, "reason", "ack")) for o in tracker.handle_all(messages))

    class Collector:
        def emit(
            self, topic: str, value: bytes | None, key: bytes | None = None, *, anchors: Sequence[BoltInput]
        ) -> None:
            checks.append((json.loads(value or b""), anchored([a.tuple for a in anchors])))

        def ack(self, m: BoltInput) -> None:
            decide(m.tuple.ack())

        def fail(self, m: BoltInput, reason: str | None = None) -> None:
            decide(m.tuple.fail())

    join = join_bolt("paid", hold_s=HOLD_S)

    def spout(msg_id: str, row: dict[str, Any], side: bytes) -> None:
        tree = SpoutTree("s", msg_id, ids)
        root = tree.emit()
        decide([tree.init()])
        join(BoltInput(json.dumps(row).encode(), row["order"].encode(), [(SIDE, side)], "to-join", 0, 0,
                       InputTuple(root, ids), int(time.time() * 1000)), Collector())  # fmt: skip
        while checks:  # the check bolt: an underpaid order fails the joined message
            paid, child = checks.pop(0)
            check = InputTuple(child, ids)
            decide(check.fail() if paid["paid"] < paid["amount"] else check.ack())

    spout("payments/0/0", {"order": "o8", "paid": 30}, b"payment")  # held: the one pending tree
    spout("orders/0/0", {"order": "o9", "amount": 50}, b"order")  # its init nacked overload; held all the same
    spout("orders/0/1", {"order": "o8", "amount": 30}, b"order")  # overload too; joined with o8's payment
    spout("orders.replay/0/0", {"order": "o9", "amount": 50}, b"order")  # o9's replayed copy, the original held
    spout("payments/0/1", {"order": "o9", "paid": 10}, b"payment")  # overload; underpaid: the check fails it
    spout("payments.replay/0/1", {"order": "o9", "paid": 10}, b"payment")  # its replay: joined again, failed
    spout("orders.replay/0/1", {"order": "o8", "amount": 30}, b"order")  # o8's replay: joined again, acked
    assert outcomes == [
        ("orders/0/0", "overload"),
        ("orders/0/1", "overload"),
        ("payments/0/0", "ack"),
        ("payments/0/1", "overload"),
        ("orders.replay/0/0", "failed"),
        ("payments.replay/0/1", "failed"),
        ("orders.replay/0/1", "ack"),
    ]
    assert tracker.pending == 0


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
    # Old on arrival, with its partner held fresh (a join behind its input): failed, never joined (the pair's fates
    # would part: the payment acked, the order nacked timeout).
    calls = run(message(0, b"payment", PAYMENT), message(1, b"order", ORDER, age_s=HOLD_S + 1))
    assert calls == [("fail", 1)]


def test_a_message_without_a_side_is_failed() -> None:
    assert run(message(0, None, ORDER), message(1, b"refund", ORDER)) == [("fail", 0), ("fail", 1)]


def test_a_side_too_old_on_arrival_and_a_message_that_is_no_side_are_failed_for_reasons_of_their_own() -> None:
    """One reason said both: 1,292 sides failed on arrival after a gap with no join reading read as malformed."""
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    join(message(0, b"refund", ORDER), collector)
    join(message(1, b"order", ORDER, age_s=HOLD_S + 1), collector)
    assert collector.calls == [("fail", 0), ("fail", 1)]
    assert collector.reasons == [
        "join: not a side of an order (its 'side' header is neither order nor payment)",
        "join: came too late to be held for its partner (written more than hold_s ago)",
    ]


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


def test_sides_held_from_a_revoked_partition_are_failed_and_the_others_kept() -> None:
    """Its partner goes to the partition's new owner: held here, the side waited for it until its tree timed out."""
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    here = message(0, b"order", ORDER)
    moving = replace(message(1, b"order", {"order": "o2", "amount": 5}), partition=1)
    for m in (here, moving):
        join(m, collector)
    join.revoked({("to-join", 1), ("elsewhere", 0)}, collector)
    assert collector.calls == [("fail", 1)]
    join(message(2, b"payment", PAYMENT), collector)  # the side kept is joined as before
    joined = {"order": "o1", "amount": 30, "paid": 30}
    assert collector.calls[1:] == [("emit", (joined, [0, 2])), ("ack", 0), ("ack", 2)]
    join(replace(message(3, b"payment", {"order": "o2", "paid": 5}), partition=1), collector)
    assert len(collector.calls) == 4 and join.waiting[(b"o2", b"payment")][0].offset == 3  # never with the failed side


def test_a_side_stamped_by_a_clock_ahead_does_not_keep_the_others_from_being_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """First in arrival order, a side stamped an hour ahead was fresh for that hour, and the housekeeping, which stops
    at the first side still fresh, failed no other side held meanwhile (their trees timed out instead)."""
    clock = [1_000.0]
    monkeypatch.setattr(join_module, "time", SimpleNamespace(time=lambda: clock[0]))
    ahead = replace(message(0, b"order", ORDER), timestamp_ms=int((clock[0] + 3600) * 1000))
    other = replace(message(1, b"order", {"order": "o2", "amount": 5}), timestamp_ms=int(clock[0] * 1000))
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    join(ahead, collector)
    join(other, collector)
    clock[0] += HOLD_S + 1
    join(replace(message(2, b"order", {"order": "o3", "amount": 5}), timestamp_ms=int(clock[0] * 1000)), collector)
    assert collector.calls == [("fail", 0), ("fail", 1)]


def test_a_side_that_cannot_be_joined_is_failed_on_arrival_and_its_partner_stays_held() -> None:
    """A payment that is JSON but not an object (written by another producer than the example's spouts) raised at the
    merge, failing itself as it should; but held first, such a side failed each arriving partner instead (with its
    own error: every attempt of the good side until it was dead-lettered), and itself only after ``hold_s``, as
    "held too long". Messages without a key, or keyed other than their order, were joined with a stranger."""
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    join(message(0, b"order", ORDER), collector)
    join(replace(message(1, b"payment", PAYMENT), value=b'["o1", 30]'), collector)
    assert collector.calls == [("fail", 1)] and (b"o1", b"order") in join.waiting and b"o1" not in join.joined
    join(message(2, b"payment", PAYMENT), collector)
    assert collector.calls[1:] == [("emit", ({"order": "o1", "amount": 30, "paid": 30}, [0, 2])), ("ack", 0),
                                   ("ack", 2)]  # fmt: skip
    bad = [b'["o2", 5]', b"{", b"\xff", b"[" * 100_000, json.dumps({"order": "o9", "amount": 5}).encode()]
    calls = run(*(replace(message(i, b"order", {"order": "o2"}), value=value) for i, value in enumerate(bad)),
                replace(message(8, b"order", {"order": "o3", "amount": 5}), key=None),
                message(9, b"payment", {"order": "o2", "paid": 5}))  # fmt: skip
    assert calls == [("fail", i) for i in (*range(len(bad)), 8)]  # held, none of them: the payment waits


class Refusing(Recorder):
    """A collector whose first emit raises, as the bolt's does for a joined message it cannot send."""

    def emit(self, topic: str, value: bytes | None, key: bytes | None = None, *, anchors: Sequence[BoltInput]) -> None:
        if not any(call[0] == "refused" for call in self.calls):
            self.calls.append(("refused", [a.offset for a in anchors]))
            raise ValueError("refused")
        super().emit(topic, value, key, anchors=anchors)


def test_a_joined_message_the_emit_refuses_fails_its_input_only_and_its_partner_stays_held() -> None:
    """The order was taken off the held sides before the emit raised: settled by nobody, its tree timed out (30 s),
    where the payment's replay could join it at once."""
    join, collector = join_bolt("paid", hold_s=HOLD_S), Refusing()
    join(message(0, b"order", ORDER), collector)
    with pytest.raises(ValueError, match="refused"):
        join(message(1, b"payment", PAYMENT), collector)
    assert (b"o1", b"order") in join.waiting and b"o1" not in join.joined
    join(message(2, b"payment", PAYMENT), collector)  # the payment's replay
    assert collector.calls == [("refused", [0, 1]), ("emit", ({"order": "o1", "amount": 30, "paid": 30}, [0, 2])),
                               ("ack", 0), ("ack", 2)]  # fmt: skip


def test_a_side_held_too_long_is_failed_at_a_tick_while_no_message_comes() -> None:
    """On a quiet input the housekeeping at each message never ran: the side waited until its tree timed out at the
    acker, nacked ``timeout`` without a reason. The bolt's tick fails it once held ``hold_s``, saying why."""
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    join(message(0, b"order", ORDER, age_s=HOLD_S - 1), collector)
    join(message(1, b"order", {"order": "o2", "amount": 5}), collector)
    join.tick(collector)
    assert collector.calls == []  # fresh, both
    held = join.waiting[(b"o1", b"order")]
    held[0] = replace(held[0], timestamp_ms=(held[0].timestamp_ms or 0) - 1000)  # one second later, for the first
    join.tick(collector)
    assert collector.calls == [("fail", 0)] and list(join.waiting) == [(b"o2", b"order")]


def test_a_side_that_arrived_after_a_fresher_one_is_failed_at_the_tick_all_the_same() -> None:
    """Arrival order is not the order of the spouts' timestamps (a partition or a spout behind the others): the
    housekeeping at each message stops at the first side still fresh, and the tick must not, or the older side
    behind it waits until its tree times out."""
    join, collector = join_bolt("paid", hold_s=HOLD_S), Recorder()
    join(message(0, b"order", {"order": "fresh", "amount": 1}), collector)
    join(message(1, b"order", {"order": "old", "amount": 1}, age_s=HOLD_S / 2), collector)  # written before
    for copies in join.waiting.values():  # HOLD_S / 2 + 1 s later
        copies[0] = replace(copies[0], timestamp_ms=(copies[0].timestamp_ms or 0) - int((HOLD_S / 2 + 1) * 1000))
    join.tick(collector)
    assert collector.calls == [("fail", 1)] and list(join.waiting) == [(b"fresh", b"order")]


class _Refusing:
    """A producer at the edge that refuses every record (a topic it may not write, say)."""

    def __init__(self, _settings: dict[str, Any]) -> None:
        self.reports: list[Any] = []

    def produce(self, topic: str, value: bytes, on_delivery: Any, **kwargs: Any) -> None:
        record = SimpleNamespace(
            topic=lambda: topic, partition=lambda: kwargs.get("partition", -1), offset=lambda: -1001
        )
        self.reports.append((on_delivery, record))

    def flush(self, _timeout: float) -> int:
        for on_delivery, record in self.reports:
            on_delivery(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), record)
        return 0


def test_rows_the_broker_refuses_are_an_error_not_ids_whose_outcomes_never_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each refused row was taken for written, under one id (``orders/0/-1001``): the run waited its 60 s and said
    "(none yet)" of outcomes that could not come."""
    monkeypatch.setattr(wordcount_cli, "Producer", _Refusing)
    with pytest.raises(KafkaException):
        join_module._write(ServiceConfig(), "orders", [{"order": 1}, {"order": 2}])


def test_an_empty_bootstrap_servers_is_refused_before_any_broker_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--bootstrap-servers ""`` is a usage error (exit 2), not "start a local broker"."""
    started: list[object] = []
    monkeypatch.setattr(join_module, "kafka_cluster", lambda *a, **k: started.append(a))
    monkeypatch.setattr("sys.argv", ["join", "--bootstrap-servers", " "])
    with pytest.raises(SystemExit) as stopped:
        join_module.main()
    assert stopped.value.code == 2
    assert "--bootstrap-servers is empty" in capsys.readouterr().err
    assert started == []
