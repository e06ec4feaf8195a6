"""Generated tracker workloads: realistic tuple trees, shuffled the way Kafka delivers them.

Used by `acker simulate`, the core benchmark and tests. Each source record becomes a tree built with the
real client helpers (`acker.core.tuple_tree`): the spout emits one root tuple that passes through ``depth`` bolt
stages; every stage but the last emits ``fanout`` children per input (Storm's word count is ``depth=2``:
split emits a word per token, count acks each word: 1 init + 1 + fanout acks per tree). Failure
injection: a tuple may fail instead of being processed (``fail_rate``) or its ack may be lost (``drop_rate``).

Arrival order: the messages of one tree come in a random order (inits after acks, children's acks before their
parents': any order a set of independent producers can give), and trees overlap within a sliding window of
``window`` trees. A tick is inserted every ``tick_every`` messages and ``buckets`` more at the end, so with
``tick_every`` larger than a window's worth of messages, only trees with a lost ack time out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from acker.columnar.block import Kind
from acker.core.ids import IdGenerator
from acker.core.messages import TICK, Message
from acker.core.tuple_tree import InputTuple, SpoutTree, TupleIds, anchored


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    trees: int = 10_000
    fanout: int = 5
    depth: int = 2
    fail_rate: float = 0.0
    drop_rate: float = 0.0
    window: int = 64
    tick_every: int = 5_000
    buckets: int = 3
    seed: int = 0
    spout: str = "sentences"


@dataclass(slots=True)
class Workload:
    messages: list[Message] = field(default_factory=list)
    expected: dict[str, str] = field(default_factory=dict)  # msg_id → "ack" | "failed" | "timeout"
    anchors: dict[str, int] = field(default_factory=dict)  # msg_id → its tree's anchor, which its outcome names


def _tree_messages(
    spec: WorkloadSpec, index: int, rng: random.Random, next_id: IdGenerator
) -> tuple[list[Message], str, int]:
    tree = SpoutTree(spec.spout, f"{spec.spout}/0/{index}", next_id)
    messages: list[Message] = []
    failed = dropped = False
    level: list[TupleIds] = [tree.emit()]
    for stage in range(spec.depth):
        children: list[TupleIds] = []
        for ids in level:
            source = InputTuple(ids, next_id)
            if rng.random() < spec.fail_rate:
                messages.extend(source.fail())
                failed = True
                continue
            if stage < spec.depth - 1:
                children.extend(anchored((source,)) for _ in range(spec.fanout))
            acks = source.ack()
            if rng.random() < spec.drop_rate:
                dropped = True
            else:
                messages.extend(acks)
        level = children
    messages.append(tree.init())
    rng.shuffle(messages)
    return messages, "failed" if failed else "timeout" if dropped else "ack", tree.anchor


def generate(spec: WorkloadSpec) -> Workload:
    rng = random.Random(spec.seed)
    next_id = IdGenerator(spec.seed)
    workload = Workload()
    active: list[list[Message]] = []
    made = 0
    since_tick = 0
    while made < spec.trees or active:
        while made < spec.trees and len(active) < spec.window:
            messages, expected, anchor = _tree_messages(spec, made, rng, next_id)
            workload.expected[f"{spec.spout}/0/{made}"] = expected
            workload.anchors[f"{spec.spout}/0/{made}"] = anchor
            if messages:
                active.append(messages)
            made += 1
        i = rng.randrange(len(active))
        workload.messages.append(active[i].pop())
        if not active[i]:
            active[i] = active[-1]
            active.pop()
        since_tick += 1
        if since_tick >= spec.tick_every:
            workload.messages.append(TICK)
            since_tick = 0
    workload.messages.extend([TICK] * spec.buckets)
    return workload


WORD_COUNT_WORDS = 5  # words per sentence in `word_count_arrays`
WORD_COUNT_MESSAGES = 2 + WORD_COUNT_WORDS  # its messages per tree: the init, the sentence's ack, each word's ack


def word_count_arrays(trees: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Storm's word count as ``trees`` whole trees, vectorised for benchmarks of millions of trees: the anchors
    (random, non-zero, of either sign), each tree's values in message order — the init (the root tuple's edge), the
    split's ack (done with the root, created the words), each count's ack (done with its word) — and the kinds of
    all the messages, tree after tree (an init, then acks). The values of a tree XOR to zero: every tree completes."""
    anchors = rng.integers(1, 2**63 - 1, size=trees, dtype=np.int64) * rng.choice([-1, 1], size=trees)
    root = rng.integers(1, 2**63 - 1, size=trees, dtype=np.int64)
    word_edges = rng.integers(1, 2**63 - 1, size=(trees, WORD_COUNT_WORDS), dtype=np.int64)
    values = np.empty((trees, WORD_COUNT_MESSAGES), np.int64)
    values[:, 0] = root
    values[:, 1] = root ^ np.bitwise_xor.reduce(word_edges, axis=1)
    values[:, 2:] = word_edges
    kinds = np.tile(np.array([Kind.INIT] + [Kind.ACK] * (WORD_COUNT_MESSAGES - 1), np.uint8), trees)
    return anchors, values, kinds
