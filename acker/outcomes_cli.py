"""`acker outcomes SPOUT`: what was decided for a spout's source records, read from its outcome topic.

Each outcome record holds rows of (message id, outcome): the acker service's ``ACK`` and nacks (``FAILED``, with the
reason the failing stage gave when it gave one, ``TIMEOUT``, ``OVERLOAD``), the spout's own (a record that started no
tree, an init that could not be delivered), and the replay job's resolution of each nack (``REPLAYED``, its copy
written to the replay topic, whose outcome follows under the same message id; ``DEAD_LETTERED``, the record's last).
Without ``--msg-id`` the newest are shown (a replay's with the record it replays, read from its copy); with it,
every outcome of the records named, oldest first, their replays' too (the copies in the spout's replay topic whose
origin is one of them, each under its own message id, "replay of" the record): what happened to a record, attempt
by attempt. A record of the topic that cannot be read is counted and said, not shown. A nack with no resolution after
it: the replay job has not read it yet, dropped it as a duplicate of a nack of the same record it resolved within
its deduplication window (the record read again and failed again, as after a spout's restart: the first
resolution stands for it), or skipped it as the nack of a record its spout's watermark had passed when the job read
it (a re-read of a record acked before: its ``ACK`` stands).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from confluent_kafka import Message
from rich.table import Table

from acker import fail_reasons
from acker.acked import CLOCK_SKEW_S, records_at, replay_copies
from acker.argtypes import at_least
from acker.config import ServiceConfig, add_arguments, load
from acker.console import printable, table_console, utc_time
from acker.dlq import every_record, newest_records
from acker.headers import first, read_headers, text
from acker.help_text import prose
from acker.kafka.clients import answering
from acker.places import place_of
from acker.retries import ORIGIN, RESOLUTIONS
from acker.topics import check_spout_name
from acker.wire import WireError, decode_outcomes

_WRITERS = {False: "spout", True: "replay job"}  # of a row no acker decided: is it a resolution?


@dataclass(frozen=True, slots=True)
class OutcomeRow:
    """One outcome of one source record, where it lies in the outcome topic and who decided it."""

    place: str  # PARTITION/OFFSET of the outcome record
    time_ms: int  # the outcome record's timestamp
    msg_id: str
    outcome: str
    # From the init's record to the one that decided the tree: 0 where the init decided it (its tuples processed
    # before it was read: a spout's own fan-out), and where not measured (the spout's own, a resolution).
    latency_ms: int
    decided_by: str  # "acker P" (its partition), "spout" or "replay job"
    reason: str | None  # a FAILED's, when the stage that failed it said why (`acker.fail_reasons`)
    replay_of: str | None = None  # a replay's: the record it replays (its origin), when looked for (``--msg-id``)


def rows_of(record: Message) -> list[OutcomeRow]:
    """The rows of an outcome record, in its order; `WireError` when it is not one."""
    decoded = decode_outcomes(record.value() or b"")
    reasons = fail_reasons.decode(first(read_headers(record), fail_reasons.HEADER))  # a header unread: none
    place, time_ms = f"{record.partition()}/{record.offset()}", record.timestamp()[1]
    acker = f"acker {decoded.acker_partition}" if decoded.acker_partition >= 0 else None
    rows = []
    for outcome, msg_id, latency in zip(decoded.outcomes, decoded.msg_ids, decoded.latency_ms, strict=True):
        by = acker or ("replay job" if outcome in RESOLUTIONS else "spout")
        reason = reasons.get(msg_id) if outcome == "FAILED" else None
        rows.append(OutcomeRow(place, time_ms, msg_id, outcome, latency, by, reason))
    return rows


@dataclass(slots=True)
class _Unreadable:
    count: int = 0
    first: str = ""  # where the first lies, and why

    def add(self, record: Message, error: WireError) -> None:
        if not self.count:
            self.first = f"{record.partition()}/{record.offset()}: {error}"
        self.count += 1


def _rows(
    records: Iterable[Message], unreadable: _Unreadable, wanted: Mapping[str, str | None] | None = None
) -> list[OutcomeRow]:
    """The rows of ``records``; only those of the message ids ``wanted`` when given, each with what it replays."""
    rows: list[OutcomeRow] = []
    for record in records:
        try:
            if wanted is None:
                rows.extend(rows_of(record))
            else:
                rows.extend(replace(r, replay_of=wanted[r.msg_id]) for r in rows_of(record) if r.msg_id in wanted)
        except WireError as error:
            unreadable.add(record, error)
    return rows


def _with_origins(config: ServiceConfig, spout: str, rows: list[OutcomeRow]) -> list[OutcomeRow]:
    """``rows``, each of a copy in ``spout``'s replay topic with the record it replays (``replay_of``: read at its
    place, its ``acker.replay.origin`` header; a copy written after its outcome, less `CLOCK_SKEW_S`, is another
    record at the place of the copy it had, in the topic made again). Copies that cannot be read now are said on
    stderr."""
    topic = config.replay_topic(spout)
    asked = {row.msg_id for row in rows if (place := place_of(row.msg_id)) is not None and place.topic == topic}
    read = records_at(config, asked)
    if unread := len(asked) - len(read.found):
        print(f"what {unread} replay(s) replay is not known: their copies could not be read now ({read.why_not})",
              file=sys.stderr)  # fmt: skip

    def origin(row: OutcomeRow) -> str | None:
        copy = read.found.get(row.msg_id)
        if copy is None or row.time_ms < copy.timestamp()[1] - CLOCK_SKEW_S * 1000:
            return None
        return text(read_headers(copy), ORIGIN) or None

    return [replace(row, replay_of=origin(row)) for row in rows]


def cmd_outcomes(args: argparse.Namespace) -> int:
    config = load(args)
    check_spout_name(config, args.spout)  # as the service does: a name it refuses has no outcome topic
    topic = config.outcome_topic(args.spout)
    answering(config.client(), topic)  # a login refused said as such, within seconds
    wanted = set(args.msg_ids) or None
    unreadable = _Unreadable()
    unread = 0
    if wanted is not None:
        records = every_record(config, topic)
        copies = replay_copies(config, args.spout, wanted) or {}
        chosen: dict[str, str | None] = {**dict.fromkeys(wanted), **{c: o for c, (o, _) in copies.items()}}
        rows = None if records is None else _rows(records, unreadable, chosen)
    else:
        found = newest_records(config, topic, args.limit or None)
        rows = None if found is None else _rows(found[0], unreadable)
        unread = 0 if found is None else found[1]
    if rows is None:
        said = f"{topic}: no such topic yet, so no outcomes (the service creates it at its spout's first outcome)"
        print(said, file=sys.stderr if args.json else sys.stdout)
        return 1 if wanted else 0
    rows.sort(key=lambda r: r.time_ms)  # stable: a record's rows, and a partition's records, stay in their order
    shown = rows if wanted or not args.limit else rows[-args.limit :]
    if wanted is None:  # the replays among them: what each replays, read from its copy
        shown = _with_origins(config, args.spout, shown)
    if args.json:
        for row in shown:
            print(json.dumps(asdict(row)))
    else:
        _print_table(topic, rows, shown, unread, replays=wanted is not None or any(r.replay_of for r in shown))
    if unreadable.count:
        print(f"{unreadable.count} record(s) of {topic} could not be read (the first at {unreadable.first})",
              file=sys.stderr)  # fmt: skip
    missing = sorted((wanted or set()) - {row.replay_of or row.msg_id for row in rows})
    for msg_id in missing:
        print(f"no outcome of {printable(msg_id)} in {topic}", file=sys.stderr)
    return 1 if missing else 0


def _print_table(
    topic: str, rows: list[OutcomeRow], shown: list[OutcomeRow], unread: int, *, replays: bool = False
) -> None:
    """``replays``: with the "replay of" column (the records asked for, and their replays)."""
    table = Table(title=f"{topic}: {len(shown)} outcome(s)")
    columns = ["place", "time (UTC)", "message id", "outcome", "latency ms", "decided by", "reason"]
    for column in [*columns, "replay of"] if replays else columns:
        table.add_column(column, justify="right" if column == "latency ms" else "left")
    for row in shown:
        cells = [row.place, utc_time(row.time_ms, millis=True), printable(row.msg_id), row.outcome,
                 str(row.latency_ms), row.decided_by, printable(row.reason or "-")]  # fmt: skip
        table.add_row(*cells, *([printable(row.replay_of or "-")] if replays else []))
    console = table_console()
    console.print(table)
    older = len(rows) - len(shown)
    if older:
        console.print(f"{older} older outcome(s) read and not shown (--limit 0 shows all)")
    if unread:  # offsets of older outcome records, and transaction markers
        console.print(f"up to {unread} older outcome record(s) not read (--limit 0 reads all)")


def add_parser(sub: Any) -> None:
    outcomes = sub.add_parser(
        "outcomes",
        help="what was decided for a spout's records: the newest outcomes, or every outcome of chosen records",
        description=prose(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    outcomes.add_argument("spout", help="the spout's name")
    outcomes.add_argument(
        "--msg-id",
        dest="msg_ids",
        action="append",
        default=[],
        metavar="ID",
        help="every outcome of this record (TOPIC/PARTITION/OFFSET, as the spout names its records), read from the "
        "whole topic; repeatable; the exit status is 1 if one has none",
    )
    outcomes.add_argument(
        "--limit", type=at_least(0), default=50, help="without --msg-id, show the newest N (0: all) [default: 50]"
    )
    outcomes.add_argument("--json", action="store_true", help="one JSON object a line instead of a table")
    # The deployment's own topics too: a spout name whose topics would meet them is refused (`check_spout_name`).
    add_arguments(outcomes, ("bootstrap_servers", "outcome_prefix", "replay_prefix", "acker_topic", "dlq_topic",
                             "replay_dlq_topic", "status_topic"))  # fmt: skip
    outcomes.set_defaults(run=cmd_outcomes)
