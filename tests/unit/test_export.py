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


def _ticks(*links: int) -> bytes:
    """One record of several ticks (the service writes one a record)."""
    n = len(links)
    kinds, anchors, values = np.full(n, Kind.TICK, np.uint8), np.zeros(n, np.int64), np.array(links, np.int64)
    return encode_batch(MessageBlock(kinds, anchors, values, np.zeros(0, np.int32), np.zeros(0, np.int64)))


def test_ticks_off_the_chain_and_records_that_are_not_acker_records_are_left_out() -> None:
    tree: list[Message] = [Init(5, "S", "M", 3), Ack(5, 3)]
    records = [
        (0, encode_tick(NO_TICK)),  # the chain's first
        (1, encode_tick(NO_TICK)),  # a second writer's
        (2, encode_tick(0)),
        (3, None),  # a tombstone
        (4, _ticks(2, 4)),  # the first continues the chain; the second names its own record
        (5, encode_batch(MessageBlock.from_messages(tree))),
    ]
    out, err = io.StringIO(), io.StringIO()
    done = export_records(records, 0, 1, out, err)
    tick = '{"type":"tick"}'
    assert out.getvalue().splitlines() == [tick, tick, tick, *map(format_message, tree)]
    assert (done.records, done.messages, done.ignored_ticks, done.undecodable, done.refused) == (6, 5, 2, 1, 0)
    assert err.getvalue().startswith("offset 3: left out, not an acker record (bad-magic")


def test_a_record_the_service_refuses_is_written_as_the_fails_of_its_inits() -> None:
    assert partition_of(2, 2) == 0 and partition_of(-1, 2) == 1
    misrouted: list[Message] = [Init(2, "S", "M", 5), Ack(2, 5), Ack(-1, 3)]
    out, err = io.StringIO(), io.StringIO()
    done = export_records([(7, encode_batch(MessageBlock.from_messages(misrouted)))], 0, 2, out, err)
    assert out.getvalue().splitlines() == [
        format_message(Init(2, "S", "M", 5)),
        '{"type":"fail","anchor":2}',
    ]
    assert (done.refused, done.messages) == (1, 2)
    assert "offset 7: refused by the service (wrong-partition" in err.getvalue()
