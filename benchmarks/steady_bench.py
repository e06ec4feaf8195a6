"""Steady-state benchmark: the tracker when its tombstone sets are larger than the CPU's caches, with and without
prefetching (messages/s on one core).

Run: ``.venv/bin/python -m benchmarks.steady_bench [--quick]``. Prints a Markdown table.

Why: a service at its steady state keeps, per partition, every tree finished in the last ``buckets`` ticks as a
tombstone (2 s timeout at a million acker messages a second: about 300,000 trees, megabytes of sets). Each new
tree looks itself up in those sets and is buried in one when it finishes, so each tree meets a cache miss there.
The core benchmark's workload keeps its sets small; this one does not.

Workload: Storm's word count (`acker.workload.word_count_arrays`: 1 init + 6 acks per tree), inits in order, each
ack arriving uniformly within the next ``--window`` trees' inits (the trees in flight between the spout and the last
bolt), a tick every ``--tick-every`` messages, 3 buckets: the sets fill to about 4 × ``tick-every`` / 7 trees.
Blocks of 65,536 messages (as the service applies its records), outcomes not materialised.

Measured in one run, per window: the tracker with its compiled loop prefetching the cache lines of the message
``AHEAD`` places on (as `acker run` runs it) and the same tracker with the prefetch off (the baseline), in the order
ABBA..., ``--repeat`` times each on a fresh tracker: messages per CPU-second of this (single) thread, median, the
ratio of the medians, p50/p99 of a block's wall time, and the tombstone sets' and table's memory at the end.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from acker.columnar import BlockTracker, MessageBlock
from acker.columnar._kernels import AHEAD
from acker.columnar.block import Kind, RecordSpans
from acker.core.tracker import TrackerConfig
from acker.workload import WORD_COUNT_MESSAGES, word_count_arrays

BLOCK = 65_536
BUCKETS = 3


def _blocks(trees: int, window: int, tick_every: int, rng: np.random.Generator) -> list[MessageBlock]:
    """The workload's messages, in arrival order, cut into blocks."""
    per = WORD_COUNT_MESSAGES
    anchors, values, kinds = word_count_arrays(trees, rng)
    arrival = np.repeat(np.arange(trees, dtype=np.float64), per).reshape(trees, per)
    arrival[:, 1:] += rng.uniform(0, window, size=(trees, per - 1))  # an ack comes within `window` trees' inits
    order = np.argsort(arrival.reshape(-1), kind="stable")
    kinds = kinds[order]
    tree = np.repeat(np.arange(trees, dtype=np.int64), per)[order]
    ticks = np.arange(tick_every, len(kinds), tick_every)
    kinds = np.insert(kinds, ticks, Kind.TICK)
    anchor = np.insert(np.repeat(anchors, per)[order], ticks, 0)
    value = np.insert(values.reshape(-1)[order], ticks, 0)
    tree = np.insert(tree, ticks, -1)
    blocks = []
    for start in range(0, len(kinds), BLOCK):
        part = slice(start, start + BLOCK)
        inits = kinds[part] == Kind.INIT
        sources = np.zeros(int(inits.sum()), np.int32)
        block = MessageBlock(kinds[part].copy(), anchor[part].copy(), value[part].copy(), sources, tree[part][inits],
                             [("sentences", "sentences/0")])  # fmt: skip
        blocks.append(block)
    return blocks


def _run(blocks: list[MessageBlock], ahead: int, block_s: list[float], trees: int) -> tuple[float, BlockTracker]:
    """CPU seconds of this thread to apply every block with a fresh tracker; appends each block's wall time. Every
    tree must be acked (the workload's acks come within its window, which its ticks must leave the time for)."""
    tracker = BlockTracker(TrackerConfig(buckets=BUCKETS), prefetch_ahead=ahead, prefetch_from_bytes=0)
    started = time.thread_time()
    for block in blocks:
        t0 = time.perf_counter()
        tracker.process_records(block, RecordSpans.single(len(block), 0, 0))
        block_s.append(time.perf_counter() - t0)
    seconds = time.thread_time() - started
    if tracker.counters.acked != trees or tracker.pending:
        raise SystemExit(f"steady_bench: {tracker.counters.acked:,} of {trees:,} trees acked, {tracker.pending:,} "
                         f"pending ({tracker.counters}): are the ticks too close for the window?")  # fmt: skip
    return seconds, tracker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller workload, for a smoke run")
    parser.add_argument("--trees", type=int, default=None, help="tuple trees per run (default 2M, quick 200k)")
    parser.add_argument("--window", type=int, nargs="+", default=[1, 2_000, 50_000], help="trees in flight")
    parser.add_argument("--tick-every", type=int, default=None, help="messages between ticks (default 1M, quick 500k)")
    parser.add_argument("--repeat", type=int, default=None, help="runs of each layout (default 5, quick 2)")
    args = parser.parse_args()
    trees = args.trees or (200_000 if args.quick else 2_000_000)
    tick_every = args.tick_every or (500_000 if args.quick else 1_000_000)  # the widest window's acks between 2 ticks
    repeat = args.repeat or (2 if args.quick else 5)
    BlockTracker.warm_up()
    print(f"workload: {trees:,} word-count trees ({trees * WORD_COUNT_MESSAGES:,} messages), a tick every "
          f"{tick_every:,} messages, {BUCKETS} buckets; prefetch {AHEAD} messages ahead; {repeat} runs each"
          "\n")  # fmt: skip
    print("| trees in flight | prefetch | messages per CPU-second | ratio | block p50 ms (wall) | "
          "block p99 ms (wall) | tombstone sets MB | table MB |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for window in args.window:
        blocks = _blocks(trees, window, tick_every, np.random.default_rng(window))
        messages = sum(len(b) for b in blocks)
        cpu: dict[int, list[float]] = {0: [], AHEAD: []}
        block_s: dict[int, list[float]] = {0: [], AHEAD: []}
        memory: dict[int, tuple[float, float]] = {}
        for run in range(repeat):
            for ahead in (0, AHEAD) if run % 2 == 0 else (AHEAD, 0):  # ABBA: the machine's drift falls on both
                seconds, tracker = _run(blocks, ahead, block_s[ahead], trees)
                cpu[ahead].append(seconds)
                memory[ahead] = (tracker._tombs.nbytes / 1e6, sum(a.nbytes for a in tracker._table) / 1e6)
        base = messages / statistics.median(cpu[0])
        for ahead in (0, AHEAD):
            rate = messages / statistics.median(cpu[ahead])
            p50, p99 = np.percentile(block_s[ahead], [50, 99]) * 1e3
            tombs_mb, table_mb = memory[ahead]
            label = f"{ahead} messages ahead" if ahead else "off (baseline)"
            print(f"| {window:,} | {label} | {rate:,.0f} | {rate / base:.2f} | {p50:.2f} | {p99:.2f} | "
                  f"{tombs_mb:.1f} | {table_mb:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
