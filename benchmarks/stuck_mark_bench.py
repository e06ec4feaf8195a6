"""Stuck-mark benchmark: what a watermark waiting on one record costs the commit job's driver at every micro-batch.

Run: ``.venv/bin/python -m benchmarks.stuck_mark_bench [--quick]``. Prints a Markdown table.

Why: the driver adds each micro-batch's done offsets to its partition's runs, advances the mark and saves every mark
as JSON (`spark_jobs.mark_store`) before the watermarks are published. A source written in transactions leaves an
offset without a record (the marker) after each transaction; while the mark waits on one record (nacked with no
replay job running, say), every transaction done above it stays a run of its own, and the runs, merged and saved at
every batch, grow with each. The commit job's recheck merges the runs only markers part (`Marks._merge_runs`).

Workload: one partition, transactions of ``--txn`` records each followed by its marker, ``--per-batch`` transactions
done per micro-batch, ``--batches`` batches (one per second at a 1 s trigger: 3,600 are an hour). Timed per batch
(wall time): `PartitionMark.add_runs` of the batch, `advance` (the record it waits on, found a moment ago, is not
asked about again) and the JSON the mark store writes. Cases:

- baseline: the first record done too, so the mark goes with the batches;
- stuck: the first record never done, the runs left as they come (as before the merge);
- stuck, merged: the same, with `PartitionMark.record_free` over a model of the partition (where its records are)
  every ``--recheck`` batches, as the recheck reads Kafka (the walk untimed: the model is no measure of it).

Printed: the median and p99 of the last 10% of the batches, their ratio to the baseline's in the same run, the runs
and the JSON's size at the end.

Then the walk against Kafka (a local broker started unless ``--bootstrap-servers``): a recheck's worth of the same
transactions (``--recheck`` × ``--per-batch``, or ``--kafka-txns``) written by a transactional producer, every
record done but the first, and `PartitionMark.record_free` reading through the commit job's lookups (`KafkaLookups
.record_offsets`), as `Marks._merge_runs` does: its time, per stretch, and as a share of a recheck's budget
(`MERGE_BUDGET_S`); with transactions of ``--txn`` records and of ten times as many. Its baseline, in the same run: a
read from each gap's start (`READ_THROUGH` 0), as the walk reads gaps far apart, and as it asked before it read
through the gaps close together.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable, Container
from unittest.mock import patch

import numpy as np
from confluent_kafka import Producer

from acker.kafka.clients import TopicSpec, create_topics
from acker.kafka.lookups import close_all, lookups
from acker.kafka.provision import kafka_cluster
from spark_jobs import watermark
from spark_jobs.commit_job import MERGE_BUDGET_S
from spark_jobs.watermark import PartitionMark, RecordsRead


def _reads(txn: int) -> RecordsRead:
    """`PartitionMark.record_free`'s reads of a model partition: records at ``k * (txn + 1) + i`` for ``i < txn``,
    the marker at ``k * (txn + 1) + txn``."""
    span = txn + 1

    def records(first: int, last: int, keep: Container[int]) -> tuple[list[int], int]:
        reached = (last + 1 if last % span == txn else last) + 1  # just past the first record at or after ``last``
        return [o for o in range(first, reached) if o % span != txn and o in keep], reached

    return records


def _advance_lookup(txn: int) -> Callable[[int], int]:
    """`PartitionMark.advance`'s question of the model partition (`_reads`)."""
    return lambda offset: offset + 1 if offset % (txn + 1) == txn else offset


def _run(args: argparse.Namespace, *, stuck: bool, merged: bool) -> tuple[list[float], PartitionMark]:
    """Per-batch seconds, and the mark at the end."""
    span = args.txn + 1
    mark = PartitionMark(0, verified=0, verified_at=0.0)
    lookup = _advance_lookup(args.txn)
    reads = _reads(args.txn)
    batch_s: list[float] = []
    for batch in range(args.batches):
        first = batch * args.per_batch
        starts = np.arange(first, first + args.per_batch, dtype=np.int64) * span
        ends = starts + args.txn
        if stuck and batch == 0:
            starts[0] = 1  # record 0 is never done
        began = time.perf_counter()
        mark.add_runs(starts, ends)
        mark.advance(lookup, 0.0)
        json.dumps({"marks": [{"mark": mark.mark, "runs": mark.runs, "verified": mark.verified}]})
        batch_s.append(time.perf_counter() - began)
        if merged and batch % args.recheck == args.recheck - 1:
            free, _ = mark.record_free(reads)
            if free:
                mark.add_spans(free)
    return batch_s, mark


def _stuck_above(txns: int, txn: int) -> PartitionMark:
    """The mark of a partition of ``txns`` transactions of ``txn`` records, every record done but the first."""
    starts = np.arange(txns, dtype=np.int64) * (txn + 1)
    ends = starts + txn
    starts[0] = 1
    mark = PartitionMark(0, verified=0)
    mark.add_runs(starts, ends)
    return mark


def _transactions(bootstrap: str, txns: int, txn: int) -> str:
    """A new topic of ``txns`` transactions of ``txn`` records (each followed by its marker), once all are readable."""
    client = {"bootstrap.servers": bootstrap}
    topic = f"stuck-mark-{uuid.uuid4().hex[:8]}"
    create_topics(client, [TopicSpec(topic, 1)])
    producer = Producer({**client, "transactional.id": topic, "linger.ms": 5})
    producer.init_transactions(30)
    for _ in range(txns):
        producer.begin_transaction()
        for _ in range(txn):
            producer.produce(topic, b"x" * 100, partition=0)
        producer.commit_transaction(30)
    kafka = lookups(client)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the last marker written
        with kafka.lock:
            if (kafka._ends(topic, 0) or (0, 0))[1] >= txns * (txn + 1):
                break
        time.sleep(0.1)
    with kafka.lock:  # connected first, as a job's lookups are
        kafka.record_offsets(topic, 0, 0, 0, ())
    return topic


def _kafka_walk(bootstrap: str, topic: str, txns: int, txn: int) -> tuple[float, int, int, int]:
    """Seconds `record_free` takes against Kafka over ``topic``'s transactions, the stretches it found, the runs left
    once they are merged, and its reads."""
    kafka = lookups({"bootstrap.servers": bootstrap})
    reads = 0

    def records(first: int, last: int, keep: Container[int]) -> tuple[list[int], int] | None:
        nonlocal reads
        reads += 1
        with kafka.lock:
            return kafka.record_offsets(topic, 0, first, last, keep)

    mark = _stuck_above(txns, txn)
    began = time.perf_counter()
    free, stopped = mark.record_free(records)
    took = time.perf_counter() - began
    assert stopped is None, f"Kafka did not answer at offset {stopped}"
    mark.add_spans(free)
    return took, len(free), len(mark.runs), reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--txn", type=int, default=100, help="records per transaction")
    parser.add_argument("--per-batch", type=int, default=20, help="transactions done per micro-batch")
    parser.add_argument("--batches", type=int, default=3600)
    parser.add_argument("--recheck", type=int, default=60, help="batches between rechecks (recheck_s / trigger_s)")
    parser.add_argument("--kafka-txns", type=int, default=None, help="transactions written for the walk against Kafka")
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true", help="600 batches, 300 transactions written")
    args = parser.parse_args()
    if args.quick:
        args.batches = 600
        args.kafka_txns = args.kafka_txns or 300
    print(f"{args.batches} batches of {args.per_batch} transactions of {args.txn} records; recheck every "
          f"{args.recheck} batches\n")  # fmt: skip
    print("| case | batch p50, ms | batch p99, ms | p50 ratio to baseline | runs at the end | JSON at the end, KB |")
    print("|---|---|---|---|---|---|")
    tail = max(1, args.batches // 10)
    base_p50 = 0.0
    for name, stuck, merged in (("baseline (mark moving)", False, False), ("stuck", True, False),
                                ("stuck, merged at each recheck", True, True)):  # fmt: skip
        batch_s, mark = _run(args, stuck=stuck, merged=merged)
        last = sorted(batch_s[-tail:])
        p50, p99 = statistics.median(last) * 1e3, last[min(len(last) - 1, int(len(last) * 0.99))] * 1e3
        base_p50 = base_p50 or p50
        size = len(json.dumps({"mark": mark.mark, "runs": mark.runs}).encode()) / 1024
        print(f"| {name} | {p50:.3f} | {p99:.3f} | {p50 / base_p50:.2f} | {len(mark.runs):,} | {size:,.1f} |")
    txns = args.kafka_txns or args.recheck * args.per_batch
    print(f"\nThe walk against Kafka, every record done but the first (recheck budget {MERGE_BUDGET_S:g} s); "
          "baseline: a read from each gap's start, as gaps farther apart are read\n")  # fmt: skip
    print("| transactions | records each | reads | walk, s | per stretch, ms | share of the budget | ratio to a read a "
          "gap | runs left |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        for count, size in ((txns, args.txn), (max(1, txns // 2), args.txn * 10)):
            topic = _transactions(cluster.bootstrap_servers, count, size)
            with patch.object(watermark, "READ_THROUGH", 0):
                apart, *_ = _kafka_walk(cluster.bootstrap_servers, topic, count, size)
            took, stretches, left, reads = _kafka_walk(cluster.bootstrap_servers, topic, count, size)
            for name, seconds, made in (("a read a gap", apart, stretches), ("read through", took, reads)):
                print(f"| {count:,} | {size:,} | {made:,} ({name}) | {seconds:.2f} | "
                      f"{seconds / max(1, stretches) * 1e3:.2f} | {seconds / MERGE_BUDGET_S:.3f} | "
                      f"{seconds / apart:.2f} | {left} |")  # fmt: skip
        close_all()  # before the broker goes


if __name__ == "__main__":
    main()
