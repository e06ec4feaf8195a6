"""A join that multi-anchors: orders and payments, matched by order id, each side its own spout.

    <prefix>.orders   --spout "orders"-->    \\
                                               <prefix>.to-join (key: order) --join--> <prefix>.paid --check
    <prefix>.payments --spout "payments"-->  /

The join bolt (explicit API) holds the first message of an order until the other side arrives, then emits one
"paid" message anchored to *both* inputs and acks both. The joined message is in two trees at once, so its fate is
both source records' fate: the check bolt fails a payment that does not cover the order, and both the order and
the payment are nacked ``failed`` (and would be replayed). A side whose partner never comes is never acked: the join
fails it once it has waited ``hold_s`` (below), saying so ("held too long for its partner"), which is how it tells
"nothing matched in time" (Storm's SingleJoinBolt lets such a tree time out, without a reason).

What the join holds is Storm's SingleJoinBolt's ``TimeCacheMap``, made exact for at-least-once input:

- **Sides, not arrivals.** Each spout tags its side (header ``side``); an order is joined with a payment only. A
  second copy of a side (a spout's re-read after a restart, a replay) is the same record, in a tree of its own. While
  the side is held, its copies are held with it, and the joined message is anchored to all of them: whichever of
  their trees is still alive carries the outcome (the first copy's tree may be decided already: its init nacked
  ``overload``, or failed by its spout, while the message went on to the join). A copy that comes after the join is
  joined again with the same partner (remembered for ``remember_s``), so its tree gets the fate of the pair too.
  A different record under the same key and side is failed (after its replays the replay job dead-letters it, where
  a person can look at it).
- **Never a tree that may have expired.** A held side is failed and forgotten once its tree may have timed out
  (found so when the join next looks at it, or by the housekeeping at each message and at each of the bolt's ticks,
  `Join.tick`: also while no message comes): ``hold_s`` (80 % of the message timeout) after its spout wrote it,
  which is before its tree opened at the acker. The ticks come well within the rest of the timeout (every 5 % of
  it), so that a side is failed, with its reason, before its tree could expire.
  Joined with a partner after that, the pair's fates would part: the partner acked, the held side nacked
  ``timeout`` and replayed to a join whose partner was used already, at every attempt until it is dead-lettered.

- **Partitions that move.** A side belongs to its partition of the join's input. When a rebalance gives that partition
  to another join process (or this one stops), its partner goes there: the bolt's ``on_revoke`` (`Join.revoked`)
  fails the sides held from it: nacked at once, their records are replayed to the new owner (after the replay job's
  backoff), not after a timeout.

Run it: ``python -m acker.examples.join`` (starts a local broker; ``--bootstrap-servers`` for a cluster). It writes a
few orders and payments, runs the acker, both spouts and both bolts in this process, and prints every outcome.
See docs/write-your-own-bolt.md for a walk through the code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol

from confluent_kafka import Message

from acker.bolt import Bolt, BoltInput
from acker.config import ServiceConfig
from acker.examples.wordcount_cli import follow_outcomes, produce
from acker.headers import first
from acker.help_text import prose
from acker.kafka.clients import TopicSpec, create_topics
from acker.kafka.provision import blank_bootstrap, kafka_cluster
from acker.service import AckerService
from acker.spout import Emitter, Spout, SpoutSettings

ORDERS = [{"order": "o1", "amount": 30}, {"order": "o2", "amount": 50}, {"order": "o3", "amount": 20}]
PAYMENTS = [{"order": "o1", "paid": 30}, {"order": "o2", "paid": 10}]  # o2 underpaid; o3 never paid


SIDE = "side"  # the header each spout tags its messages with: b"order" or b"payment"
PARTNER = {b"order": b"payment", b"payment": b"order"}


class Outputs(Protocol):
    """What the join uses of the bolt's explicit collector (``acker.bolt.Collector``)."""

    def emit(self, topic: str, value: bytes | None, key: bytes | None = None, *, anchors: Sequence[BoltInput]) -> None:
        """A child anchored to ``anchors``."""

    def ack(self, message: BoltInput) -> None:
        """Ack ``message``."""

    def fail(self, message: BoltInput, reason: str | None = None) -> None:
        """Fail ``message``, saying why (the reason reaches its dead letter)."""


def join_bolt(output: str, hold_s: float, remember_s: float | None = None) -> Join:
    """The join's function: pairs an order with its payment, both held unacked until then (module docstring)."""
    return Join(output, hold_s, 10 * hold_s if remember_s is None else remember_s)


class Join:
    """Storm's SingleJoinBolt, exact for at-least-once input (module docstring). A joined pair is remembered for
    ``remember_s``, so that a later copy of either side is joined again with the same partner."""

    def __init__(self, output: str, hold_s: float, remember_s: float) -> None:
        self.output, self.hold_s, self.remember_ms = output, hold_s, remember_s * 1000
        # (order id, side) -> the copies held of one record, unacked, oldest first; in arrival order
        self.waiting: OrderedDict[tuple[bytes, bytes], list[BoltInput]] = OrderedDict()
        # order id -> (when it was joined, the value of each side); in joining order
        self.joined: OrderedDict[bytes, tuple[float, dict[bytes, bytes | None]]] = OrderedDict()

    def __call__(self, message: BoltInput, collector: Outputs) -> None:
        now_ms = time.time() * 1000
        self._housekeeping(now_ms, collector)
        if message.timestamp_ms is None or message.timestamp_ms > now_ms:
            # Written by a clock ahead of this one (or not stamped): taken as written now. Kept, it would be held
            # fresh for as long as that clock is ahead, and, first in arrival order, keep `_housekeeping` from
            # failing every other side held meanwhile.
            message = replace(message, timestamp_ms=int(now_ms))
        side = first(message.headers, SIDE)
        if not isinstance(side, bytes) or side not in PARTNER:
            collector.fail(message, f"join: not a side of an order (its {SIDE!r} header is neither order nor payment)")
            return
        if _expired(message, now_ms, self.hold_s):  # its tree may have expired: written more than hold_s ago
            collector.fail(message, "join: came too late to be held for its partner (written more than hold_s ago)")
            return
        if (wrong := _unjoinable(message)) is not None:  # on arrival: held, it would fail its partner at the join
            collector.fail(message, f"join: {wrong}")
            return
        key = message.key or b""  # its order id, as its value says (`_unjoinable`)
        if key in self.joined:  # a copy of a side joined already (a re-read, a replay): joined again, same partner
            values = self.joined[key][1]
            if values[side] == message.value:
                self._emit(key, _merged(values), [message], collector)
            else:
                collector.fail(message, "join: another record under the same order id and side")
            return
        others = self._held((key, PARTNER[side]), now_ms, collector)
        if not others:
            mine = self._held((key, side), now_ms, collector)
            if mine and mine[0].value != message.value:
                collector.fail(message, "join: another record under the same order id and side")
            else:
                self.waiting.setdefault((key, side), []).append(message)  # held, with its copies, for the partner
            return
        values = {PARTNER[side]: others[0].value, side: message.value}
        # Before anything changes: a joined message the emit refuses fails this input (the bolt fails an input its
        # function raises on); its partner stays held, for this side's replay or failed after ``hold_s``, and no
        # pair is remembered. (A refusal after the emit took its anchors, a record the producer cannot take, fails
        # the partner's tree too: it is replayed, and a fail or ack of the copy held reaches a tree that is done.)
        self._emit(key, _merged(values), [*others, message], collector)
        del self.waiting[(key, PARTNER[side])]
        self.joined[key] = (now_ms, values)

    def tick(self, collector: Outputs) -> None:
        """The bolt's ``on_tick``: every side held is looked at (a side may have arrived after a fresher one, from a
        partition or spout behind the others, and the housekeeping at each message stops at the first still fresh),
        so that each is failed within a tick of ``hold_s``, while no message comes too; old joins are forgotten."""
        now_ms = time.time() * 1000
        for key in list(self.waiting):
            self._held(key, now_ms, collector)
        self._forget_joined(now_ms)

    def revoked(self, partitions: set[tuple[str, int]], collector: Outputs) -> None:
        """The bolt's ``on_revoke``: sides held from ``partitions``, which another join process reads from now on,
        are failed, so that their records are replayed to it; held here, they would wait for a partner that goes to
        it, until their trees time out. Forgotten before they are failed: one settled must never be held."""
        for key, copies in list(self.waiting.items()):
            moving = [copy for copy in copies if (copy.topic, copy.partition) in partitions]
            kept = [copy for copy in copies if (copy.topic, copy.partition) not in partitions]
            if kept:
                self.waiting[key] = kept
            else:
                del self.waiting[key]
            for copy in moving:
                collector.fail(copy, "join: its input partition went to another join process")

    def _held(self, key: tuple[bytes, bytes], now_ms: float, collector: Outputs) -> list[BoltInput]:
        """The copies held under ``key`` whose trees cannot have expired; the others are failed and forgotten."""
        copies = self.waiting.get(key, [])
        fresh: list[BoltInput] = []
        for copy in copies:
            if _expired(copy, now_ms, self.hold_s):
                collector.fail(copy, "join: held too long for its partner")
            else:
                fresh.append(copy)
        if fresh:
            self.waiting[key] = fresh
        else:
            self.waiting.pop(key, None)
        return fresh

    def _housekeeping(self, now_ms: float, collector: Outputs) -> None:
        """Fail what may have expired, the first to arrive first, and forget old joins. Arrival order is not quite
        the order of the spouts' timestamps (partitions, spouts behind), so a side may outlive this by a little;
        `_held` checks whatever it takes."""
        while self.waiting:
            key, copies = next(iter(self.waiting.items()))
            if not _expired(copies[0], now_ms, self.hold_s):
                break
            if self._held(key, now_ms, collector):
                self.waiting.move_to_end(key)  # its later copies are fresh
        self._forget_joined(now_ms)

    def _forget_joined(self, now_ms: float) -> None:
        """Forget the pairs joined ``remember_s`` ago or more (in joining order)."""
        while self.joined and now_ms - next(iter(self.joined.values()))[0] >= self.remember_ms:
            self.joined.popitem(last=False)

    def _emit(self, key: bytes, merged: bytes, anchors: list[BoltInput], c: Outputs) -> None:
        """The joined message, anchored to every tree of every copy, then each copy acked."""
        c.emit(self.output, merged, key=key, anchors=anchors)
        for message in anchors:
            c.ack(message)


def _unjoinable(message: BoltInput) -> str | None:
    """Why ``message`` cannot be a side of an order, or None: its value must be a JSON object whose ``order`` is the
    message's key (what the spouts write). Messages without a key, or keyed otherwise, would be joined with records
    of another order; a value that is not an object could not be merged, and held, it would fail its partner."""
    try:
        fields = json.loads(message.value or b"")
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deep
        return "its value is not JSON"
    if not isinstance(fields, dict):
        return "its value is not a JSON object"
    if message.key is None or fields.get("order") != message.key.decode(errors="replace"):
        return "its order field is not its key (the order id)"
    return None


def _merged(values: dict[bytes, bytes | None]) -> bytes:
    """The joined message's value: the order's fields and the payment's (each side a JSON object: `_unjoinable`)."""
    return json.dumps({**json.loads(values[b"order"] or b"{}"), **json.loads(values[b"payment"] or b"{}")}).encode()


def _expired(message: BoltInput, now_ms: float, hold_s: float) -> bool:
    """Whether the message's tree may have expired: written by its spout ``hold_s`` ago or more (a timestamp ahead
    of this clock, or none, was taken as the time the join read it)."""
    return message.timestamp_ms is not None and now_ms - message.timestamp_ms >= hold_s * 1000


def check(message: BoltInput, _collector: object) -> None:
    """A basic bolt: raising fails the input, hence every tree the joined message belongs to."""
    paid = json.loads(message.value or b"{}")
    if paid["paid"] < paid["amount"]:
        raise ValueError(f"order {paid['order']} is underpaid")


def keyed_by_order(record: Message, emitter: Emitter, *, output: str, side: bytes) -> None:
    """The spouts' emit function: forward the record tagged with its side, keyed by order id, so both sides meet in
    one join task."""
    order = json.loads(record.value() or b"{}")["order"].encode()
    emitter.emit(output, record.value(), key=order, headers=[(SIDE, side)])


def run(bootstrap: str, timeout_s: float = 5.0, wait_s: float = 60.0) -> dict[str, str]:
    """Run the example; return each source record's outcome (``"orders/0/1": "ACK"``, ...)."""
    prefix = f"join-{uuid.uuid4().hex[:6]}"
    config = ServiceConfig(bootstrap_servers=bootstrap, partitions=2, timeout_s=timeout_s,
                           metrics_port=0).namespaced(prefix)  # fmt: skip
    orders, payments, to_join, paid = (f"{prefix}.{t}" for t in ("orders", "payments", "to-join", "paid"))
    create_topics(config.client(), [TopicSpec(config.acker_topic, 2), TopicSpec(config.dlq_topic, 1),
                                    *(TopicSpec(config.outcome_topic(s), 2) for s in ("orders", "payments")),
                                    *(TopicSpec(t, 2) for t in (orders, payments, to_join, paid))])  # fmt: skip

    def emit_order(record: Message, emitter: Emitter) -> None:
        keyed_by_order(record, emitter, output=to_join, side=b"order")

    def emit_payment(record: Message, emitter: Emitter) -> None:
        keyed_by_order(record, emitter, output=to_join, side=b"payment")

    join = join_bolt(paid, hold_s=0.8 * timeout_s)
    parts: list[Any] = [
        AckerService(config),
        Spout(config, SpoutSettings("orders", orders, to_join, group=f"{prefix}-orders"), emit_order),
        Spout(config, SpoutSettings("payments", payments, to_join, group=f"{prefix}-payments"), emit_payment),
        Bolt(
            config,
            to_join,
            f"{prefix}-join",
            join,
            basic=False,
            on_revoke=join.revoked,
            on_tick=join.tick,
            tick_s=0.05 * timeout_s,
            output_topics=[paid],
        ),
        Bolt(config, paid, f"{prefix}-check", check),
    ]
    with (
        follow_outcomes(config, "orders") as orders_seen,
        follow_outcomes(config, "payments") as payments_seen,
        _running(parts),
    ):
        ids = _write(config, orders, ORDERS) + _write(config, payments, PAYMENTS)
        deadline = time.monotonic() + wait_s
        seen: dict[str, list[str]] = {}
        while time.monotonic() < deadline and not all(m in seen for m in ids):
            seen = {m: o for poll in (orders_seen, payments_seen) for m, o in poll(0.5).items()}
    return {m: seen[m][0] if m in seen else "(none yet)" for m in ids}


@contextlib.contextmanager
def _running(parts: list[Any]) -> Iterator[None]:
    """Each part's ``run(stop)`` in a thread of this process, until the block ends."""
    stop = threading.Event()
    threads = [threading.Thread(target=part.run, args=(stop,), daemon=True) for part in parts]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


def _write(config: ServiceConfig, topic: str, rows: list[dict[str, Any]]) -> list[str]:
    """The rows written to partition 0 of ``topic``, their ids; a row refused or not delivered raises (`produce`)."""
    return produce(config, topic, [json.dumps(row).encode() for row in rows], partition=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=prose(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None, help="a Kafka cluster [default: start a local broker]")
    args = parser.parse_args()
    if (blank := blank_bootstrap(args.bootstrap_servers)) is not None:  # not "start a local broker"
        parser.error(blank)
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        for msg_id, outcome in run(cluster.bootstrap_servers).items():
            print(f"{msg_id:40} {outcome}")


if __name__ == "__main__":
    main()
