"""Reference point: Apache Storm's own streaming word count, acking on vs off, in a Storm LocalCluster on this machine.

Run: ``.venv/bin/python -m benchmarks.storm_wordcount_bench [--quick]`` (needs Java 17+ and Maven; the first build
downloads Storm from Maven Central into ~/.m2). Prints a Markdown table, to set next to ``benchmarks.pipeline_bench``.

The topology has the shape of the project's pipeline (`acker.examples.wordcount`): a spout emitting sentences, a
split bolt (shuffle-grouped) emitting one tuple per word, anchored to the sentence when acking is on, and a count
bolt fields-grouped by word keeping running counts (it emits (word, count) unanchored, with nothing downstream) and
acking its input. Parallelism 1 for each component, one worker. The sentences are the same generated sentences
(`acker.examples.wordcount.sentences`, seed 1), written to a file that the spout reads in full at start-up.

Modes: *acking off*: the spout emits without message ids and ``topology.acker.executors = 0``; *acking on*: message
ids and ``topology.acker.executors = 1``, Storm's defaults otherwise (``topology.max.spout.pending`` unset, i.e.
unbounded); unless ``--max-spout-pending 0``, also *acking on* with ``topology.max.spout.pending = N``, the usual
tuning, since the pending limit moves Storm's throughput with acking on.

The Java side (benchmarks/storm_wordcount/, built with ``mvn -q package``) starts one LocalCluster in its JVM (heap
2 GB) and, after one warm-up run per mode (over all the sentences unless ``--warmup`` says fewer), runs ``--repeat``
rounds, each running every mode in turn, in the reverse order every other round (so that drift of a noisy machine,
and whatever the mode run first in a round pays for, falls on every mode), each a
fresh topology over the same sentences, killed once every word is counted (and, with acking on, every sentence
acked: any failed tuple fails the benchmark). Throughput is words counted per second, measured in the count bolt
from the first counted word to the last, so topology start-up (about 6 s a run) and tear-down are excluded. The
table gives the median of the runs of each mode; the ratio is that median over the median with acking off.

Latency: with acking on, the spout times each sentence from its emit to its ack (Storm's complete latency). At full
speed that is mostly time queued behind the sentences emitted before it (without ``max.spout.pending``, the whole
input); so after the rounds, ``--repeat`` more runs of the last acking mode emit at ``--paced`` × its median rate
(half by default), as `pipeline_bench`'s latency round writes at half the tracked rate. Memory: the JVM's peak
resident memory, one figure for the whole run (every mode runs in the one LocalCluster).

Not like for like with ``pipeline_bench``: a LocalCluster runs spout, bolts and acker as threads of one JVM, and
tuples go between them through in-memory queues (no serialisation within a worker, no network, no broker), while the
project's stages are separate Python processes that write every tuple to a Kafka broker and read it back.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from acker.examples.wordcount import sentences

PROJECT = Path(__file__).resolve().parent / "storm_wordcount"
MAIN_CLASS = "acker.bench.StormWordCountBench"
RUN_LINE = re.compile(r"^(?P<kind>RUN|PACED) mode=(?P<mode>\S+) rep=(?P<rep>\d+) .*words_per_s=(?P<rate>\d+) "
                      r"acked=(?P<acked>\d+) failed=(?P<failed>\d+).* p50_ms=(?P<p50>\S+) p99_ms=(?P<p99>\S+) "
                      r"max_ms=(?P<max>\S+)")  # fmt: skip


@dataclass
class Results:
    storm_version: str = "?"
    java_version: str = "?"
    sentences: int = 0
    words: int = 0
    rates: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    latencies_ms: dict[str, list[tuple[float, float, float]]] = field(default_factory=lambda: defaultdict(list))
    paced_mode: str = ""
    paced_per_s: float = 0.0
    paced_ms: list[tuple[float, float, float]] = field(default_factory=list)
    peak_rss_kib: int = -1


def _label(mode: str) -> str:
    if mode == "off":
        return "acking off (no message ids, topology.acker.executors = 0)"
    if mode == "on":
        return "acking on (message ids, topology.acker.executors = 1, max.spout.pending unset)"
    return f"acking on, topology.max.spout.pending = {mode.removeprefix('on:')}"


def _build(mvn: str) -> None:
    """``mvn -q package``: compiles the topology and copies its runtime classpath to target/lib."""
    print(f"building {PROJECT} (mvn -B -q package) ...")
    command = [mvn, "-B", "-q", "-f", str(PROJECT / "pom.xml"), "package"]
    build = subprocess.run(command, check=False, capture_output=True, text=True)
    if build.returncode != 0:
        sys.exit(f"the Maven build failed:\n{build.stdout}{build.stderr}")


def _run_java(java: str, argv: list[str], results: Results, log: Path, timeout_s: float) -> None:
    """Runs the Java benchmark, echoing progress and filling ``results``; its stderr (Storm's log) goes to ``log``."""
    classpath = os.pathsep.join([str(PROJECT / "target" / "classes"), str(PROJECT / "target" / "lib" / "*")])
    command = [java, "-Xms2g", "-Xmx2g", f"-Dlog4j2.configurationFile={PROJECT / 'src/main/resources/log4j2.xml'}",
               "-cp", classpath, MAIN_CLASS, *argv]  # fmt: skip
    with log.open("w") as stderr, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True) as java_:
        assert java_.stdout is not None
        watchdog = threading.Timer(timeout_s, java_.kill)
        watchdog.start()
        for raw in java_.stdout:
            line = raw.strip()
            key, _, value = line.partition(" ")
            if key == "STORM_VERSION":
                results.storm_version = value
            elif key == "JAVA_VERSION":
                results.java_version = value
            elif key == "WORKLOAD":
                fields = dict(item.split("=") for item in value.split())
                results.sentences, results.words = int(fields["sentences"]), int(fields["words"])
            elif key == "STARTED":
                print(f"LocalCluster up ({value})")
            elif key == "WARMUP":
                print(f"warm-up {value}")
            elif key == "MEMORY":
                results.peak_rss_kib = int(value.partition("=")[2])
            elif match := RUN_LINE.match(line):
                mode, rate = match["mode"], float(match["rate"])
                latency = (float(match["p50"]), float(match["p99"]), float(match["max"]))
                if mode != "off":
                    acked, failed = int(match["acked"]), int(match["failed"])
                    assert failed == 0 and acked == results.sentences, f"{line}: not every sentence was acked"
                if match["kind"] == "PACED":
                    results.paced_mode, results.paced_per_s = mode, float(line.split("per_s=")[1].split()[0])
                    results.paced_ms.append(latency)
                    print(f"paced run {match['rep']} {_label(mode)}, {results.paced_per_s:,.0f} sentences/s: complete "
                          f"latency p50 {latency[0]:.2f} ms, p99 {latency[1]:.2f} ms")  # fmt: skip
                    continue
                results.rates[mode].append(rate)
                if mode != "off":
                    results.latencies_ms[mode].append(latency)
                print(f"run {match['rep']} {_label(mode)}: {rate:,.0f} words/s")
        status = java_.wait()
        watchdog.cancel()
    if status != 0:
        sys.exit(f"the Java benchmark failed (exit status {status}); its log: {log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer sentences, one round (about a minute)")
    parser.add_argument("--sentences", type=int, default=None, help="default 400,000 (quick: 100,000)")
    parser.add_argument("--repeat", type=int, default=None, help="rounds of all modes; default 5 (quick: 1)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up sentences per mode; default all")
    parser.add_argument("--max-spout-pending", type=int, default=1000, help="third mode; 0 to leave it out")
    parser.add_argument("--paced", type=float, default=0.5,
                        help="latency rounds: the last acking mode's spout paced at this fraction of its median "
                             "rate [0.5; 0: none]")  # fmt: skip
    parser.add_argument("--timeout-s", type=float, default=300, help="per topology run")
    parser.add_argument("--no-build", action="store_true", help="use the classes already in target/")
    args = parser.parse_args()
    n = args.sentences or (100_000 if args.quick else 400_000)
    repeat = args.repeat or (1 if args.quick else 5)
    warmup = n if args.warmup is None else args.warmup
    modes = ["off", "on", *([f"on:{args.max_spout_pending}"] if args.max_spout_pending > 0 else [])]
    java, mvn = shutil.which("java"), shutil.which("mvn")
    if java is None or (mvn is None and not args.no_build):
        sys.exit("needs java (17+) and mvn on the PATH")

    started = time.monotonic()
    if not args.no_build:
        assert mvn is not None
        _build(mvn)
    results = Results()
    with tempfile.TemporaryDirectory(prefix="storm-wc-") as tmp:
        path = Path(tmp) / "sentences.txt"
        path.write_bytes(b"".join(line + b"\n" for line in sentences(n, seed=1)))
        argv = ["--sentences", str(path), "--repeat", str(repeat), "--warmup", str(warmup),
                "--timeout-s", str(args.timeout_s), "--modes", ",".join(modes), "--paced", str(args.paced)]  # fmt: skip
        budget = args.timeout_s * (len(modes) * (repeat + 1) + (repeat if args.paced > 0 else 0)) + 180
        _run_java(java, argv, results, PROJECT / "target" / "bench-stderr.log", budget)
    elapsed = time.monotonic() - started

    missing = [mode for mode in modes if len(results.rates[mode]) != repeat]
    assert not missing, f"no result for {missing}; see {PROJECT / 'target' / 'bench-stderr.log'}"
    median = {mode: statistics.median(results.rates[mode]) for mode in modes}
    print(f"\ncommand: {' '.join(['.venv/bin/python -m benchmarks.storm_wordcount_bench', *sys.argv[1:]])}")
    print(f"Storm {results.storm_version} (storm-server LocalCluster, in-process), Java {results.java_version}")
    print(f"workload: {results.sentences:,} sentences, {results.words:,} words (acker.examples.wordcount.sentences, "
          f"seed 1); parallelism 1 per component (spout, split, count, and the acker when on), one worker; "
          f"median of {repeat} run(s) per mode after one warm-up run each; {elapsed:.0f} s in all\n")  # fmt: skip
    print("| mode | words counted/s | ratio |")
    print("|---|---:|---:|")
    for mode in modes:
        print(f"| {_label(mode)} | {median[mode]:,.0f} | {median[mode] / median['off']:.2f} |")
    _report_latency(results, median)
    if results.peak_rss_kib >= 0:
        print(f"\npeak resident memory of the JVM (the LocalCluster and every run in it; heap -Xms2g -Xmx2g): "
              f"{results.peak_rss_kib / 1024:,.0f} MiB")  # fmt: skip


def _report_latency(results: Results, median: dict[str, float]) -> None:
    """Storm's complete latency (a sentence's emit → its ack at the spout), the median of the runs' p50 and p99 and
    the largest maximum: at full speed in each acking mode, and paced."""
    rows = [(f"{_label(mode)}, full speed", median[mode] * results.sentences / results.words, runs)
            for mode, runs in results.latencies_ms.items()]  # fmt: skip
    if results.paced_ms:
        rows.append((f"{_label(results.paced_mode)}, the spout paced", results.paced_per_s, results.paced_ms))
    if not rows:
        return
    print("\ncomplete latency, ms (a sentence's emit → its ack at the spout; medians of the runs' p50 and p99, the "
          "largest max)\n")  # fmt: skip
    print("| mode | sentences/s | p50 | p99 | max |")
    print("|---|---:|---:|---:|---:|")
    for label, per_s, runs in rows:
        p50, p99 = (statistics.median(run[i] for run in runs) for i in (0, 1))
        print(f"| {label} | {per_s:,.0f} | {p50:,.2f} | {p99:,.2f} | {max(run[2] for run in runs):,.2f} |")


if __name__ == "__main__":
    main()
