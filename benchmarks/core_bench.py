"""Core benchmark: tracker throughput (messages/s on one core) and memory per pending tree.

Run: ``.venv/bin/python -m benchmarks.core_bench [--quick]``. Prints a Markdown table.

Workload: Storm's word count as tuple trees (1 init + 1 sentence ack + 5 word acks per tree), built with the
real client helpers, each tree's messages shuffled and trees overlapping (`acker.workload`). Measured in one run:

- baseline: the irreducible per-message cost of Python — one dict XOR per message, ``d[a] = d.get(a, 0) ^ v``,
  over the same (anchor, value) pairs, with no rules at all;
- reference: `acker.core.Tracker.handle`, one message at a time;
- columnar: `acker.columnar.BlockTracker.process` on blocks of 8,192 messages (encoding the blocks is not
  timed: the acker topic's records carry them already columnar), with per-block latency percentiles, and once
  more including the materialisation of outcome objects.

Memory: bytes retained per pending tree after 1M inits (tracemalloc, everything the tracker keeps, message-id
strings and int objects included), for the reference and the columnar tracker.
Each throughput figure is the median of ``--repeat`` runs; ratios compare figures of the same run.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from acker.columnar import BlockTracker, MessageBlock
from acker.core import Acked, Init, Tracker
from acker.core.ids import IdGenerator
from acker.core.messages import Ack, Message
from acker.workload import WorkloadSpec, generate

BLOCK = 8192


def _median_rate(messages: int, runs: int, once: Callable[[], object]) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        once()
        times.append(time.perf_counter() - started)
    return messages / statistics.median(times), times


def _baseline(pairs: list[tuple[int, int]]) -> None:
    d: dict[int, int] = {}
    get = d.get
    for a, v in pairs:
        d[a] = get(a, 0) ^ v


def _columnar(blocks: list[MessageBlock], latencies: list[float] | None, materialise: bool) -> None:
    tracker = BlockTracker()
    for block in blocks:
        started = time.perf_counter()
        result = tracker.process(block)
        if materialise:
            result.to_outcomes()
        if latencies is not None:
            latencies.append(time.perf_counter() - started)


def _check(expected: dict[str, str], messages: list[Message], blocks: list[MessageBlock]) -> None:
    """Both trackers decide the workload as it was made to be decided (one untimed pass each): a figure of a tracker
    that decides otherwise is no figure."""
    acked = sum(1 for outcome in expected.values() if outcome == "ack")
    columnar = BlockTracker()
    for block in blocks:
        columnar.process(block)
    reference = sum(isinstance(o, Acked) for o in Tracker().handle_all(messages))
    if not columnar.counters.acked == reference == acked:
        raise SystemExit(f"core_bench: trees acked: columnar {columnar.counters.acked:,}, reference {reference:,}, "
                         f"expected {acked:,}")  # fmt: skip


def _memory_per_tree(trees: int, columnar: bool) -> float:
    gen = IdGenerator(7)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracker: Tracker | BlockTracker
    if columnar:
        tracker = BlockTracker()
        for start in range(0, trees, BLOCK):
            inits: list[Message] = [
                Init(gen(), "sentences", f"sentences/{i % 12}/{i}", gen())
                for i in range(start, min(trees, start + BLOCK))
            ]
            tracker.process(MessageBlock.from_messages(inits))
            del inits
    else:
        tracker = Tracker()
        for i in range(trees):
            tracker.handle(Init(gen(), "sentences", f"sentences/{i % 12}/{i}", gen()))
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert tracker.pending == trees
    return used / trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller workload, for a smoke run")
    parser.add_argument("--trees", type=int, default=None, help="tuple trees in the throughput workload")
    parser.add_argument("--pending", type=int, default=None, help="pending trees for the memory figure")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trees = args.trees or (30_000 if args.quick else 300_000)
    pending = args.pending or (100_000 if args.quick else 1_000_000)

    workload = generate(WorkloadSpec(trees=trees, window=256, tick_every=100_000))
    messages = workload.messages
    n = len(messages)
    pairs = [(m.anchor, m.value) if isinstance(m, Ack | Init) else (getattr(m, "anchor", 0), 0) for m in messages]
    blocks = [MessageBlock.from_messages(messages[i : i + BLOCK]) for i in range(0, n, BLOCK)]
    _columnar(blocks[:2], None, True)  # compile (or load the cached machine code) before timing
    _check(workload.expected, messages, blocks)

    base_rate, _ = _median_rate(n, args.repeat, lambda: _baseline(pairs))
    ref_rate, _ = _median_rate(n, args.repeat, lambda: Tracker().handle_all(messages))
    latencies: list[float] = []
    col_rate, _ = _median_rate(n, args.repeat, lambda: _columnar(blocks, latencies, False))
    mat_rate, _ = _median_rate(n, args.repeat, lambda: _columnar(blocks, None, True))
    p50, p99 = (float(v) for v in np.percentile(latencies, [50, 99]))

    ref_mem = _memory_per_tree(pending, columnar=False)
    col_mem = _memory_per_tree(pending, columnar=True)

    print(f"workload: {trees:,} word-count trees, {n:,} messages; memory at {pending:,} pending trees\n")
    print("| measure | messages/s | ratio |")
    print("|---|---:|---:|")
    print(f"| baseline: one dict XOR per message | {base_rate:,.0f} | 1.00 |")
    print(f"| reference tracker (`Tracker.handle`) | {ref_rate:,.0f} | {ref_rate / base_rate:.2f} × baseline |")
    print(f"| columnar tracker (`BlockTracker.process`) | {col_rate:,.0f} | {col_rate / ref_rate:.1f} × reference |")
    print(f"| columnar + outcome objects | {mat_rate:,.0f} | {mat_rate / ref_rate:.1f} × reference |")
    print(f"\ncolumnar block of {BLOCK:,} messages: p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
    print("\n| memory per pending tree | bytes |")
    print("|---|---:|")
    print(f"| reference tracker | {ref_mem:.0f} |")
    print(f"| columnar tracker | {col_mem:.0f} |")


if __name__ == "__main__":
    main()
