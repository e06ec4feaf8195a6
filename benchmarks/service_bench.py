"""Service benchmark: acker messages per second through a real broker, next to a plain consumer.

Run: ``.venv/bin/python -m benchmarks.service_bench [--quick]`` (starts a local broker unless
``--bootstrap-servers`` names one). Prints a Markdown table.

1. Load: word-count trees (1 init + 1 sentence ack + 5 word acks each) are encoded into acker records of
   ``--batch`` messages, each record holding whole trees, and produced to a fresh acker topic.
2. Baseline, same run: a plain confluent-kafka consumer reads every record of the topic (touching each value).
3. The service (one `AckerService` in this process, the same code as ``acker run``) reads the same records and
   decides every tree; throughput runs from its first record to the last outcome decided. Then, as a bound, the
   service's own work without Kafka: fresh trackers parse and decide the same record values in this process.
   Both start cold (tables and tombstone sets grow as trees arrive), as a service does after a restart.
   At least a million trees: on a shorter run the plain consumer's start-up (its first fetches) is most of its time.
4. The live maximum: the records of about ``--latency-s`` seconds at the backlog maximum are produced as fast as the
   producer goes to a fresh topic while an ``acker run`` process (2 s timeout) decides them, timed from the first
   record produced to the last outcome read. The backlog maximum of step 3 has the machine to itself; here the
   producer, the broker's write path and the service share the 2 cores, as they do in the latency runs.
5. Latency at 10%, 25% and 50% of the backlog maximum and at 50% of the live maximum: records are produced at that
   rate to a fresh topic, an ``acker run`` process decides them, and a reader takes each outcome record; latency is
   from when a record was due at that rate (not when it was produced: no coordinated omission) to reading the
   outcome record it decided, found by its ``acker.decided-by`` header,
   which names a range of records (end to end: broker, acker, outcome producer, broker, reader; the reader does not
   decode outcomes). The service runs with a 2 s timeout, and the first 1.5 timeouts are not measured: until then
   the trackers' tables grow (finished trees stay one timeout as tombstones) and each growth rehashes a table in
   one go, a one-off stall of up to tens of ms after a start. p50/p99, and the CPU each process used (in cores:
   1.00 is one core busy all the time), with the part of the local broker's that its JIT compiler took. The load
   generator, the broker and the service share 2 cores. Before these runs (except with ``--quick``), ``--warm-up``
   unmeasured streams at 25% of the backlog maximum: without them the broker's JIT compiler took more than half of
   the broker's CPU during the 10% run (0.32 of 0.59 cores) and a third during the 25% run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer

from acker.columnar import MessageBlock
from acker.columnar.block import RecordSpans
from acker.columnar.tracker import BlockTracker
from acker.config import ServiceConfig, to_argv
from acker.kafka.clients import TopicSpec, consume_available, create_topics, produce
from acker.kafka.provision import kafka_cluster
from acker.service import DECIDED_BY, AckerService, record_groups
from acker.status import read_status
from acker.topics import service_topics
from acker.wire import encode_batch, parse_batch
from acker.workload import WORD_COUNT_MESSAGES, word_count_arrays
from benchmarks import cpu


def _records(trees: int, batch: int, partitions: int, rng: np.random.Generator, first: int = 0) -> list[list[bytes]]:
    """Per partition, record values of about ``batch`` messages holding whole word-count trees (vectorised)."""
    anchors, values, kinds = word_count_arrays(trees, rng)
    per_tree = WORD_COUNT_MESSAGES
    offsets = np.arange(first, first + trees, dtype=np.int64)
    partition = np.abs(np.fmod(anchors, partitions))
    out: list[list[bytes]] = []
    per_record = max(1, batch // per_tree)
    for p in range(partitions):
        mine = np.flatnonzero(partition == p)
        values_p = []
        for start in range(0, len(mine), per_record):
            chosen = mine[start : start + per_record]
            block = MessageBlock(
                kinds[: len(chosen) * per_tree],
                np.repeat(anchors[chosen], per_tree),
                values[chosen].reshape(-1),
                np.zeros(len(chosen), np.int32),
                offsets[chosen],
                [("sentences", "sentences/0")],
            )
            values_p.append(encode_batch(block))
        out.append(values_p)
    return out


def _produce_all(bootstrap: str, topic: str, records: list[list[bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for p, values in enumerate(records):
        for value in values:
            produce(producer, topic, value, partition=p)
    assert producer.flush(60) == 0


def _plain_consumer(config: ServiceConfig, records: int, pids: dict[str, int]) -> tuple[float, float]:
    # The service's consumer settings (`ServiceConfig.stream_consumer`), but for its group and assignor.
    consumer = Consumer(
        config.stream_consumer(
            **{"group.id": f"plain-{uuid.uuid4().hex}", "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )
    )
    assigned = threading.Event()
    consumer.subscribe([config.acker_topic], on_assign=lambda c, parts: assigned.set())
    seen, size = 0, 0
    while not assigned.is_set():
        seen += len(consumer.consume(1, timeout=0.1))  # joins the group
    window = cpu.Window(pids)
    while seen < records:
        # As the service reads: take what is there, wait only for a first record (a batch consume with a timeout
        # would wait for a full batch at the end).
        batch = consume_available(consumer, 1000, 0.5)
        for record in batch:
            if record.error() is None:
                size += len(record.value() or b"")
                seen += 1
    timed = window.close()
    consumer.close()
    return timed


def _tracker_only(
    config: ServiceConfig, records: list[list[bytes]], trees: int, pids: dict[str, int]
) -> tuple[float, float]:
    """Seconds for fresh trackers (one per partition, as the service keeps) to parse and decide every record in this
    process, in groups of whole records as the service applies them, partitions on ``tracker_threads`` threads as
    the service decides them: the service's own work without Kafka. Every tree must be acked."""
    BlockTracker.warm_up()
    window = cpu.Window(pids)
    with ThreadPoolExecutor(config.tracker_threads) as pool:
        acked = sum(pool.map(functools.partial(_decide_partition, config), records))
    timed = window.close()
    if acked != trees:
        raise SystemExit(f"service_bench: the trackers alone acked {acked:,} of {trees:,} trees")
    return timed


def _decide_partition(config: ServiceConfig, values: list[bytes]) -> int:
    """The trees one partition's tracker acks."""
    tracker = BlockTracker(config.tracker_config())
    blocks = [parse_batch(value) for value in values]
    for start, end in record_groups([len(b) for b in blocks]):
        group = blocks[start:end]
        spans = RecordSpans.of([len(b) for b in group], list(range(start, end)), [1] * len(group))
        tracker.process_records(MessageBlock.concat(group), spans)
    return tracker.counters.acked


def _service_run(config: ServiceConfig, trees: int, pids: dict[str, int]) -> tuple[float, float]:
    service = AckerService(config)
    service.consumer.subscribe([config.acker_topic], on_assign=service._on_assign, on_revoke=service._on_revoke)
    while not service._states:
        service.step(timeout_s=0.1)  # joins the group
    window = cpu.Window(pids)
    states = list(service._states.values())
    acked, stalled_at = 0, time.monotonic() + 60
    while acked < trees:
        service.step(timeout_s=0.2)
        now_acked = sum(state.tracker.counters.acked for state in states)  # cheaper than a metrics snapshot
        if now_acked > acked:
            acked, stalled_at = now_acked, time.monotonic() + 60
        elif time.monotonic() > stalled_at:  # a tree the service does not ack: no figure, rather than no end
            raise SystemExit(f"service_bench: the service acked {acked:,} of {trees:,} trees, and none for 60 s")
    timed = window.close()
    service.close()
    return timed


@dataclass
class Stream:
    """One run of records produced live to an `acker run` process."""

    latencies_ms: list[float]  # of the records measured (after the warm-up), each from when it was due
    elapsed_s: float  # from the first record produced to the last outcome read
    achieved_records: float  # records/s produced in the measured part (below the rate asked when the producer lags)
    cores: dict[str, float]  # CPU used by each process, in cores, while the records were produced
    peak_mib: float  # the `acker run` process's peak resident memory (VmHWM)


@contextlib.contextmanager
def _acker_run(config: ServiceConfig) -> Iterator[int]:
    """An `acker run` process serving every partition of ``config``'s acker topic; yields its pid."""
    flags, env = to_argv(replace(config, metrics_port=0, status_interval_s=0.5))
    args = [sys.executable, "-m", "acker.cli", "run", *flags, "--log-level", "WARNING"]
    service = subprocess.Popen(args, env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 60
        while len(read_status(config, timeout_s=2)) < config.partitions:  # every partition owned and serving
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.5)
        yield service.pid
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(60)


def _outcome_reader(config: ServiceConfig) -> Consumer:
    # The default fetch.wait.max.ms (500): the broker answers a waiting fetch as soon as a record arrives, and a
    # short wait only makes an idle reader ask again and again (at 5 ms, 0.4 of the broker's cores here).
    reader = Consumer({"bootstrap.servers": config.bootstrap_servers, "group.id": f"lat-{uuid.uuid4().hex}",
                       "auto.offset.reset": "earliest"})  # fmt: skip
    reader.subscribe([config.outcome_topic("sentences")])
    while not reader.assignment():
        reader.consume(1, timeout=0.1)
    return reader


class _Latencies:
    """Each acker record's latency, from when it was due to when an outcome record deciding it was read, whichever
    of its delivery report (which gives its offset) and that outcome comes first."""

    def __init__(self) -> None:
        self.sent: dict[tuple[int, int], float | None] = {}  # (partition, offset) → when due; None: not measured
        self.early: dict[tuple[int, int], float] = {}  # decided before its delivery report: when read
        self.latencies_ms: list[float] = []

    def delivered(self, due: float | None, error: object, record: Any) -> None:
        if error is None:
            key = (record.partition(), record.offset())
            read = self.early.pop(key, None)
            if read is None:
                self.sent[key] = due
            elif due is not None:
                self.latencies_ms.append((read - due) * 1000)

    def read(self, partition: int, offsets: range, now: float) -> None:
        for offset in offsets:  # the service applies many records at once
            key = (partition, offset)
            if key in self.sent:
                if (due := self.sent.pop(key)) is not None:
                    self.latencies_ms.append((now - due) * 1000)
            else:  # its delivery report is still to come (or a tick: the service's own record)
                self.early.setdefault(key, now)  # the first outcome read that decided it


def _interleaved(records: list[list[bytes]]) -> list[tuple[int, bytes]]:
    """(partition, value) of every record, the partitions taking turns."""
    return [(p, values[i]) for i in range(max(map(len, records))) for p, values in enumerate(records)
            if i < len(values)]  # fmt: skip


def _stream(config: ServiceConfig, records: list[list[bytes]], rate_records: float, broker_pid: int | None) -> Stream:
    """Produce ``records`` at ``rate_records``/s (``math.inf``: as fast as the producer goes, nothing left out as
    warm-up) to an `acker run` process; return end-to-end latencies and the CPU each process used.

    A record's latency runs from when it was due (``begin + i / rate``), not from when it was produced: when the load
    generator falls behind, the time a record waits to be sent is part of what a source producing at that rate would
    see (no coordinated omission). Records due in the warm-up are not measured, even when their outcomes come after.
    The service runs in its own process, as in production, so that the load generator does not share its GIL.
    """
    with _acker_run(config) as service_pid:
        reader = _outcome_reader(config)
        producer = Producer({"bootstrap.servers": config.bootstrap_servers, "linger.ms": 0})
        book = _Latencies()
        last_read = 0.0

        def drain(timeout: float) -> None:
            nonlocal last_read
            producer.poll(0)  # delivery reports first: a record's offset is known before its outcome can be read
            for record in consume_available(reader, 1000, timeout):  # a full-batch wait would fall behind
                if record.error() is None:
                    decided_by = dict(record.headers() or [])[DECIDED_BY]
                    partition, span = decided_by.decode().split("/")  # type: ignore[union-attr]
                    first, last = map(int, span.split("-"))
                    last_read = time.perf_counter()
                    book.read(int(partition), range(first, last + 1), last_read)

        flat = _interleaved(records)
        # Not measured: the first 1.5 timeouts, while the trackers' tables grow to their steady size (finished trees
        # stay as tombstones for one timeout; after that, tables stop growing and no longer rehash).
        paced = math.isfinite(rate_records)
        warm_up = math.ceil(rate_records * config.timeout_s * 1.5) if paced else 0
        pids = {"acker service": service_pid, "load generator and reader": os.getpid(), "broker": broker_pid or 0}
        pids = {name: pid for name, pid in pids.items() if pid}  # no broker pid: an existing cluster
        usage = _Usage(pids, broker_pid)
        begin = time.perf_counter()
        first_measured = last_produced = begin
        for i, (p, value) in enumerate(flat):
            drain(0)  # also when behind schedule
            due = begin + i / rate_records if paced else time.perf_counter()
            while (wait := due - time.perf_counter()) > 0:
                drain(min(wait, 0.002))
            last_produced = time.perf_counter()
            if i == warm_up:
                usage, first_measured = _Usage(pids, broker_pid), last_produced

            # Polled by drain; when librdkafka's 1 GB queue is full (the live maximum), waits for the broker.
            on_delivery = functools.partial(book.delivered, due if i >= warm_up else None)
            produce(producer, config.acker_topic, value, partition=p, on_delivery=on_delivery)
        # Records produced a second from the first measured to the last: the rate asked, unless the generator lagged.
        # From when the first measured record was due: a generator behind then and caught up later does not read
        # as faster than asked.
        measured = len(flat) - warm_up
        first_due = begin + warm_up / rate_records if paced else first_measured
        achieved = (measured - 1) / (last_produced - first_due) if measured > 1 else math.nan
        producer.flush(30)
        cores = usage.cores()
        deadline = time.monotonic() + 30
        while book.sent and time.monotonic() < deadline:
            drain(0.05)
        assert not book.sent, f"{len(book.sent)} records got no outcome"
        reader.close()
        return Stream(book.latencies_ms, last_read - begin, achieved, cores, cpu.peak_rss_mib(service_pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trees", type=int, default=None)
    parser.add_argument("--batch", type=int, default=8192, help="acker messages per record (throughput)")
    parser.add_argument(
        "--latency-batch", type=int, default=None, help="acker messages per record (latency; default: --batch)"
    )
    parser.add_argument("--latency-s", type=float, default=None, help="duration of the latency phase")
    parser.add_argument("--warm-up", type=int, default=2, help="unmeasured streams before the latency runs")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--tracker-threads", type=int, default=ServiceConfig.tracker_threads, help="the service's deciding threads"
    )
    parser.add_argument("--repeat", type=int, default=None, help="runs of each measure [3; quick 1]")
    args = parser.parse_args()
    trees = args.trees or (50_000 if args.quick else 1_000_000)
    repeat = args.repeat = args.repeat or (1 if args.quick else 3)
    rng = np.random.default_rng(1)
    records = _records(trees, args.batch, args.partitions, rng)
    n_records = sum(len(r) for r in records)
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        bootstrap = cluster.bootstrap_servers
        config = ServiceConfig(bootstrap_servers=bootstrap, partitions=args.partitions, metrics_port=0,
                               tracker_threads=args.tracker_threads, timeout_s=300)  # fmt: skip
        (plain_rate, plain_cpu), (acker_rate, acker_cpu), (alone_rate, alone_cpu) = _throughput(
            config, records, trees, repeat, cluster.pid
        )
        streaming = replace(config, timeout_s=2.0)
        batch = args.latency_batch or args.batch
        seconds = args.latency_s or (3 if args.quick else 8)
        live_trees = int(acker_rate * seconds / 7)
        live = _stream(_fresh(streaming), _records(live_trees, batch, args.partitions, rng), math.inf, cluster.pid)
        live_rate = live_trees * 7 / live.elapsed_s
        print(f"live: {live_rate:,.0f} msg/s, CPU in cores: {_cores(live.cores)}, acker run's peak memory "
              f"{live.peak_mib:,.0f} MiB")  # fmt: skip
        for done in range(1, (0 if args.quick else args.warm_up) + 1):  # the broker's JIT, before the latency runs
            warm = _records(int(acker_rate * 0.25 * seconds / 7), batch, args.partitions, rng, first=trees)
            warming = _stream(_fresh(streaming), warm, sum(map(len, warm)) / seconds, cluster.pid)
            print(f"warm-up {done} (not measured), CPU in cores: {_cores(warming.cores)}")
        rows = []
        for basis, maximum, fraction in (("backlog", acker_rate, 0.1), ("backlog", acker_rate, 0.25),
                                         ("backlog", acker_rate, 0.5), ("live", live_rate, 0.5)):  # fmt: skip
            total_s = seconds + streaming.timeout_s * 1.5
            lat_records = _records(int(maximum * fraction * total_s / 7), batch, args.partitions, rng, first=trees)
            rate_records = sum(map(len, lat_records)) / total_s
            paced = _stream(_fresh(streaming), lat_records, rate_records, cluster.pid)
            p50, p99 = np.percentile(paced.latencies_ms, [50, 99])
            cores = _cores(paced.cores)
            reached = maximum * fraction * paced.achieved_records / rate_records
            rows.append((f"{fraction:.0%} of the {basis} maximum", maximum * fraction, reached, rate_records,
                         len(paced.latencies_ms), p50, p99, cores))  # fmt: skip
            print(f"{rows[-1][0]}: p50 {p50:.1f} ms, p99 {p99:.1f} ms, CPU in cores: {cores}, acker run's peak "
                  f"memory {paced.peak_mib:,.0f} MiB")  # fmt: skip
    rates, cpu_ns = (plain_rate, acker_rate, alone_rate), (plain_cpu, acker_cpu, alone_cpu)
    _print_tables(args, n_records, Figures(trees * 7, *rates, cpu_ns, live, live_rate, rows))


def _throughput(
    base: ServiceConfig, records: list[list[bytes]], trees: int, repeat: int, broker_pid: int | None
) -> list[tuple[float, float]]:
    """(messages/s, CPU ns a message) of the plain consumer, the service and its trackers alone, medians of
    ``repeat`` runs; the CPU is this process's (the consumer, the service or the trackers, librdkafka's threads) and
    the local broker's."""
    pids = {"benchmark": os.getpid(), **({"broker": broker_pid} if broker_pid else {})}
    messages, n_records = trees * 7, sum(len(r) for r in records)
    plain, acker, alone = [], [], []
    for run in range(repeat):
        config = _fresh(base)
        _produce_all(base.bootstrap_servers, config.acker_topic, records)
        plain.append(_plain_consumer(config, n_records, pids))
        acker.append(_service_run(config, trees, pids))
        alone.append(_tracker_only(config, records, trees, {"benchmark": pids["benchmark"]}))  # no broker: no Kafka
        print(f"run {run + 1}: plain {messages / plain[-1][0]:,.0f} msg/s, acker {messages / acker[-1][0]:,.0f} "
              f"msg/s, trackers alone {messages / alone[-1][0]:,.0f} msg/s")  # fmt: skip
    return [_medians(runs, messages) for runs in (plain, acker, alone)]


def _medians(runs: list[tuple[float, float]], messages: int) -> tuple[float, float]:
    """Messages per second and CPU nanoseconds per message, the medians of ``runs`` of (seconds, CPU seconds)."""
    rate = messages / statistics.median(seconds for seconds, _ in runs)
    return rate, statistics.median(used for _, used in runs) / messages * 1e9


@dataclass
class Figures:
    messages: int  # of the throughput runs
    plain_rate: float
    acker_rate: float
    alone_rate: float
    cpu_ns: tuple[float, float, float]  # CPU ns a message of the plain consumer, the service, the trackers alone
    live: Stream
    live_rate: float
    rows: list[tuple[Any, ...]]  # of the latency table


def _print_tables(args: argparse.Namespace, n_records: int, f: Figures) -> None:
    repeat = args.repeat
    print(f"\nworkload: {f.messages // 7:,} word-count trees = {f.messages:,} acker messages in {n_records:,} records "
          f"of ~{args.batch:,}; {args.partitions} partitions, {args.tracker_threads} tracker thread(s); "
          f"median of {repeat} run(s)\n")  # fmt: skip
    print("| measure | acker messages/s | ratio | CPU ns a message | cores |")
    print("|---|---:|---:|---:|---:|")
    for measure, rate, used in (
        ("plain confluent-kafka consumer, same records", f.plain_rate, f.cpu_ns[0]),
        ("acker service (one process), reading a backlog: the backlog maximum", f.acker_rate, f.cpu_ns[1]),
        ("its trackers alone, same records parsed in process, no Kafka (bound)", f.alone_rate, f.cpu_ns[2]),
    ):
        print(f"| {measure} | {rate:,.0f} | {rate / f.plain_rate:.2f} | {used:.1f} | {used * rate / 1e9:.2f} |")
    live = "`acker run`, records produced while it runs, as fast as the producer goes: the live maximum"
    print(f"| {live} | {f.live_rate:,.0f} | {f.live_rate / f.plain_rate:.2f} | | |")
    # What the ratio target asks of the CPU: the plain read leaves the cores it does not use; a service at 0.8 of it
    # decides each message in 1 / (0.8 × its rate) seconds of wall clock on all of them.
    cores = len(os.sched_getaffinity(0))  # the cores this process may run on
    budget = cores / (0.8 * f.plain_rate) * 1e9 - f.cpu_ns[0]
    print(f"\nCPU ns a message: of this process (all its threads) and the local broker (not for the trackers alone), "
          f"in the timed section; cores: "
          f"the same per second. At 0.8 of the plain consumer, on {cores} cores, the service's own work could take "
          f"{budget:.1f} ns of CPU a message at most (the plain read's {f.cpu_ns[0]:.1f} ns left out); its trackers "
          f"alone take {f.cpu_ns[2]:.1f}.")  # fmt: skip
    print(f"\nCPU in cores during the live maximum: {_cores(f.live.cores)}")
    print(
        "\nLatency from when each record was due at the rate asked to when its outcome was read; reached: the rate "
        "the load generator produced at, in the measured part."
    )
    print("\n| load | acker messages/s asked | reached | records/s asked | records measured | p50 ms | p99 ms "
          "| CPU in cores |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for load, msgs, reached, recs, count, p50, p99, cores in f.rows:
        print(f"| {load} | {msgs:,.0f} | {reached:,.0f} | {recs:,.1f} | {count:,} | {p50:.1f} | {p99:.1f} "
              f"| {cores} |")  # fmt: skip


def _fresh(config: ServiceConfig) -> ServiceConfig:
    """``config`` in a namespace of its own, its acker and outcome topics created."""
    config = config.namespaced(f"bench-{uuid.uuid4().hex[:8]}")
    create_topics(config.client(), [TopicSpec(config.acker_topic, config.partitions),
                                    TopicSpec(config.outcome_topic("sentences"), config.partitions),
                                    *service_topics(config)])  # fmt: skip  # the status topic, read while it starts
    return config


class _Usage:
    """The CPU the processes use from now on, in cores, and the part of the local broker's that its JIT compiler
    threads use (a lower bound: threads that end meanwhile are not counted)."""

    def __init__(self, pids: dict[str, int], broker_pid: int | None) -> None:
        self.pids, self.broker_pid = pids, broker_pid
        self.before, self.jit = cpu.snapshot(pids), self._jit()
        self.since = time.perf_counter()

    def _jit(self) -> dict[int, float]:
        return cpu.threads(self.broker_pid, cpu.JVM_COMPILER) if self.broker_pid else {}

    def cores(self) -> dict[str, float]:
        elapsed = time.perf_counter() - self.since
        cores = {name: used / elapsed for name, used in cpu.spent(self.before, self.pids).items()}
        if self.broker_pid:
            cores["of which the broker's JIT compiler"] = cpu.threads_spent(self.jit, self._jit()) / elapsed
        return cores


def _cores(cores: dict[str, float]) -> str:
    return ", ".join(f"{name} {used:.2f}" for name, used in cores.items())


if __name__ == "__main__":
    main()
