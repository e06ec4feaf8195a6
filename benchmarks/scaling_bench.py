"""Scaling benchmark: acker throughput with 1, 2 and 4 partitions, one ``acker run`` process per partition.

Run: ``.venv/bin/python -m benchmarks.scaling_bench [--quick]`` (starts a local broker unless ``--bootstrap-servers``
names one). Prints a Markdown table.

For each n: a fresh acker topic with n partitions and n ``acker run`` processes in one group; once every partition
is owned (each instance's status), the same word-count trees (whole trees per record of ~8,192 messages, as in
service_bench) are produced as fast as the producer goes, and the time runs until a reader of the outcome topic has
seen every tree decided. Reference in the same run: the producer alone (how fast the records reach the broker),
which bounds every figure from above. Also the peak resident memory (VmHWM) of the largest instance. On this
machine the broker, the producer and the n processes share 2 cores, so the curve flattens at once; see
docs/benchmarks.md for what limits it beyond.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import replace

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

from acker import avro_longs
from acker.config import ServiceConfig, to_argv
from acker.kafka.clients import TopicSpec, consume_available, create_topics, produce
from acker.kafka.provision import kafka_cluster
from acker.status import read_status
from acker.wire import decode_outcome_anchors
from benchmarks import cpu
from benchmarks.service_bench import _records

SPOUT = "sentences"


def _produce(config: ServiceConfig, records: list[list[bytes]]) -> float:
    """Produce every record (partition p gets records[p]); return the seconds until all are delivered."""
    producer = Producer(config.client(**{"linger.ms": 5, "compression.type": "lz4"}))
    began = time.perf_counter()
    for p, values in enumerate(records):
        for value in values:
            produce(producer, config.acker_topic, value, partition=p)
    assert producer.flush(120) == 0
    return time.perf_counter() - began


def _outcome_counter(config: ServiceConfig, partitions: int) -> Consumer:
    consumer = Consumer(config.client(**{"group.id": f"count-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(config.outcome_topic(SPOUT), p, 0) for p in range(partitions)])
    return consumer


def _count(consumer: Consumer) -> int:
    """Outcomes newly read. Counted from the anchors alone (`decode_outcome_anchors`, ~30x faster than decoding every
    column): the reader shares the cores with the instances it times, so its own work must stay small."""
    return sum(len(decode_outcome_anchors(r.value() or b"")[2]) for r in consume_available(consumer, 1000, 0.05)
               if r.error() is None)  # fmt: skip


def _run(bootstrap: str, n: int, trees: int) -> tuple[float, float, float]:
    """(acker messages/s through n instances, producer-only messages/s, the largest peak resident memory of an
    instance, MiB) for one run."""
    run = uuid.uuid4().hex[:8]
    config = ServiceConfig(bootstrap_servers=bootstrap, partitions=n, timeout_s=300, status_interval_s=0.2,
                           metrics_port=0).namespaced(f"scale-{run}")  # fmt: skip
    create_topics(config.client(), [TopicSpec(config.acker_topic, n), TopicSpec(config.outcome_topic(SPOUT), n),
                                    TopicSpec(config.status_topic, 1)])  # fmt: skip
    records = _records(trees, 8192, n, np.random.default_rng(n))
    messages = trees * 7
    processes = []
    for i in range(n):
        flags, env = to_argv(replace(config, instance_id=f"i{i}"))
        argv = [sys.executable, "-m", "acker.cli", "run", *flags, "--log-level", "WARNING"]
        processes.append(subprocess.Popen(argv, env={**os.environ, **env}))
    try:
        deadline = time.monotonic() + 120
        while len({s.get("instance") for s in read_status(config, timeout_s=2).values()}) < n:
            assert time.monotonic() < deadline, "the instances did not take every partition"
            time.sleep(0.2)
        counter = _outcome_counter(config, n)
        avro_longs.outcome_anchors(bytes(5), 0)  # its compiled loop loaded (or compiled) before the clock starts
        began = time.perf_counter()
        _produce(config, records)
        decided = 0
        while decided < trees:
            assert time.monotonic() < deadline + 600, "not every tree was decided"
            decided += _count(counter)
        elapsed = time.perf_counter() - began
        counter.close()
        peak = max(cpu.peak_rss_mib(process.pid) for process in processes)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(60)
    # The producer alone, on a fresh topic: the ceiling of every figure above.
    alone = replace(config, acker_topic=f"scale-{run}-alone")
    create_topics(config.client(), [TopicSpec(alone.acker_topic, n)])
    return messages / elapsed, messages / _produce(alone, records), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trees", type=int, default=None, help="trees a run [300,000; quick 50,000]")
    parser.add_argument("--repeat", type=int, default=None, help="runs per instance count [3; quick 1]")
    args = parser.parse_args()
    trees = args.trees or (50_000 if args.quick else 300_000)
    repeat = args.repeat or (1 if args.quick else 3)
    rows = []
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        for n in (1, 2, 4):
            runs = []
            for i in range(repeat):
                runs.append(_run(cluster.bootstrap_servers, n, trees))
                print(f"  run {i + 1}: {runs[-1][0]:,.0f} acker messages/s (producer alone {runs[-1][1]:,.0f}/s)")
            acker, producer, peak = (statistics.median(r[k] for r in runs) for k in range(3))
            rows.append((n, acker, producer, peak))
            print(f"{n} partition(s)/instance(s): {acker:,.0f} acker messages/s (producer alone {producer:,.0f}/s)")
    print(f"\nworkload: {trees:,} word-count trees = {trees * 7:,} acker messages in records of ~8,192; "
          f"{os.cpu_count()} cores shared by the broker, the producer and the instances; "
          f"median of {repeat}\n")  # fmt: skip
    print("| partitions = instances | acker messages/s | × one instance | producer alone, messages/s "
          "| peak memory of an instance, MiB |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for n, acker, producer, peak in rows:
        print(f"| {n} | {acker:,.0f} | {acker / rows[0][1]:.2f} | {producer:,.0f} | {peak:,.0f} |")


if __name__ == "__main__":
    main()
