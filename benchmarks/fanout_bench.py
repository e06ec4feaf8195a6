"""One record fanned out to many children: how long until its tree is acked, against how long its children take to
be processed untracked; the fanning bolt's and the acker's memory.

Run: ``.venv/bin/python -m benchmarks.fanout_bench [--quick] [--children 1000,10000,100000] [--repeat 3]``
(starts a local broker unless ``--bootstrap-servers`` names one). Prints Markdown tables.

The pipeline, each stage a process of this module (``--role``), and `acker run` when tracked, on fresh topics of one
partition each: a spout (source → fan topic), a fan bolt (basic: a record ``<id> <n>`` in, ``n`` children out to the
leaf topic, every child anchored to it) and a leaf bolt (basic: counts the leaves of each record; at the ``n``-th it
writes ``<id>`` out of the pipeline, to the done topic, `Collector.write`). Untracked, the spout writes no anchors and
nothing goes to the acker.

For each size, ``--repeat`` records, one at a time (the next is written once the last is done and, tracked, has its
outcome), timed from the record's timestamp:

- **done**: to the done record's timestamp (its last leaf processed);
- **acked** (tracked): to the timestamp of the outcome record that acks it.

The baseline is the untracked mode's *done*: the ratios are tracked *done* over it (what the acker traffic costs the
work itself) and tracked *acked* over it (how long until the guarantee says the work is done). A tree lives
``--timeout-s`` (300) here, well beyond the largest size, so that each is acked rather than timed out: with the
default 30 s, 300k children of one record were acked at 30.0 s on a loaded 2-vCPU host, and 500k timed out
(docs/benchmarks.md, "Very large fan-out"). Also, per mode: the CPU seconds per 1,000 children of each process, and
the peak resident memory of each (Linux's VmHWM) after each size, the sizes in increasing order, so that a size's peak
is the largest so far.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from acker.argtypes import at_least
from acker.bolt import BasicCollector, BasicFunction, Bolt, BoltInput
from acker.cli import run_until_signalled
from acker.config import ServiceConfig, add_arguments, load, to_argv
from acker.kafka.clients import TopicSpec, create_topics
from acker.kafka.clients import produce as send
from acker.kafka.provision import Cluster, kafka_cluster
from acker.spout import Spout, SpoutSettings
from acker.wire import decode_outcomes
from benchmarks import cpu
from benchmarks.pipeline_bench import _wait_ready, running

SPOUT = "fanout"


@dataclass(frozen=True)
class Topics:
    """The pipeline's topics and groups, all under ``prefix`` (`Topics.of`)."""

    prefix: str
    source: str
    fan: str
    leaves: str
    done: str

    @classmethod
    def of(cls, prefix: str) -> Topics:
        return cls(prefix, *(f"{prefix}.{name}" for name in ("source", "fan", "leaves", "done")))

    @property
    def spout(self) -> SpoutSettings:
        return SpoutSettings(SPOUT, self.source, self.fan, group=f"{self.prefix}-spout")


def fan(topics: Topics) -> BasicFunction:
    """The fan bolt's function: ``<id> <n>`` in, ``n`` copies of it out to the leaf topic."""

    def function(message: BoltInput, collector: BasicCollector) -> None:
        value = message.value or b""
        for _ in range(int(value.split()[1])):
            collector.emit(topics.leaves, value)

    return function


def leaf(topics: Topics) -> BasicFunction:
    """The leaf bolt's function: counts each record's leaves; at its ``n``-th, writes ``<id>`` to the done topic."""
    seen: Counter[bytes] = Counter()

    def function(message: BoltInput, collector: BasicCollector) -> None:
        record, n = (message.value or b"").split()
        seen[record] += 1
        if seen[record] == int(n):
            del seen[record]
            collector.write(topics.done, record)

    return function


def role(argv: list[str]) -> int:
    """One stage of the pipeline, run until signalled (``--role spout|fan|leaf``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", required=True, choices=("spout", "fan", "leaf"))
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--untracked", action="store_true")
    add_arguments(parser)
    args = parser.parse_args(argv)
    config, topics = load(args), Topics.of(args.prefix)
    if args.role == "spout":
        return run_until_signalled(Spout(config, replace(topics.spout, tracked=not args.untracked)))
    if args.role == "fan":
        return run_until_signalled(
            Bolt(config, topics.fan, f"{topics.prefix}-fan", fan(topics), output_topics=[topics.leaves])
        )
    return run_until_signalled(
        Bolt(config, topics.leaves, f"{topics.prefix}-leaf", leaf(topics), output_topics=[topics.done])
    )


@dataclass
class Pipeline:
    """A running pipeline: its settings, its topics, the pid of each process (and the local broker's)."""

    config: ServiceConfig
    topics: Topics
    pids: dict[str, int]


@contextmanager
def pipeline(cluster: Cluster, tracked: bool, timeout_s: float) -> Iterator[Pipeline]:
    """The pipeline of one mode on fresh topics, each stage in its group with its partition assigned."""
    run = uuid.uuid4().hex[:8]
    config = ServiceConfig(bootstrap_servers=cluster.bootstrap_servers, partitions=1, metrics_port=0)
    config = replace(config.namespaced(f"fan-{run}"), timeout_s=timeout_s)
    topics = Topics.of(f"fan-{run}")
    create_topics(config.client(), [
        TopicSpec(config.acker_topic, 1), TopicSpec(config.outcome_topic(SPOUT), 1),
        *(TopicSpec(t, 1) for t in (topics.source, topics.fan, topics.leaves, topics.done)),
    ])  # fmt: skip
    common, _ = to_argv(config)
    stage = [sys.executable, "-m", "benchmarks.fanout_bench", *common, "--prefix", topics.prefix, "--role"]
    argvs = {
        "spout": [*stage, "spout", *([] if tracked else ["--untracked"])],
        "fan": [*stage, "fan"],
        "leaf": [*stage, "leaf"],
    }
    if tracked:
        argvs["acker"] = [sys.executable, "-m", "acker.cli", "run", *common, "--log-level", "WARNING"]
    with running(cluster, argvs) as pids:
        spout = topics.spout
        groups = {spout.consumer_group: 1, spout.replay_group: 1, f"{topics.prefix}-fan": 1, f"{topics.prefix}-leaf": 1}
        if tracked:
            groups[config.group] = 1
        _wait_ready(config, groups)
        yield Pipeline(config, topics, pids)


class Reader:
    """The records of one topic from its beginning, each read once."""

    def __init__(self, config: ServiceConfig, topic: str) -> None:
        self.consumer = Consumer(
            config.client(**{"group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False})
        )
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def read(self, seconds: float) -> list[Message]:
        return [r for r in self.consumer.consume(1000, timeout=seconds) if r.error() is None]

    def close(self) -> None:
        self.consumer.close()


class Running:
    """A running pipeline of one mode, measured one record at a time (`Running.measure`)."""

    def __init__(self, line: Pipeline, tracked: bool) -> None:
        self.line, self.tracked = line, tracked
        self.done = Reader(line.config, line.topics.done)
        self.outcomes = Reader(line.config, line.config.outcome_topic(SPOUT)) if tracked else None
        self.done_at: dict[bytes, int] = {}
        self.acked_at: dict[str, int] = {}
        # One producer for every record, connected before the first: a record is stamped when it is produced, and a
        # new producer's metadata lookup and connection would be timed with it.
        self.producer = Producer(line.config.producer())
        self.producer.list_topics(line.topics.source, timeout=30)

    def measure(self, children: int, wait_s: float) -> tuple[float, float | None, dict[str, float]]:
        """One record of ``children`` children: ms from its write to its last leaf done, to its ack (tracked, else
        None), and the CPU seconds each process used meanwhile."""
        window = cpu.Window(self.line.pids)
        name = uuid.uuid4().hex.encode()
        msg_id, written_ms = _write(self.producer, self.line.topics.source, name + b" %d" % children)
        deadline = time.monotonic() + wait_s
        while name not in self.done_at or (self.tracked and msg_id not in self.acked_at):
            assert time.monotonic() < deadline, f"{children} children: not done and acked in {wait_s:.0f} s"
            for record in self.done.read(0.02):
                self.done_at[record.value() or b""] = record.timestamp()[1]
            for record in self.outcomes.read(0.02) if self.outcomes else []:
                decoded = decode_outcomes(record.value() or b"")
                for outcome, decided in zip(decoded.outcomes, decoded.msg_ids, strict=True):
                    assert outcome == "ACK", f"{decided}: {outcome}, not acked"
                    self.acked_at.setdefault(decided, record.timestamp()[1])
        used = window.by_process()
        acked_ms = float(self.acked_at[msg_id] - written_ms) if self.tracked else None
        return float(self.done_at[name] - written_ms), acked_ms, used

    def peaks(self) -> dict[str, float]:
        """The peak resident memory so far of each process but the broker, MiB."""
        return {name: cpu.peak_rss_mib(pid) for name, pid in self.line.pids.items() if name != "broker"}

    def close(self) -> None:
        self.done.close()
        if self.outcomes:
            self.outcomes.close()


@dataclass
class Sized:
    """What the records of one size measured in one mode."""

    done_ms: list[float] = field(default_factory=list)
    acked_ms: list[float] = field(default_factory=list)
    cpu_s: Counter[str] = field(default_factory=Counter)  # CPU seconds, by process
    children: int = 0  # in all, of the records measured
    peak_mib: dict[str, float] = field(default_factory=dict)  # the peak resident memory so far, by process

    def add(self, children: int, done_ms: float, acked_ms: float | None, used: dict[str, float]) -> None:
        self.done_ms.append(done_ms)
        if acked_ms is not None:
            self.acked_ms.append(acked_ms)
        self.cpu_s.update(used)
        self.children += children

    @property
    def cpu_per_1k(self) -> dict[str, float]:
        """CPU seconds per 1,000 children, by process."""
        return {name: seconds * 1000 / self.children for name, seconds in self.cpu_s.items()}


def _write(producer: Producer, topic: str, value: bytes) -> tuple[str, int]:
    """``value`` written to partition 0 of ``topic``: its message id and its timestamp (ms)."""
    written: list[Message] = []
    failed: list[KafkaError] = []
    send(producer, topic, value, partition=0, on_delivery=lambda e, r: failed.append(e) if e else written.append(r))
    assert producer.flush(60) == 0 and not failed and written, f"not written: {failed}"
    record = written[0]
    return f"{record.topic()}/{record.partition()}/{record.offset()}", record.timestamp()[1]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ratio(value: float, base: float) -> str:
    """``value / base`` to two places, or n/a when the base measured nothing: CPU time is counted in clock ticks
    (10 ms), and the processes of a small fan-out may use less than one between the two readings."""
    return f"{value / base:.2f}" if base > 0 else "n/a"


def report(sizes: list[int], untracked: dict[int, Sized], tracked: dict[int, Sized]) -> None:
    print("\n### Time from the record's write (median ms)\n")
    print("| children | untracked done | tracked done | tracked acked | done: tracked / untracked "
          "| acked: tracked / untracked |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        base, done, acked = _median(untracked[n].done_ms), _median(tracked[n].done_ms), _median(tracked[n].acked_ms)
        print(f"| {n:,} | {base:.0f} | {done:.0f} | {acked:.0f} | {_ratio(done, base)} | {_ratio(acked, base)} |")
    names = sorted({*tracked[sizes[-1]].cpu_per_1k, *untracked[sizes[-1]].cpu_per_1k})
    print("\n### CPU seconds per 1,000 children, by process (tracked / untracked ratio of the total last)\n")
    print(f"| children | mode | {' | '.join(names)} | total | tracked / untracked |")
    print(f"|---:|---|{'---:|' * (len(names) + 2)}")
    for n in sizes:
        totals = {mode: sum(s[n].cpu_per_1k.values()) for mode, s in (("untracked", untracked), ("tracked", tracked))}
        for mode, runs in (("untracked", untracked), ("tracked", tracked)):
            cells = " | ".join(f"{runs[n].cpu_per_1k[p]:.3f}" if p in runs[n].cpu_per_1k else "n/a" for p in names)
            ratio = _ratio(totals["tracked"], totals["untracked"]) if mode == "tracked" else ""
            print(f"| {n:,} | {mode} | {cells} | {totals[mode]:.3f} | {ratio} |")
    stages = [p for p in names if p != "broker"]
    print("\n### Peak resident memory so far, MiB (sizes in increasing order; fan bolt tracked / untracked last)\n")
    print(f"| children | mode | {' | '.join(stages)} | fan: tracked / untracked |")
    print(f"|---:|---|{'---:|' * (len(stages) + 1)}")
    for n in sizes:
        for mode, runs in (("untracked", untracked), ("tracked", tracked)):
            cells = " | ".join(f"{runs[n].peak_mib[p]:.0f}" if p in runs[n].peak_mib else "n/a" for p in stages)
            ratio = _ratio(tracked[n].peak_mib["fan"], untracked[n].peak_mib["fan"]) if mode == "tracked" else ""
            print(f"| {n:,} | {mode} | {cells} | {ratio} |")


def _sizes(text: str) -> list[int]:
    """``--children``: positive whole numbers, comma-separated, in increasing order (the memory peaks are so far)."""
    try:
        sizes = sorted({int(n) for n in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole numbers, comma-separated: {text!r}") from None
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"a fan-out of fewer than one child: {text!r}")
    return sizes


def main(argv: list[str]) -> int:
    if "--role" in argv:
        return role(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--children", type=_sizes, default=None, help="sizes, comma-separated [1000,10000,100000; quick 1000,10000]"
    )
    parser.add_argument("--repeat", type=at_least(1), default=None, help="records of each size [3; quick 1]")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="the trees' timeout (the acker's)")
    args = parser.parse_args(argv)
    sizes = args.children or _sizes("1000,10000" if args.quick else "1000,10000,100000")
    repeat = args.repeat or (1 if args.quick else 3)
    wait_s = args.timeout_s + 60
    print(f"fan-out: {', '.join(f'{n:,}' for n in sizes)} children, {repeat} record(s) each, tree timeout "
          f"{args.timeout_s:.0f} s", flush=True)  # fmt: skip
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster, ExitStack() as stack:
        modes = {tracked: Running(stack.enter_context(pipeline(cluster, tracked, args.timeout_s)), tracked)
                 for tracked in (False, True)}  # fmt: skip
        for running_mode in modes.values():
            stack.callback(running_mode.close)
            running_mode.measure(sizes[0], wait_s)  # a warm-up: a pipeline's first record waits for its clients
        results = {tracked: {n: Sized() for n in sizes} for tracked in modes}
        for n in sizes:
            for _ in range(repeat):  # the modes in turn, so that a noisy moment of the machine falls on both
                for tracked, running_mode in modes.items():
                    results[tracked][n].add(n, *running_mode.measure(n, wait_s))
            for tracked, running_mode in modes.items():
                results[tracked][n].peak_mib = running_mode.peaks()
                print(f"{'tracked' if tracked else 'untracked'} {n:,}: done {results[tracked][n].done_ms} ms"
                      f"{f', acked {results[tracked][n].acked_ms} ms' if tracked else ''}", flush=True)  # fmt: skip
    report(sizes, results[False], results[True])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
