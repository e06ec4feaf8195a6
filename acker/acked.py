"""Which source records were acked at least once, read from their spout's outcome topic.

A record may be dead-lettered and acked both: a spout started again (or given a partition in a rebalance) reads from
the watermark, which lags what is done, so a record acked before is read again as a new tree, and if that copy fails
its nacks go on to the dead-letter topic; the replay job reads nacks alone and does not know of the first ACK. An
``ACK`` under the record's own message id, or under the message id of one of its replay copies (in the spout's replay
topic, whose ``acker.replay.origin`` header names it), says that a whole tree of the record was processed once:
re-driving its dead letter would process it again (`acker dlq redrive --skip-acked`).

Three answers, as `Acked` gives them: acked; not acked (no such ACK in the topics as they are now: both are read
whole, within their retention, so an ACK deleted by it is not known); and not known. Not known: the outcome topic
does not exist (a mistyped prefix must not read as "none acked"), or the record itself cannot be read now (deleted by
retention, no answer). The record is read for its timestamp: a message id is a place, and a topic deleted and made
again under its name has new records at the old places, whose ACKs must not count for them. An ACK counts only if
its outcome record was written after the record was (less `CLOCK_SKEW_S`: the two timestamps come from the clocks of
two hosts).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from confluent_kafka import Message

from acker.config import ServiceConfig
from acker.dlq import every_record
from acker.headers import read_headers, text
from acker.kafka.lookups import lookups
from acker.retries import ORIGIN
from acker.wire import WireError, decode_outcomes

CLOCK_SKEW_S = 60.0  # how much earlier than its record an ACK's outcome record may be stamped and still count


def replay_copies(config: ServiceConfig, spout: str, origins: Collection[str]) -> dict[str, str] | None:
    """The copies of the records ``origins`` in ``spout``'s replay topic, by message id: each copy's origin; None
    when the topic does not exist."""
    topic = config.replay_topic(spout)
    records = every_record(config, topic)
    if records is None:
        return None
    copies: dict[str, str] = {}
    for record in records:
        origin = text(read_headers(record), ORIGIN)
        if origin is not None and origin in origins:
            copies[f"{topic}/{record.partition()}/{record.offset()}"] = origin
    return copies


@dataclass(slots=True)
class Acked:
    """What `acked` found. Invariant: ``origins`` and ``unknown`` are disjoint; the records asked of that are in
    neither were not acked."""

    origins: set[str] = field(default_factory=set)  # acked
    unknown: set[str] = field(default_factory=set)  # not known (see the module)
    no_outcome_topic: bool = False  # every record asked of is unknown
    no_replay_topic: bool = False  # the ACKs of replay copies were not looked for
    unreadable: int = 0  # outcome records that are not outcome records (the jobs dead-letter them too)
    first_unreadable: str = ""  # where the first lies, and why


def records_at(config: ServiceConfig, msg_ids: Collection[str]) -> dict[str, Message]:
    """The records ``msg_ids`` (``topic/partition/offset``) that can be read now, by message id (one gone, or one Kafka
    does not answer for now, is left out)."""
    places: dict[tuple[str, int], dict[int, str]] = {}
    for msg_id in msg_ids:
        parts = msg_id.rsplit("/", 2)
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            places.setdefault((parts[0], int(parts[1])), {})[int(parts[2])] = msg_id
    kafka = lookups(config.client())
    found: dict[str, Message] = {}
    for (topic, partition), at in places.items():
        try:
            with kafka.lock:
                records = kafka.fetch(topic, partition, list(at))
        except LookupError:
            continue
        found |= {at[offset]: record for offset, record in records.items() if record is not None}
    return found


def acked(config: ServiceConfig, spout: str, origins: Collection[str]) -> Acked:
    """Which of ``origins`` (message ids of ``spout``'s source records) ``spout``'s outcome topic acks, under their
    own message id or one of their replay copies' (`Acked`)."""
    topic = config.outcome_topic(spout)
    records = every_record(config, topic)
    if records is None:
        return Acked(unknown=set(origins), no_outcome_topic=True)
    copies = replay_copies(config, spout, set(origins))
    written = {msg_id: record.timestamp()[1] for msg_id, record in records_at(config, origins).items()}
    found = Acked(unknown=set(origins) - set(written), no_replay_topic=copies is None)
    wanted: dict[str, str] = {**{o: o for o in written}, **{c: o for c, o in (copies or {}).items() if o in written}}
    for record in records:
        try:
            decoded = decode_outcomes(record.value() or b"")
        except WireError as error:
            if not found.unreadable:
                found.first_unreadable = f"{topic}/{record.partition()}/{record.offset()}: {error}"
            found.unreadable += 1
            continue
        for outcome, msg_id in zip(decoded.outcomes, decoded.msg_ids, strict=True):
            origin = wanted.get(msg_id) if outcome == "ACK" else None
            # Written before the record (less the skew): an ACK of another record once at its place.
            if origin is not None and record.timestamp()[1] >= written[origin] - CLOCK_SKEW_S * 1000:
                found.origins.add(origin)
    return found
