"""Buckets benchmark: what each timeout bucket costs the columnar tracker (messages/s on one core, memory).

Run: ``.venv/bin/python -m benchmarks.buckets_bench [--quick]``. Prints a Markdown table.

Why: a tree not pending is looked for among the tombstones of every bucket (one set per bucket, one cache miss
each), and every set has the capacity of the fullest one. At a steady state every set holds some: the cost of a new
tree grows with the bucket count. ``buckets`` is the service's setting (`acker.config.BUCKETS_MAX` caps it).

Workload, per bucket count B: a fresh tracker, every one of its B+1 sets given a tombstone (a tree acked, then a
tick, B times over), ``--trees`` whole trees (init, ack) and a tick, untimed, which grow the sets to the size they
keep at a steady state, then ``--trees`` whole trees more, timed (CPU time of this thread), all in blocks of 8,192
messages (the core benchmark's); the median of ``--repeat`` runs, its ratio to B = 3 (the default) measured in the
same run, the p50/p99 of a timed block's wall time over every run, and the tombstone sets' memory.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from acker.columnar import BlockTracker, MessageBlock
from acker.core import TICK, Ack, Init, Message, TrackerConfig
from acker.core.ids import IdGenerator
from benchmarks.core_bench import BLOCK


def _run(buckets: int, trees: int, ids: IdGenerator, block_s: list[float]) -> tuple[float, int]:
    """Messages per CPU-second through ``trees`` whole trees, and the tombstone sets' bytes; the wall time of each
    block added to ``block_s``."""
    tracker = BlockTracker(TrackerConfig(buckets=buckets))
    filling: list[Message] = []
    for i in range(buckets):
        anchor, value = ids(), ids()
        filling += [Init(anchor, "s", f"t/0/{i}", value), Ack(anchor, value), TICK]
    tracker.process(MessageBlock.from_messages(filling))
    for block in _blocks(trees, ids, "w"):  # the sets grown to their size, as at a steady state
        tracker.process(block)
    tracker.process(MessageBlock.from_messages([TICK]))
    blocks = _blocks(trees, ids, "t")
    messages = sum(len(block) for block in blocks)
    started = time.thread_time()
    for block in blocks:
        began = time.perf_counter()
        tracker.process(block)
        block_s.append(time.perf_counter() - began)
    rate = messages / (time.thread_time() - started)
    if tracker.counters.acked != buckets + 2 * trees or tracker.pending:  # a tracker dropping trees is not faster
        raise SystemExit(f"buckets_bench: {tracker.counters.acked:,} of {buckets + 2 * trees:,} trees acked, "
                         f"{tracker.pending:,} pending, at {buckets} buckets")  # fmt: skip
    return rate, int(tracker._tombs.nbytes)


def _blocks(trees: int, ids: IdGenerator, tag: str) -> list[MessageBlock]:
    """``trees`` whole trees (init, ack), in blocks of `BLOCK` messages."""
    pairs = [(ids(), ids()) for _ in range(trees)]
    messages: list[Message] = [
        m for i, (a, v) in enumerate(pairs) for m in (Init(a, "s", f"{tag}/1/{i}", v), Ack(a, v))
    ]
    return [MessageBlock.from_messages(messages[i : i + BLOCK]) for i in range(0, len(messages), BLOCK)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trees", type=int, default=None, help="trees a run [200,000; quick 20,000]")
    parser.add_argument("--repeat", type=int, default=None, help="runs per bucket count [5; quick 3]")
    parser.add_argument("--buckets", default="3,8,16,32,64,128", help="bucket counts [3,8,16,32,64,128]")
    args = parser.parse_args()
    trees, repeat = args.trees or (20_000 if args.quick else 200_000), args.repeat or (3 if args.quick else 5)
    counts = [int(b) for b in args.buckets.split(",")]
    ids = IdGenerator(4)
    _run(3, 1000, ids, [])  # compiles the tracker's loop
    rates: dict[int, list[float]] = {b: [] for b in counts}
    block_s: dict[int, list[float]] = {b: [] for b in counts}
    memory: dict[int, int] = {}
    for _ in range(repeat):  # interleaved: a noisy moment weighs on every count alike
        for b in [3, *counts] if 3 not in counts else counts:
            rate, memory[b] = _run(b, trees, ids, block_s.setdefault(b, []))
            rates.setdefault(b, []).append(rate)
    base = statistics.median(rates[3])
    print(f"\nworkload: {trees:,} whole trees (init, ack) into a tracker whose every tombstone set holds one; "
          f"median of {repeat}")  # fmt: skip
    base_p99 = float(np.percentile(block_s[3], 99))
    print(f"| buckets | messages/s | ratio to 3 buckets | block of {BLOCK:,}: p50 ms | p99 ms | p99 ratio | "
          "tombstone sets |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for b in sorted(rates):
        rate = statistics.median(rates[b])
        p50, p99 = np.percentile(block_s[b], [50, 99])
        print(f"| {b} | {rate:,.0f} | {rate / base:.2f} | {p50 * 1e3:.2f} | {p99 * 1e3:.2f} | {p99 / base_p99:.2f} | "
              f"{memory[b] / 2**20:,.1f} MiB |")  # fmt: skip


if __name__ == "__main__":
    main()
