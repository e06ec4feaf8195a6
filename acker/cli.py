"""The `acker` command line: one sub-command per job, each a thin shell around library code."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence

from acker.core.outcomes import Acked
from acker.core.tracker import Tracker, TrackerConfig
from acker.errors import AckerError


def _tracker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--buckets", type=int, default=3, help="ticks after which a pending tree expires (>= 2)")
    parser.add_argument(
        "--high-water", type=int, default=None, help="pending trees at which new inits are nacked 'overload'"
    )
    parser.add_argument(
        "--relocate-on-update",
        action="store_true",
        help="every update restarts a tree's timeout (Storm's RotatingMap put), not only reset-timeout",
    )


def _tracker_config(args: argparse.Namespace) -> TrackerConfig:
    return TrackerConfig(args.buckets, args.high_water, args.relocate_on_update)


def _cmd_replay(args: argparse.Namespace) -> int:
    from acker.columnar import BlockTracker
    from acker.replay import replay

    config = _tracker_config(args)
    tracker = Tracker(config) if args.engine == "reference" else BlockTracker(config)
    if args.file == "-":
        bad = replay(tracker, sys.stdin, sys.stdout, sys.stderr)
    else:
        with open(args.file, encoding="utf-8") as lines:
            bad = replay(tracker, lines, sys.stdout, sys.stderr)
    if args.stats:
        print(" ".join(f"{k}={v}" for k, v in tracker.counters.as_dict().items()), file=sys.stderr)
    if bad:
        print(f"{bad} malformed line(s) skipped", file=sys.stderr)
        return 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from acker.workload import WorkloadSpec, generate

    spec = WorkloadSpec(
        trees=args.trees,
        fanout=args.fanout,
        fail_rate=args.fail_rate,
        drop_rate=args.drop_rate,
        seed=args.seed,
        buckets=args.buckets,
    )
    workload = generate(spec)
    tracker = Tracker(TrackerConfig(buckets=args.buckets))
    started = time.perf_counter()
    outcomes = tracker.handle_all(workload.messages)
    elapsed = time.perf_counter() - started

    got: dict[str, str] = {}
    duplicates = 0
    for outcome in outcomes:
        duplicates += outcome.msg_id in got
        got[outcome.msg_id] = "ack" if isinstance(outcome, Acked) else outcome.reason.value
    lost = [m for m in workload.expected if m not in got]
    wrong = [m for m, want in workload.expected.items() if m in got and got[m] != want]
    early = [m for m in wrong if got[m] == "ack"]  # acked although a tuple failed or was lost

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Core demo: {spec.trees} trees, {len(workload.messages)} messages")
    table.add_column("measure")
    table.add_column("value", justify="right")
    by_kind = Counter(got.values())
    for name, value in (
        ("source records", spec.trees),
        ("acked", by_kind["ack"]),
        ("nacked failed", by_kind["failed"]),
        ("nacked timeout", by_kind["timeout"]),
        ("expected acked", sum(v == "ack" for v in workload.expected.values())),
        ("records without an outcome (lost)", len(lost)),
        ("wrong outcomes", len(wrong)),
        ("acked too early", len(early)),
        ("duplicate outcomes", duplicates),
        ("throughput (messages/s)", f"{len(workload.messages) / elapsed:,.0f}"),
    ):
        table.add_row(name, str(value))
    for key, value in tracker.counters.as_dict().items():
        table.add_row(f"counter {key}", str(value))
    Console().print(table)
    ok = not lost and not wrong and not duplicates
    print("RESULT:", "every record has exactly its right outcome" if ok else "FAILED: see the table above")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="acker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    replay = sub.add_parser(
        "replay",
        help="run protocol messages (JSON lines) through the tracker and print the outcomes",
        description="Read protocol messages as JSON lines from FILE (or - for stdin) and write the outcomes as "
        "JSON lines in decision order. Malformed lines are reported on stderr and skipped; the exit status is "
        "1 if any line was malformed.",
    )
    replay.add_argument("file", help="JSON-lines file, or - for standard input")
    replay.add_argument("--stats", action="store_true", help="print the tracker's counters on stderr at the end")
    replay.add_argument(
        "--engine",
        choices=("reference", "columnar"),
        default="reference",
        help="reference: one message at a time, exact decision order; columnar: the compiled block tracker "
        "(same decisions; the outcomes of one tick in table order)",
    )
    _tracker_options(replay)
    replay.set_defaults(run=_cmd_replay)

    demo = sub.add_parser(
        "demo",
        help="run the tracker on a generated word-count workload with failures and check every outcome",
    )
    demo.add_argument("--trees", type=int, default=100_000, help="source records (tuple trees)")
    demo.add_argument("--fanout", type=int, default=5, help="words per sentence")
    demo.add_argument("--fail-rate", type=float, default=0.01, help="probability that a tuple fails")
    demo.add_argument("--drop-rate", type=float, default=0.01, help="probability that an ack is lost")
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--buckets", type=int, default=3)
    demo.set_defaults(run=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except AckerError as error:
        print(f"acker: {error}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
