"""Which source records were acked at least once, read from their spout's outcome topic.

A record may be dead-lettered and acked both: a spout started again (or given a partition in a rebalance) reads from
the watermark, which lags what is done, so a record acked before is read again as a new tree, and if that copy fails
its nacks go on to the dead-letter topic; the replay job reads nacks alone and does not know of the first ACK. An
``ACK`` under the record's own message id, or under the message id of one of its replay copies (in the spout's replay
topic, whose ``acker.replay.origin`` header names it), says that a whole tree of the record was processed once:
re-driving its dead letter would process it again (`acker dlq redrive --skip-acked`). (Once, as its spout counts
processed: an untracked spout acks a record whose emit function raised after it emitted something.)

Three answers, as `Acked` gives them: acked; not acked (no such ACK in the topics as they are now: both are read
whole, within their retention, so an ACK deleted by it is not known); and not known. Not known: the spout's outcome
or replay topic cannot be read to its end (it does not exist: a mistyped prefix must not read as "none acked"; a
transaction left open there), or the record itself cannot be read now (deleted by retention, no answer, no
timestamp), or its message id is not a place.

A message id is a place, and a topic deleted and made again under its name has new records at the old places,
whose ACKs must not count for them: an ACK counts only if its outcome record was written after the record it acks
was (the source record, and the replay copy, itself written after the record: less `CLOCK_SKEW_S`, as the timestamps
come from the clocks of several hosts). A letter, too, is written after its record, with its value (`Acked.holds`).
What this cannot tell apart: a topic made again within that skew of the old one's last ACKs, the ACK of an old
record's tree still in flight when its topic was made again, and records whose timestamps are older than their
writing (a mirror that keeps the source cluster's, a back-fill stamped with event time), whose old ACKs count.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from confluent_kafka import Message

from acker.config import ServiceConfig
from acker.dlq import DlqError, every_record
from acker.headers import read_headers, text
from acker.kafka.lookups import lookups
from acker.places import place_of
from acker.retries import ORIGIN
from acker.wire import WireError, decode_outcomes

CLOCK_SKEW_S = 10.0  # how much earlier than the record it acks an ACK's outcome record may be stamped and count


@dataclass(slots=True)
class Records:
    """What `records_at` read: the records by message id, and why the first of the others could not be read."""

    found: dict[str, Message] = field(default_factory=dict)
    why_not: str = ""


def records_at(config: ServiceConfig, msg_ids: Collection[str]) -> Records:
    """The records ``msg_ids`` that can be read now. One gone (deleted, past the end), not a place, or in a partition
    Kafka does not answer for now (or past a transaction still open there) is left out."""
    places: dict[tuple[str, int], dict[int, str]] = {}
    read = Records()
    for msg_id in msg_ids:
        place = place_of(msg_id)
        if place is None:
            read.why_not = read.why_not or f"{msg_id!r} is not a record's place (TOPIC/PARTITION/OFFSET)"
        else:
            places.setdefault((place.topic, place.partition), {})[place.offset] = msg_id
    if not places:
        return read
    kafka = lookups(config.client())
    for (topic, partition), at in places.items():
        try:
            with kafka.lock:
                records = kafka.fetch(topic, partition, list(at))
        except LookupError as error:
            read.why_not = read.why_not or str(error)
            continue
        read.found |= {at[offset]: record for offset, record in records.items() if record is not None}
        if len(records) > sum(1 for r in records.values() if r is not None) and not read.why_not:
            read.why_not = f"{topic}[{partition}]: no record at an offset asked (deleted by retention?)"
    return read


def replay_copies(config: ServiceConfig, spout: str, origins: Collection[str]) -> dict[str, tuple[str, int]] | None:
    """The copies of the records ``origins`` in ``spout``'s replay topic, by message id: each copy's origin and
    timestamp (ms); None when the topic does not exist."""
    topic = config.replay_topic(spout)
    records = every_record(config, topic)
    if records is None:
        return None
    copies: dict[str, tuple[str, int]] = {}
    for record in records:
        origin = text(read_headers(record), ORIGIN)
        if origin is not None and origin in origins:
            copies[f"{topic}/{record.partition()}/{record.offset()}"] = (origin, record.timestamp()[1])
    return copies


@dataclass(slots=True)
class Acked:
    """What `acked` found. Invariant: ``origins`` and ``unknown`` are disjoint; the records asked of that are in
    neither were not acked."""

    origins: set[str] = field(default_factory=set)  # acked
    unknown: set[str] = field(default_factory=set)  # not known (see the module)
    # Why the spout's outcome or replay topic could not be read (it does not exist, a transaction open there): all
    # are unknown
    not_read: str | None = None
    why_unknown: str = ""  # why the first record of ``unknown`` could not be read
    written: dict[str, int] = field(default_factory=dict)  # when each record known was written (ms)
    values: dict[str, bytes | None] = field(default_factory=dict)  # and its value
    unreadable: int = 0  # outcome records that are not outcome records (the jobs dead-letter them too)
    first_unreadable: str = ""  # where the first lies, and why

    def holds(self, origin: str, written_ms: int, value: bytes | None) -> bool:
        """Whether a copy of record ``origin`` written at ``written_ms`` holding ``value`` (a dead letter) is of the
        record now at that place, whose answer this is: one written before it (less the skew), or with another
        value, is of a record once there (its topic made again). False for a record not known."""
        written = self.written.get(origin)
        return written is not None and written_ms >= written - CLOCK_SKEW_S * 1000 and value == self.values[origin]


def acked(config: ServiceConfig, spout: str, origins: Collection[str]) -> Acked:
    """Which of ``origins`` (message ids of ``spout``'s source records) ``spout``'s outcome topic acks, under their
    own message id or one of their replay copies' (`Acked`)."""
    try:
        return _acked(config, spout, origins)
    except DlqError as error:  # a transaction left open in one of the topics: not read to its end
        return Acked(unknown=set(origins), not_read=str(error))


def _acked(config: ServiceConfig, spout: str, origins: Collection[str]) -> Acked:
    topic = config.outcome_topic(spout)
    outcomes = every_record(config, topic)
    copies = None if outcomes is None else replay_copies(config, spout, set(origins))
    if outcomes is None or copies is None:
        missing = topic if outcomes is None else config.replay_topic(spout)
        return Acked(unknown=set(origins), not_read=f"no topic {missing}")
    read = records_at(config, origins)
    # When each record was written (ms), by the message id an ACK of it would have: a source record's, and a copy's
    # written after its record (an older one is of another record once at that place).
    written = {o: t for o, record in read.found.items() if (t := record.timestamp()[1]) >= 0}  # -1: no timestamp
    skew_ms = CLOCK_SKEW_S * 1000
    copies = {c: (o, t) for c, (o, t) in copies.items() if o in written and t >= 0 and t >= written[o] - skew_ms}
    found = Acked(unknown=set(origins) - set(written), why_unknown=read.why_not or "a record without a timestamp",
                  written=written, values={o: read.found[o].value() for o in written})  # fmt: skip
    # By the message id an ACK of a record may have (its own, a copy's): the record, and the later of its writing
    # and the copy's.
    trees = {**{o: (o, t) for o, t in written.items()}, **{c: (o, max(t, written[o])) for c, (o, t) in copies.items()}}
    for record in outcomes:
        try:
            decoded = decode_outcomes(record.value() or b"")
        except WireError as error:
            if not found.unreadable:
                found.first_unreadable = f"{topic}/{record.partition()}/{record.offset()}: {error}"
            found.unreadable += 1
            continue
        for outcome, msg_id in zip(decoded.outcomes, decoded.msg_ids, strict=True):
            # Written before what it acks (less the skew): an ACK of another record once at its place.
            tree = trees.get(msg_id) if outcome == "ACK" else None
            if tree is not None and record.timestamp()[1] >= tree[1] - skew_ms:
                found.origins.add(tree[0])
    return found
