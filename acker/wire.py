"""The wire format of the acker topic and the outcome topics: a 4-byte prefix, then an Avro record.

    byte 0-1  b"AK"                  magic: this is a kafka-acker record
    byte 2    b"B" | b"O"            what follows: an acker batch or an outcome batch
    byte 3    version                1 today; a reader rejects a version it does not know
    byte 4-   Avro binary encoding   of schemas/acker_batch.avsc or schemas/outcome_batch.avsc

The prefix lets a consumer recognise a record written with an unknown schema version before decoding a byte of
it, and dead-letter it instead of misreading it. Each schema is parsed once, at import.

Decoding validates everything the tracker relies on (consistent column lengths, known kinds, non-zero anchors and
tuple ids, init source indices in range), so a record is either applied whole or rejected whole with a
`WireError` that says why.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import fastavro
import numpy as np
from numba import njit

from acker import avro_longs
from acker.columnar._kernels import renumber
from acker.columnar.block import MAX_OFFSET, Kind, MessageBlock, OutcomeBlock
from acker.columnar.block import split_msg_id as _split
from acker.errors import AckerError

MAGIC = b"AK"
BATCH = b"B"
OUTCOMES = b"O"
VERSION = 1
_PREFIX_BATCH = MAGIC + BATCH + bytes([VERSION])
_PREFIX_OUTCOMES = MAGIC + OUTCOMES + bytes([VERSION])
SPOUT_NAME = r"[A-Za-z0-9._-]{1,200}"  # it names the outcome topic: Kafka's legal characters
_SPOUT_NAME = re.compile(SPOUT_NAME)
# Outcomes per outcome record, at most: ~19 bytes each, so that a record stays far below the broker's 1 MB default
# (message.max.bytes) however many trees one tick expires or one burst overloads. Writers split above it.
OUTCOMES_PER_RECORD = 1 << 14
# And bytes per outcome record, at most (but for one outcome whose message id alone is larger): message ids that are
# not record coordinates are written whole, each its own source, and 16,384 ids of 60 bytes pass 1 MB.
OUTCOME_RECORD_MAX_BYTES = 1 << 19
# What Avro's Java reader takes of an outcome record as the Spark jobs start it (`spark_jobs.session.AVRO_LIMITS`):
# items in an array, bytes in a string. Far above what a writer writes (`OUTCOMES_PER_RECORD` items; a string is at
# most a record); a record past them is one the jobs dead-letter, which the spouts' reader refuses too.
AVRO_ARRAY_MAX_ITEMS = 64 * OUTCOMES_PER_RECORD
AVRO_STRING_MAX_BYTES = 64 << 20


def _json(name: str) -> Any:
    return json.loads(files("acker.schemas").joinpath(name).read_text("utf-8"))


ACKER_BATCH_SCHEMA = fastavro.parse_schema(_json("acker_batch.avsc"))
OUTCOME_BATCH_SCHEMA = fastavro.parse_schema(_json("outcome_batch.avsc"))


def _with_outcome_codes(schema: dict[str, Any]) -> tuple[tuple[str, ...], Any]:
    """The Outcome enum's symbols, and the OutcomeBatch ``schema`` with its outcomes read as the ints that encode them
    (Avro writes an enum as its symbol's index). Read as symbols, fastavro takes a negative index as Python does, from
    the end of the symbols (-1 is the last); Java's reader (Spark's) refuses it, and so does `decode_outcomes`."""
    (field,) = [field for field in schema["fields"] if field["name"] == "outcomes"]
    symbols = tuple(field["type"]["items"]["symbols"])
    field["type"]["items"] = "int"
    return symbols, fastavro.parse_schema(schema)


OUTCOME_SYMBOLS, _OUTCOME_CODES_SCHEMA = _with_outcome_codes(_json("outcome_batch.avsc"))


# Every reason a `WireError` gives: each is a dead-letter reason of the service, exported at 0 from its start
# (`acker_dead_letters_total`), so that an alert on its increase sees the first one.
WIRE_REASONS = (
    "bad-avro",
    "bad-column",
    "bad-magic",
    "bad-spout",
    "empty",
    "inconsistent-columns",
    "undecodable",
    "unknown-message-type",
    "unknown-version",
    "wrong-partition",
    "wrong-record-kind",
    "zero-id",
)


class WireError(AckerError):
    """A record that is not a valid acker or outcome record; ``reason`` is a short machine-readable word, one of
    `WIRE_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in WIRE_REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _check_prefix(data: bytes, kind: bytes) -> None:
    if not data:  # a null value (a tombstone) as well: callers read it as b""
        raise WireError("empty", "the record has no value (null or empty)")
    if len(data) < 4 or data[:2] != MAGIC:
        raise WireError("bad-magic", "the value does not start with the kafka-acker prefix 'AK'")
    if data[2:3] != kind:
        raise WireError("wrong-record-kind", f"expected record kind {kind!r}, got {data[2:3]!r}")
    if data[3] != VERSION:
        raise WireError("unknown-version", f"schema version {data[3]} is not known to this reader (knows {VERSION})")


def _write(schema: Any, prefix: bytes, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    out.write(prefix)
    fastavro.schemaless_writer(out, schema, record)
    return out.getvalue()


def _read(schema: Any, data: bytes, *, trailing: bool = False) -> dict[str, Any]:
    """The Avro record of ``schema`` after the 4-byte prefix of ``data``; `WireError` if it is not one, or bytes
    follow it and not ``trailing`` (Java's reader, Spark's, ignores bytes after a record)."""
    try:
        stream = io.BytesIO(data)
        stream.seek(4)
        record = fastavro.schemaless_reader(stream, schema, None)
    except Exception as error:  # fastavro raises many types on truncated or garbage input
        said = str(error) or ("the record ends before its last field" if isinstance(error, EOFError) else "no detail")
        raise WireError("undecodable", f"Avro decoding failed: {type(error).__name__}: {said}") from None
    if stream.tell() != len(data) and not trailing:
        raise WireError("undecodable", f"{len(data) - stream.tell()} trailing bytes after the Avro record")
    assert isinstance(record, dict)
    return record


def encode_batch(block: MessageBlock) -> bytes:
    """The Kafka record value carrying ``block``."""
    return _write(
        ACKER_BATCH_SCHEMA,
        _PREFIX_BATCH,
        {
            "kinds": block.kinds.astype(np.uint8, copy=False).tobytes(),
            "anchors": block.anchors.astype("<i8", copy=False).tobytes(),
            "values": block.values.astype("<i8", copy=False).tobytes(),
            "sources": [{"spout": spout, "source": source} for spout, source in block.sources],
            "init_sources": block.init_source.astype("<i4", copy=False).tobytes(),
            "init_offsets": block.init_offset.astype("<i8", copy=False).tobytes(),
        },
    )


_INIT, _TICK, _ANCHOR, _OK, _ACK = int(Kind.INIT), int(Kind.TICK), int(Kind.ANCHOR), int(Kind.OK), int(Kind.ACK)


_COLUMNS = (("kinds", "u1", 1), ("anchors", "<i8", 8), ("values", "<i8", 8), ("init_sources", "<i4", 4),
            ("init_offsets", "<i8", 8))  # fmt: skip


def _column(data: bytes, column: tuple[str, str, int], start: int = 0, end: int | None = None) -> np.ndarray:
    """The column (name, dtype, width: `_COLUMNS`) held in ``data[start:end]`` (to its end by default), as a
    read-only view of it: no copy until the records are concatenated (`MessageBlock.concat`, whose columns are
    aligned). A view's may not be: numba types it as aligned all the same (its ``typeof`` does not look), and the
    checks compiled for it (`_scan`, scalar loads) read it as x86-64 and ARM64 read any unaligned word; a kernel
    vectorised with aligned loads would not."""
    name, dtype, width = column
    size = (len(data) if end is None else end) - start
    if size % width:
        raise WireError("bad-column", f"column {name!r} has {size} bytes, not a multiple of {width}")
    return np.frombuffer(data, dtype=dtype, count=size // width, offset=start)


def _columns(data: bytes, sources: int) -> tuple[list[np.ndarray], list[tuple[str, str]]]:
    """The five columns of the AckerBatch in ``data`` (`_COLUMNS`) and its sources. A regular record (all but those
    a writer never makes) is read where its fields lie (`avro_longs.acker_batch_layout`: its columns views of
    ``data`` itself, a third of fastavro's time); any other is read by fastavro, whose errors say why."""
    layout = avro_longs.acker_batch_layout(data, 4, sources)
    if layout is not None:
        spans, names = layout
        try:  # the names first, as fastavro reads them before the columns after them
            decoded = [(data[a:b].decode(), data[c:d].decode()) for a, b, c, d in names.tolist()]
        except UnicodeDecodeError:  # a name that is not UTF-8: fastavro's reading says so
            pass
        else:
            return [
                _column(data, column, *span) for column, span in zip(_COLUMNS, spans.tolist(), strict=True)
            ], decoded
    record = _read(ACKER_BATCH_SCHEMA, data)
    return (
        [_column(record[column[0]], column) for column in _COLUMNS],
        [(s["spout"], s["source"]) for s in record["sources"]],
    )


def parse_batch(data: bytes) -> MessageBlock:
    """The block carried by an acker-topic record value, as read-only views of it, with its structure checked
    (prefix, Avro, column lengths, init columns, source references) but not its messages nor its spout names: see
    `check_messages`. Checking many parsed records at once, concatenated, is much cheaper than one by one."""
    _check_prefix(data, BATCH)
    # A source is there for the inits that refer to it (the schema's doc): more sources than inits is not a record
    # a writer makes, and one of half a million empty sources (1 MB) took fastavro a quarter second and 100 MB at its
    # peak to read, a fetch of them gigabytes.
    counts = avro_longs.acker_batch_counts(data, 4, _INIT)  # an int: numba takes an IntEnum 10 µs slower
    if counts is not None and counts.sources > counts.inits:
        raise WireError("bad-column", f"{counts.sources} sources but {counts.inits} inits: a source is listed for "
                        "its inits")  # fmt: skip
    if counts is None or not counts.whole:  # the count stopped where fastavro might go on, building every source
        raise WireError("undecodable", "Avro decoding failed: the record is cut short before its sources end, or "
                        "holds what Avro's specification never writes (a long over 10 bytes, a block count of -2⁶³, "
                        "a negative length)")  # fmt: skip
    (kinds, anchors, values, init_source, init_offset), sources = _columns(data, counts.sources)
    n = len(kinds)
    if len(anchors) != n or len(values) != n:
        raise WireError("bad-column", f"{n} kinds but {len(anchors)} anchors and {len(values)} values")
    inits = counts.inits
    if len(init_source) != inits or len(init_offset) != inits:
        raise WireError("bad-column", f"{inits} inits but {len(init_source)} init sources, {len(init_offset)} offsets")
    if inits and (init_source.min() < 0 or init_source.max() >= len(sources)):
        raise WireError("bad-column", "an init refers to a source that the record does not list")
    lowest = int(init_offset.min()) if inits else 0
    if lowest < -1:  # -1 is "no offset": below it, a message id would be misread as its source
        raise WireError("bad-column", f"an init's offset is {lowest}: an offset is -1 (none) or more")
    if inits and init_offset.max() >= MAX_OFFSET:  # a message id could not carry it (`split_msg_id`)
        raise WireError("bad-column", f"an init's offset is {int(init_offset.max())}: past any Kafka offset")
    if lowest == -1:  # an id written whole: looked at only then, off the usual path
        whole = np.flatnonzero(init_offset == -1)
        init_source, init_offset, sources = _split_whole(init_source, init_offset, sources, whole)
    return MessageBlock(kinds, anchors, values, init_source, init_offset, sources)


def _split_whole(
    init_source: np.ndarray, init_offset: np.ndarray, sources: list[tuple[str, str]], whole: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """The inits at ``whole`` (offset -1: the message id is the source alone) whose id has an offset after all
    (``"t/0/5"``) in the one form Python writes (``("t/0", 5)``, `split_msg_id`). Invariant: one message id, one
    form; the Spark jobs read a source and offset as coordinates, and took ``("t/0/5", -1)``, which the schema allows
    a writer in another language, for no coordinates: its ack never moved the watermark, its nack was not replayed."""
    index = {source: i for i, source in enumerate(sources)}
    init_source, init_offset, sources = init_source.copy(), init_offset.copy(), list(sources)
    for i in whole:
        spout, source = sources[init_source[i]]
        head, offset = _split(source)
        if offset >= 0:
            j = index.setdefault((spout, head), len(sources))
            if j == len(sources):
                sources.append((spout, head))
            init_source[i], init_offset[i] = j, offset
    return init_source, init_offset, sources


@njit(cache=True, nogil=True)  # checked in the service's deciding threads (`acker.service`)
def _scan(kinds: Any, anchors: Any, values: Any, partition: int, partitions: int) -> tuple[int, bool, bool, int, int]:
    """One pass over a block's columns: (the highest kind, whether a message other than a tick has anchor 0,
    whether an anchor or ok message has tuple id 0 or an ack value 0, how many messages other than ticks belong on
    another partition than ``partition`` of ``partitions`` (none checked when ``partitions`` <= 0), the partition of
    the first)."""
    highest, zero_anchor, zero_id, wrong, first_wrong = 0, False, False, 0, -1
    last, owner = 0, 0
    for i in range(kinds.shape[0]):
        kind = int(kinds[i])
        highest = max(highest, kind)
        if kind == _TICK:
            continue
        anchor = anchors[i]
        zero_anchor |= anchor == 0
        # An ack of value 0 changes no XOR word, yet a tree is decided when its word is 0 after an update: it would
        # complete a tree whose init (of value 0) waits for its anchors. A client's ack is an edge XOR its children's
        # edges, never 0 but by the accident of 2⁻⁶⁴ already accepted for a false zero.
        zero_id |= kind in (_ANCHOR, _OK, _ACK) and values[i] == 0
        if partitions > 0:
            if anchor != last:  # a tree's messages mostly come together: one division for them (owner of 0: 0)
                # partition_of: |anchor| mod partitions, without negating (|-2⁶³| is not an int64).
                owner = anchor % partitions
                if anchor < 0 and owner != 0:
                    owner = partitions - owner
                last = anchor
            if owner != partition:
                wrong += 1
                if first_wrong < 0:
                    first_wrong = owner
    return highest, zero_anchor, zero_id, wrong, first_wrong


# Spout names whose outcome or replay topic would be one of the Spark jobs' own, with why, under their default names
# (``acker.outcomes.dlq``, ``acker.replay.dlq``, ``acker.replay.progress``): refused by every spout, and in an acker
# record (a client of its own naming one had its outcomes published among the commit job's dead letters).
RESERVED_NAMES: Mapping[str, str] = {
    "dlq": "its outcome and replay topics are the Spark jobs' dead-letter topics",
    "progress": "its replay topic is the replay job's progress topic",
}
_VALID_SPOUTS_KEPT = 4096


def spout_name_valid(spout: str) -> bool:
    """Whether ``spout`` can name its outcome topic."""
    return _SPOUT_NAME.fullmatch(spout) is not None


def name_refusal(spout: str) -> str | None:
    """Why no outcome of ``spout`` can be published under any configuration: a name that cannot name a topic, or a
    reserved one (`RESERVED_NAMES`); None for any other name."""
    if not spout_name_valid(spout):
        return f"spout {spout[:80]!r} cannot name a topic ([A-Za-z0-9._-], 1-200 long)"
    if spout in RESERVED_NAMES:
        return f"spout {spout!r} is reserved: {RESERVED_NAMES[spout]}"
    return None


class SpoutNames:
    """The spouts whose trees the service answers: those ``refusal`` finds nothing against (it says why it refuses
    a name, None for one it answers). The service's is `acker.topics.outcome_refusal` under its configuration,
    which also refuses a name whose outcome topic would be one of the deployment's own under the prefixes it uses
    (``outcome_prefix`` ``acker.`` and spout ``status``: outcomes written among the status records). Names answered
    are remembered (up to 4096 of them), so that a name is checked once, not in every record; the service's
    deciding threads share one (a set's lookups and additions are atomic)."""

    def __init__(self, refusal: Callable[[str], str | None] = name_refusal) -> None:
        self._refusal = refusal
        self._answered: set[str] = set()

    def refusal(self, spout: str) -> str | None:
        if spout in self._answered:
            return None
        why = self._refusal(spout)
        if why is None:
            if len(self._answered) >= _VALID_SPOUTS_KEPT:
                self._answered.clear()
            self._answered.add(spout)
        return why

    def answerable(self, spout: str) -> bool:
        return self.refusal(spout) is None

    def check(self, spouts: Iterable[str]) -> None:
        """`WireError` (``bad-spout``) for the first of ``spouts`` refused."""
        for spout in spouts:
            why = self.refusal(spout)
            if why is not None:
                raise WireError("bad-spout", why)


ANY_CONFIGURATION = SpoutNames()  # the names refused whatever the configuration (`name_refusal`)


def spout_answerable(spout: str) -> bool:
    """Whether the service publishes outcomes for ``spout`` under some configuration (`name_refusal`)."""
    return ANY_CONFIGURATION.answerable(spout)


def check_block(block: MessageBlock, partition: int, partitions: int, spouts: SpoutNames = ANY_CONFIGURATION) -> None:
    """`WireError` unless ``spouts`` answers every spout it names and every message of ``block`` is one the tracker
    may apply (`check_messages`) and belongs on ``partition`` of ``partitions`` (``partition_of`` of its anchor; not
    checked when ``partitions`` <= 0, the count unknown), in one compiled pass.

    A message on another partition is part of a tree that this partition does not own: it could never complete
    here, and the tree's other messages are elsewhere (a producer that does not set the partition itself, or a
    partition count changed under live trees). The record is dead-lettered; the service fails the trees whose inits it
    holds (`acker.service.failing_inits`), and the others time out; both are replayed.
    """
    spouts.check({spout for spout, _ in block.sources})  # many sources (a spout's partitions, records), few spouts
    highest, zero_anchor, zero_id, wrong, first_wrong = _scan(
        block.kinds, block.anchors, block.values, partition, partitions
    )
    if highest > Kind.TICK:
        raise WireError("unknown-message-type", f"message kind {highest} is not a known kind")
    if zero_anchor:
        raise WireError("zero-id", "a message other than a tick has anchor 0")
    if zero_id:
        raise WireError("zero-id", "an anchor or ok message has tuple id 0, or an ack has value 0")
    if wrong:
        raise WireError(
            "wrong-partition",
            f"{wrong} message(s) belong on partition {first_wrong}, not {partition} (of {partitions})",
        )


def check_messages(block: MessageBlock) -> None:
    """`WireError` unless every message of ``block`` is one the tracker may apply: a known kind, a non-zero
    anchor (ticks apart), a non-zero tuple id for anchor and ok messages, a spout name that can name a topic."""
    check_block(block, 0, 0)


def decode_batch(data: bytes) -> MessageBlock:
    """The block carried by an acker-topic record value, every check passed, in fresh writable columns;
    `WireError` if it is not a valid one."""
    block = parse_batch(data)
    check_messages(block)
    return MessageBlock.concat([block])


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """One decoded outcome-topic record: the outcomes of one spout's trees."""

    spout: str
    acker_partition: int
    acker_offset: int
    outcomes: list[str]  # ACK, FAILED, TIMEOUT, OVERLOAD
    anchors: list[int]
    msg_ids: list[str]
    latency_ms: list[int]


def encode_outcomes(
    spout: str, block: OutcomeBlock, rows: np.ndarray, *, acker_partition: int, acker_offset: int
) -> bytes:
    """The outcome-topic record value for the outcomes ``rows`` (indices into ``block``) of ``spout``.

    Written field by field in the order of schemas/outcome_batch.avsc with the compiled array encoder
    (`acker.avro_longs`): the service writes one such record per spout per group of acker records it applies at once.
    """
    # outcomes (enum symbols by index: ACK, FAILED, TIMEOUT, OVERLOAD) and anchors; sources; the other columns
    used, local = renumber(block.source[rows], len(block.sources))
    head, tail = avro_longs.outcome_columns(
        block.code, block.anchor, block.offset, block.latency_ms, rows=rows, source_index=local
    )
    return b"".join(
        (
            _PREFIX_OUTCOMES,
            avro_longs.string(spout),
            avro_longs.long(acker_partition),
            avro_longs.long(acker_offset),
            head,
            avro_longs.strings([block.sources[s][1] for s in used.tolist()]),
            tail,
        )
    )


def decode_outcomes(data: bytes) -> OutcomeRecord:
    """The outcome-topic record ``data``; `WireError` if it is not a valid one: not Avro of the schema, an outcome that
    is not a symbol of the enum, columns of different lengths, a source index outside the sources, an offset below -1,
    a spout name that cannot name a topic, an array or a string longer than the Spark jobs' Avro reader takes.

    It refuses whatever `decode_outcome_anchors` refuses (a record the failover read-back refuses is not one a spout
    reads), and whatever the Spark jobs refuse, a spout name that cannot name a topic too (a record they dead-letter,
    and whose trees a spout that took it would never time out: the watermark would wait at them until the spout
    restarted). The record is read as Java's reader (Spark's) reads it where fastavro differs: a long of more than 10
    bytes, an int (an enum index) of more than 5 and an array block of -2⁶³ items (read by fastavro as empty) are
    refused; an int past 32 bits is its low 32 (`java_int`); bytes after the record are ignored. The Spark jobs take
    the records this takes and read the same outcomes in them (`spark_jobs.outcomes.refusal`)."""
    _check_prefix(data, OUTCOMES)
    r = _read(_OUTCOME_CODES_SCHEMA, data, trailing=True)
    sources, offsets = r["sources"], r["offsets"]
    index, codes = _java_ints(r["source_index"]), _java_ints(r["outcomes"])
    # In the order the Spark jobs check, for the reason they give (`spark_jobs.outcomes.refusal`): what Java's reader
    # refuses (undecodable), then the columns, then the spout.
    head = avro_longs.outcome_anchors(data, len(_PREFIX_OUTCOMES), whole=True)
    if head is None:
        raise WireError("undecodable", "Avro that only fastavro reads (a long over 10 bytes, an int over 5, a block "
                        "of -2⁶³ items)")  # fmt: skip
    columns = ("outcomes", "anchors", "source_index", "offsets", "latency_ms")
    if max(len(r[name]) for name in (*columns, "sources")) > AVRO_ARRAY_MAX_ITEMS:
        raise WireError("undecodable", f"an array of more than {AVRO_ARRAY_MAX_ITEMS} items (the Spark jobs' limit)")
    if any(
        len(s) > AVRO_STRING_MAX_BYTES // 4 and len(s.encode()) > AVRO_STRING_MAX_BYTES for s in [r["spout"], *sources]
    ):
        raise WireError("undecodable", f"a string of more than {AVRO_STRING_MAX_BYTES} bytes (the Spark jobs' limit)")
    if codes and not 0 <= min(codes) <= max(codes) < len(OUTCOME_SYMBOLS):
        raise WireError("undecodable", f"an outcome's enum index is outside 0-{len(OUTCOME_SYMBOLS) - 1}")
    if len({len(r[name]) for name in columns}) != 1:
        raise WireError("inconsistent-columns", "outcome columns of different lengths")
    if any(not 0 <= i < len(sources) for i in index):
        raise WireError("inconsistent-columns", "a source index outside the record's sources")
    if offsets and min(offsets) < -1:  # -1 is "no offset": below it, a message id would be misread as its source
        raise WireError("bad-column", f"an outcome's offset is {min(offsets)}: an offset is -1 (none) or more")
    _check_outcome_spout(head.spout)
    msg_ids = [sources[i] if off < 0 else f"{sources[i]}/{off}" for i, off in zip(index, offsets, strict=True)]
    outcomes = list(map(OUTCOME_SYMBOLS.__getitem__, codes))
    return OutcomeRecord(
        r["spout"], java_int(r["acker_partition"]), r["acker_offset"], outcomes, r["anchors"], msg_ids, r["latency_ms"]
    )


def decode_outcome_anchors(data: bytes) -> tuple[int, int, np.ndarray]:
    """(acker_partition, acker_offset, anchors) of an outcome-topic record, read no further than its anchors: what
    a new owner reads back (`acker.kafka.decided`), 30× faster than `decode_outcomes`. `WireError` when
    `decode_outcomes` would find the fields read invalid (a spout name not UTF-8, an outcome outside the enum, not as
    many outcomes as anchors, more than the Spark jobs take, a spout name that cannot name a topic), which refuses
    whatever this refuses."""
    _check_prefix(data, OUTCOMES)
    head = avro_longs.outcome_anchors(data, len(_PREFIX_OUTCOMES))
    if head is None:
        raise WireError("bad-avro", "not an outcome record: truncated or malformed")
    if head.outcomes != len(head.anchors):
        raise WireError("bad-avro", f"{head.outcomes} outcomes but {len(head.anchors)} anchors")
    if head.lowest_outcome < 0 or head.highest_outcome >= len(OUTCOME_SYMBOLS):
        raise WireError("bad-avro", f"an outcome's enum index is outside 0-{len(OUTCOME_SYMBOLS) - 1}")
    if len(head.anchors) > AVRO_ARRAY_MAX_ITEMS:
        raise WireError("bad-avro", f"more than {AVRO_ARRAY_MAX_ITEMS} outcomes (the Spark jobs' limit)")
    _check_outcome_spout(head.spout)
    return head.acker_partition, head.acker_offset, head.anchors


def java_int(value: int) -> int:
    """An Avro int as Java's reader (Spark's) reads it: the low 32 bits of its zigzag varint. fastavro reads the
    whole varint, and 5 bytes carry 35 bits: a writer may write an int past 32 bits (no writer of ours does), which
    Java reads as another, in-range value (an enum index 2³²+1 is FAILED)."""
    if -(2**31) <= value < 2**31:
        return value
    z = (value << 1 if value >= 0 else (-value << 1) - 1) & 0xFFFFFFFF
    return (z >> 1) ^ -(z & 1)


def _java_ints(values: list[int]) -> list[int]:
    if values and (min(values) < -(2**31) or max(values) >= 2**31):
        return list(map(java_int, values))
    return values


def _check_outcome_spout(spout: str) -> None:
    """`WireError` for an outcome record's spout name that cannot name a topic: the Spark jobs dead-letter it."""
    if not spout_name_valid(spout):
        raise WireError("bad-spout", f"spout name {spout[:200]!r} cannot name a topic")


def split_outcomes(data: bytes) -> tuple[bytes, bytes] | None:
    """An outcome record as two, each with half of its outcomes (in order) and its acker partition and offset; None
    for a record of one outcome. For a record its topic refuses as too large: outcomes are independent."""
    r = decode_outcomes(data)
    rows = list(zip(r.outcomes, r.anchors, r.msg_ids, r.latency_ms, strict=True))
    if len(rows) < 2:
        return None
    half = len(rows) // 2
    where = {"acker_partition": r.acker_partition, "acker_offset": r.acker_offset}
    return encode_outcome_rows(r.spout, rows[:half], **where), encode_outcome_rows(r.spout, rows[half:], **where)


def encode_outcome_rows(
    spout: str, rows: list[tuple[str, int, str, int]], *, acker_partition: int = -1, acker_offset: int = -1
) -> bytes:
    """An outcome record of rows of (outcome, anchor, msg_id, latency ms): written by a spout itself, not by an
    acker (``acker_partition`` -1), or an acker's record split in two (`split_outcomes`).

    A spout decides alone for records that start no tree (untracked mode, or nothing emitted: fully processed at
    once) and for trees whose init could not be delivered (failed).
    """
    sources: dict[str, int] = {}
    index, offsets = [], []
    for _, _, msg_id, _ in rows:
        source, offset = _split(msg_id)
        index.append(sources.setdefault(source, len(sources)))
        offsets.append(offset)
    return _write(
        OUTCOME_BATCH_SCHEMA,
        _PREFIX_OUTCOMES,
        {
            "spout": spout,
            "acker_partition": acker_partition,
            "acker_offset": acker_offset,
            "outcomes": [outcome for outcome, _, _, _ in rows],
            "anchors": [anchor for _, anchor, _, _ in rows],
            "sources": list(sources),
            "source_index": index,
            "offsets": offsets,
            "latency_ms": [latency for _, _, _, latency in rows],
        },
    )
