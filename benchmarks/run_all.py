"""The whole benchmark suite, one script after another, with the machine it ran on.

Run: ``.venv/bin/python -m benchmarks.run_all [--quick] [--only NAME ...] [--output FILE]``

Each benchmark is a script of its own that prints Markdown tables with its baseline measured in the same run (see
each module's docstring, and docs/benchmarks.md for the method and the figures). This runs them in sequence — never
two at once: they share the machine — and writes one report: the machine, then each benchmark's command and output.
The report goes to ``--output`` (default ``.cache/benchmarks/report-<time>.md``, not tracked) and to stdout.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

SUITE = [  # name, module, what it compares
    ("core", "benchmarks.core_bench", "tracker core: reference vs columnar, memory per pending tree"),
    ("storm-acker", "benchmarks.storm_bench", "tracker core vs Storm's own acker (Java), same messages"),
    ("steady", "benchmarks.steady_bench", "tracker with tombstone sets beyond the caches, prefetch on vs off"),
    ("service", "benchmarks.service_bench", "acker service vs a plain consumer; complete latency"),
    ("scaling", "benchmarks.scaling_bench", "acker throughput with 1, 2 and 4 partitions/instances"),
    ("recovery", "benchmarks.recovery_bench", "rebuilding 100k pending trees after kill -9; spurious replays"),
    ("pipeline", "benchmarks.pipeline_bench", "word count tracked vs untracked through Kafka"),
    ("stage", "benchmarks.stage_bench", "the word count's bolts tracked vs untracked, one at a time; header cost"),
    ("storm-wordcount", "benchmarks.storm_wordcount_bench", "Storm's word count, acking on vs off, LocalCluster"),
    ("commit", "benchmarks.commit_bench", "Spark commit job: acks/s and ack-to-watermark delay"),
]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    try:  # the benchmarks that need Java say so themselves; the others run without it
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
    except OSError:
        java = []
    return (
        f"{os.cpu_count()} × {cpu}{memory}; {platform.platform()}; Python {platform.python_version()}; "
        f"{java[0] if java else 'no java'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="each benchmark's quick mode (a smoke run)")
    parser.add_argument("--only", nargs="+", choices=[name for name, _, _ in SUITE], help="run only these")
    parser.add_argument("--output", default=None, help="write the report here as well")
    args = parser.parse_args()
    chosen = [entry for entry in SUITE if not args.only or entry[0] in args.only]
    stamp = time.strftime("%Y-%m-%d %H:%M")
    output = Path(args.output or f".cache/benchmarks/report-{time.strftime('%Y%m%d-%H%M%S')}.md")
    output.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"# Benchmark report, {stamp}{' (quick)' if args.quick else ''}\n", f"Machine: {machine()}\n"]
    failed = []
    for name, module, what in chosen:
        command = [sys.executable, "-m", module, *(["--quick"] if args.quick else [])]
        print(f"== {name}: {what}", file=sys.stderr, flush=True)
        began = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        took = time.monotonic() - began
        tables = [line for line in result.stdout.splitlines() if not line.startswith("%")]
        shown = " ".join(["python -m", module, *command[3:]])
        parts.append(f"## {name}: {what}\n\n`{shown}` ({took:.0f} s)\n\n" + "\n".join(tables) + "\n")
        if result.returncode != 0:
            failed.append(name)
            parts.append(f"**failed** (exit {result.returncode}):\n\n```\n{result.stderr[-2000:]}\n```\n")
    report = "\n".join(parts)
    output.write_text(report)
    print(report)
    print(f"report written to {output}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
