"""The service passes the reason a fail gave (`acker.fail_reasons`, a header of the acker record) on to the tree's
FAILED outcome record, by message id; what cannot be read is no reason, and never changes what is decided. Records
are made here, nothing is produced (`_decide` only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from acker import fail_reasons
from acker.columnar import MessageBlock
from acker.config import ServiceConfig
from acker.core import Ack, Fail, Init, TrackerConfig
from acker.core.ids import partition_of
from acker.core.messages import TreeMessage
from acker.partition import PartitionState
from acker.service import AckerService, _Destination, _part_of
from acker.wire import decode_outcomes, encode_batch, encode_outcome_rows, split_outcomes
from tests.records import Consumed

PARTITIONS = 4


@dataclass
class _WithHeaders(Consumed):
    _headers: list[tuple[str, bytes]] | None = None
    reads: list[int] = field(default_factory=list)

    def headers(self) -> list[tuple[str, bytes]] | None:  # type: ignore[override]
        self.reads.append(self._offset)
        return self._headers


def _record(offset: int, messages: Sequence[TreeMessage], reasons: bytes | None = None) -> _WithHeaders:
    headers = None if reasons is None else [(fail_reasons.HEADER, reasons)]
    return _WithHeaders(0, offset, encode_batch(MessageBlock.from_messages(list(messages))), _headers=headers)


def _anchors(n: int) -> list[int]:
    return [a for a in range(1, 10_000) if partition_of(a, PARTITIONS) == 0][:n]


def test_a_reason_read_before_its_trees_init_goes_with_its_failed_outcome_by_message_id() -> None:
    service = AckerService(ServiceConfig(metrics_port=0, kafka={"log_level": "0"}))
    service._partition_count = PARTITIONS
    a, b, c, d = _anchors(4)
    other = next(x for x in range(1, 1000) if partition_of(x, PARTITIONS) == 1)
    state = PartitionState(0, TrackerConfig(), 1000, 0)
    records = [
        _record(0, [Fail(a)], fail_reasons.encode({a: "bolt x: ValueError: early"})),  # before its init
        _record(1, [Init(a, "s", "t/0/1", 1), Init(b, "s", "t/0/2", 1), Fail(b)], fail_reasons.encode({b: "late"})),
        # rejected (an ack of another partition's tree): its tree is failed in its place, saying why; its own
        # header is not read (its dead letter reads its headers, and a read may take them: `read_headers`)
        _record(2, [Init(c, "s", "t/0/3", 1), Ack(other, 1)], fail_reasons.encode({c: "never read"})),
        _record(3, [Init(d, "s", "t/0/4", 1), Fail(d)], b"[" * 100_000),  # a header that is not one: no reason
    ]
    decided = service._decide((state, records))  # type: ignore[arg-type]
    service.close()
    assert [why.reason for _, why in decided.rejected] == ["wrong-partition"]
    assert records[2].reads == []
    failed = {}
    for outcome_record in decided.outcomes:
        rows = decode_outcomes(outcome_record.value)
        assert set(rows.outcomes) == {"FAILED"}
        failed.update(dict.fromkeys(rows.msg_ids))
        failed.update(fail_reasons.decode(outcome_record.reasons))
    assert failed == {
        "t/0/1": "bolt x: ValueError: early",
        "t/0/2": "late",
        "t/0/3": "its acker record 0/2 was dead-lettered (wrong-partition)",
        "t/0/4": None,
    }
    assert len(state.reasons) == 0  # each taken once


def test_the_halves_of_an_outcome_record_too_large_carry_only_their_own_reasons() -> None:
    """The whole header on every half could keep a half too large down to a single outcome."""
    value = encode_outcome_rows("s", [("FAILED", i, f"t/0/{i}", 0) for i in range(1, 5)], acker_partition=0)
    reasons = fail_reasons.encode({f"t/0/{i}": f"r{i}" for i in range(1, 5)})
    assert reasons is not None
    to = _Destination(0, "out", 0, [("acker.decided-by", b"0/1-2"), (fail_reasons.HEADER, reasons)], 2, None)
    halves = split_outcomes(value)
    assert halves is not None
    first, second = (_part_of(to, half) for half in halves)
    assert first.headers == [("acker.decided-by", b"0/1-2"), (fail_reasons.HEADER, b'{"t/0/1": "r1", "t/0/2": "r2"}')]
    assert dict(second.headers)[fail_reasons.HEADER] == b'{"t/0/3": "r3", "t/0/4": "r4"}'
    acked = encode_outcome_rows("s", [("ACK", 9, "t/0/9", 0)], acker_partition=0)
    assert _part_of(to, acked).headers == [("acker.decided-by", b"0/1-2")]
