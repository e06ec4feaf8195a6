"""Cost of the guarantee: the word-count pipeline tracked vs untracked, same input, same run.

Run: ``.venv/bin/python -m benchmarks.pipeline_bench [--quick]`` (starts a local broker unless
``--bootstrap-servers`` names one). Prints a Markdown table.

For each mode the stages start as separate processes (`acker wordcount spout|split|count`, and `acker run` when
tracked), one process each, on fresh topics; once every stage's consumer group is stable with all its partitions
assigned (start-up, imports and the acker's compiled kernels are behind every process), ``--sentences`` generated
sentences are written to the source topic. Throughput is words counted per second, measured on the sink topic from
the timestamp of its first record to the timestamp of its last. Tracked mode also checks that every sentence was acked.
Before the measured rounds (except with ``--quick``), ``--warm-up`` rounds (2) of each mode on half the sentences, not
counted, warm the broker up: in the first rounds on a fresh broker its JIT compiler's threads take as much CPU as its
request handlers. The share the compiler took in each warm-up round is printed: it falls slowly (49 % in the first
round, still 19-36 % in rounds 4-6 of one run, start-ups included), so the first measured rounds pay more of it.
Storm reports 5 to 8 × lower throughput with acking on; the target here is tracked ≥ 0.8 × untracked.

It also prints where the CPU went: the CPU seconds of each process (and of the local broker) per 1,000 words, from
the moment the sentences are written until the sink holds every count. On a machine with fewer cores than busy
processes, the throughput ratio is close to the ratio of the total CPU per word of the two modes.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient

from acker.config import ServiceConfig, to_argv
from acker.examples.wordcount import Topics, sentences
from acker.examples.wordcount_cli import follow_outcomes, produce
from acker.kafka.clients import TopicSpec, create_topics
from acker.kafka.provision import Cluster, kafka_cluster
from benchmarks import cpu


def _sink_span(
    config: ServiceConfig, topic: str, partitions: int, expected: int, *, timeout_s: float, full: Callable[[], object]
) -> float:
    """Seconds between the first and the last record of the sink, once it holds ``expected`` records; ``full`` is
    called as soon as it is seen to hold them (asked every 0.1 s), before they are read."""
    consumer = Consumer(config.client(**{"group.id": f"sink-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + timeout_s
    while sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts) < expected:
        assert time.monotonic() < deadline, "the pipeline did not count every word in time"
        time.sleep(0.1)
    full()
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


def measured(
    config: ServiceConfig, topics: Topics, partitions: int, lines: list[bytes], pids: dict[str, int]
) -> tuple[list[str], float, dict[str, float]]:
    """Write ``lines`` to a running pipeline's source topic and wait for every count: the sentences' message ids, the
    words counted per second (`_sink_span`), and the CPU seconds per 1,000 words of each process of ``pids``, from
    the first sentence written until the sink holds every count (not while it is read)."""
    window = cpu.Window(pids)
    ids = produce(config, topics.sentences, lines)
    words = sum(len(line.split()) for line in lines)
    used: dict[str, float] = {}
    span = _sink_span(config, topics.counts, partitions, words, timeout_s=600, full=lambda: used.update(
        {name: seconds * 1000 / words for name, seconds in window.by_process().items()}))  # fmt: skip
    return ids, words / span, used


def _wait_ready(config: ServiceConfig, groups: dict[str, int], timeout_s: float = 120) -> None:
    """Until each consumer group is stable with its topic's ``groups[group]`` partitions all assigned."""
    admin = AdminClient(config.client())
    deadline = time.monotonic() + timeout_s
    while True:
        ready = 0
        for group, future in admin.describe_consumer_groups(list(groups)).items():
            description = future.result(timeout=10)
            assigned = sum(len(m.assignment.topic_partitions) for m in description.members)
            ready += description.state == ConsumerGroupState.STABLE and assigned == groups[group]
        if ready == len(groups):
            return
        assert time.monotonic() < deadline, "the stages did not join their groups in time"
        time.sleep(0.2)


@dataclass(frozen=True)
class Stages:
    """How the pipeline's processes run: the partitions of every topic, and the settings a user may tune."""

    partitions: int = 4
    max_pending: int | None = None  # the spout's (tracked); None: the default
    ack_linger_ms: int | None = None  # how long spout and bolts gather acker messages; None: the default
    acker_partitions: int | None = None  # of the acker and outcome topics; None: ``partitions``


def _run(cluster: Cluster, lines: list[bytes], tracked: bool, stages: Stages) -> tuple[float, dict[str, float]]:
    """Words counted per second, and the CPU seconds per 1,000 words of each process."""
    bootstrap, partitions, max_pending = cluster.bootstrap_servers, stages.partitions, stages.max_pending
    acker_partitions = stages.acker_partitions or partitions
    run = uuid.uuid4().hex[:8]
    config = ServiceConfig(bootstrap_servers=bootstrap, partitions=acker_partitions, metrics_port=0)
    config = config.namespaced(f"wc-{run}")
    if stages.ack_linger_ms is not None:
        config = replace(config, ack_linger_ms=stages.ack_linger_ms)
    topics = Topics(f"wc-{run}")
    create_topics(config.client(), [
        TopicSpec(config.acker_topic, acker_partitions),
        TopicSpec(config.outcome_topic(topics.spout), acker_partitions),
        *(TopicSpec(t, partitions) for t in (topics.sentences, topics.split, topics.words, topics.counts)),
    ])  # fmt: skip
    common, _ = to_argv(config)
    stage = [sys.executable, "-m", "acker.cli", "wordcount"]
    argvs = {
        "spout": [
            *stage,
            "spout",
            *common,
            "--prefix",
            topics.prefix,
            *([] if tracked else ["--untracked"]),
            *(["--max-pending", str(max_pending)] if max_pending else []),
        ],
        "split": [*stage, "split", *common, "--prefix", topics.prefix],
        "count": [*stage, "count", *common, "--prefix", topics.prefix],
    }
    if tracked:
        argvs["acker"] = [sys.executable, "-m", "acker.cli", "run", *common, "--log-level", "WARNING"]
    processes = [subprocess.Popen(argv) for argv in argvs.values()]
    pids = {name: process.pid for name, process in zip(argvs, processes, strict=True)}
    if cluster.pid is not None:
        pids["broker"] = cluster.pid
    try:
        # The spout reads its source and its replay topic.
        groups = {f"{topics.prefix}-spout": 2 * partitions, f"{topics.prefix}-split": partitions,
                  f"{topics.prefix}-count": partitions}  # fmt: skip
        if tracked:
            groups[config.group] = acker_partitions
        _wait_ready(config, groups)
        ids, rate, used = measured(config, topics, partitions, lines, pids)
        if tracked:
            poll = follow_outcomes(config, topics.spout)
            deadline = time.monotonic() + 120
            seen = poll(0.5)
            while not all(m in seen for m in ids):
                assert time.monotonic() < deadline, "not every sentence got an outcome"
                seen = poll(0.5)
            settled = time.monotonic() + 2.0  # and on a while: a second outcome of a sentence comes after its first
            while time.monotonic() < settled:
                seen = poll(0.5)
            assert all(seen[m][0] == "ACK" for m in ids), "a sentence was not acked"
            # A replay (the spout's timeout) would count its words twice and inflate the rate: none may have come.
            assert all(len(seen[m]) == 1 for m in ids), "a sentence got more than one outcome"
        return rate, used
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)


def _warm_up(cluster: Cluster, lines: list[bytes], stages: Stages, rounds: int) -> None:
    """``rounds`` uncounted rounds of both modes; with a local broker, prints the share of its CPU its JIT compiler
    used in each (at least that share: compiler threads that ended during a round are not counted)."""
    for done in range(1, rounds + 1):
        pid = cluster.pid
        before = (cpu.cpu_seconds(pid), cpu.threads(pid, cpu.JVM_COMPILER)) if pid is not None else None
        for tracked in (False, True):
            _run(cluster, lines, tracked, stages)
        if pid is None or before is None:
            print(f"warm-up round {done} done", flush=True)
            continue
        compiled = cpu.threads_spent(before[1], cpu.threads(pid, cpu.JVM_COMPILER))
        share = compiled / max(1e-9, cpu.cpu_seconds(pid) - before[0])
        print(f"warm-up round {done}: the broker's JIT compiler used at least {share:.0%} of its CPU", flush=True)


def arguments(description: str | None) -> argparse.ArgumentParser:
    """The options of a word-count benchmark: where, how much, how many rounds, and the stages' acker linger."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=None, help="measured rounds [3; quick 1]")
    parser.add_argument("--warm-up", type=int, default=2, help="uncounted rounds first (not with --quick)")
    parser.add_argument("--ack-linger-ms", type=int, default=None, help="the stages' acker batches (default: 20)")
    return parser


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--max-pending", type=int, default=None, help="the spout's max pending trees (tracked)")
    parser.add_argument(
        "--acker-partitions", type=int, default=None, help="of the acker and outcome topics (default: --partitions)"
    )
    args = parser.parse_args()
    n = args.sentences or (5_000 if args.quick else 50_000)
    repeat = args.repeat or (1 if args.quick else 3)
    lines = list(sentences(n, seed=1))
    words = sum(len(line.split()) for line in lines)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    stages = Stages(args.partitions, args.max_pending, args.ack_linger_ms, args.acker_partitions)
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        if not args.quick:
            _warm_up(cluster, lines[: max(1, n // 2)], stages, args.warm_up)
        for run in range(repeat):
            # Alternate, so that drift of a noisy machine hits both, and neither mode always runs second (the
            # broker's JIT load falls more on the mode that runs second, and in the first rounds).
            for tracked in (False, True) if run % 2 == 0 else (True, False):
                rate, used = _run(cluster, lines, tracked, stages)
                rates[tracked].append(rate)
                cpus[tracked].append(used)
                print(f"run {run + 1} {'tracked' if tracked else 'untracked'}: {rate:,.0f} words/s")
    untracked, with_acker = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"\nworkload: {n:,} sentences, {words:,} words; one process per stage; median of {repeat} run(s)\n")
    print("| mode | words counted/s | ratio |")
    print("|---|---:|---:|")
    print(f"| untracked (at-most-once, no acker) | {untracked:,.0f} | 1.00 |")
    print(f"| tracked (acker service, every sentence acked) | {with_acker:,.0f} | {with_acker / untracked:.2f} |")
    # Each tracked run follows its untracked run: their ratio cancels the machine's drift between rounds.
    paired = statistics.median(t / u for t, u in zip(rates[True], rates[False], strict=True))
    print(f"\nmedian of the ratios of each round (tracked run / the untracked run of the same round): {paired:.2f}")
    names = list(cpus[True][0])
    median = {mode: {name: statistics.median(run.get(name, 0.0) for run in cpus[mode]) for name in names}
              for mode in (False, True)}  # fmt: skip
    print("\n| CPU seconds per 1,000 words | " + " | ".join(names) + " | total |")
    print("|---|" + "---:|" * (len(names) + 1))
    for mode, label in ((False, "untracked"), (True, "tracked")):
        row = median[mode]
        print(f"| {label} | " + " | ".join(f"{row[name]:.3f}" for name in names) + f" | {sum(row.values()):.3f} |")


if __name__ == "__main__":
    main()
