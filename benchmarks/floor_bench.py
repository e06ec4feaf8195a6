"""The floor of the guarantee's cost: the word count's Kafka traffic, tracked and untracked, without tracking logic.

Run: ``.venv/bin/python -m benchmarks.floor_bench [--quick] [--repeat N]`` (starts a local broker unless
``--bootstrap-servers`` names one). Prints Markdown tables.

`pipeline_bench` compares the project's word count tracked and untracked. This benchmark asks how much of the
tracked mode's extra CPU an implementation of the same design pays on this machine with no tracking logic at all, and
how fast it could run tracked. The stages here are plain confluent-kafka loops (`_Stage`), with the project's client
settings (`ServiceConfig.stream_consumer`, `ServiceConfig.stage_producer`) and nothing else, one process each, as in
`pipeline_bench`:

- **untracked floor**: spout (sentences → split topic), split (a message per word, keyed by word), count (a running
  count per word to the sink). No header, no acker.
- **tracked floor**: the same, plus what the guarantee puts on Kafka, at the rate the project's stages put it there: a
  16-byte ``acker.ids`` header on every data message (made from a counter, not drawn), read by the next stage; acker
  records gathered per acker partition for ``ack_linger_ms`` (the project's setting): an init from the spout per
  sentence (25 bytes, the project's columnar size), an ack from the split per sentence and from the count per word
  (17 bytes; not combined per tree, as the project's clients combine them; no encoding); an acker process that reads
  the acker topic and writes, for each record of inits, an outcome record of 16 bytes an init (no decoding, no
  tracking); the spout reading its outcome topic as the project's spout does (`acker.spout.outcome_consumer`),
  without decoding. No ids drawn, no XOR, no pending trees, no delivery callbacks, no Avro.
- **padded floor**: both, each stage spinning on every input message for the CPU that brings its untracked mode to the
  project's (measured once, after the warm-up): an implementation as heavy as the project's untracked stages, whose
  tracking costs nothing but its Kafka traffic.

Each round runs the floor, the padded floor and the project's word count (`pipeline_bench._run`), untracked and
tracked, in an order reversed every other round. The CPU figures (every process of a pipeline and the local broker,
per 1,000 words, from the first sentence written until the sink holds every count) give the floor's extra CPU a
word, E, and the project's untracked CPU a word, U; where both modes keep the cores busy, throughput follows CPU per
word, and U / (U + E) is what an implementation as heavy as the project's could reach with free tracking logic. The
padded floor measures that as throughput, without the model.

Then latency at a steady rate, as `pipeline_bench` measures it (``--latency-s``): a fresh floor pipeline and a fresh
word count of each mode are given sentences at half the project's tracked throughput, each with a marker word of its
own, and a sentence's delay is from its record's timestamp to its marker word's count in the sink (the first 10 s,
2 s with ``--quick``, not counted): how much of the project's extra latency tracked its Kafka traffic alone brings.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import statistics
import struct
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

from acker.cli import tune_gc
from acker.config import ServiceConfig
from acker.examples.wordcount import Topics, sentences
from acker.headers import HEADER, HeaderList
from acker.kafka.clients import TopicSpec, consume_available, create_topics, end_offsets
from acker.kafka.provision import Cluster, kafka_cluster
from acker.spout import SpoutSettings, outcome_consumer
from benchmarks.pipeline_bench import (
    LATENCY_HEADER,
    Latencies,
    Paced,
    Pipeline,
    PipelineOf,
    Round,
    Stages,
    _run,
    _wait_ready,
    arguments,
    latency,
    latency_row,
    latency_seconds,
    measured,
    paced,
    peak_mib,
    running,
    warm_up_seconds,
)

_MESSAGE = 25  # bytes an acker message takes in a columnar record (kind, anchor, value; an init's offset too)
_OUTCOME = 16  # bytes an outcome takes in an outcome record (anchor, offset; its code and latency about nothing)
_IDS = struct.Struct("<qq")


class _Stage:
    """One stage of the floor pipeline, a plain consumer and producer loop (see the module's note)."""

    def __init__(self, config: ServiceConfig, topics: Topics, name: str, tracked: bool, pad_ns: int = 0) -> None:
        self.config, self.topics, self.name, self.tracked = config, topics, name, tracked
        self.pad_ns = pad_ns  # CPU spent on each input message, standing for a stage's own work
        # The acker's is the service's outcome producer (a 1 ms linger); the stages' are the project's stage producer.
        outcomes = {"enable.idempotence": True, "linger.ms": 1}
        self.producer = Producer(config.producer(**outcomes) if name == "acker" else config.stage_producer())
        self.batches: dict[int, bytearray] = {}
        self.started: dict[int, float] = {}
        self.sent = 0  # data messages sent with a header (their ids: a counter)
        self.acked = 0  # acker messages, spread over the acker partitions in turn, as random anchors spread them
        self.counts: Counter[bytes] = Counter()
        source = {"spout": topics.sentences, "split": topics.split, "count": topics.words, "acker": config.acker_topic}
        self.consumer = Consumer(config.stream_consumer(**{"group.id": f"{topics.prefix}-{name}",
                                                           "auto.offset.reset": "earliest"}))  # fmt: skip
        self.consumer.subscribe([source[name]])
        self.outcomes: Consumer | None = None
        if name == "spout" and tracked:  # read as the project's spout reads them, from their end
            settings = SpoutSettings(topics.spout, topics.sentences, topics.split)
            self.outcomes = Consumer(outcome_consumer(config, settings, f"{topics.prefix}-outcomes"))
            topic = config.outcome_topic(topics.spout)
            parts = [TopicPartition(topic, p) for p in range(config.partitions)]
            ends = end_offsets(self.outcomes, parts)
            self.outcomes.assign([TopicPartition(topic, p.partition, end) for p, end in zip(parts, ends, strict=True)])

    def header(self) -> HeaderList | None:
        self.sent += 1
        return [(HEADER, _IDS.pack(self.sent, self.sent))] if self.tracked else None

    def acker_message(self, init: bool = False) -> None:
        if not self.tracked:
            return
        self.acked += 1
        partition = self.acked % self.config.partitions
        batch = self.batches.get(partition)
        if batch is None:
            batch = self.batches[partition] = bytearray()
            self.started[partition] = time.monotonic()
        batch += b"\1" * (_MESSAGE if init else _MESSAGE - 8)

    def flush_acker(self, now: float) -> None:
        linger_s = self.config.ack_linger_ms / 1000
        for partition in [p for p, at in self.started.items() if now - at >= linger_s]:
            del self.started[partition]
            value = bytes(self.batches.pop(partition))
            self.producer.produce(self.config.acker_topic, value, partition=partition,
                                  key=b"i" if self.name == "spout" else b"a")  # fmt: skip

    def step(self) -> None:
        topics = self.topics
        for record in consume_available(self.consumer, 500, 0.1):
            if record.error() is not None:
                continue
            if self.tracked and self.name in ("split", "count"):
                record.headers()  # the anchors the stage before wrote
            value = record.value() or b""
            if self.pad_ns:
                end = time.thread_time_ns() + self.pad_ns
                while time.thread_time_ns() < end:
                    pass
            if self.name == "spout":
                self.producer.produce(topics.split, value, headers=self.header())
                self.acker_message(init=True)
            elif self.name == "split":
                for word in value.split():
                    self.producer.produce(topics.words, word, key=word, headers=self.header())
                self.acker_message()
            elif self.name == "count":
                self.counts[value] += 1
                self.producer.produce(topics.counts, str(self.counts[value]).encode(), key=value)
                self.acker_message()
            elif record.key() == b"i":  # the acker: an outcome for every init, decided by nothing
                outcomes = b"\2" * (len(value) // _MESSAGE * _OUTCOME)
                partition = (record.partition() or 0) % self.config.partitions
                self.producer.produce(self.config.outcome_topic(topics.spout), outcomes, key=b"0", partition=partition)
        if self.outcomes is not None:
            consume_available(self.outcomes, 1000, 0)
        self.flush_acker(time.monotonic())
        self.producer.poll(0)


def serve(argv: list[str]) -> None:
    """``serve NAME PREFIX BOOTSTRAP PARTITIONS LINGER_MS TRACKED PAD_NS``: one stage, until SIGTERM."""
    name, prefix, bootstrap, partitions, linger_ms, tracked, pad_ns = argv
    config = ServiceConfig(bootstrap_servers=bootstrap, partitions=int(partitions), ack_linger_ms=int(linger_ms),
                           metrics_port=0).namespaced(prefix)  # fmt: skip
    stage = _Stage(config, Topics(prefix), name, tracked == "1", int(pad_ns))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tune_gc()  # as every stage of the project tunes its collector
    while not stop.is_set():
        stage.step()
    stage.producer.flush(30)


@contextlib.contextmanager
def _floor_pipeline(
    cluster: Cluster, tracked: bool, stages: Stages, pads: dict[str, int] | None = None
) -> Iterator[Pipeline]:
    """The floor pipeline of one mode on fresh topics, one process a stage, each in its group with all its
    partitions assigned."""
    partitions = stages.partitions
    linger_ms = ServiceConfig.ack_linger_ms if stages.ack_linger_ms is None else stages.ack_linger_ms
    prefix = f"floor-{uuid.uuid4().hex[:8]}"
    config = ServiceConfig(bootstrap_servers=cluster.bootstrap_servers, partitions=partitions,
                           metrics_port=0).namespaced(prefix)  # fmt: skip
    topics = Topics(prefix)
    create_topics(config.client(), [
        TopicSpec(config.acker_topic, partitions), TopicSpec(config.outcome_topic(topics.spout), partitions),
        *(TopicSpec(t, partitions) for t in (topics.sentences, topics.split, topics.words, topics.counts)),
    ])  # fmt: skip
    names = ["spout", "split", "count", *(["acker"] if tracked else [])]
    common = [prefix, cluster.bootstrap_servers, str(partitions), str(linger_ms), "1" if tracked else "0"]
    pads = pads or {}
    argvs = {name: [sys.executable, "-m", "benchmarks.floor_bench", "serve", name, *common, str(pads.get(name, 0))]
             for name in names}  # fmt: skip
    with running(cluster, argvs) as pids:
        _wait_ready(config, {f"{prefix}-{name}": partitions for name in names})
        yield Pipeline(config, topics, partitions, pids)


def _floor(
    cluster: Cluster, lines: list[bytes], tracked: bool, stages: Stages, pads: dict[str, int] | None = None
) -> Round:
    with _floor_pipeline(cluster, tracked, stages, pads) as pipeline:
        _, rate, used = measured(pipeline.config, pipeline.topics, pipeline.partitions, lines, pipeline.pids)
        return Round(rate, used, peak_mib(pipeline.pids))


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2:])
        return
    args = arguments(__doc__).parse_args()
    n = args.sentences or (5_000 if args.quick else 50_000)
    lines = list(sentences(n, seed=1))
    stages = Stages(args.partitions, ack_linger_ms=args.ack_linger_ms)
    runs: list[tuple[str, Run, bool]] = [
        ("floor, untracked", _floor, False), ("floor, tracked", _floor, True),
        ("project, untracked", _run, False), ("project, tracked", _run, True),
    ]  # fmt: skip
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        for done in range(0 if args.quick else args.warm_up):  # the broker's JIT compiler, mostly
            for _, run, tracked in runs:
                run(cluster, lines[: max(1, n // 2)], tracked, stages)
            print(f"warm-up round {done + 1} done", flush=True)
        pads = _pads(lines, _floor(cluster, lines, False, stages), _run(cluster, lines, False, stages))
        print(f"padding the floor's stages, CPU ns an input message: {pads}", flush=True)
        padded = functools.partial(_floor, pads=pads)
        runs[2:2] = [("padded floor, untracked", padded, False), ("padded floor, tracked", padded, True)]
        results: dict[str, list[Round]] = {label: [] for label, _, _ in runs}
        for done in range(args.repeat or (1 if args.quick else 3)):
            for label, run, tracked in runs if done % 2 == 0 else runs[::-1]:  # the machine drifts: both ways round
                results[label].append(run(cluster, lines, tracked, stages))
                print(f"round {done + 1}, {label}: {results[label][-1].words_per_s:,.0f} words/s", flush=True)
        # Every pipeline at one rate, half the project's tracked one: how much of the project's extra latency tracked
        # its Kafka traffic alone brings.
        rate = statistics.median(r.words_per_s for r in results["project, tracked"])
        at = paced(rate, sum(len(line.split()) for line in lines) / n, latency_seconds(args), warm_up_seconds(args))
        latencies: dict[str, Latencies] = {}
        for label, pipeline_of, tracked in _LATENCY_ROUNDS if at.lines else ():
            latencies[label] = latency(cluster, at.lines, at.per_s, tracked, stages, skip=at.skip,
                                       pipeline_of=pipeline_of)  # fmt: skip
            print(f"latency round, {label}: {latencies[label].rate:,.0f} sentences/s", flush=True)
    _report(n, results)
    if latencies:
        _report_latency(at, latencies)


Run = Callable[[Cluster, list[bytes], bool, Stages], Round]


_LATENCY_ROUNDS: list[tuple[str, PipelineOf | None, bool]] = [
    ("floor, untracked", _floor_pipeline, False), ("floor, tracked", _floor_pipeline, True),
    ("project, untracked", None, False), ("project, tracked", None, True),
]  # fmt: skip


def _report_latency(at: Paced, latencies: dict[str, Latencies]) -> None:
    print(f"\nlatency: sentences written at {at.per_s:,.0f} a second (half the project's tracked rate), each with a "
          f"marker word of its own, to a pipeline of each kind: {at.warm_up_s:.0f} s of them not counted "
          f"(warm-up), then {len(at.lines) - at.skip:,} measured\n")  # fmt: skip
    print(f"| a sentence written → its marker word counted, ms | sentences/s written | {LATENCY_HEADER} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, got in latencies.items():
        base = latencies[label.split(",")[0] + ", untracked"]  # the same kind's
        print(latency_row(label, got.rate, got.counted_ms, at.per_s, float(np.percentile(base.counted_ms, 99))))


def _pads(lines: list[bytes], floor: Round, project: Round) -> dict[str, int]:
    """CPU ns an input message that brings each floor stage to the project's, untracked (the same run's): what
    the project's stages do beyond moving the messages, as a spin, with no tracking logic."""
    words = sum(len(line.split()) for line in lines)
    inputs = {"spout": len(lines), "split": len(lines), "count": words}
    return {name: max(0, int((project.cpu[name] - floor.cpu[name]) / 1000 * words / count * 1e9))
            for name, count in inputs.items()}  # fmt: skip


def _report(n: int, results: dict[str, list[Round]]) -> None:
    names = ["spout", "split", "count", "acker", "broker"]
    rates = {label: statistics.median(r.words_per_s for r in runs) for label, runs in results.items()}
    used = {label: {name: statistics.median(r.cpu.get(name, 0.0) for r in runs) for name in names}
            for label, runs in results.items()}  # fmt: skip
    total = {label: sum(row.values()) for label, row in used.items()}
    print(f"\n{n:,} sentences; medians of {len(next(iter(results.values())))} round(s)\n")
    print("| pipeline | words/s | ratio to its untracked | CPU s per 1,000 words: " + " | ".join(names) + " | total |")
    print("|---|---:|---:|" + "---:|" * (len(names) + 1))
    for label, row in used.items():
        cells = " | ".join(f"{row[name]:.4f}" for name in names)
        ratio = rates[label] / rates[f"{label.rsplit(', ', 1)[0]}, untracked"]  # of the medians (the rounds': below)
        print(f"| {label} | {rates[label]:,.0f} | {ratio:.2f} | {cells} | {total[label]:.4f} |")
    stages = names[:-1]  # the broker's memory is not measured (shared by every run)
    print("\n| pipeline | peak resident memory, MiB: " + " | ".join(stages) + " |")
    print("|---|" + "---:|" * len(stages))
    for label, runs in results.items():
        peaks = {name: statistics.median(r.peak_mib.get(name, math.nan) for r in runs) for name in stages}
        print(f"| {label} | " + " | ".join("" if math.isnan(v) else f"{v:.0f}" for v in peaks.values()) + " |")
    extra = total["floor, tracked"] - total["floor, untracked"]
    plain, tracked = total["project, untracked"], total["project, tracked"]
    print(
        f"\nthe floor's extra CPU a word (E): {extra * 1000:.2f} µs; the project's untracked CPU a word (U): "
        f"{plain * 1000:.2f} µs, tracked: {tracked * 1000:.2f} µs (extra {(tracked - plain) * 1000:.2f} µs)"
    )
    print(f"U / (U + E): {plain / (plain + extra):.2f}; the project's by CPU, U / tracked: {plain / tracked:.2f}; "
          f"by throughput: {rates['project, tracked'] / rates['project, untracked']:.2f}; the floor's own by "
          f"throughput: {rates['floor, tracked'] / rates['floor, untracked']:.2f}")  # fmt: skip
    bounds = [
        _bound(*(results[label][i].cpu for label in ("floor, untracked", "floor, tracked", "project, untracked")))
        for i in range(len(results["floor, untracked"]))
    ]
    print(f"U / (U + E) of each round: {', '.join(f'{b:.3f}' for b in bounds)} "
          f"(median {statistics.median(bounds):.3f})")  # fmt: skip
    for kind in ("floor", "padded floor", "project"):
        if f"{kind}, tracked" in results:
            paired = [
                t.words_per_s / u.words_per_s
                for t, u in zip(results[f"{kind}, tracked"], results[f"{kind}, untracked"], strict=True)
            ]
            print(f"{kind}: tracked / untracked throughput in each round: {', '.join(f'{r:.2f}' for r in paired)} "
                  f"(median {statistics.median(paired):.2f})")  # fmt: skip


def _bound(floor: dict[str, float], floor_tracked: dict[str, float], plain: dict[str, float]) -> float:
    """U / (U + E) of one round: the project's untracked CPU a word over it plus the floor's extra."""
    extra = sum(floor_tracked.values()) - sum(floor.values())
    return sum(plain.values()) / (sum(plain.values()) + extra)


if __name__ == "__main__":
    main()
