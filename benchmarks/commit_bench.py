"""Commit job benchmark: acks per second on local Spark, and the delay from an ack to its visible watermark.

Run: ``.venv/bin/python -m benchmarks.commit_bench [--quick]`` (starts a local broker unless ``--bootstrap-servers``
names one; Spark on ``local[2]``, the connectors resolved as for the jobs). Prints Markdown tables.

1. Throughput. ``--acks`` ACK outcomes for ``--partitions`` source partitions (every offset once, shuffled within
   windows of 10,000 offsets: out of order, as acks come), in outcome records of ``--per-record`` outcomes, as the
   acker writes them. Each query first reads one warm-up record (compiling its plan), then the rest is produced and
   timed until the query has taken in every ack:
   - baseline: Spark's Kafka source and the job's own decoding alone (`spark_jobs.commit_job.done_offsets`, every
     column computed: its rows, a done offset each, are counted and hashed), the count taken to the driver: what the
     job does above it is its bitmaps, marks and commits;
   - the commit job (`spark_jobs.commit_job`, trigger ``--trigger-s``) until the watermark it publishes in the
     ``<group>.acked`` group is the end of every partition.
2. Latency, at ``--latency-rates`` acks/s (25k, 50k and 100k: up to the throughput target) as long as they are
   below the measured rate: acks produced in order, a record every 50 ms; the watermark
   group is polled every 20 ms; the delay of a record is from producing it to the first poll that shows a
   watermark past its last offset on every partition (waiting for the next trigger, the micro-batch, the commit).
   p50/p99. With a trigger of T seconds and micro-batches of d seconds, the delay lies between d and about T + d.
3. Memory: the peak resident memory (VmHWM) of this process, the jobs' driver (their marks and bitmaps live here),
   and of Spark's JVM, after the baseline and after the commit job's throughput run (a peak only grows: the second
   is of both runs).

The source topic exists but holds no records: the job only reads it where a gap must be explained.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from confluent_kafka import Producer
from pyspark.sql import functions as F

from acker.kafka.clients import TopicSpec, create_topics, produce
from acker.kafka.lookups import lookups
from acker.kafka.provision import kafka_cluster
from acker.wire import encode_outcome_rows
from benchmarks import cpu
from spark_jobs.commit_job import CommitJobSettings, OutcomeSource, done_offsets, start
from spark_jobs.session import spark_session, stop

SPOUT = "bench"


def _ack_records(topic: str, partitions: int, acks: int, per_record: int, rng: np.random.Generator) -> list[bytes]:
    """Outcome records acking offsets 0..acks/partitions-1 of every partition, out of order within windows."""
    per_partition = acks // partitions
    order: list[tuple[int, int]] = []
    for first in range(0, per_partition, 10_000):
        window = [(p, o) for p in range(partitions) for o in range(first, min(first + 10_000, per_partition))]
        order += [window[i] for i in rng.permutation(len(window))]
    return [
        encode_outcome_rows(SPOUT, [("ACK", 1 + p * 1_000_003 + o, f"{topic}/{p}/{o}", 5) for p, o in chunk])
        for chunk in (order[i : i + per_record] for i in range(0, len(order), per_record))
    ]


def _produce(client: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer({**client, "linger.ms": 5})
    for value in values:
        produce(producer, topic, value)
    assert producer.flush(60) == 0


def _wait(done: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.02) -> float:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"commit_bench: {what} did not finish within {timeout_s:.0f} s")
        time.sleep(poll_s)
    return time.perf_counter()


def _alive(query: Any) -> bool:
    """True while ``query`` runs; its error, if it stopped on one, ends the benchmark at once (not at a timeout)."""
    if (error := query.exception()) is not None:
        raise SystemExit(f"commit_bench: the query failed: {error}")
    return True


def _topics(client: dict[str, Any], partitions: int) -> tuple[str, str]:
    run = uuid.uuid4().hex[:8]
    source, outcomes = f"src-{run}", f"out-{run}.{SPOUT}"
    create_topics(client, [TopicSpec(source, partitions), TopicSpec(outcomes, partitions)])
    return source, outcomes


def _baseline(
    spark: Any, client: dict[str, Any], records: list[bytes], acks: int, topic: str, *, trigger_s: float
) -> float:
    seen = [0]
    lock = threading.Lock()

    def count(batch: Any, _batch_id: int) -> None:
        # Every column computed (a hash of each row, XORed: a sum would overflow, which ANSI SQL refuses): a bare
        # count lets Spark prune the columns it needs not, and skip most of the job's decoding.
        n, _ = batch.agg(F.count(F.lit(1)), F.bit_xor(F.xxhash64(*batch.columns))).first()
        with lock:
            seen[0] += n or 0

    query = (
        done_offsets(OutcomeSource(client, (topic,)).read(spark))
        .writeStream.foreachBatch(count)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="commit-bench-"))
        .trigger(processingTime=f"{trigger_s} seconds")  # the job's
        .start()
    )
    try:
        warm = len(records[0]) and acks // len(records)
        _produce(client, topic, records[:1])
        _wait(lambda: _alive(query) and seen[0] >= warm, 300, "the baseline's warm-up")
        started = time.perf_counter()
        _produce(client, topic, records[1:])
        ended = _wait(lambda: _alive(query) and seen[0] >= acks, 600, "the baseline")
    finally:
        query.stop()
    return (acks - warm) / (ended - started)


class _Job:
    """The commit job on fresh topics, and the watermarks it publishes."""

    def __init__(
        self,
        spark: Any,
        client: dict[str, Any],
        partitions: int,
        trigger_s: float,
        topics: tuple[str, str] | None = None,
    ) -> None:
        self.source, self.outcomes = topics or _topics(client, partitions)
        settings = CommitJobSettings(
            OutcomeSource(client, (self.outcomes,)),
            tempfile.mkdtemp(prefix="commit-bench-"),
            trigger_s=trigger_s,
            groups={SPOUT: f"g-{self.outcomes}"},
            dlq_topic=f"dlq-{self.outcomes}",
        )
        create_topics(client, [TopicSpec(settings.dlq_topic, 1)])  # as `acker topics create` makes it for a job
        self.group = settings.watermark_group(SPOUT)
        self.partitions = [(self.source, p) for p in range(partitions)]
        self.kafka = lookups(client)
        self.queries = start(spark, settings)

    def marks(self) -> list[int]:
        with self.kafka.lock:
            committed = self.kafka.committed(self.group, self.partitions)
        return [committed[tp] for tp in self.partitions]

    def rows_read(self) -> int:
        """Kafka records the main query has taken in so far."""
        return sum(int(p["numInputRows"]) for p in self.queries[0].recentProgress)

    def stop(self) -> None:
        for query in self.queries:
            query.stop()


def _peak_mib(spark: Any) -> dict[str, float]:
    """The peak resident memory so far of this process (the jobs' driver: marks, bitmaps) and of Spark's JVM, MiB."""
    return {
        "Python driver": cpu.peak_rss_mib(os.getpid()),
        "Spark JVM": cpu.peak_rss_mib(spark.sparkContext._gateway.proc.pid),
    }


def _throughput(
    spark: Any, client: dict[str, Any], acks: int, *, partitions: int, per_record: int, trigger_s: float
) -> tuple[float, float, dict[str, dict[str, float]]]:
    """(baseline acks/s, commit job acks/s, the peak memory after each (`_peak_mib`))."""
    topics = _topics(client, partitions)
    records = _ack_records(topics[0], partitions, acks, per_record, np.random.default_rng(1))
    acks = acks // partitions * partitions
    # The baseline first, the job's queries not started yet: idle, they would still take the cores' time.
    baseline = _baseline(spark, client, records, acks, _topics(client, partitions)[1], trigger_s=trigger_s)
    memory = {"after the baseline": _peak_mib(spark)}
    job = _Job(spark, client, partitions, trigger_s, topics)
    try:
        _produce(client, job.outcomes, records[:1])
        _wait(lambda: job.rows_read() >= 1, 300, "the commit job's warm-up")
        started = time.perf_counter()
        _produce(client, job.outcomes, records[1:])
        end = acks // partitions
        ended = _wait(lambda: job.marks() == [end] * partitions, 600, "the commit job", poll_s=0.05)
        memory["after the commit job (peak of both runs)"] = _peak_mib(spark)
    finally:
        job.stop()
    warm = acks // len(records)
    return baseline, (acks - warm) / (ended - started), memory


def _latency(
    spark: Any, client: dict[str, Any], rate: float, *, seconds: float, partitions: int, trigger_s: float
) -> list[float]:
    """Delays (s) from producing a record of in-order acks to the watermark showing it, at ``rate`` acks/s."""
    job = _Job(spark, client, partitions, trigger_s)
    per_partition = max(1, round(rate * 0.05 / partitions))
    ticks = int(seconds / 0.05)
    records = [
        encode_outcome_rows(
            SPOUT,
            [
                ("ACK", 1 + o, f"{job.source}/{p}/{o}", 5)
                for p in range(partitions)
                for o in range(t * per_partition, (t + 1) * per_partition)
            ],
        )
        for t in range(ticks + 1)
    ]
    sent: list[float] = []
    delays: list[float] = []
    stop = threading.Event()

    def watch() -> None:  # record t is visible once every partition's mark is past (t + 1) * per_partition
        while not stop.is_set() or len(delays) < len(sent):
            marks = job.marks()
            now = time.perf_counter()
            while len(delays) < len(sent) and min(marks) >= (len(delays) + 1) * per_partition:
                delays.append(now - sent[len(delays)])
            time.sleep(0.02)

    try:
        producer = Producer({**client, "linger.ms": 1})
        produce(producer, job.outcomes, records[0])
        producer.flush(30)
        _wait(lambda: min(job.marks()) >= per_partition, 300, "the commit job's warm-up")
        delays.append(0.0)
        sent.append(time.perf_counter())
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        begin = time.perf_counter()
        for t in range(1, ticks + 1):
            while (wait := begin + t * 0.05 - time.perf_counter()) > 0:
                time.sleep(wait)
            sent.append(time.perf_counter())
            produce(producer, job.outcomes, records[t])
            producer.poll(0)
        producer.flush(30)
        stop.set()
        watcher.join(120)
        if len(delays) < len(sent):  # the slowest left out would bias p99 down: not a figure to print
            raise SystemExit(f"commit_bench: {len(sent) - len(delays)} records not visible after 120 s")
    finally:
        job.stop()
    return delays[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--acks", type=int, default=None, help="acks of the throughput run [2,000,000; quick 200,000]")
    parser.add_argument("--per-record", type=int, default=1000, help="outcomes per outcome record [1000]")
    parser.add_argument("--partitions", type=int, default=4, help="source (and outcome) partitions [4]")
    parser.add_argument("--trigger-s", type=float, default=1.0, help="the job's trigger interval [1]")
    parser.add_argument("--latency-s", type=float, default=None, help="latency runs: seconds each [20; quick 8]")
    parser.add_argument(
        "--latency-rates", default="25000,50000,100000", help="acks/s of the latency runs [25000,50000,100000]"
    )
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    acks = args.acks or (200_000 if args.quick else 2_000_000)
    seconds = args.latency_s or (8 if args.quick else 20)
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        client = {"bootstrap.servers": cluster.bootstrap_servers}
        spark = spark_session("acker-commit-bench", args.master)
        try:
            baseline, rate, memory = _throughput(
                spark, client, acks, partitions=args.partitions, per_record=args.per_record, trigger_s=args.trigger_s
            )
            print(f"throughput: baseline {baseline:,.0f} acks/s, commit job {rate:,.0f} acks/s")
            latencies = {}
            for load in sorted(float(r) for r in args.latency_rates.split(",")):
                if load > rate:
                    print(f"latency at {load:,.0f} acks/s: skipped, above the measured rate")
                    continue
                delays = _latency(spark, client, load, seconds=seconds, partitions=args.partitions,
                                  trigger_s=args.trigger_s)  # fmt: skip
                latencies[load] = 1000 * np.array(delays)
                print(f"latency at {load:,.0f} acks/s: p99 {np.percentile(latencies[load], 99):,.0f} ms")
        finally:
            stop(spark)
    print(f"\nworkload: {acks:,} acks over {args.partitions} partitions in records of {args.per_record:,}; "
          f"{args.master}; trigger {args.trigger_s:g} s\n")  # fmt: skip
    print("| measure | acks/s | ratio |")
    print("|---|---:|---:|")
    print(f"| Spark's Kafka source + the job's decoding, every column (baseline) | {baseline:,.0f} | 1.00 |")
    print(f"| commit job (marks kept, watermark published) | {rate:,.0f} | {rate / baseline:.2f} |")
    print("\n| peak resident memory, MiB | " + " | ".join(memory["after the baseline"]) + " |")
    print("|---|" + "---:|" * len(memory["after the baseline"]))
    for when, peaks in memory.items():
        print(f"| {when} | " + " | ".join(f"{mib:,.0f}" for mib in peaks.values()) + " |")
    print("\n| load acks/s | share of the job's rate | records measured | p50 ms | p99 ms | max ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for load, ms in latencies.items():
        p50, p99 = np.percentile(ms, [50, 99])
        print(f"| {load:,.0f} | {load / rate:.0%} | {len(ms):,} | {p50:,.0f} | {p99:,.0f} | {ms.max():,.0f} |")


if __name__ == "__main__":
    main()
