"""The worked examples of the seed documents, step by step."""

from acker.core import TICK, Ack, Acked, Anchor, Fail, Init, Message, Nacked, NackReason, Ok, Tracker, partition_of
from acker.core.tuple_tree import InputTuple, SpoutTree, anchored

AID = 0x5EED


def test_fsshelter_chain_table() -> None:
    """Spout → Bolt A → Bolt B, FsShelter's separate form (seed 001, first table)."""
    tracker = Tracker()
    steps: list[tuple[Message, int]] = [
        (Init(AID, "s", "m", 0), 0),  # Track: v = 0, waits for its anchors
        (Anchor(AID, 100), 100),
        (Anchor(AID, 200), 100 ^ 200),
        (Ok(AID, 100), 200),
    ]
    for message, value in steps:
        assert tracker.handle(message) == ()
        assert tracker.ledger(AID) == value
    assert tracker.handle(Ok(AID, 200)) == (Acked(AID, "s", "m", 0),)
    assert tracker.ledger(AID) is None


def test_fsshelter_fanout_table() -> None:
    """Spout → Bolt A → (Bolt B, Bolt C) (seed 001, second table)."""
    tracker = Tracker()
    table: list[tuple[Message, int]] = [
        (Init(AID, "s", "m", 0), 0),
        (Anchor(AID, 100), 100),
        (Anchor(AID, 200), 100 ^ 200),
        (Anchor(AID, 300), 100 ^ 200 ^ 300),
        (Ok(AID, 100), 200 ^ 300),
        (Ok(AID, 200), 300),
    ]
    for message, value in table:
        assert tracker.handle(message) == ()
        assert tracker.ledger(AID) == value
    assert tracker.handle(Ok(AID, 300)) == (Acked(AID, "s", "m", 0),)


def test_two_spouts_two_ackers_multi_anchoring_walkthrough() -> None:
    """Seed 002's 4-bit walk-through: stid1=1010, stid2=1011, tid1=1100 anchored to both; ack vals as shown."""
    stid1, stid2, tid1 = 0b1010, 0b1011, 0b1100
    ackers = [Tracker(), Tracker()]

    def acker_of(root: int) -> Tracker:
        return ackers[partition_of(root, 2)]

    assert acker_of(stid1) is not acker_of(stid2)  # the walk-through has one tree per acker
    acker_of(stid1).handle(Init(stid1, "sid1", "m1", stid1))
    acker_of(stid2).handle(Init(stid2, "sid2", "m2", stid2))
    assert acker_of(stid1).ledger(stid1) == 0b1010 and acker_of(stid2).ledger(stid2) == 0b1011
    # Bolt1 emits tid1 anchored to both: each acker XORs tid1 in.
    acker_of(stid1).handle(Anchor(stid1, tid1))
    acker_of(stid2).handle(Anchor(stid2, tid1))
    assert acker_of(stid1).ledger(stid1) == 0b0110 and acker_of(stid2).ledger(stid2) == 0b0111
    # Bolt1 acks both inputs.
    acker_of(stid1).handle(Ok(stid1, stid1))
    acker_of(stid2).handle(Ok(stid2, stid2))
    assert acker_of(stid1).ledger(stid1) == 0b1100 and acker_of(stid2).ledger(stid2) == 0b1100
    # Bolt2 acks tid1, which carries both roots: both trees complete.
    assert acker_of(stid1).handle(Ok(stid1, tid1)) == (Acked(stid1, "sid1", "m1", 0),)
    assert acker_of(stid2).handle(Ok(stid2, tid1)) == (Acked(stid2, "sid2", "m2", 0),)


def test_multi_anchoring_walkthrough_with_helpers_and_combined_acks() -> None:
    """The same topology through the client helpers: one combined ack per root per input."""
    ids = iter(range(1, 100))
    next_id = lambda: next(ids)  # noqa: E731 - a deterministic id source
    t1, t2 = SpoutTree("sid1", "m1", next_id), SpoutTree("sid2", "m2", next_id)
    in1, in2 = InputTuple(t1.emit(), next_id), InputTuple(t2.emit(), next_id)
    child = anchored((in1, in2))
    assert set(child.roots) == {t1.anchor, t2.anchor}
    tracker = Tracker()
    messages: list[Message] = [t1.init(), t2.init(), *in1.ack(), *in2.ack()]
    assert tracker.handle_all(messages) == []
    leaf = InputTuple(child, next_id)
    outcomes = tracker.handle_all(list(leaf.ack()))
    assert sorted(o.msg_id for o in outcomes) == ["m1", "m2"]


def test_c_acked_d_and_e_created() -> None:
    """Seed 004: when C is acked with children D and E, one message removes C and adds D and E."""
    a, b, c, d, e = 0xA, 0xB, 0xC, 0xD, 0xE
    tracker = Tracker()
    tracker.handle(Init(AID, "s", "m", a))
    tracker.handle(Ack(AID, a ^ b ^ c))  # A done, created B and C
    tracker.handle(Ack(AID, c ^ d ^ e))  # C done, created D and E: the tree cannot complete early
    assert tracker.ledger(AID) == b ^ d ^ e
    assert tracker.handle(Ack(AID, b)) == ()
    assert tracker.handle(Ack(AID, d)) == ()
    assert tracker.handle(Ack(AID, e)) == (Acked(AID, "s", "m", 0),)


def test_fail_before_init_nacks_when_init_arrives() -> None:
    tracker = Tracker()
    assert tracker.handle(Fail(AID)) == ()
    assert tracker.handle(Ack(AID, 5)) == ()
    assert tracker.handle(Init(AID, "s", "m", 5)) == (Nacked(AID, "s", "m", NackReason.FAILED, 0),)
    assert tracker.handle(Ack(AID, 7)) == ()
    assert tracker.counters.late == 1


def test_timeout_on_the_buckets_th_tick() -> None:
    tracker = Tracker()
    tracker.handle(Init(AID, "s", "m", 9))
    assert tracker.handle(TICK) == ()
    assert tracker.handle(TICK) == ()
    assert tracker.handle(TICK) == (Nacked(AID, "s", "m", NackReason.TIMEOUT, 3),)
