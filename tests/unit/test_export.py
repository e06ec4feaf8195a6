"""`acker.export.export_records`: what the service applies of an acker partition, as `acker replay` lines."""

from __future__ import annotations

import io

import numpy as np

from acker.columnar.block import Kind, MessageBlock
from acker.core import Ack, Init, Message
from acker.core.ids import partition_of
from acker.export import export_records
from acker.partition import NO_TICK, encode_tick
from acker.replay import format_message
from acker.wire import encode_batch

TICK = '{"type":"tick"}'


def _ticks(*links: int) -> bytes:
    """One record of several ticks (the service writes one a record)."""
    n = len(links)
    kinds, anchors, values = np.full(n, Kind.TICK, np.uint8), np.zeros(n, np.int64), np.array(links, np.int64)
    return encode_batch(MessageBlock(kinds, anchors, values, np.zeros(0, np.int32), np.zeros(0, np.int64)))


def _record(*messages: Message) -> bytes:
    return encode_batch(MessageBlock.from_messages(list(messages)))


def test_ticks_off_the_chain_and_records_that_are_not_acker_records_are_left_out_and_named() -> None:
    tree: list[Message] = [Init(5, "S", "M", 3), Ack(5, 3)]
    records = [
        (0, encode_tick(NO_TICK)),  # the chain's first
        (1, encode_tick(NO_TICK)),  # a second writer's
        (2, encode_tick(0)),
        (3, None),  # a tombstone
        (4, _ticks(2, 4)),  # the first continues the chain; the second names its own record
        (5, _record(*tree)),
    ]
    out, err = io.StringIO(), io.StringIO()
    done = export_records(records, out, err)
    assert out.getvalue().splitlines() == [TICK, TICK, TICK, *map(format_message, tree)]
    assert (done.records, done.messages, done.ignored_ticks, done.undecodable, done.refused) == (6, 5, 2, 1, 0)
    said = err.getvalue().splitlines()
    assert said[0] == "offset 1: a tick left out, off the tick chain (it begins a chain; the chain is at 0)"
    assert said[1] == "offset 3: left out, not an acker record (empty: the record has no value (null or empty))"
    assert said[2:] == ["offset 4: a tick left out, off the tick chain (it follows offset 4; the chain is at 4)"]


def test_from_a_tick_the_service_ignored_the_chain_is_the_one_read_before_the_start() -> None:
    """Begun at the stale tick, the chain took it, left out every later tick, and no tree timed out."""
    records = [(0, encode_tick(NO_TICK)), (1, encode_tick(NO_TICK)), (2, _record(Init(5, "S", "M", 3)))]
    records += [(3 + i, encode_tick(i + 2 if i else 0)) for i in range(3)]  # 3 follows 0, 4 follows 3, 5 follows 4
    out = io.StringIO()
    done = export_records(records, out, io.StringIO(), write_from=1)
    assert out.getvalue().splitlines() == [format_message(Init(5, "S", "M", 3)), TICK, TICK, TICK]
    assert (done.records, done.ignored_ticks) == (5, 1)


def test_a_record_the_service_dead_lettered_as_misplaced_is_written_as_the_fails_of_its_inits() -> None:
    assert partition_of(2, 2) == 0 and partition_of(-1, 2) == 1
    misrouted = _record(Init(2, "S", "M", 5), Ack(2, 5), Ack(-1, 3))
    out, err = io.StringIO(), io.StringIO()
    done = export_records([(7, misrouted)], out, err, misplaced={7: "1 message(s) belong on partition 1"})
    assert out.getvalue().splitlines() == ['{"type":"fail","anchor":2}', format_message(Init(2, "S", "M", 5))]
    assert (done.refused, done.messages) == (1, 2)
    assert "offset 7: refused by the service (wrong-partition: 1 message(s) belong on partition 1)" in err.getvalue()
    # Not dead-lettered (read before the partition count grew, say): the service applied it.
    out = io.StringIO()
    assert export_records([(7, misrouted)], out, io.StringIO()).refused == 0
    assert len(out.getvalue().splitlines()) == 3


def test_a_record_refused_whatever_the_partition_count_is_refused_without_a_dead_letter() -> None:
    out, err = io.StringIO(), io.StringIO()
    done = export_records([(0, _record(Init(2, "bad spout!", "M", 5), Init(4, "S", "N", 1)))], out, err)
    assert out.getvalue().splitlines() == ['{"type":"fail","anchor":4}', format_message(Init(4, "S", "N", 1))]
    assert done.refused == 1 and "offset 0: refused by the service (bad-spout" in err.getvalue()
