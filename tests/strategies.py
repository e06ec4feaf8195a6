"""Shared Hypothesis strategies: random tuple DAGs processed by several producers, and their arrival orders.

A `Scenario` is what a real pipeline would send to one acker partition: the inits from the spout producer and the
acks/fails from several bolt producers, each producer's own messages in the order it sent them, interleaved
arbitrarily (Kafka keeps order per producer and partition, nothing across producers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import strategies as st

from acker.core import TICK, Ack, Anchor, Fail, Init, Message, Ok, ResetTimeout, TrackerConfig
from acker.core.ids import IdGenerator
from acker.core.tuple_tree import InputTuple, SpoutTree, TupleIds, anchored

ids64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1).filter(bool)


@dataclass
class Scenario:
    streams: list[list[tuple[Message, str]]]  # per producer: (message, msg_id of the tree it belongs to)
    trees: dict[str, int] = field(default_factory=dict)  # msg_id → anchor
    failed: set[str] = field(default_factory=set)  # msg_ids with at least one fail
    members: dict[str, set[str]] = field(default_factory=dict)  # msg_id → msg_ids sharing messages (joins)


def build_scenario(
    rng: random.Random, *, trees: int, producers: int, max_tuples: int, fail_rate: float, join_rate: float
) -> Scenario:
    """Run a random pipeline to completion with the client helpers, recording who sent what."""
    next_id = IdGenerator(rng.getrandbits(32))
    streams: list[list[tuple[Message, str]]] = [[] for _ in range(producers + 1)]  # stream 0: the spout
    scenario = Scenario(streams)
    in_flight: list[tuple[TupleIds, frozenset[str]]] = []
    inits = []
    for i in range(trees):
        msg_id = f"src/0/{i}"
        tree = SpoutTree("spout", msg_id, next_id)
        for _ in range(rng.randint(1, 3)):
            in_flight.append((tree.emit(), frozenset({msg_id})))
        scenario.trees[msg_id] = tree.anchor
        inits.append((tree.init(), msg_id))
    # The spout sends each init at a random point of its stream (before or after its tuples are processed).
    created = len(in_flight)
    by_anchor = {anchor: msg_id for msg_id, anchor in scenario.trees.items()}
    while in_flight:
        producer = rng.randint(1, producers)
        inputs = [in_flight.pop(rng.randrange(len(in_flight)))]
        if in_flight and rng.random() < join_rate:
            inputs.append(in_flight.pop(rng.randrange(len(in_flight))))  # a join: same tree (diamond) or another
        sources = [InputTuple(ids, next_id) for ids, _ in inputs]
        owners = frozenset().union(*(o for _, o in inputs))
        for _ in range(rng.choice((0, 0, 1, 2, 3)) if created < max_tuples else 0):
            in_flight.append((anchored(sources), owners))
            created += 1
        for source, (_, owner) in zip(sources, inputs, strict=True):
            if rng.random() < fail_rate:
                messages: list[Message] = list(source.fail())
                scenario.failed |= owner
            else:
                messages = list(source.ack())
            streams[producer].extend((m, by_anchor[m.anchor]) for m in messages)  # type: ignore[union-attr]
    for init, msg_id in inits:
        streams[0].insert(rng.randint(0, len(streams[0])), (init, msg_id))
    return scenario


def interleave(rng: random.Random, streams: list[list[tuple[Message, str]]]) -> list[tuple[Message, str]]:
    """One arrival order that keeps each producer's own order."""
    cursors = [0] * len(streams)
    live = [i for i, s in enumerate(streams) if s]
    out = []
    while live:
        k = rng.randrange(len(live))
        i = live[k]
        out.append(streams[i][cursors[i]])
        cursors[i] += 1
        if cursors[i] == len(streams[i]):
            live.pop(k)
    return out


@st.composite
def scenarios(
    draw: st.DrawFn, fail_rate: float = 0.0, join_rate: float = 0.2
) -> tuple[Scenario, list[tuple[Message, str]]]:
    rng = draw(st.randoms(use_true_random=False))
    scenario = build_scenario(
        rng,
        trees=draw(st.integers(1, 6)),
        producers=draw(st.integers(1, 4)),
        max_tuples=draw(st.integers(1, 40)),
        fail_rate=fail_rate,
        join_rate=join_rate,
    )
    return scenario, interleave(rng, scenario.streams)


# Raw protocol traffic over a handful of anchors and tiny values: XOR words hit zero often, and collisions, late
# messages, fails before inits, resets and ticks all happen. Not realistic; meant to reach every rule.
small_anchors = st.sampled_from([1, -1, 2, 7, -(1 << 63), (1 << 63) - 1])
small_values = st.integers(0, 3)
msg_ids = st.sampled_from(["a", "t/0/5", "t/1/5", "t/1/007", "x/y/9223372036854775807", "/3", "t/0/18"])
raw_messages = st.lists(
    st.one_of(
        st.builds(Init, small_anchors, st.sampled_from(["s", "u"]), msg_ids, small_values),
        st.builds(Ack, small_anchors, small_values),
        st.builds(Anchor, small_anchors, st.integers(1, 3)),
        st.builds(Ok, small_anchors, st.integers(1, 3)),
        st.builds(Fail, small_anchors),
        st.builds(ResetTimeout, small_anchors),
        st.just(TICK),
    ),
    max_size=120,
)
tracker_configs = st.builds(
    TrackerConfig,
    buckets=st.integers(2, 4),
    high_water=st.none() | st.integers(1, 4),
    relocate_on_update=st.booleans(),
)
