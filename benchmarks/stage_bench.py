"""Where the word count's tracked stages spend more than untracked ones: one bolt at a time, in this process.

Run: ``.venv/bin/python -m benchmarks.stage_bench [--quick]`` (starts a local broker unless ``--bootstrap-servers``
names one). Prints Markdown tables.

For the split bolt (a sentence in, a message per word out, basic API) and the count bolt (a word in, an unanchored
count out and an ack, explicit API), the input topic is filled before the bolt starts, once with an anchor header on
every message (as a tracked spout or split bolt writes them) and once without (untracked); the bolt then processes
it in this process, and the CPU seconds of the whole process (the bolt's Python thread and librdkafka's threads)
per input message are taken from its first message to the last one's acks and children delivered. Both variants
alternate, and the ratio of each pair is printed: the stage's own share of the tracked mode's extra CPU, without
the broker, the acker service or the other stages (`pipeline_bench` measures the whole).

With each bolt's, the peak resident memory of the process while it ran (its high-water mark set back before each run,
Linux's ``/proc/self/clear_refs``): what the tracked mode's anchors, pending acks and combined acks hold beyond the
untracked mode's buffers.

Also, the same confluent-kafka producer and consumer loop with and without the 16-byte anchor header, for the part of
that share that is librdkafka's and the Python client's handling of a header, not the project's code.

No latency figures: the input is all there before the bolt starts, so a message's wait is its place in the backlog,
not the stage's doing. The stages' latency is measured at a steady rate, in a whole pipeline, by `pipeline_bench` and
`floor_bench`.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import random
import resource
import statistics
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from acker.bolt import Bolt
from acker.cli import tune_gc
from acker.config import ServiceConfig
from acker.examples.wordcount import Topics, count_function, sentences, split_function
from acker.headers import HEADER
from acker.kafka.clients import TopicSpec, create_topics, produce
from acker.kafka.provision import kafka_cluster
from benchmarks import cpu


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process: Python's and librdkafka's
    return usage.ru_utime + usage.ru_stime


def _anchor_header(rng: random.Random) -> list[tuple[str, bytes]]:
    return [(HEADER, struct.pack("<qq", rng.getrandbits(63) | 1, rng.getrandbits(63) | 1))]


def _fill(bootstrap: str, topic: str, values: list[tuple[bytes, bytes | None]], tracked: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(7)
    for value, key in values:
        produce(producer, topic, value, key=key, headers=_anchor_header(rng) if tracked else None)
    assert producer.flush(60) == 0


def _bolt_run(bootstrap: str, stage: str, tracked: bool, *, lines: list[bytes]) -> tuple[float, float]:
    """CPU microseconds per input message of one bolt over a topic filled before it starts, and the peak resident
    memory of this process while the bolt ran (MiB; NaN where it cannot be told)."""
    run = uuid.uuid4().hex[:8]
    config = ServiceConfig(bootstrap_servers=bootstrap, partitions=4, metrics_port=0).namespaced(f"stage-{run}")
    topics = Topics(f"stage-{run}")
    # Every topic the bolts write to: on a broker that creates none on first use, the count bolt's counts were all
    # refused, and the row timed the handling of their delivery failures.
    outputs = (topics.split, topics.words, topics.counts)
    create_topics(config.client(), [TopicSpec(config.acker_topic, 4), *(TopicSpec(t, 4) for t in outputs)])
    if stage == "split":
        values: list[tuple[bytes, bytes | None]] = [(line, None) for line in lines]
        topic, bolt = topics.split, Bolt(config, topics.split, f"{topics.prefix}-split", split_function(topics))
    else:
        values = [(word, word) for line in lines for word in line.split()]
        function = count_function(topics, Counter())
        topic, bolt = topics.words, Bolt(config, topics.words, f"{topics.prefix}-count", function, basic=False)
    _fill(bootstrap, topic, values, tracked)
    measured_peak = cpu.reset_peak_rss()  # the fill's and the runs' before are not the bolt's
    try:
        while bolt.counters["processed"] == 0:  # joined, assigned, and the first message in
            bolt.step(0.1)
        first = bolt.counters["processed"]
        started = _cpu_s()
        while bolt.counters["processed"] < len(values):
            bolt.step(0.1)
        assert bolt.flush(60) == 0
        used = _cpu_s() - started
        assert not bolt.counters["child_delivery_failures"], f"{stage}: its messages were not all delivered"
        peak = cpu.peak_rss_mib(os.getpid()) if measured_peak else float("nan")
    finally:
        bolt.close()
    return used / (len(values) - first) * 1e6, peak


def _client_run(bootstrap: str, tracked: bool, n: int) -> tuple[float, float]:
    """CPU microseconds per message to produce ``n`` small messages, then to consume them (reading their headers)."""
    topic = f"stage-client-{uuid.uuid4().hex[:8]}"
    create_topics({"bootstrap.servers": bootstrap}, [TopicSpec(topic, 1)])
    failed: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                         "delivery.report.only.error": True,
                         "on_delivery": lambda error, _: failed.append(error)})  # fmt: skip
    headers = _anchor_header(random.Random(3)) if tracked else None
    started = _cpu_s()
    for _ in range(n):
        produce(producer, topic, b"word", key=b"word", headers=headers)
    assert producer.flush(60) == 0 and not failed, failed[:1]
    produced = _cpu_s() - started
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read, started, deadline = 0, -1.0, time.monotonic() + 120
    while read < n:
        assert time.monotonic() < deadline, f"{read} of {n} messages read in 120 s"
        records = consumer.consume(500, 1.0)
        if records and started < 0:
            started = _cpu_s()
        for record in records:
            if record.error() is None:
                read += 1
                record.headers()
    consumed = _cpu_s() - started
    consumer.close()
    return produced / n * 1e6, consumed / n * 1e6


Runs = dict[bool, list[tuple[float, ...]]]  # tracked? -> what each run of a measure returned, in order


def _pairs(measure: Callable[[bool], tuple[float, ...]], rounds: int) -> Runs:
    """Untracked and tracked alternately (the order swapped every round): what each run measured."""
    got: Runs = {False: [], True: []}
    for done in range(rounds):
        for tracked in (False, True) if done % 2 == 0 else (True, False):
            got[tracked].append(measure(tracked))
    return got


def _row(name: str, got: Runs, figure: int = 0) -> None:
    """A table row of one figure of the runs: the medians untracked and tracked, the difference, and the paired
    ratios' median (range)."""
    untracked, tracked = ([run[figure] for run in got[mode]] for mode in (False, True))
    ratios = [t / u for t, u in zip(tracked, untracked, strict=True)]
    plain, anchored = statistics.median(untracked), statistics.median(tracked)
    print(f"| {name} | {plain:.2f} | {anchored:.2f} | {anchored - plain:+.2f} | "
          f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None, help="pairs of runs per measure (default 4; 1 quick)")
    args = parser.parse_args()
    n = args.sentences or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 4)
    lines = list(sentences(n, seed=1))
    words = sum(len(line.split()) for line in lines)
    bolts = {"split bolt (a sentence)": "split", "count bolt (a word)": "count"}
    tune_gc()  # as every stage of the project tunes its collector: without, a fifth of a bolt's time was collections
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        bootstrap = cluster.bootstrap_servers
        _bolt_run(bootstrap, "split", True, lines=lines[: max(1, n // 10)])  # the broker and the code warmed up
        print(f"\n{n:,} sentences ({words:,} words); medians of {rounds} pair(s), paired ratios median (range)\n")
        print("| CPU µs per input message | untracked | tracked | extra | tracked / untracked |")
        print("|---|---:|---:|---:|---:|")
        got: dict[str, Runs] = {}
        for name, stage in bolts.items():
            got[name] = _pairs(functools.partial(_bolt_run, bootstrap, stage, lines=lines), rounds)
            _row(name, got[name])
        clients = _pairs(lambda tracked: _client_run(bootstrap, tracked, words), rounds)
        _row("produce a message (client only)", clients, 0)
        _row("consume a message (client only)", clients, 1)
    print("\n| peak resident memory of the process while the bolt ran, MiB | untracked | tracked | extra | "
          "tracked / untracked |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for name, runs in got.items():
        if any(math.isnan(run[1]) for mode in runs.values() for run in mode):
            print(f"| {name} | not measured here (no /proc/self/clear_refs) | | | |")
        else:
            _row(name, runs, 1)


if __name__ == "__main__":
    main()
