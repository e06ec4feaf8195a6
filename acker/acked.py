"""Which source records were acked at least once, read from their spout's outcome topic.

A record may be dead-lettered and acked both: a spout started again (or given a partition in a rebalance) reads from
the watermark, which lags what is done, so a record acked before is read again as a new tree, and if that copy fails
its nacks go on to the dead-letter topic; the replay job reads nacks alone and does not know of the first ACK. An
``ACK`` under the record's own message id, or under the message id of one of its replay copies (in the spout's replay
topic, whose ``acker.replay.origin`` header names it), says that a whole tree of the record was processed once:
re-driving its dead letter would process it again (`acker dlq redrive --skip-acked`).

Both topics are read whole, up to their ends now (within their retention): an ACK deleted by retention is not known.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from acker.config import ServiceConfig
from acker.dlq import every_record
from acker.headers import read_headers, text
from acker.retries import ORIGIN
from acker.wire import WireError, decode_outcomes


def replay_copies(config: ServiceConfig, spout: str, origins: Collection[str]) -> dict[str, str]:
    """The copies of the records ``origins`` in ``spout``'s replay topic, by message id: each copy's origin."""
    topic = config.replay_topic(spout)
    copies: dict[str, str] = {}
    for record in every_record(config, topic) or ():
        origin = text(read_headers(record), ORIGIN)
        if origin is not None and origin in origins:
            copies[f"{topic}/{record.partition()}/{record.offset()}"] = origin
    return copies


@dataclass(slots=True)
class Acked:
    """What `acked` found: the records acked, and the outcome records it could not read."""

    origins: set[str] = field(default_factory=set)
    unreadable: int = 0  # outcome records that are not outcome records (the jobs dead-letter them too)
    first_unreadable: str = ""  # where the first lies, and why


def acked(config: ServiceConfig, spout: str, origins: Collection[str]) -> Acked:
    """Those of ``origins`` (message ids of ``spout``'s source records) that ``spout``'s outcome topic acks, under
    their own message id or one of their replay copies' (none while the topic does not exist)."""
    wanted: dict[str, str] = {**{o: o for o in origins}, **replay_copies(config, spout, set(origins))}
    found = Acked()
    topic = config.outcome_topic(spout)
    for record in every_record(config, topic) or ():
        try:
            decoded = decode_outcomes(record.value() or b"")
        except WireError as error:
            if not found.unreadable:
                found.first_unreadable = f"{topic}/{record.partition()}/{record.offset()}: {error}"
            found.unreadable += 1
            continue
        for outcome, msg_id in zip(decoded.outcomes, decoded.msg_ids, strict=True):
            if outcome == "ACK" and msg_id in wanted:
                found.origins.add(wanted[msg_id])
    return found
