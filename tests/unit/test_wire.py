"""The Avro wire format: round trips, and every way a record can be invalid."""

from __future__ import annotations

import ast
import inspect
import io
import tracemalloc

import fastavro
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from acker import avro_longs, wire
from acker.columnar import BlockTracker, MessageBlock
from acker.columnar.block import Kind
from acker.core import Ack, Anchor, Init, Message
from acker.core.ids import partition_of
from acker.wire import (
    _PREFIX_OUTCOMES,
    ACKER_BATCH_SCHEMA,
    OUTCOME_BATCH_SCHEMA,
    SPOUT_NAME,
    WIRE_REASONS,
    WireError,
    _write,
    check_block,
    decode_batch,
    decode_outcome_anchors,
    decode_outcomes,
    encode_batch,
    encode_outcomes,
    parse_batch,
)
from tests.strategies import raw_messages


@given(raw_messages)
def test_batch_round_trip(messages: list[Message]) -> None:
    zero_acks = [m for m in messages if isinstance(m, Ack) and m.value == 0]
    if zero_acks:  # refused: a zero ack would complete a tree whose init of value 0 waits for its anchors
        with pytest.raises(WireError, match="zero-id"):
            decode_batch(encode_batch(MessageBlock.from_messages(messages)))
        messages = [m for m in messages if m not in zero_acks]
    assert decode_batch(encode_batch(MessageBlock.from_messages(messages))).to_messages() == messages


def test_an_ack_of_value_0_and_an_offset_past_any_kafka_offset_are_refused() -> None:
    """An ack of value 0 completed a tree whose init had value 0 (FsShelter's form, waiting for its anchors): acked
    with its descendants unprocessed. An init offset of 19 digits could not be split back out of its message id, and
    a record split in halves changed the id's form."""
    early = MessageBlock.from_messages([Init(5, "s", "t/0/7", 0), Ack(5, 0)])
    with pytest.raises(WireError, match=r"zero-id: .* an ack has value 0"):
        decode_batch(encode_batch(early))

    def init_at(offset: int) -> bytes:  # the columns as a producer may write them: no message id is parsed
        sources, offsets = np.array([0], "<i4").tobytes(), np.array([offset], "<i8").tobytes()
        return _raw(kinds=bytes([Kind.INIT]), sources=[{"spout": "s", "source": "t/0"}], init_sources=sources,
                    init_offsets=offsets)  # fmt: skip

    with pytest.raises(WireError, match="past any Kafka offset"):
        decode_batch(init_at(10**18))
    assert decode_batch(init_at(10**18 - 1)).to_messages() == [Init(5, "s", f"t/0/{10**18 - 1}", 3)]


def _raw(**columns: object) -> bytes:
    record: dict[str, object] = {
        "kinds": bytes([1]),
        "anchors": np.array([5], "<i8").tobytes(),
        "values": np.array([3], "<i8").tobytes(),
        "sources": [],
        "init_sources": b"",
        "init_offsets": b"",
    }
    record.update(columns)
    out = io.BytesIO()
    out.write(b"AKB\x01")
    fastavro.schemaless_writer(out, ACKER_BATCH_SCHEMA, record)
    return out.getvalue()


def test_a_hand_built_record_decodes() -> None:
    assert decode_batch(_raw()).to_messages() == [Ack(5, 3)]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"garbage that is not ours", "bad-magic"),
        (b"AKO\x01" + _raw()[4:], "wrong-record-kind"),
        (b"AKB\x02" + _raw()[4:], "unknown-version"),
        (_raw()[:-3], "undecodable"),
        (_raw() + b"\x00", "undecodable"),
        (b"AKB\x01\xff\xff\xff\xff\xff\xff\xff", "undecodable"),
        (_raw(anchors=b"\x00" * 7), "bad-column"),
        (_raw(values=b""), "bad-column"),
        (_raw(kinds=bytes([9])), "unknown-message-type"),
        (_raw(anchors=np.zeros(1, "<i8").tobytes()), "zero-id"),
        (_raw(kinds=bytes([2]), values=np.zeros(1, "<i8").tobytes()), "zero-id"),
        (_raw(kinds=bytes([3]), values=np.zeros(1, "<i8").tobytes()), "zero-id"),  # an ok's tuple id too
        (_raw(kinds=bytes([0])), "bad-column"),  # an init without its init columns
        (
            _raw(
                kinds=bytes([0]),
                init_sources=np.array([1], "<i4").tobytes(),
                init_offsets=np.array([4], "<i8").tobytes(),
                sources=[{"spout": "s", "source": "t/0"}],
            ),
            "bad-column",
        ),
        (  # a source index below 0: numpy would take it from the end, another spout's source maybe
            _raw(
                kinds=bytes([0, 0]),
                anchors=np.array([5, 6], "<i8").tobytes(),
                values=np.array([3, 3], "<i8").tobytes(),
                init_sources=np.array([-1, 0], "<i4").tobytes(),
                init_offsets=np.array([4, 4], "<i8").tobytes(),
                sources=[{"spout": "s", "source": "t/0"}, {"spout": "other", "source": "u/1"}],
            ),
            "bad-column",
        ),
        (  # more sources than inits: none of those of the ack refer to them
            _raw(sources=[{"spout": "s", "source": "t/0"}]),
            "bad-column",
        ),
        (  # an offset below -1 ("none"): read as no offset, the message id would be the source alone
            _raw(
                kinds=bytes([0]),
                init_sources=np.array([0], "<i4").tobytes(),
                init_offsets=np.array([-5], "<i8").tobytes(),
                sources=[{"spout": "s", "source": "t/0"}],
            ),
            "bad-column",
        ),
    ],
)
def test_invalid_records_are_rejected_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(WireError) as raised:
        decode_batch(data)
    assert raised.value.reason == reason


def test_a_record_of_many_sources_and_no_inits_is_refused_before_fastavro_builds_them() -> None:
    """2 bytes a source on the wire (empty names), about 200 at the peak in the objects fastavro built for it: a
    1 MB record took 100 MB at its peak to read, and a fetch of 50 of them 2.8 GB, before it was found to be invalid
    (or, sources that no init refers to being allowed, taken). Refused first, it takes about its own size."""
    n = 500_000
    data = b"AKB\x01" + b"\x00\x00\x00" + avro_longs.long(n) + b"\x00\x00" * n + b"\x00\x00\x00"
    _refused_within_its_size(data, "500000 sources but 0 inits")


@pytest.mark.parametrize("cut", [True, False])
def test_a_record_claiming_more_sources_than_inits_is_refused_cut_short_or_with_a_count_past_its_bytes(
    cut: bool,
) -> None:
    """Cut short after its sources (no end of the array, no init columns), or its first block claiming 2⁶³-1 items
    (which wrapped the walk's count round to below 0), the record went to fastavro, which built every source it found
    before it failed: a second and 100 MB for 1 MB of them."""
    one_init = avro_longs.long(1) + bytes([Kind.INIT]) + avro_longs.long(8) + bytes(8) + avro_longs.long(8) + bytes(8)
    if cut:
        data = b"AKB\x01" + one_init + avro_longs.long(500_000) + b"\x00\x00" * 500_000
    else:
        data = b"AKB\x01" + one_init + avro_longs.long(2**63 - 1) + avro_longs.long(1) + b"\x00" * 1_000_000
    assert avro_longs.acker_batch_counts(data, 4, Kind.INIT) is not None
    _refused_within_its_size(data, "sources but 1 inits")


def _refused_within_its_size(data: bytes, said: str, reason: str = "bad-column") -> None:
    """``data`` refused as ``reason`` (saying ``said``), the memory taken meanwhile under 4 times its size."""
    wire.parse_batch(encode_batch(MessageBlock.from_messages([Ack(5, 3)])))  # compiled before measuring
    tracemalloc.start()
    try:
        with pytest.raises(WireError, match=said) as raised:
            wire.parse_batch(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raised.value.reason == reason and peak < 4 * len(data), peak


@given(raw_messages, st.floats(0, 1, exclude_max=True))
def test_the_compiled_count_of_inits_and_sources_agrees_with_fastavro(messages: list[Message], cut: float) -> None:
    """On every record a writer makes, and on a record cut short anywhere: None when its kinds are cut, else their
    inits, with the sources its array claims, or none when the cut comes before the array's count, whole only when
    the cut comes after the array's end."""
    data = encode_batch(MessageBlock.from_messages(messages))
    record = fastavro.schemaless_reader(io.BytesIO(data[4:]), ACKER_BATCH_SCHEMA, None)
    assert isinstance(record, dict)
    counts = (record["kinds"].count(Kind.INIT), len(record["sources"]))
    assert avro_longs.acker_batch_counts(data, 4, Kind.INIT) == (*counts, True)
    assert counts[1] <= counts[0]
    kinds_end = 4 + len(avro_longs.long(len(record["kinds"]))) + len(record["kinds"])
    at = 4 + int(cut * (len(data) - 4))
    short = avro_longs.acker_batch_counts(data[:at], 4, Kind.INIT)
    if at < kinds_end:
        assert short is None
    else:
        assert short is not None and short.inits == counts[0] and short.sources in (0, counts[1])
        init_columns = [avro_longs.long(len(record[name])) + record[name] for name in ("init_sources", "init_offsets")]
        assert short.whole == (at >= len(data) - sum(map(len, init_columns)))  # cut after the sources' end


def _parsed(data: bytes) -> tuple[object, ...]:
    """What `parse_batch` makes of ``data``: its columns and sources, or the reason and text of its refusal."""
    try:
        block = parse_batch(data)
    except WireError as error:
        return (error.reason, str(error))
    columns = (block.kinds, block.anchors, block.values, block.init_source, block.init_offset)
    return (*(column.tolist() for column in columns), *(column.dtype for column in columns), block.sources)


@given(
    raw_messages,
    st.floats(0, 1, exclude_max=True),
    st.integers(0, 255),
    st.sampled_from(["as written", "byte changed", "cut", "bytes after"]),
)
def test_a_record_read_where_its_fields_lie_is_read_as_fastavro_reads_it(
    messages: list[Message], at: float, byte: int, change: str
) -> None:
    """The columns read in place (`avro_longs.acker_batch_layout`) are fastavro's, byte for byte and type for type,
    and a record it does not find regular goes to fastavro, which refuses it with the same reason and text as before:
    on every record a writer makes, with any byte changed, cut short anywhere, or with bytes after it."""
    data = encode_batch(MessageBlock.from_messages(messages))
    i = 4 + int(at * (len(data) - 4))
    data = {
        "as written": data,
        "byte changed": data[:i] + bytes([byte]) + data[i + 1 :],
        "cut": data[:i],
        "bytes after": data + bytes([byte]),
    }[change]
    in_place = _parsed(data)
    layout = avro_longs.acker_batch_layout
    try:
        avro_longs.acker_batch_layout = lambda *_: None
        assert _parsed(data) == in_place
    finally:
        avro_longs.acker_batch_layout = layout


@pytest.mark.parametrize(
    "hexed",
    [
        encode_batch(MessageBlock.from_messages([Init(5, "spout", "t/0/7", 3)])).replace(b"spout", b"spo\xffu").hex(),
        # a column after the names of a length no column has, 3 bytes of init_sources: its error came first
        "414b420102001001000000000000001000000000000000000202ff02740006000000100000000000000000",
    ],
)
def test_a_source_name_that_is_not_utf8_is_refused_as_fastavro_refuses_it(hexed: str) -> None:
    """Found regular by the reading in place, whose decoding of the names then fails: fastavro's reading says why,
    as it did before, whatever the columns after the names hold."""
    data = bytes.fromhex(hexed)
    assert avro_longs.acker_batch_layout(data, 4, 1) is not None
    with pytest.raises(WireError, match="undecodable: Avro decoding failed: UnicodeDecodeError"):
        parse_batch(data)


@pytest.mark.parametrize(
    "hexed",
    [
        "414b42018080808080808080808000000002027300000000",  # the kinds' length in 11 bytes, one source, no inits
        "414b4201000000ffffffffffffffffff010002027300000000",  # a block of -2⁶³ items (fastavro: none) before it
        # an ack (5, 3), the kinds' length in 11 bytes, and a source
        "414b420182808080808080808080000110050000000000000010030000000000000002027306742f30000000",
    ],
)
def test_more_sources_than_inits_are_refused_however_the_numbers_are_written(hexed: str) -> None:
    """The count before fastavro reads as Java's reader does, and stops at a long over 10 bytes or a block count of
    -2⁶³, which fastavro reads: the same record was refused or taken by how its numbers were written. Refused as
    Java's reader refuses it, before fastavro builds the sources."""
    data = bytes.fromhex(hexed)
    fastavro.schemaless_reader(io.BytesIO(data[4:]), ACKER_BATCH_SCHEMA, None)  # a record fastavro reads
    with pytest.raises(WireError, match="never writes") as raised:
        wire.parse_batch(data)
    assert raised.value.reason == "undecodable"


def test_a_record_of_many_sources_whose_numbers_java_refuses_is_refused_before_fastavro_builds_them() -> None:
    """Its kinds' length written in 11 bytes, the count before fastavro stopped, and fastavro built half a million
    sources (128 MB for 1 MB) before the record was refused."""
    n = 500_000
    data = b"AKB\x01" + b"\x80" * 10 + b"\x00" + b"\x00\x00" + avro_longs.long(n) + b"\x00\x00" * n + b"\x00\x00\x00"
    _refused_within_its_size(data, "never writes", "undecodable")


def test_a_message_id_written_whole_is_read_in_the_one_form_python_writes() -> None:
    """``("t/0/5", -1)`` is the message id ``t/0/5``, as ``("t/0", 5)`` is (the schema allows both): the Spark jobs
    took the first for no coordinates (an ack that never moved the watermark, a nack not replayed)."""
    data = _raw(
        kinds=bytes([0, 0, 0, 0]),
        anchors=np.array([4, 6, 8, 10], "<i8").tobytes(),
        values=np.array([1, 1, 1, 1], "<i8").tobytes(),
        init_sources=np.array([0, 1, 2, 3], "<i4").tobytes(),
        init_offsets=np.array([-1, 7, -1, -1], "<i8").tobytes(),
        sources=[{"spout": "s", "source": "t/0/5"}, {"spout": "s", "source": "t/0"}, {"spout": "s", "source": "o-9"},
                 {"spout": "s", "source": "t/1/0"}],  # a partition's first record: offset 0 is an offset
    )  # fmt: skip
    inits = decode_batch(data).to_messages()
    assert [(m.msg_id, m.anchor) for m in inits if isinstance(m, Init)] == [
        ("t/0/5", 4), ("t/0/7", 6), ("o-9", 8), ("t/1/0", 10)
    ]  # fmt: skip
    block = decode_batch(data)
    assert [block.sources[s] for s in block.init_source] == [("s", "t/0"), ("s", "t/0"), ("s", "o-9"), ("s", "t/1")]
    assert block.init_offset.tolist() == [5, 7, -1, 0]


def test_a_spout_name_must_be_able_to_name_a_topic() -> None:
    for spout in ("with space", "", "x" * 201, "slash/no"):
        with pytest.raises(WireError) as raised:
            decode_batch(encode_batch(MessageBlock.from_messages([Init(1, spout, "t/0/1", 1)])))
        assert raised.value.reason == "bad-spout"


def test_a_spout_name_whose_topics_would_be_a_spark_jobs_own_is_refused() -> None:
    """Every spout refused it; a client of its own naming one had its outcomes published among the commit job's dead
    letters (``acker.outcomes.dlq``), where nothing reads them as outcomes."""
    for spout, why in (("dlq", "the Spark jobs' dead-letter topics"), ("progress", "the replay job's progress topic")):
        with pytest.raises(WireError, match=f"reserved: .*{why}") as raised:  # the topic met named ("progress": its
            decode_batch(encode_batch(MessageBlock.from_messages([Init(1, spout, "t/0/1", 1)])))  # outcomes' was)
        assert raised.value.reason == "bad-spout"
    decode_batch(encode_batch(MessageBlock.from_messages([Init(1, "dlq2", "t/0/1", 1)])))


def test_messages_must_be_on_the_partition_of_their_anchor() -> None:
    block = MessageBlock.from_messages([Ack(-1, 3), Ack(4, 1)])  # partition_of: 1 and 0 of 2
    check_block(MessageBlock.from_messages([Ack(-1, 3), Ack(3, 1)]), 1, 2)
    check_block(block, 0, 0)  # partition count unknown: nothing checked
    with pytest.raises(WireError) as raised:
        check_block(block, 1, 2)
    assert raised.value.reason == "wrong-partition"
    assert "belong on partition 0, not 1" in raised.value.detail


def test_a_block_failing_several_checks_gets_the_reason_of_the_first() -> None:
    """Kinds, then anchors, then tuple ids, then partitions: what the messages are comes before where they are."""
    block = MessageBlock.from_messages([Ack(3, 1), Anchor(5, 7)])  # both on partition 1 of 2, checked against 0
    block.kinds[1], block.anchors[0], block.values[1] = 9, 0, 0

    def reason() -> str:
        with pytest.raises(WireError) as raised:
            check_block(block, 0, 2)
        return str(raised.value.args[0])

    assert reason().startswith("unknown-message-type")
    block.kinds[1] = Kind.ANCHOR
    assert reason() == "zero-id: a message other than a tick has anchor 0"
    block.anchors[0] = 3
    assert reason() == "zero-id: an anchor or ok message has tuple id 0, or an ack has value 0"
    block.values[1] = 7
    assert reason() == "wrong-partition: 2 message(s) belong on partition 1, not 0 (of 2)"


def test_the_partition_check_is_partition_of_for_every_sign_and_extreme() -> None:
    for anchor in (-(1 << 63), (1 << 63) - 1, -1, 1, -5, 5, -12, 12):
        block = MessageBlock.from_messages([Ack(anchor, 3)])
        for partitions in (1, 2, 3, 4, 7, 12):
            owner = partition_of(anchor, partitions)
            check_block(block, owner, partitions)
            if partitions > 1:
                with pytest.raises(WireError, match=f"belong on partition {owner},"):
                    check_block(block, (owner + 1) % partitions, partitions)


def test_a_tick_may_have_anchor_zero() -> None:
    assert decode_batch(_raw(kinds=bytes([6]), anchors=np.zeros(1, "<i8").tobytes())).kinds.tolist() == [6]


def test_outcomes_round_trip() -> None:
    tracker = BlockTracker()
    block = MessageBlock.from_messages(
        [Init(1, "s", "t/0/7", 2), Init(3, "u", "t/1/9", 4), Init(5, "s", "plain-id", 6), Ack(1, 2), Ack(5, 6)]
    )
    result = tracker.process(block, record_offset=44, timestamp_ms=1000)
    rows = np.array([i for i, (spout, _) in enumerate(result.sources[s] for s in result.source) if spout == "s"])
    decoded = decode_outcomes(encode_outcomes("s", result, rows, acker_partition=3, acker_offset=44))
    assert decoded.spout == "s" and decoded.acker_partition == 3 and decoded.acker_offset == 44
    assert decoded.outcomes == ["ACK", "ACK"]
    assert decoded.msg_ids == ["t/0/7", "plain-id"]
    assert decoded.anchors == [1, 5] and decoded.latency_ms == [0, 0]
    with pytest.raises(WireError):
        decode_outcomes(encode_batch(block))


@pytest.mark.parametrize(
    ("anchors", "source_index"),
    [([1], [0, 0]), ([1, 2], [0, 3])],  # a column short; a source index outside the sources
)
def test_an_outcome_record_with_inconsistent_columns_is_a_wire_error(
    anchors: list[int], source_index: list[int]
) -> None:
    """Valid Avro, wrong shape: a reader (every spout reads its outcome topic) gets a WireError, not an IndexError."""
    value = _write(OUTCOME_BATCH_SCHEMA, _PREFIX_OUTCOMES, {
        "spout": "s", "acker_partition": 0, "acker_offset": 0, "outcomes": ["ACK", "ACK"], "anchors": anchors,
        "sources": ["t/0"], "source_index": source_index, "offsets": [1, 2], "latency_ms": [0, 0]})  # fmt: skip
    with pytest.raises(WireError, match="inconsistent-columns"):
        decode_outcomes(value)


def test_an_outcome_offset_below_minus_one_is_a_wire_error() -> None:
    """-1 is "no offset": an offset below it was read as none, and the message id as the source alone ('t/0'), which
    names no record; an init's offset below -1 is refused the same way (`parse_batch`)."""

    def at(offset: int) -> bytes:
        return _write(OUTCOME_BATCH_SCHEMA, _PREFIX_OUTCOMES, {
            "spout": "s", "acker_partition": 0, "acker_offset": 0, "outcomes": ["ACK", "ACK"], "anchors": [1, 2],
            "sources": ["t/0"], "source_index": [0, 0], "offsets": [7, offset], "latency_ms": [0, 0]})  # fmt: skip

    assert decode_outcomes(at(-1)).msg_ids == ["t/0/7", "t/0"]
    for offset in (-2, -5, -(1 << 63)):
        with pytest.raises(WireError, match=f"bad-column: an outcome's offset is {offset}"):
            decode_outcomes(at(offset))


_LONGS = st.integers(-(1 << 63), (1 << 63) - 1)


@given(
    st.from_regex(SPOUT_NAME, fullmatch=True),
    st.integers(-(1 << 31), (1 << 31) - 1),
    _LONGS,
    st.lists(st.tuples(st.sampled_from(["ACK", "FAILED", "REPLAYED"]), _LONGS), max_size=40),
    st.integers(1, 3),
)
def test_the_compiled_head_reader_agrees_with_fastavro(
    spout: str, partition: int, offset: int, rows: list[tuple[str, int]], cut: int
) -> None:
    """Records written by fastavro (any writer may have), also in blocks of items with negative counts."""
    record = {"spout": spout, "acker_partition": partition, "acker_offset": offset,
              "outcomes": [o for o, _ in rows], "anchors": [a for _, a in rows], "sources": ["t/0"],
              "source_index": [0] * len(rows), "offsets": [1] * len(rows), "latency_ms": [0] * len(rows)}  # fmt: skip
    out = io.BytesIO()
    fastavro.schemaless_writer(out, OUTCOME_BATCH_SCHEMA, record)
    value = _PREFIX_OUTCOMES + out.getvalue()
    got_partition, got_offset, anchors = decode_outcome_anchors(value)
    assert (got_partition, got_offset, anchors.tolist()) == (partition, offset, [a for _, a in rows])
    if rows:  # the same anchors in blocks of ``cut`` items, each with a negative count and its byte size
        items = [_zigzag(a) for _, a in rows]
        blocks = b"".join(
            _zigzag(-len(chunk)) + _zigzag(len(b"".join(chunk))) + b"".join(chunk)
            for chunk in (items[i : i + cut] for i in range(0, len(items), cut))
        )
        head = value[: len(_PREFIX_OUTCOMES)] + _skip_to_anchors(out.getvalue())
        assert decode_outcome_anchors(head + blocks + b"\x00")[2].tolist() == [a for _, a in rows]
    read = len(_PREFIX_OUTCOMES) + len(_skip_to_anchors(out.getvalue(), anchors=True))  # what the reader needs
    for end in range(read - 1, len(_PREFIX_OUTCOMES) - 1, -max(1, read // 7)):
        with pytest.raises(WireError):  # truncated: an error, never a crash or a read past the end
            decode_outcome_anchors(value[:end])


def _zigzag(n: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, {"type": "long"}, n)
    return out.getvalue()


def _skip_to_anchors(body: bytes, anchors: bool = False) -> bytes:
    """The Avro bytes of an OutcomeBatch up to its anchors (spout, partition, offset, outcomes), or through them."""
    reader = io.BytesIO(body)
    for schema in ({"type": "string"}, {"type": "int"}, {"type": "long"}):
        fastavro.schemaless_reader(reader, schema)
    fastavro.schemaless_reader(reader, {"type": "array", "items": "int"})
    if anchors:
        fastavro.schemaless_reader(reader, {"type": "array", "items": "long"})
    return body[: reader.tell()]


@pytest.mark.parametrize("size", [(1 << 63) - 1, (1 << 63) - 20, 1 << 40])
def test_a_huge_length_in_an_outcome_record_is_a_wire_error_not_a_read_past_the_end(size: int) -> None:
    for rest in (b"\x00" * 16, b"\x02\x04" * 16):
        with pytest.raises(WireError):
            decode_outcome_anchors(_PREFIX_OUTCOMES + _zigzag(size) + rest)  # the spout name's length
        with pytest.raises(WireError):  # an array count
            decode_outcome_anchors(_PREFIX_OUTCOMES + b"\x00\x00\x00" + _zigzag(size) + rest)
        with pytest.raises(WireError):  # the count -2⁶³
            decode_outcome_anchors(_PREFIX_OUTCOMES + b"\x00\x00\x00" + _zigzag(-(1 << 63)) + rest)


def test_every_reason_the_reader_gives_is_one_of_the_wire_reasons() -> None:
    """The service exports each of `WIRE_REASONS` at 0 from its start (an alert on an increase sees the first dead
    letter): a reason given and not listed would begin at 1, unseen."""
    source = ast.parse(inspect.getsource(wire))
    calls = [node for node in ast.walk(source) if isinstance(node, ast.Call) and ast.unparse(node.func) == "WireError"]
    reasons = [call.args[0] for call in calls]
    assert all(isinstance(reason, ast.Constant) for reason in reasons)
    assert {reason.value for reason in reasons if isinstance(reason, ast.Constant)} == set(WIRE_REASONS)
    with pytest.raises(AssertionError):
        WireError("not-a-reason", "")
