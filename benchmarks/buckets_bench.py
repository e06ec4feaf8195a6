"""Buckets benchmark: what each timeout bucket costs the columnar tracker (messages/s on one core, memory).

Run: ``.venv/bin/python -m benchmarks.buckets_bench [--quick]``. Prints a Markdown table.

Why: a tree not pending is looked for among the tombstones of every bucket (one set per bucket, one cache miss
each), and every set has the capacity of the fullest one. At a steady state every set holds some: the cost of a new
tree grows with the bucket count. ``buckets`` is the service's setting (`acker.config.BUCKETS_MAX` caps it).

Workload, per bucket count B: a fresh tracker, every one of its B+1 sets given a tombstone (a tree acked, then a
tick, B times over), then ``--trees`` whole trees (init, ack) in one block, timed (CPU time of this thread); the
median of ``--repeat`` runs, its ratio to B = 3 (the default) measured in the same run, and the tombstone sets'
memory.
"""

from __future__ import annotations

import argparse
import statistics
import time

from acker.columnar import BlockTracker, MessageBlock
from acker.core import TICK, Ack, Init, Message, TrackerConfig
from acker.core.ids import IdGenerator


def _run(buckets: int, trees: int, ids: IdGenerator) -> tuple[float, int]:
    """Messages per CPU-second through one block of ``trees`` whole trees, and the tombstone sets' bytes."""
    tracker = BlockTracker(TrackerConfig(buckets=buckets))
    filling: list[Message] = []
    for i in range(buckets):
        anchor, value = ids(), ids()
        filling += [Init(anchor, "s", f"t/0/{i}", value), Ack(anchor, value), TICK]
    tracker.process(MessageBlock.from_messages(filling))
    pairs = [(ids(), ids()) for _ in range(trees)]
    block = MessageBlock.from_messages([m for i, (a, v) in enumerate(pairs) for m in (Init(a, "s", f"t/1/{i}", v),
                                                                                      Ack(a, v))])  # fmt: skip
    started = time.thread_time()
    tracker.process(block)
    return len(block) / (time.thread_time() - started), int(tracker._tombs.nbytes)


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
    _run(3, 1000, ids)  # compiles the tracker's loop
    rates: dict[int, list[float]] = {b: [] for b in counts}
    memory: dict[int, int] = {}
    for _ in range(repeat):  # interleaved: a noisy moment weighs on every count alike
        for b in [3, *counts] if 3 not in counts else counts:
            rate, memory[b] = _run(b, trees, ids)
            rates.setdefault(b, []).append(rate)
    base = statistics.median(rates[3])
    print(f"\nworkload: {trees:,} whole trees (init, ack) into a tracker whose every tombstone set holds one; "
          f"median of {repeat}")  # fmt: skip
    print("| buckets | messages/s | ratio to 3 buckets | tombstone sets |")
    print("|---:|---:|---:|---:|")
    for b in sorted(rates):
        rate = statistics.median(rates[b])
        print(f"| {b} | {rate:,.0f} | {rate / base:.2f} | {memory[b] / 2**20:,.1f} MB |")


if __name__ == "__main__":
    main()
