"""Cost of the guarantee: the word-count pipeline tracked vs untracked, same input, same run.

Run: ``.venv/bin/python -m benchmarks.pipeline_bench [--quick]`` (starts a local broker unless
``--bootstrap-servers`` names one). Prints a Markdown table.

For each mode, ``--sentences`` generated sentences are written to a fresh source topic first; then the stages start
as separate processes (`acker wordcount spout|split|count`, and `acker run` when tracked), one process each.
Throughput is words counted per second, measured on the sink topic from the timestamp of its first record to the
timestamp of its last (so process start-up is not counted). Tracked mode also checks that every sentence was acked.
Storm reports 5 to 8 × lower throughput with acking on; the target here is tracked ≥ 0.8 × untracked.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from acker.config import ServiceConfig, to_argv
from acker.examples.wordcount import SPOUT, Topics, sentences
from acker.examples.wordcount_cli import follow_outcomes, produce
from acker.kafka.clients import TopicSpec, create_topics
from acker.kafka.provision import kafka_cluster


def _sink_span(config: ServiceConfig, topic: str, partitions: int, expected: int, timeout_s: float) -> float:
    """Seconds between the first and the last record of the sink, once it holds ``expected`` records."""
    consumer = Consumer(config.client(**{"group.id": f"sink-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + timeout_s
    while sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts) < expected:
        assert time.monotonic() < deadline, "the pipeline did not count every word in time"
        time.sleep(0.5)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    first, last, seen = None, None, 0
    while seen < expected:
        for record in consumer.consume(1000, timeout=1):
            if record.error() is None:
                ts = record.timestamp()[1]
                first = ts if first is None else min(first, ts)
                last = ts if last is None else max(last, ts)
                seen += 1
    consumer.close()
    assert first is not None and last is not None
    return (last - first) / 1000


def _run(bootstrap: str, lines: list[bytes], tracked: bool, partitions: int) -> float:
    run = uuid.uuid4().hex[:8]
    config = ServiceConfig(bootstrap_servers=bootstrap, acker_topic=f"acker-{run}", group=f"acker-{run}",
                           outcome_prefix=f"out-{run}.", dlq_topic=f"dlq-{run}", status_topic=f"st-{run}",
                           partitions=partitions, metrics_port=0)  # fmt: skip
    topics = Topics(f"wc-{run}")
    create_topics(config.client(), [
        TopicSpec(config.acker_topic, partitions), TopicSpec(config.outcome_topic(SPOUT), partitions),
        *(TopicSpec(t, partitions) for t in (topics.sentences, topics.split, topics.words, topics.counts)),
    ])  # fmt: skip
    ids = produce(config, topics.sentences, lines)
    common, _ = to_argv(config)
    stage = [sys.executable, "-m", "acker.cli", "wordcount"]
    argvs = [
        [*stage, "spout", *common, "--prefix", topics.prefix, *([] if tracked else ["--untracked"])],
        [*stage, "split", *common, "--prefix", topics.prefix],
        [*stage, "count", *common, "--prefix", topics.prefix],
    ]
    if tracked:
        argvs.append([sys.executable, "-m", "acker.cli", "run", *common, "--log-level", "WARNING"])
    processes = [subprocess.Popen(argv) for argv in argvs]
    try:
        words = sum(len(line.split()) for line in lines)
        span = _sink_span(config, topics.counts, partitions, words, timeout_s=600)
        if tracked:
            poll = follow_outcomes(config, SPOUT)
            deadline = time.monotonic() + 120
            seen = poll(0.5)
            while not all(m in seen for m in ids):
                assert time.monotonic() < deadline, "not every sentence got an outcome"
                seen = poll(0.5)
            assert all(seen[m][0] == "ACK" for m in ids), "a sentence was not acked"
        return words / span
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.sentences or (5_000 if args.quick else 50_000)
    repeat = 1 if args.quick else args.repeat
    lines = list(sentences(n, seed=1))
    words = sum(len(line.split()) for line in lines)
    rates: dict[bool, list[float]] = {True: [], False: []}
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        for run in range(repeat):
            for tracked in (False, True):  # alternate, so that drift of a noisy machine hits both
                rates[tracked].append(_run(cluster.bootstrap_servers, lines, tracked, args.partitions))
                print(f"run {run + 1} {'tracked' if tracked else 'untracked'}: {rates[tracked][-1]:,.0f} words/s")
    untracked, tracked = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"\nworkload: {n:,} sentences, {words:,} words; one process per stage; median of {repeat} run(s)\n")
    print("| mode | words counted/s | ratio |")
    print("|---|---:|---:|")
    print(f"| untracked (at-most-once, no acker) | {untracked:,.0f} | 1.00 |")
    print(f"| tracked (acker service, every sentence acked) | {tracked:,.0f} | {tracked / untracked:.2f} |")


if __name__ == "__main__":
    main()
