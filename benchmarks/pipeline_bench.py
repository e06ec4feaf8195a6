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
processes, the throughput ratio is close to the ratio of the total CPU per word of the two modes. And the peak
resident memory of each process (Linux's VmHWM, read when the sink holds every count and, tracked, every sentence is
acked).

Then latency at a steady rate: a fresh pipeline of each mode is given sentences at one steady rate, half the
tracked mode's measured throughput, each with a marker word of its own (``~<n>``) as its last word. The delay of a
sentence is from its record's timestamp to that of its marker word's count in the sink (one clock: every process runs
here), and, tracked, the acker's complete latency of its tree (from the spout's init to the last ack). The first
10 s of sentences (2 s with ``--quick``) are a warm-up, not counted. With ``--quick`` the tracked throughput is that
of a burst smaller than the spout's max pending, which never waits for an ack: half of it may be more than the
tracked mode sustains, and the delays then grow through the round.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from acker.config import ServiceConfig, to_argv
from acker.examples.wordcount import Topics, sentences
from acker.examples.wordcount_cli import follow_outcomes, produce
from acker.kafka.clients import TopicSpec, create_topics, end_offsets
from acker.kafka.clients import produce as send
from acker.kafka.provision import Cluster, kafka_cluster
from acker.spout import SpoutSettings
from acker.wire import decode_outcomes
from benchmarks import cpu


def _read_from_start(
    config: ServiceConfig,
    topic: str,
    partitions: int,
    *,
    take: Callable[[Message], None],
    done: Callable[[], bool],
    timeout_s: float,
    what: str,
) -> None:
    """Every record of ``topic`` from its beginning to ``take`` until ``done()``; fails after ``timeout_s``."""
    consumer = Consumer(config.client(**{"group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    deadline = time.monotonic() + timeout_s
    try:
        while not done():
            assert time.monotonic() < deadline, f"{what} in {timeout_s:.0f} s"
            for record in consumer.consume(1000, timeout=0.5):
                if record.error() is None:
                    take(record)
    finally:
        consumer.close()


def _sink_span(
    config: ServiceConfig, topic: str, partitions: int, expected: int, *, timeout_s: float, full: Callable[[], object]
) -> float:
    """Seconds between the first and the last record of the sink, once it holds ``expected`` records; ``full`` is
    called as soon as it is seen to hold them (asked every 0.1 s), before they are read."""
    consumer = Consumer(config.client(**{"group.id": f"sink-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + timeout_s
    while sum(end_offsets(consumer, parts)) < expected:
        assert time.monotonic() < deadline, "the pipeline did not count every word in time"
        time.sleep(0.1)
    consumer.close()
    full()
    stamps: list[int] = []
    _read_from_start(config, topic, partitions, take=lambda record: stamps.append(record.timestamp()[1]),
                     done=lambda: len(stamps) >= expected, timeout_s=timeout_s,
                     what="the sink's records were not all read")  # fmt: skip
    return (max(stamps) - min(stamps)) / 1000


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


@dataclass(frozen=True)
class Round:
    """What one round of one mode measured."""

    words_per_s: float
    cpu: dict[str, float]  # CPU seconds per 1,000 words, by process (and the broker)
    peak_mib: dict[str, float]  # peak resident memory of each stage process (not the broker's), MiB


@dataclass(frozen=True)
class Pipeline:
    """A running word count: its settings, its topics, the pid of each process (and the local broker's)."""

    config: ServiceConfig
    topics: Topics
    partitions: int
    pids: dict[str, int]


def peak_mib(pids: dict[str, int]) -> dict[str, float]:
    """The peak resident memory so far of each process of ``pids`` but the broker, MiB."""
    return {name: cpu.peak_rss_mib(pid) for name, pid in pids.items() if name != "broker"}


@contextlib.contextmanager
def running(cluster: Cluster, argvs: dict[str, list[str]]) -> Iterator[dict[str, int]]:
    """The processes ``argvs`` (by name) started; yields their pids, and the local broker's as ``broker``; ends them."""
    processes = [subprocess.Popen(argv) for argv in argvs.values()]
    pids = {name: process.pid for name, process in zip(argvs, processes, strict=True)}
    if cluster.pid is not None:
        pids["broker"] = cluster.pid
    try:
        yield pids
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)


@contextlib.contextmanager
def _pipeline(cluster: Cluster, tracked: bool, stages: Stages) -> Iterator[Pipeline]:
    """A word count on fresh topics, one process per stage (and `acker run` when tracked), each in its group with
    all its partitions assigned."""
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
    with running(cluster, argvs) as pids:
        # The spout reads its source in its group and its replay topic in another (`SpoutSettings.replay_group`).
        spout = SpoutSettings(topics.spout, topics.sentences, topics.split, group=topics.spout_group)
        groups = {spout.consumer_group: partitions, spout.replay_group: partitions,
                  f"{topics.prefix}-split": partitions, f"{topics.prefix}-count": partitions}  # fmt: skip
        if tracked:
            groups[config.group] = acker_partitions
        _wait_ready(config, groups)
        yield Pipeline(config, topics, partitions, pids)


def _run(cluster: Cluster, lines: list[bytes], tracked: bool, stages: Stages) -> Round:
    """Words counted per second, the CPU seconds per 1,000 words of each process, and the stages' peak memory."""
    with _pipeline(cluster, tracked, stages) as pipeline:
        config, topics = pipeline.config, pipeline.topics
        ids, rate, used = measured(config, topics, pipeline.partitions, lines, pipeline.pids)
        if tracked:
            with follow_outcomes(config, topics.spout) as poll:
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
        return Round(rate, used, peak_mib(pipeline.pids))


MARKER = b"~"
"""The marker words of the latency round begin with it (``~0``, ``~1``, ...): no generated word does."""


def _marker(index: int) -> bytes:
    """The marker word of the latency round's sentence ``index``."""
    return MARKER + b"%d" % index


LATENCY_WARM_UP_S = 10.0
"""The latency round's first seconds of sentences, left out of its figures: just started, a tracked pipeline falls
behind by up to a second and takes seconds to catch up (at 4,116 sentences/s on 2 cores, the stages, the acker and
the broker used 1.4 cores, and caught up after 4 to 7 s); the untracked one does not."""
QUICK_WARM_UP_S = 2.0
"""A quick run's (a smoke run, whose figures are not compared): long enough to leave the start out."""


@dataclass(frozen=True)
class Latencies:
    """What one latency round measured: each sentence's delays in ms, in the order they were written (warm-up
    left out)."""

    rate: float  # sentences written a second
    counted_ms: np.ndarray  # a sentence written → its marker word's count written (the sink record's timestamp)
    complete_ms: np.ndarray  # the project's, tracked: the acker's complete latency (the spout's init → the tree's
    # last ack); or empty


def _paced_write(
    config: ServiceConfig, topic: str, lines: list[bytes], per_s: float
) -> tuple[dict[bytes, tuple[int, str]], float]:
    """Write ``lines`` at ``per_s`` a second, each with a marker word of its own last (``~<index>``): by marker, the
    time each was written (ms, the record's timestamp) and its message id (coordinates); and the rate achieved."""
    producer = Producer(config.producer(**{"enable.idempotence": True}))
    written: dict[bytes, tuple[int, str]] = {}
    failed: list[KafkaError] = []

    def delivered(marker: bytes, error: KafkaError | None, record: Message) -> None:
        if error is not None:
            failed.append(error)
        else:
            written[marker] = record.timestamp()[1], f"{record.topic()}/{record.partition()}/{record.offset()}"

    begin = time.perf_counter()
    for i, line in enumerate(lines):
        due = begin + i / per_s
        while (wait := due - time.perf_counter()) > 0:
            producer.poll(wait)  # returns early when a delivery report is served
        marker = _marker(i)
        send(producer, topic, line + b" " + marker, on_delivery=functools.partial(delivered, marker))
        producer.poll(0)
    achieved = len(lines) / (time.perf_counter() - begin)
    assert producer.flush(60) == 0 and not failed, f"sentences not written: {failed[:3]}"
    return written, achieved


PipelineOf = Callable[[Cluster, bool, Stages], contextlib.AbstractContextManager[Pipeline]]
"""Starts a word count of one mode (tracked?) and yields it running, every stage in its group."""


def latency(
    cluster: Cluster,
    lines: list[bytes],
    per_s: float,
    tracked: bool,
    stages: Stages,
    *,
    skip: int,
    pipeline_of: PipelineOf | None = None,
) -> Latencies:
    """``lines`` written at ``per_s`` a second to a fresh pipeline (the project's word count unless ``pipeline_of``
    starts another): the delays of each (`Latencies`) but the first ``skip``. The complete latency is read from the
    outcomes of the project's acker only."""
    with (pipeline_of or _pipeline)(cluster, tracked, stages) as pipeline:
        config, topics, partitions = pipeline.config, pipeline.topics, pipeline.partitions
        written, rate = _paced_write(config, topics.sentences, lines, per_s)
        counted: dict[bytes, int] = {}

        def count(record: Message) -> None:
            if (word := record.key() or b"").startswith(MARKER):
                counted.setdefault(word, record.timestamp()[1])

        _read_from_start(config, topics.counts, partitions, take=count, done=lambda: len(counted) >= len(written),
                         timeout_s=120, what="not every sentence's marker word was counted")  # fmt: skip
        complete: dict[str, int] = {}

        def outcome(record: Message) -> None:
            decoded = decode_outcomes(record.value() or b"")
            assert all(o == "ACK" for o in decoded.outcomes), "a sentence was not acked"
            for msg_id, ms in zip(decoded.msg_ids, decoded.latency_ms, strict=True):
                complete.setdefault(msg_id, ms)

        project = tracked and pipeline_of is None
        if project:
            outcomes = config.outcome_topic(topics.spout)
            _read_from_start(config, outcomes, config.partitions, take=outcome,
                             done=lambda: len(complete) >= len(lines), timeout_s=120,
                             what="not every sentence got an outcome")  # fmt: skip
    markers = [_marker(i) for i in range(skip, len(lines))]
    counted_ms = np.array([counted[m] - written[m][0] for m in markers], dtype=float)
    complete_ms = np.array([complete[written[m][1]] for m in markers] if project else [], dtype=float)
    return Latencies(rate, counted_ms, complete_ms)


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
    parser.add_argument(
        "--latency-s",
        type=float,
        default=None,
        help="measured seconds of each latency round, after 10 s of warm-up (2 quick) [10; quick 5; 0: none]",
    )
    return parser


def latency_seconds(args: argparse.Namespace) -> float:
    """The measured seconds of each latency round `arguments` asked for: ``--latency-s``, else 10 (5 quick)."""
    return float(args.latency_s) if args.latency_s is not None else (5.0 if args.quick else 10.0)


def warm_up_seconds(args: argparse.Namespace) -> float:
    """The first seconds of each latency round left out of its figures: `LATENCY_WARM_UP_S` (`QUICK_WARM_UP_S`)."""
    return QUICK_WARM_UP_S if args.quick else LATENCY_WARM_UP_S


@dataclass(frozen=True)
class Paced:
    """The sentences of the latency rounds: written at ``per_s`` a second, the first ``skip`` of them (``warm_up_s``
    of them) a warm-up."""

    per_s: float
    skip: int
    lines: list[bytes]
    warm_up_s: float


def paced(tracked_words_per_s: float, words_per_sentence: float, latency_s: float, warm_up_s: float) -> Paced:
    """The latency rounds' sentences, at half the tracked mode's measured rate (in sentences: its words a second over
    words a sentence), for ``latency_s`` seconds after ``warm_up_s`` of them; none if ``latency_s`` is 0."""
    per_s = tracked_words_per_s / words_per_sentence / 2
    skip = round(per_s * warm_up_s)
    lines = list(sentences(skip + max(10, round(per_s * latency_s)), seed=2)) if latency_s > 0 else []
    return Paced(per_s, skip, lines, warm_up_s)


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--max-pending", type=int, default=None, help="the spout's max pending trees (tracked)")
    parser.add_argument(
        "--acker-partitions", type=int, default=None, help="of the acker and outcome topics (default: --partitions)"
    )
    args = parser.parse_args()
    n = args.sentences or (5_000 if args.quick else 50_000)
    repeat = args.repeat or (1 if args.quick else 3)
    latency_s = latency_seconds(args)
    lines = list(sentences(n, seed=1))
    words = sum(len(line.split()) for line in lines)
    rounds: dict[bool, list[Round]] = {True: [], False: []}
    stages = Stages(args.partitions, args.max_pending, args.ack_linger_ms, args.acker_partitions)
    latencies: dict[bool, Latencies] = {}
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        if not args.quick:
            _warm_up(cluster, lines[: max(1, n // 2)], stages, args.warm_up)
        for run in range(repeat):
            # Alternate, so that drift of a noisy machine hits both, and neither mode always runs second (the
            # broker's JIT load falls more on the mode that runs second, and in the first rounds).
            for tracked in (False, True) if run % 2 == 0 else (True, False):
                rounds[tracked].append(_run(cluster, lines, tracked, stages))
                print(f"run {run + 1} {_mode(tracked)}: {rounds[tracked][-1].words_per_s:,.0f} words/s", flush=True)
        # Both modes at one rate, half the tracked mode's.
        at = paced(statistics.median(r.words_per_s for r in rounds[True]), words / n, latency_s, warm_up_seconds(args))
        for tracked in (False, True) if at.lines else ():
            latencies[tracked] = latency(cluster, at.lines, at.per_s, tracked, stages, skip=at.skip)
            print(f"latency round {_mode(tracked)}: {latencies[tracked].rate:,.0f} sentences/s", flush=True)
    _report(n, words, repeat, rounds)
    if latencies:
        _report_latency(at, latencies)


def _mode(tracked: bool) -> str:
    return "tracked" if tracked else "untracked"


def _report(n: int, words: int, repeat: int, rounds: dict[bool, list[Round]]) -> None:
    rates = {mode: [r.words_per_s for r in rounds[mode]] for mode in rounds}
    untracked, with_acker = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"\nworkload: {n:,} sentences, {words:,} words; one process per stage; median of {repeat} run(s)\n")
    print("| mode | words counted/s | ratio |")
    print("|---|---:|---:|")
    print(f"| untracked (at-most-once, no acker) | {untracked:,.0f} | 1.00 |")
    print(f"| tracked (acker service, every sentence acked) | {with_acker:,.0f} | {with_acker / untracked:.2f} |")
    # Each round's tracked run and untracked run are next to each other (in an order that alternates): their ratio
    # cancels the machine's drift between rounds.
    paired = statistics.median(t / u for t, u in zip(rates[True], rates[False], strict=True))
    print(f"\nmedian of the ratios of each round (tracked run / the untracked run of the same round): {paired:.2f}")
    for title, field, digits in (
        ("CPU seconds per 1,000 words", "cpu", 3),
        ("peak resident memory, MiB", "peak_mib", 0),
    ):
        table: dict[bool, list[dict[str, float]]] = {mode: [getattr(r, field) for r in rounds[mode]] for mode in rounds}
        names = list(table[True][0])
        print(f"\n| {title} | " + " | ".join(names) + " | total |")
        print("|---|" + "---:|" * (len(names) + 1))
        for mode in (False, True):  # a process the mode does not run (the acker, untracked): a dash
            row = {
                name: statistics.median(run[name] for run in table[mode]) for name in names if name in table[mode][0]
            }
            cells = " | ".join(f"{row[name]:,.{digits}f}" if name in row else "-" for name in names)
            print(f"| {_mode(mode)} | {cells} | {sum(row.values()):,.{digits}f} |")


def _report_latency(at: Paced, latencies: dict[bool, Latencies]) -> None:
    print(f"\nlatency: sentences written at {at.per_s:,.0f} a second (half the tracked mode's rate), each with a "
          f"marker word of its own, to a pipeline of each mode: {at.warm_up_s:.0f} s of them not counted (warm-up), "
          f"then {len(at.lines) - at.skip:,} measured\n")  # fmt: skip
    print(f"| delay, ms | sentences/s written | {LATENCY_HEADER} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = float(np.percentile(latencies[False].counted_ms, 99))
    rows = [(f"{_mode(mode)}: a sentence written → its marker word counted", latencies[mode].rate,
             latencies[mode].counted_ms) for mode in (False, True)]  # fmt: skip
    rows.append(("tracked: complete latency (the spout's init → the tree's last ack, at the acker)",
                 latencies[True].rate, latencies[True].complete_ms))  # fmt: skip
    for label, rate, ms in rows:
        print(latency_row(label, rate, ms, at.per_s, base))


LATENCY_HEADER = "p50 | p99 | max | p99 ratio to untracked | p50 of the last second"
"""The columns of `latency_row`."""


def latency_row(label: str, rate: float, ms: np.ndarray, per_s: float, base_p99: float) -> str:
    """A table row of one latency round: its label, the sentences written a second, and its delays (`LATENCY_HEADER`;
    the ratio is to ``base_p99``)."""
    p50, p99 = np.percentile(ms, [50, 99])
    last = np.median(ms[-max(1, round(per_s)) :])  # far below p50: the round had not caught up with its warm-up yet
    return f"| {label} | {rate:,.0f} | {p50:,.0f} | {p99:,.0f} | {ms.max():,.0f} | {p99 / base_p99:.2f} | {last:,.0f} |"


if __name__ == "__main__":
    main()
