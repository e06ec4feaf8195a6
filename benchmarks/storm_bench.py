"""Storm comparison: Apache Storm's own acker and this project's trackers on the same messages.

Run: ``.venv/bin/python -m benchmarks.storm_bench [--quick]`` (needs Java 17+ and Maven; the first run downloads
storm-client and its dependencies into ``~/.m2``). Prints two Markdown tables.

Workload: the core benchmark's (`benchmarks.core_bench`): Storm's word count as tuple trees (1 init + 1 sentence ack
+ 5 word acks per tree) from `acker.workload`, 256 trees overlapping, a tick every 100,000 messages and 3 at the end.
The messages are written to a file (kind, anchor, value per message) and replayed, same trees and same ids, through:

- Storm's acker: ``org.apache.storm.daemon.Acker`` from storm-client, unmodified, driven by a small Java harness
  (``benchmarks/storm_acker``, built with Maven into its git-ignored ``target/``; storm-client 2.8.3: the newest,
  2.8.4, does not resolve, its parent POM missing from Maven Central, and its sources are the same). Each message
  becomes the tuple a worker would hand the acker: init → ``__ack_init`` [anchor, value, spout task], ack →
  ``__ack_ack`` [anchor, value], fail → ``__ack_fail`` [anchor], reset → ``__ack_reset_timeout`` [anchor], tick → a
  system tick tuple. All tuples are built before timing, so only ``Acker.execute`` is timed (its output collector
  just counts what it is given): no deserialisation, queues or transfer, as the project's figures have no Kafka.
  One thread; untimed passes first (JIT), then ``--repeat`` timed passes, each through a fresh acker after a full GC;
  the JVM runs with a fixed 4 GB heap and the serial collector.
- this project's columnar tracker (`BlockTracker.process` on blocks of 8,192 messages, encoding not timed) and
  reference tracker (`Tracker.handle`), in the same run, with `benchmarks.core_bench`'s columnar pass.

Each throughput figure is the median of ``--repeat`` passes, all three single-threaded and run one after another:
by CPU time of the thread doing the work (for Storm's acker, plus the time spent in collections during the pass,
which the serial collector runs in another thread), which on a shared machine leaves out waiting for a core, and by
wall clock. Latency: the wall time through each 8,192 messages of the timed passes (a block of the columnar tracker;
Storm's acker and the reference tracker take them one at a time, timed at every 8,192th), p50/p99/max, the p99's
ratio to Storm's. Memory: bytes per pending tree with ``--pending`` trees open (inits of trees that never complete, ids
from the same generator). Storm: heap used after a full GC minus heap used before, in a second JVM. This project:
tracemalloc, as in the core benchmark. What each figure holds differs: Storm's acker keeps a tree's XOR value, spout
task, start time and failed flag (the message id stays with the spout executor, which also keeps a pending entry per
tree), while this project's trackers also keep the tree's spout and message id.
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from acker.columnar import BlockTracker, MessageBlock
from acker.core import Tracker
from acker.core.ids import IdGenerator
from acker.core.messages import Message
from acker.core.outcomes import Acked
from acker.workload import WorkloadSpec, generate
from benchmarks.core_bench import BLOCK, _columnar, _memory_per_tree

HARNESS = Path(__file__).resolve().parent / "storm_acker"
JAR = HARNESS / "target" / "storm-acker-bench.jar"
JVM_FLAGS = ["-Xms4g", "-Xmx4g", "-XX:+UseSerialGC"]
RECORD = np.dtype([("kind", "u1"), ("anchor", "<i8"), ("value", "<i8")])  # 17 bytes, packed, little-endian


def build_harness() -> None:
    """Build the Java harness and copy storm-client and its dependencies next to it (incremental, quiet)."""
    command = ["mvn", "-q", "-B", "-f", str(HARNESS / "pom.xml"), "package"]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"building the Storm harness failed:\n{done.stdout}{done.stderr}")


def median_rates(messages: int, runs: int, once: Callable[[], object]) -> tuple[float, float]:
    """Messages per second by CPU time of this thread and by wall clock, each the median of ``runs`` runs.

    Like `core_bench._median_rate`, which only takes wall time: on a shared machine the CPU figure does not count
    the time spent waiting for a core."""
    cpu, wall = [], []
    for _ in range(runs):
        gc.collect()
        cpu_started, wall_started = time.thread_time(), time.perf_counter()
        once()
        cpu.append(time.thread_time() - cpu_started)
        wall.append(time.perf_counter() - wall_started)
    return messages / statistics.median(cpu), messages / statistics.median(wall)


def write_messages(path: Path, block: MessageBlock) -> None:
    """The harness's input: one (kind, anchor, value) record per message, in order."""
    records = np.empty(len(block), RECORD)
    records["kind"], records["anchor"], records["value"] = block.kinds, block.anchors, block.values
    records.tofile(path)


def write_pending_inits(path: Path, trees: int) -> None:
    """The inits `core_bench._memory_per_tree` opens: same generator, seed and order of ids (anchor, then value)."""
    gen = IdGenerator(7)
    ids = np.array([gen() for _ in range(2 * trees)], np.int64)
    records = np.zeros(trees, RECORD)  # kind 0: init
    records["anchor"], records["value"] = ids[0::2], ids[1::2]
    records.tofile(path)


def java_command(*args: str) -> list[str]:
    return ["java", *JVM_FLAGS, "-cp", f"{JAR}:{JAR.parent / 'lib'}/*", "acker.bench.AckerBench", *args]


def run_java(command: list[str]) -> dict[str, Any]:
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_storm(
    blocks: list[MessageBlock], pending: int, warmup: int, repeat: int
) -> tuple[dict[str, Any], dict[str, Any], list[list[str]]]:
    """Storm's acker on the workload (throughput) and on ``pending`` never-completing inits (memory), in two JVMs."""
    with tempfile.TemporaryDirectory(prefix="storm_bench_") as tmp:
        workload_file, pending_file = Path(tmp) / "workload.bin", Path(tmp) / "pending.bin"
        write_messages(workload_file, MessageBlock.concat(blocks))
        write_pending_inits(pending_file, pending)
        throughput_cmd = java_command("throughput", str(workload_file), str(warmup), str(repeat), str(BLOCK))
        memory_cmd = java_command("memory", str(pending_file))
        return run_java(throughput_cmd), run_java(memory_cmd), [throughput_cmd, memory_cmd]


def _reference(messages: list[Message], latencies: list[float]) -> None:
    """The reference tracker through every message, the wall time of each `BLOCK` of them added to ``latencies``."""
    tracker = Tracker()
    for start in range(0, len(messages), BLOCK):
        began = time.perf_counter()
        tracker.handle_all(messages[start : start + BLOCK])
        latencies.append(time.perf_counter() - began)


def print_latencies(names: list[str], block_seconds: list[list[float]]) -> None:
    """The table of the wall time through `BLOCK` messages, per tracker, the first one's p99 the baseline."""
    print(f"\n| tracker | time through {BLOCK:,} messages (wall), p50 ms | p99 ms | max ms | p99 ratio to Storm's |")
    print("|---|---:|---:|---:|---:|")
    base_ms = float(np.percentile(block_seconds[0], 99)) * 1e3
    for name, seconds in zip(names, block_seconds, strict=True):
        ms = np.array(seconds) * 1e3
        p50, p99 = np.percentile(ms, [50, 99])
        print(f"| {name} | {p50:.3f} | {p99:.3f} | {ms.max():.3f} | {p99 / base_ms:.2f} |")


def count_acked(messages: list[Message], blocks: list[MessageBlock]) -> tuple[int, int]:
    """Trees acked by the columnar and by the reference tracker (one untimed pass each, to check the replay)."""
    columnar = BlockTracker()
    for block in blocks:
        columnar.process(block)
    outcomes = Tracker().handle_all(messages)
    return columnar.counters.acked, sum(isinstance(o, Acked) for o in outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller workload, for a smoke run")
    parser.add_argument("--trees", type=int, default=None, help="tuple trees in the throughput workload")
    parser.add_argument("--pending", type=int, default=None, help="pending trees for the memory figure")
    parser.add_argument("--repeat", type=int, default=None, help="timed passes per tracker")
    args = parser.parse_args()
    trees = args.trees or (30_000 if args.quick else 300_000)
    pending = args.pending or (100_000 if args.quick else 1_000_000)
    repeat = args.repeat or (3 if args.quick else 5)
    warmup = 2_000_000 if args.quick else 4_000_000  # messages through Storm's acker before timing
    started = time.perf_counter()

    build_harness()
    messages = generate(WorkloadSpec(trees=trees, window=256, tick_every=100_000)).messages
    n = len(messages)
    blocks = [MessageBlock.from_messages(messages[i : i + BLOCK]) for i in range(0, n, BLOCK)]

    storm, storm_mem, commands = run_storm(blocks, pending, warmup, repeat)
    col_acked, ref_acked = count_acked(messages, blocks)
    if not storm["acked"] == col_acked == ref_acked == trees or storm["pending_after"] != 0:
        raise SystemExit(f"the replays disagree: storm {storm}, columnar acked {col_acked}, reference {ref_acked}")
    _columnar(blocks[:2], None, True)  # compile (or load the cached machine code) before timing
    col_blocks: list[float] = []
    col_cpu, col_wall = median_rates(n, repeat, lambda: _columnar(blocks, col_blocks, False))
    ref_blocks: list[float] = []
    ref_cpu, ref_wall = median_rates(n, repeat, lambda: _reference(messages, ref_blocks))
    ref_mem = _memory_per_tree(pending, columnar=False)
    col_mem = _memory_per_tree(pending, columnar=True)
    elapsed = time.perf_counter() - started

    storm_cpu, storm_wall = float(storm["messages_per_cpu_second"]), float(storm["messages_per_second"])
    storm_bytes = float(storm_mem["bytes_per_tree"])
    version = storm["storm_version"]
    print(f"command: {shlex.join([Path(sys.executable).name, '-m', 'benchmarks.storm_bench', *sys.argv[1:]])}")
    print(f"Storm's acker: {shlex.join(commands[0])}")
    print(f"               {shlex.join(commands[1])}  (input files in a temporary directory)")
    print(f"storm-client {version}; java {storm['java_version']} ({storm['java_vm']}), GC {', '.join(storm['gc'])}")
    print(f"workload: {trees:,} word-count trees, {n:,} messages, every tree acked by all three; {repeat} timed passes")
    print(f"memory at {pending:,} pending trees; whole run {elapsed:.0f} s\n")
    rows = [
        (f"Storm's acker (`org.apache.storm.daemon.Acker` {version}, Java)", storm_cpu, storm_wall),
        ("columnar tracker (`BlockTracker.process`, blocks of 8,192)", col_cpu, col_wall),
        ("reference tracker (`Tracker.handle`)", ref_cpu, ref_wall),
    ]
    print("| tracker | messages per CPU-second (one core) | ratio to Storm's | messages/s (wall clock) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, cpu, wall in rows:
        print(f"| {name} | {cpu:,.0f} | {cpu / storm_cpu:.2f} | {wall:,.0f} | {wall / storm_wall:.2f} |")
    print_latencies([name for name, _, _ in rows], [storm["block_seconds"], col_blocks, ref_blocks])
    print(f"\n| memory per pending tree at {pending:,} pending | bytes | ratio to Storm's acker |")
    print("|---|---:|---:|")
    print(f"| Storm's acker (JVM heap, compressed oops) | {storm_bytes:.0f} | 1.00 |")
    print(f"| columnar tracker | {col_mem:.0f} | {col_mem / storm_bytes:.2f} |")
    print(f"| reference tracker | {ref_mem:.0f} | {ref_mem / storm_bytes:.2f} |")


if __name__ == "__main__":
    main()
