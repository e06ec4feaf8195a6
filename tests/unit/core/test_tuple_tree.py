"""Client-side helpers: ids, partitions, spout trees, anchoring, the basic-bolt pattern."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acker.core import Acked, Fail, IdGenerator, Nacked, NackReason, Tracker, partition_of
from acker.core.ids import INT64_MAX, INT64_MIN
from acker.core.tuple_tree import UNTRACKED, InputTuple, SpoutTree, TupleIds, anchored, run_basic
from acker.errors import ProtocolError
from tests.strategies import ids64


def test_id_generator_is_reproducible_non_zero_and_signed() -> None:
    a, b = IdGenerator(42), IdGenerator(42)
    drawn = [a() for _ in range(10_000)]
    assert drawn == [b() for _ in range(10_000)]
    assert all(x != 0 and INT64_MIN <= x <= INT64_MAX for x in drawn)
    assert any(x < 0 for x in drawn) and any(x > 0 for x in drawn)


def test_id_generator_skips_zero() -> None:
    gen = IdGenerator(0)
    stream = iter([0, 0, 5, (1 << 64) - 1])
    gen._bits = lambda bits: next(stream)  # a source that starts with zeros
    assert gen() == 5
    assert gen() == -1  # the top half of the unsigned range maps to negative ids


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_an_unseeded_id_generator_draws_other_ids_in_a_forked_child() -> None:
    """A child forked after the generator was made (a stage made before a worker pool) drew its parent's sequence:
    the same anchors and edges in two processes. A seeded one keeps its sequence: it was asked to."""
    unseeded, seeded = IdGenerator(), IdGenerator(7)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its next ids, to the parent, then out at once (no test teardown in a fork)
        os.write(write, f"{unseeded()} {seeded()}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_unseeded, child_seeded = map(int, pipe.read().split())
    os.waitpid(child, 0)
    assert child_unseeded != unseeded()
    assert child_seeded == seeded()


@given(ids64, st.integers(1, 1000))
def test_partition_is_abs_of_truncating_remainder(anchor: int, n: int) -> None:
    java_style = abs(int(anchor - n * int(anchor / n))) if abs(anchor) < 2**52 else abs(anchor) % n
    assert partition_of(anchor, n) == java_style
    assert 0 <= partition_of(anchor, n) < n


def test_partition_examples() -> None:
    assert partition_of(-1, 4) == 1  # Java: Math.abs(-1L % 4) == 1, not Python's -1 % 4 == 3
    assert partition_of(INT64_MIN, 7) == abs(INT64_MIN) % 7
    with pytest.raises(ValueError):
        partition_of(5, 0)


def test_spout_tree_init_is_the_xor_of_its_root_edges() -> None:
    tree = SpoutTree("s", "t/0/1", IdGenerator(1))
    edges = [tree.emit().edges[0][1] for _ in range(3)]
    assert tree.init().value == edges[0] ^ edges[1] ^ edges[2]


def test_spout_tree_refuses_a_root_after_its_init() -> None:
    """A root emitted after the init would be outside the tree: acked with it while still being processed."""
    tree = SpoutTree("s", "t/0/1", IdGenerator(1))
    tree.emit()
    tree.init()
    with pytest.raises(ProtocolError):
        tree.emit()


def test_spout_tree_without_emits_has_no_init() -> None:
    with pytest.raises(ProtocolError):
        SpoutTree("s", "m", IdGenerator(1)).init()


def test_diamond_join_of_two_inputs_of_one_tree_completes() -> None:
    gen = IdGenerator(3)
    tree = SpoutTree("s", "m", gen)
    left, right = InputTuple(tree.emit(), gen), InputTuple(tree.emit(), gen)
    joined = anchored((left, right))
    assert joined.roots == (tree.anchor,)
    tracker = Tracker()
    assert tracker.handle_all([tree.init(), *left.ack(), *right.ack()]) == []
    assert tracker.handle_all(list(InputTuple(joined, gen).ack())) == [Acked(tree.anchor, "s", "m", 0)]


def test_input_can_finish_only_once() -> None:
    source = InputTuple(SpoutTree("s", "m", IdGenerator(1)).emit(), IdGenerator(2))
    source.ack()
    with pytest.raises(ProtocolError):
        source.fail()
    with pytest.raises(ProtocolError):
        anchored((source,))


def test_anchoring_to_a_finished_input_changes_no_other_input() -> None:
    """A child anchored to [open, finished] is refused before any edge is drawn: the open input's ack must not carry
    the edge of a child that was never sent, or its tree could never complete."""
    gen = IdGenerator(4)
    tree = SpoutTree("s", "m", gen)
    still_open, done = InputTuple(tree.emit(), gen), InputTuple(tree.emit(), gen)
    done_acks = done.ack()
    with pytest.raises(ProtocolError):
        anchored([still_open, done])
    tracker = Tracker()
    assert tracker.handle_all([tree.init(), *done_acks, *still_open.ack()]) == [Acked(tree.anchor, "s", "m", 0)]


def test_ids_naming_a_root_twice_are_refused() -> None:
    """A bolt merging two inputs of one tree by concatenating their ids (not `anchored`) named the root twice: a child
    got that root's edge twice (edge 0, invisible) and the input's ack carried it twice, so the tree was acked while the
    child was still pending."""
    gen = IdGenerator(5)
    tree = SpoutTree("s", "t/0/1", gen)
    first, second = tree.emit(), tree.emit()
    with pytest.raises(ProtocolError, match="names a root twice"):
        TupleIds(first.edges + second.edges)
    with pytest.raises(ProtocolError, match="names a root twice"):
        TupleIds(((5, 7), (6, 8), (5, 9)))
    assert TupleIds(((5, 7), (6, 8))).roots == (5, 6)
    # The merge done right: the child has one non-zero edge, and the tree waits for it.
    tracker = Tracker()
    sources = [InputTuple(first, gen), InputTuple(second, gen)]
    child = anchored(sources)
    assert child.roots == (tree.anchor,) and child.edges[0][1] != 0
    assert tracker.handle_all([tree.init(), *sources[0].ack(), *sources[1].ack()]) == []
    assert tracker.handle_all(InputTuple(child, gen).ack()) == [Acked(tree.anchor, "s", "t/0/1", 0)]


def test_a_child_edge_that_cancels_to_zero_is_refused_and_leaves_the_inputs_as_they_were() -> None:
    """Two inputs of one root drawing the same edge (2⁻⁶⁴, or a generator that repeats itself) would give the child
    edge 0 in that root: invisible, so its tree could complete while it is being processed."""
    gen = IdGenerator(6)
    tree = SpoutTree("s", "m", gen)
    left, right = InputTuple(tree.emit(), lambda: 42), InputTuple(tree.emit(), lambda: 42)
    with pytest.raises(ProtocolError, match="cancelled to 0"):
        anchored([left, right])
    tracker = Tracker()  # no edge of the refused child stayed in the inputs' acks
    assert tracker.handle_all([tree.init(), *left.ack(), *right.ack()]) == [Acked(tree.anchor, "s", "m", 0)]


def test_unanchored_and_untracked_send_nothing() -> None:
    source = InputTuple(UNTRACKED, IdGenerator(1))
    assert anchored((source,)) == UNTRACKED
    assert source.ack() == [] and source.reset_timeout() == []


def test_basic_bolt_acks_after_return_and_fails_on_exception() -> None:
    gen = IdGenerator(9)
    tree = SpoutTree("s", "m", gen)
    root = tree.emit()

    def split(emit):  # type: ignore[no-untyped-def]
        for word in ["a", "b", "c"]:
            emit(word)

    result = run_basic(root, gen, split)
    assert [payload for _, payload in result.children] == ["a", "b", "c"]
    tracker = Tracker()
    tracker.handle_all([tree.init(), *result.acker_messages])
    leaves = [m for ids, _ in result.children for m in run_basic(ids, gen, lambda emit: None).acker_messages]
    assert tracker.handle_all(leaves) == [Acked(tree.anchor, "s", "m", 0)]

    def broken(emit):  # type: ignore[no-untyped-def]
        emit("x")
        raise RuntimeError("database down")

    failed = run_basic(root, gen, broken)
    assert failed.children == [] and isinstance(failed.error, RuntimeError)
    assert failed.acker_messages == [Fail(tree.anchor)]
    again = Tracker()
    again.handle(tree.init())
    assert again.handle_all(list(failed.acker_messages)) == [Nacked(tree.anchor, "s", "m", NackReason.FAILED, 0)]
