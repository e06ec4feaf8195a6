"""A join that multi-anchors: orders and payments, matched by order id, each side its own spout.

    <prefix>.orders   --spout "orders"-->    \\
                                               <prefix>.to-join (key: order) --join--> <prefix>.paid --check
    <prefix>.payments --spout "payments"-->  /

The join bolt (explicit API) holds the first message of an order until the other side arrives, then emits one
"paid" message anchored to *both* inputs and acks both. The joined message is in two trees at once, so its fate is
both source records' fate: the check bolt fails a payment that does not cover the order, and both the order and
the payment are nacked ``failed`` (and would be replayed). A side whose partner never comes is never acked: its
tree times out, which is how a join tells "nothing matched in time" (Storm's joins behave the same way).

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
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Message, Producer

from acker.bolt import Bolt, BoltInput, Collector
from acker.config import ServiceConfig
from acker.examples.wordcount_cli import follow_outcomes
from acker.help_text import prose
from acker.kafka.clients import TopicSpec, create_topics, produce
from acker.kafka.provision import kafka_cluster
from acker.service import AckerService
from acker.spout import Emitter, Spout, SpoutSettings

ORDERS = [{"order": "o1", "amount": 30}, {"order": "o2", "amount": 50}, {"order": "o3", "amount": 20}]
PAYMENTS = [{"order": "o1", "paid": 30}, {"order": "o2", "paid": 10}]  # o2 underpaid; o3 never paid


def join_bolt(output: str) -> Any:
    waiting: dict[bytes, BoltInput] = {}  # the first side of each order, not acked yet

    def join(message: BoltInput, collector: Collector) -> None:
        key = message.key or b""
        other = waiting.pop(key, None)
        if other is None:
            waiting[key] = message  # held: acked when its partner arrives, or its tree times out
            return
        merged = {**json.loads(other.value or b"{}"), **json.loads(message.value or b"{}")}
        collector.emit(output, json.dumps(merged).encode(), key=key, anchors=[other, message])  # both trees
        collector.ack(other)
        collector.ack(message)

    return join


def check(message: BoltInput, _collector: object) -> None:
    """A basic bolt: raising fails the input, hence every tree the joined message belongs to."""
    paid = json.loads(message.value or b"{}")
    if paid["paid"] < paid["amount"]:
        raise ValueError(f"order {paid['order']} is underpaid")


def keyed_by_order(record: Message, emitter: Emitter, *, output: str) -> None:
    """The spouts' emit function: forward the record, keyed by order id, so both sides meet in one join task."""
    emitter.emit(output, record.value(), key=json.loads(record.value() or b"{}")["order"].encode())


def run(bootstrap: str, timeout_s: float = 5.0, wait_s: float = 60.0) -> dict[str, str]:
    """Run the example; return each source record's outcome (``"orders/0/1": "ACK"``, ...)."""
    prefix = f"join-{uuid.uuid4().hex[:6]}"
    config = ServiceConfig(bootstrap_servers=bootstrap, partitions=2, timeout_s=timeout_s,
                           metrics_port=0).namespaced(prefix)  # fmt: skip
    orders, payments, to_join, paid = (f"{prefix}.{t}" for t in ("orders", "payments", "to-join", "paid"))
    create_topics(config.client(), [TopicSpec(config.acker_topic, 2), TopicSpec(config.dlq_topic, 1),
                                    *(TopicSpec(config.outcome_topic(s), 2) for s in ("orders", "payments")),
                                    *(TopicSpec(t, 2) for t in (orders, payments, to_join, paid))])  # fmt: skip

    def emit(record: Message, emitter: Emitter) -> None:
        keyed_by_order(record, emitter, output=to_join)

    parts: list[Any] = [
        AckerService(config),
        Spout(config, SpoutSettings("orders", orders, to_join, group=f"{prefix}-orders"), emit),
        Spout(config, SpoutSettings("payments", payments, to_join, group=f"{prefix}-payments"), emit),
        Bolt(config, to_join, f"{prefix}-join", join_bolt(paid), basic=False),
        Bolt(config, paid, f"{prefix}-check", check),
    ]
    polls = [follow_outcomes(config, spout) for spout in ("orders", "payments")]
    with _running(parts):
        ids = _write(config, orders, ORDERS) + _write(config, payments, PAYMENTS)
        deadline = time.monotonic() + wait_s
        seen: dict[str, list[str]] = {}
        while time.monotonic() < deadline and not all(m in seen for m in ids):
            seen = {m: o for poll in polls for m, o in poll(0.5).items()}
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
    producer = Producer(config.producer())
    ids: list[str] = []
    for row in rows:
        produce(producer, topic, json.dumps(row).encode(), partition=0,
                on_delivery=lambda _e, r: ids.append(f"{r.topic()}/{r.partition()}/{r.offset()}"))  # fmt: skip
    producer.flush(30)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=prose(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None, help="a Kafka cluster [default: start a local broker]")
    args = parser.parse_args()
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        for msg_id, outcome in run(cluster.bootstrap_servers).items():
            print(f"{msg_id:40} {outcome}")


if __name__ == "__main__":
    main()
