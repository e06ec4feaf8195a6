"""The whole benchmark suite, one script after another, with the machine it ran on.

Run: ``.venv/bin/python -m benchmarks.run_all [--quick | --smoke] [--only NAME ...] [--output FILE]
[--bootstrap-servers HOST:PORT]``

Each benchmark is a script of its own that prints Markdown tables with its baseline measured in the same run (see
each module's docstring, and docs/benchmarks.md for the method and the figures). This runs them in sequence — never
two at once: they share the machine — and writes one report: the machine, then each benchmark's command and output.
The report goes to ``--output`` (default ``.cache/benchmarks/report-<time>.md``, not tracked) and to stdout.

A benchmark fails the run when it exits with an error, runs past ``--timeout-min``, or prints no figures to compare
(`failure`, `missing_figures`): no Markdown table, no ratio to a baseline in one, or a cell that is not a number where
one was measured (nan, inf). What the figures are is not checked: a shared machine gives no stable ones
(docs/benchmarks.md). The test suite runs each benchmark's smoke run the same way
(tests/integration/test_benchmarks.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

SUITE = [  # name, module, what it compares
    ("core", "benchmarks.core_bench", "tracker core: reference vs columnar, memory per pending tree"),
    ("storm-acker", "benchmarks.storm_bench", "tracker core vs Storm's own acker (Java), same messages"),
    ("steady", "benchmarks.steady_bench", "tracker with tombstone sets beyond the caches, prefetch on vs off"),
    ("buckets", "benchmarks.buckets_bench", "tracker: messages/s and tombstone memory by bucket count"),
    ("service", "benchmarks.service_bench", "acker service vs a plain consumer; complete latency"),
    ("scaling", "benchmarks.scaling_bench", "acker throughput with 1, 2 and 4 partitions/instances"),
    ("recovery", "benchmarks.recovery_bench", "rebuilding 100k pending trees after kill -9; spurious replays"),
    ("pipeline", "benchmarks.pipeline_bench", "word count tracked vs untracked through Kafka"),
    ("stage", "benchmarks.stage_bench", "the word count's bolts tracked vs untracked, one at a time; header cost"),
    ("floor", "benchmarks.floor_bench", "the word count's Kafka traffic alone, tracked vs untracked: the bound"),
    ("storm-wordcount", "benchmarks.storm_wordcount_bench", "Storm's word count, acking on vs off, LocalCluster"),
    ("fanout", "benchmarks.fanout_bench", "one record fanned out to 1k-100k children: acked vs done untracked"),
    ("commit", "benchmarks.commit_bench", "Spark commit job: acks/s and ack-to-watermark delay"),
    ("replay-batch", "benchmarks.replay_batch_bench", "replay job: a batch of nacks on the driver, whole vs parts"),
    ("stuck-mark", "benchmarks.stuck_mark_bench", "commit job driver: a batch with a stuck watermark, merged or not"),
    ("avro-cache", "benchmarks.avro_cache_bench", "Spark jobs' JVM: Avro readers left per micro-batch, fast vs other"),
]


# `--smoke`: each benchmark's quick run on the smallest workload that still goes through all of it (every mode,
# table and latency round), for the tests (tests/integration/test_benchmarks.py), which check that the scripts run
# to their end and print figures, not what the figures are. Most of a quick run is its fixed costs (a broker, a JVM,
# Spark, processes started); these cut what grows with the workload. `--smoke` run on 2026-12-02: see
# docs/benchmarks.md.
SMOKE = {
    "core": ["--trees", "10000", "--pending", "20000"],
    "storm-acker": ["--trees", "10000", "--pending", "20000", "--repeat", "1"],
    "service": ["--trees", "10000", "--latency-s", "2"],
    "scaling": ["--trees", "10000"],
    "recovery": ["--trees", "5000", "--decided", "5000"],
    "pipeline": ["--sentences", "1000", "--latency-s", "2"],
    "floor": ["--sentences", "1000", "--latency-s", "1"],
    "storm-wordcount": ["--sentences", "20000"],
    "fanout": ["--children", "100,1000"],
    "commit": ["--acks", "40000", "--latency-s", "3"],
    "replay-batch": ["--nacks", "40000"],
    "stuck-mark": ["--batches", "120", "--kafka-txns", "40"],
    "avro-cache": ["--batches", "10"],
}


# The benchmarks that run against Kafka: each starts a local broker of its own unless ``--bootstrap-servers`` names a
# cluster (topics and groups of their own, so other work may share it).
KAFKA = {"service", "scaling", "recovery", "pipeline", "stage", "floor", "fanout", "commit", "stuck-mark"}


def command_of(name: str, module: str, quick: bool, smoke: bool, bootstrap: str | None = None) -> list[str]:
    """How benchmark ``name`` is run: its module, ``--quick`` for a quick or smoke run, `SMOKE`'s arguments for a
    smoke run, and the cluster ``bootstrap`` names for one of `KAFKA` (None: a broker of its own)."""
    return [
        sys.executable,
        "-m",
        module,
        *(["--quick"] if quick or smoke else []),
        *(SMOKE.get(name, []) if smoke else []),
        *(["--bootstrap-servers", bootstrap] if bootstrap is not None and name in KAFKA else []),
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


# A ratio to a baseline, as the benchmarks name theirs: a "ratio" column or row, "× one instance", "replay / baseline",
# "tracked / untracked".
_RATIO = re.compile(r"ratio|×|/ (?:baseline|untracked)", re.IGNORECASE)
_NOT_MEASURED = re.compile(r"^-?(?:nan|inf(?:inity)?)$", re.IGNORECASE)


def missing_figures(stdout: str) -> str | None:
    """Why ``stdout`` (a benchmark's) has no figures to compare, or None: it has Markdown tables, a ratio to a
    baseline among them, and no cell reading nan or inf (a division by a zero or a missing measure)."""
    rows = [line for line in stdout.splitlines() if line.lstrip().startswith("|")]
    if not rows:
        return "it printed no table"
    if not any(_RATIO.search(row) for row in rows):
        return "its tables give no ratio to a baseline"
    cells = [cell.strip() for row in rows for cell in row.strip().strip("|").split("|")]
    bad = [cell for cell in cells if _NOT_MEASURED.match(cell)]
    if bad:
        return f"its tables have cells that are not measures: {', '.join(sorted(set(bad)))}"
    return None


def failure(code: int | None, stdout: str, timeout_min: float) -> str | None:
    """Why a benchmark's run failed (`run_benchmark`'s exit status, None after a timeout, and its stdout), or None."""
    if code is None:
        return f"timed out after {timeout_min:g} min"
    if code != 0:
        return f"exit {code}"
    return missing_figures(stdout)


STOP_GRACE_S = 15.0  # a benchmark told to stop (SIGTERM) gets this long before SIGKILL


def run_benchmark(command: list[str], timeout_s: float) -> tuple[int | None, str, str]:
    """Run ``command`` in a process group of its own: exit status (None if it timed out), stdout, stderr. A timeout,
    Ctrl-C or a SIGTERM to this runner ends the benchmark and every process it started (its service and stage
    processes; its broker follows its owner): `subprocess.run` killed the benchmark alone, and left them running."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as child:
        try:
            out, err = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            out, err = _end_group(child)
            return None, out, err
        except BaseException:
            _end_group(child)
            raise
        return child.returncode, out, err


def _end_group(child: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM to the child's process group, SIGKILL to what is left after `STOP_GRACE_S`; its output, read while
    it stops (a benchmark logging as it stops would otherwise block on a full pipe, and lose its grace)."""
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)
        try:
            out, err = child.communicate(timeout=wait_s)  # retried after a timeout, nothing of the output is lost
        except subprocess.TimeoutExpired:
            continue
        with contextlib.suppress(ProcessLookupError):  # the leader is gone; what it started may not be
            os.killpg(child.pid, signal.SIGKILL)
        return out, err
    return "", ""


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # a SIGTERM ends the running benchmark as Ctrl-C does


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="each benchmark's quick mode")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="quick runs on the smallest workloads, as the tests run them",
    )
    parser.add_argument("--only", nargs="+", choices=[name for name, _, _ in SUITE], help="run only these")
    parser.add_argument("--output", default=None, help="write the report here as well")
    parser.add_argument(
        "--bootstrap-servers", default=None, help="the Kafka cluster of the benchmarks that use one (default: each "
        "starts a local broker of its own)"
    )  # fmt: skip
    parser.add_argument(
        "--timeout-min", type=float, default=60.0, help="a benchmark still running after this is ended [60]"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    chosen = [entry for entry in SUITE if not args.only or entry[0] in args.only]
    stamp = time.strftime("%Y-%m-%d %H:%M")
    output = Path(args.output or f".cache/benchmarks/report-{time.strftime('%Y%m%d-%H%M%S')}.md")
    output.parent.mkdir(parents=True, exist_ok=True)
    kind = " (smoke)" if args.smoke else " (quick)" if args.quick else ""
    parts = [f"# Benchmark report, {stamp}{kind}\n", f"Machine: {machine()}\n"]
    failed = []
    for name, module, what in chosen:
        command = command_of(name, module, args.quick, args.smoke, args.bootstrap_servers)
        print(f"== {name}: {what}", file=sys.stderr, flush=True)
        began = time.monotonic()
        code, stdout, stderr = run_benchmark(command, args.timeout_min * 60)
        took = time.monotonic() - began
        tables = [line for line in stdout.splitlines() if not line.startswith("%")]
        shown = " ".join(["python -m", module, *command[3:]])
        parts.append(f"## {name}: {what}\n\n`{shown}` ({took:.0f} s)\n\n" + "\n".join(tables) + "\n")
        why = failure(code, stdout, args.timeout_min)
        if why is not None:
            failed.append(name)
            said = f":\n\n```\n{stderr[-2000:]}\n```" if code != 0 else ""  # its stderr, where it ended in error
            parts.append(f"**failed** ({why}){said}\n")
    report = "\n".join(parts)
    output.write_text(report)
    print(report)
    print(f"report written to {output}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
