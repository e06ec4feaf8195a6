"""Recovery benchmark: rebuilding a partition's pending trees after a kill -9, and the replays it causes.

Run: ``.venv/bin/python -m benchmarks.recovery_bench [--quick]`` (starts a local broker unless
``--bootstrap-servers`` names one). Prints a Markdown table.

1. One acker partition and an ``acker run`` process (message timeout 600 s: nothing expires during the run) are fed
   ``--trees`` word-count trees (100,000) of which only the init and the sentence's ack are sent: that many trees
   pending, in records of ~8,192 messages.
   Then ``--decided`` more trees (100,000) are sent whole: the process decides them and publishes their outcomes,
   after the committed offset (the pending trees hold it back).
2. Once the process has committed its recovery offset for all of them, it is killed with SIGKILL and a new one is
   started at once. Kafka moves the partition after the dead member's session times out (``session.timeout.ms``,
   6 s here); the new owner then replays the partition from the committed offset.
3. Measured, from the new process's start: when it owns the partition (its first status record), and when its
   status shows every tree pending again with nothing left to read (state rebuilt), each dated by the time the
   instance wrote in that status (`_StatusWatch`): when it was published, and for the state rebuilt when the last
   record was applied (``read_at``; the status that says so comes up to a status interval and the loop's wait for
   records later). The replay itself is the difference. Baseline in the same run: a plain
   consumer reading the same records from the same offset. The new owner first reads back the outcomes published
   after the committed offset (the commit's metadata says where they start): timed alone, with the same code, in
   this process. And the peak resident memory of the first owner at the kill (every tree pending) and of the new
   one once its state is rebuilt.
4. Then the remaining acks of every tree are sent. Spurious replays = trees whose outcome is not ``ACK`` (each would
   make its spout replay a record that was processed fine). Storm's acker keeps its pending trees in memory only: when
   an acker dies, every one of them times out and is replayed (spurious replays = all of them). Duplicates = outcomes
   published twice: without the read-back, every tree decided after the committed offset is decided and published
   again by the replay.

Its figures are the durations of one failover (each run's, and their median), not a distribution over messages: what
a tree pending through the failover waits for is the failover's time, the same for all of them. The service's latency
per outcome is `service_bench`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

from acker.columnar import MessageBlock
from acker.columnar.block import Kind
from acker.config import ServiceConfig, to_argv
from acker.kafka.clients import READ_TO_SETTINGS, TopicSpec, consume_available, create_topics, log_bounds, produce
from acker.kafka.decided import read_decided
from acker.kafka.provision import kafka_cluster
from acker.outcome_log import parse_metadata
from acker.service import compile_now
from acker.status import group_lag
from acker.wire import decode_outcomes, encode_batch
from benchmarks import cpu

SPOUT = "sentences"
WORDS = 5
STATUS_INTERVAL_S = 0.02  # the resolution of the spans timed from statuses


def _trees(n: int, rng: np.random.Generator, first: int = 0) -> tuple[list[bytes], list[bytes]]:
    """Record values: (the inits and sentence acks of ``n`` trees, then the word acks that complete them); message
    ids are offsets from ``first`` on."""
    anchors = rng.integers(1, 2**63 - 1, size=n, dtype=np.int64)
    root = rng.integers(1, 2**63 - 1, size=n, dtype=np.int64)
    words = rng.integers(1, 2**63 - 1, size=(n, WORDS), dtype=np.int64)
    per_record = 8192 // 2
    heads, tails = [], []
    for start in range(0, n, per_record):
        s = slice(start, min(n, start + per_record))
        k = s.stop - s.start
        kinds = np.tile(np.array([Kind.INIT, Kind.ACK], np.uint8), k)
        values = np.stack([root[s], root[s] ^ np.bitwise_xor.reduce(words[s], axis=1)], axis=1).reshape(-1)
        offsets = np.arange(first + s.start, first + s.stop, dtype=np.int64)
        heads.append(encode_batch(MessageBlock(kinds, np.repeat(anchors[s], 2), values, np.zeros(k, np.int32),
                                               offsets, [(SPOUT, f"{SPOUT}/0")])))  # fmt: skip
        tails.append(encode_batch(MessageBlock(np.full(k * WORDS, Kind.ACK, np.uint8), np.repeat(anchors[s], WORDS),
                                               words[s].reshape(-1), np.zeros(0, np.int32), np.zeros(0, np.int64),
                                               [])))  # fmt: skip
    return heads, tails


def _send(config: ServiceConfig, values: list[bytes]) -> None:
    producer = Producer(config.client(**{"linger.ms": 5}))
    for value in values:
        produce(producer, config.acker_topic, value, partition=0)
    assert producer.flush(60) == 0


def _start(config: ServiceConfig, name: str) -> subprocess.Popen[bytes]:
    flags, env = to_argv(replace(config, instance_id=name))
    argv = [sys.executable, "-m", "acker.cli", "run", *flags, "--log-level", "WARNING"]
    return subprocess.Popen(argv, env={**os.environ, **env})


class _StatusWatch:
    """Every status record of the run, read as the instances publish them, each with the time the instance wrote in
    it (its wall clock, when it published): a state is dated when the service reached it, not when this script
    noticed, so the spans are not rounded up to this script's polls. Their resolution is the status interval."""

    def __init__(self, config: ServiceConfig) -> None:
        group = f"watch-{uuid.uuid4().hex}"
        self._consumer = Consumer(config.client(**{"group.id": group, "enable.auto.commit": False}))
        self._consumer.assign([TopicPartition(config.status_topic, 0, 0)])
        self._topic = config.acker_topic
        self._seen: list[dict[str, Any]] = []

    def first(self, instance: str, trees: int | None, timeout_s: float) -> float:
        """The time of ``instance``'s first status of partition 0; with ``trees`` pending and no lag, if given, and
        then the time it applied the last record read (its ``read_at``): the status comes up to a status interval
        and a wait for records (0.1 s, the partition idle) later."""
        deadline = time.monotonic() + timeout_s
        looked = 0
        while time.monotonic() < deadline:
            for status in self._seen[looked:]:
                if status.get("instance") == instance and (
                    trees is None or (status.get("pending") == trees and status.get("lag") == 0)
                ):
                    return float(status["time"] if trees is None else status["read_at"])
            looked = len(self._seen)
            for record in self._consumer.consume(100, timeout=0.05):
                if record.error() is None:
                    status = json.loads(record.value() or b"{}")
                    if status.get("topic") == self._topic and status.get("partition") == 0:
                        self._seen.append(status)
        raise SystemExit(f"recovery_bench: {instance} did not reach the expected state in {timeout_s:.0f} s")

    def close(self) -> None:
        self._consumer.close()


def _plain_read(config: ServiceConfig, start: int) -> float:
    """Seconds for a plain consumer to read partition 0 from ``start`` to its end (the baseline)."""
    consumer = Consumer(config.client(**{"group.id": f"plain-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    end = log_bounds(consumer, TopicPartition(config.acker_topic, 0))[1]
    consumer.assign([TopicPartition(config.acker_topic, 0, start)])
    began, position = time.perf_counter(), start
    while position < end:
        for record in consume_available(consumer, 1000, 1.0):
            if record.error() is None:
                position = (record.offset() or 0) + 1
    elapsed = time.perf_counter() - began
    consumer.close()
    return elapsed


def _outcomes(config: ServiceConfig, expected: int, timeout_s: float) -> dict[str, list[str]]:
    consumer = Consumer(config.client(**{"group.id": f"out-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([config.outcome_topic(SPOUT)])
    seen: dict[str, list[str]] = {}
    deadline = time.monotonic() + timeout_s
    settled: float | None = None  # once every tree has one, read on a while: a second outcome comes after the first
    while time.monotonic() < (deadline if settled is None else settled):
        if settled is None and len(seen) >= expected:
            settled = time.monotonic() + 2.0
        for record in consumer.consume(500, timeout=0.2):
            if record.error() is None:
                decoded = decode_outcomes(record.value() or b"")
                for outcome, msg_id in zip(decoded.outcomes, decoded.msg_ids, strict=True):
                    seen.setdefault(msg_id, []).append(outcome)
    consumer.close()
    return seen


def _read_back(config: ServiceConfig) -> tuple[float, int]:
    """Seconds to read back the outcomes the committed offset's metadata points at, and how many trees they name."""
    consumer = Consumer(config.client(**{"group.id": config.group, "enable.auto.commit": False, **READ_TO_SETTINGS}))
    try:
        committed = consumer.committed([TopicPartition(config.acker_topic, 0)], timeout=10)[0]
        # As the service is when it reads back: its loops compiled before it joined, its reading consumer connected.
        compile_now()
        starts = parse_metadata(committed.metadata)
        for topic, (partition, _) in starts.items():
            log_bounds(consumer, TopicPartition(topic, partition))
        log_bounds(consumer, TopicPartition(config.acker_topic, 0))
        began = time.perf_counter()
        decided = read_decided(consumer, TopicPartition(config.acker_topic, 0), starts)
        return time.perf_counter() - began, len(decided.anchors)
    finally:
        consumer.close()


def _run(bootstrap: str, trees: int, decided: int, rng: np.random.Generator) -> dict[str, float]:
    run = uuid.uuid4().hex[:8]
    session = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
    config = ServiceConfig(bootstrap_servers=bootstrap, partitions=1, timeout_s=600, commit_interval_s=0.5,
                           status_interval_s=STATUS_INTERVAL_S, metrics_port=0,
                           kafka=session).namespaced(f"rec-{run}")  # fmt: skip
    create_topics(config.client(), [TopicSpec(config.acker_topic, 1), TopicSpec(config.outcome_topic(SPOUT), 1),
                                    TopicSpec(config.status_topic, 1)])  # fmt: skip
    heads, tails = _trees(trees, rng)
    done_heads, done_tails = _trees(decided, rng, first=trees)
    watch = _StatusWatch(config)
    first = _start(config, "first")
    second = None
    try:
        watch.first("first", None, 120)
        _send(config, heads)
        watch.first("first", trees, 120)
        _send(config, done_heads + done_tails)
        assert len(_outcomes(config, decided, 120)) == decided, "the first process did not decide every whole tree"
        time.sleep(2 * config.commit_interval_s)
        lags = group_lag(config)
        committed = lags[0][0] if lags else None
        assert committed is not None, "no recovery offset was committed"
        read_back_s, read_back = _read_back(config)
        first_peak = cpu.peak_rss_mib(first.pid)  # holding every pending tree
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        started = time.time()  # the instances' clock: the statuses' times are theirs, on this machine
        second = _start(config, "second")
        owned = watch.first("second", None, 120)
        rebuilt = watch.first("second", trees, 120)
        second_peak = cpu.peak_rss_mib(second.pid)  # the replay's and the read-back's peak, and the trees rebuilt
        baseline = _plain_read(config, committed)
        _send(config, tails)
        outcomes = _outcomes(config, trees + decided, 120)
    finally:
        watch.close()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(60)
    acked = sum(1 for o in outcomes.values() if o[0] == "ACK") - decided
    return {
        "read_back_s": read_back_s,
        "read_back": read_back,
        "owned_s": owned - started,
        "rebuilt_s": rebuilt - started,
        "replay_s": rebuilt - owned,
        "plain_read_s": baseline,
        "first_peak_mib": first_peak,
        "second_peak_mib": second_peak,
        "spurious": trees - acked,
        "undecided": trees + decided - len(outcomes),
        "duplicates": sum(len(o) - 1 for o in outcomes.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trees", type=int, default=None, help="pending trees at the kill [100,000; quick 20,000]")
    parser.add_argument(
        "--decided", type=int, default=None, help="trees decided after the offset [100,000; quick 20,000]"
    )
    parser.add_argument("--repeat", type=int, default=None, help="kills [3; quick 1]")
    args = parser.parse_args()
    trees = args.trees or (20_000 if args.quick else 100_000)
    decided = args.decided or (20_000 if args.quick else 100_000)
    repeat = args.repeat or (1 if args.quick else 3)
    rng = np.random.default_rng(1)
    runs = []
    with kafka_cluster(args.bootstrap_servers, use_docker=False) as cluster:
        for i in range(repeat):
            runs.append(_run(cluster.bootstrap_servers, trees, decided, rng))
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in runs[-1].items()))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    # Correctness counts are not figures to take a median of: one run with duplicates is a failure.
    for k in ("spurious", "undecided", "duplicates"):
        med[k] = max(r[k] for r in runs)
    print(f"\nworkload: {trees:,} pending trees on one acker partition, then {decided:,} trees decided after them "
          f"({2 * trees + 7 * decided:,} acker messages to replay); session.timeout.ms 6000; "
          f"median of {repeat} run(s)\n")  # fmt: skip
    print("| measure | value |")
    print("|---|---:|")
    print(f"| new process started → owns the partition (start-up + Kafka failover) | {med['owned_s']:.2f} s |")
    print(f"| owns the partition → every tree pending again, nothing left to read | {med['replay_s'] * 1000:.0f} ms |")
    print(f"| baseline: a plain consumer reading the same records | {med['plain_read_s'] * 1000:.0f} ms |")
    print(f"| replay / baseline | {med['replay_s'] / med['plain_read_s']:.1f} |")
    print(f"| reading back the outcomes decided after the committed offset ({med['read_back']:,.0f} trees), alone; "
          f"the new owner does it on assignment | {med['read_back_s'] * 1000:.0f} ms |")  # fmt: skip
    print(f"| new process started → state rebuilt | {med['rebuilt_s']:.2f} s |")
    print(f"| peak resident memory: the first owner at the kill (every tree pending) / the new owner, state rebuilt | "
          f"{med['first_peak_mib']:.0f} / {med['second_peak_mib']:.0f} MiB |")  # fmt: skip
    print(f"| spurious replays (trees not acked after the crash), the most of any run | {med['spurious']:.0f} of "
          f"{trees:,} |")  # fmt: skip
    print(f"| trees without an outcome / duplicate outcomes, the most of any run | {med['undecided']:.0f} / "
          f"{med['duplicates']:.0f} "
          f"(without the read-back, the replay would decide and publish again each of the {decided:,}) |")  # fmt: skip
    print(f"| Storm, for reference: an acker's pending trees when it dies | all {trees:,} time out and are replayed |")
    wrong = {k: med[k] for k in ("spurious", "undecided", "duplicates") if med[k]}
    if wrong:  # printed above, and a failed run: figures of a failover that lost or repeated outcomes are no figures
        raise SystemExit(f"recovery_bench: the failover's outcomes are wrong: {wrong}")


if __name__ == "__main__":
    main()
