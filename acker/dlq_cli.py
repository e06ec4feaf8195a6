"""`acker dlq list|show|redrive`: the dead-letter topics from the command line (`acker.dlq`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from confluent_kafka import KafkaError
from rich.table import Table

import acker.dlq
from acker.acked import acked
from acker.argtypes import at_least
from acker.config import ServiceConfig, add_arguments, load
from acker.console import printable, table_console, utc_time
from acker.dlq import (
    DeadLetter,
    DlqError,
    parse_coordinates,
    plan,
    preview,
    read,
    read_newest,
    refuse_copies,
    refuse_in_flight,
    repeats,
    send,
    target_partitions,
    those_that_can_go_back,
)
from acker.help_text import prose
from acker.kafka.clients import KafkaClientError, answering, partition_count
from acker.retries import SPOUT, Decision
from acker.topics import check_spout_name, spout_refusal


def _topic(args: argparse.Namespace, config: ServiceConfig) -> str:
    return str(args.topic or config.replay_dlq_topic)


def _places(args: argparse.Namespace, config: ServiceConfig) -> list[tuple[int, int]]:
    """The records named (partition, offset), read before Kafka is asked anything: a mistyped place is said at once."""
    return [parse_coordinates(place, _topic(args, config)) for place in args.places]


def _chosen(args: argparse.Namespace, config: ServiceConfig, places: list[tuple[int, int]]) -> list[DeadLetter]:
    topic = _topic(args, config)
    if not places and not _exists(config, topic):  # --all: an empty list would read as "nothing dead-lettered"
        raise DlqError(f"no dead-letter topic {topic!r}")
    return read(config, topic, places or None)


def _exists(config: ServiceConfig, topic: str) -> bool:
    """Whether ``topic`` exists; any other failure (no answer, not authorized) is raised, not taken for an answer."""
    try:
        partition_count(config.client(), topic)
    except KafkaClientError as error:
        if error.code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise
    return True


def _answer(config: ServiceConfig, args: argparse.Namespace) -> None:
    """Returns once Kafka has answered about the dead-letter topic: a login refused is said as such within seconds,
    not, 10 s later, as a Kafka that did not answer (`answering`)."""
    answering(config.client(), _topic(args, config))


_YES_NO: dict[bool | None, str] = {True: "yes", False: "no", None: "-"}


def _acked(config: ServiceConfig, letters: list[DeadLetter]) -> tuple[dict[str, bool | None], list[str]]:
    """Whether each letter's record was acked too (`acker.acked`), by the letter's coordinates: None where that is not
    known (the acker's own letters, and one that names no spout or one the spouts refuse; a record that cannot be read
    now; a letter of another record than the one at its origin's place now; a spout whose outcome or replay topic
    could not be read); and why those topics could not be (said on stderr, as what else is not known)."""
    spouts = {letter.coordinates: spout for letter in letters if not letter.acker_kind
              and (spout := letter.header(SPOUT)) and spout_refusal(config, spout) is None}  # fmt: skip
    origins: dict[str, set[str]] = {}
    for letter in letters:
        if letter.coordinates in spouts:
            origins.setdefault(spouts[letter.coordinates], set()).add(letter.origin)
    found = {spout: acked(config, spout, wanted) for spout, wanted in origins.items()}
    for spout, said in sorted(found.items()):
        if said.not_read is not None:
            print(f"{said.not_read}: whether the records of spout {spout} were acked is not known (are "
                  "--outcome-prefix and --replay-prefix the deployment's?)", file=sys.stderr)  # fmt: skip
            continue
        if said.unknown:
            print(f"{len(said.unknown)} record(s) of spout {spout} could not be read now, so whether they were acked "
                  f"is not known ({said.why_unknown})", file=sys.stderr)  # fmt: skip
        if said.unreadable:
            print(f"{said.unreadable} record(s) of {config.outcome_topic(spout)} could not be read (the first at "
                  f"{said.first_unreadable})", file=sys.stderr)  # fmt: skip

    others = 0  # letters of another record than the one at their origin's place now

    def acked_or_not(letter: DeadLetter) -> bool | None:
        nonlocal others
        spout = spouts.get(letter.coordinates)
        if spout is None or letter.origin in found[spout].unknown or found[spout].not_read is not None:
            return None
        said, origin = found[spout], letter.origin
        if not said.holds(origin, letter.timestamp_ms, letter.value):
            others += 1
            return None
        return origin in said.origins

    answers = {letter.coordinates: acked_or_not(letter) for letter in letters}
    if others:
        print(f"{others} letter(s) are not of the record now at their origin's place (written before it, or another "
              "value: its topic made again?): whether they were acked is not known", file=sys.stderr)  # fmt: skip
    return answers, sorted(why for a in found.values() if (why := a.not_read) is not None)


def _leave_acked(
    config: ServiceConfig, letters: list[DeadLetter], decisions: list[Decision]
) -> tuple[list[DeadLetter], list[Decision]]:
    """``letters`` planned to go back (and their decisions) but those whose record was acked too (`_acked`). Asked of
    the plan, not before it: the letters left out still name the rounds re-driven already."""
    acked_too, not_read = _acked(config, letters)
    if not_read:  # taken for "none acked", every record would go back
        raise DlqError(f"--skip-acked: {'; '.join(not_read)}, so which records were acked is not known; nothing "
                       "re-driven")  # fmt: skip
    kept = [(letter, d) for letter, d in zip(letters, decisions, strict=True) if not acked_too[letter.coordinates]]
    return [letter for letter, _ in kept], [d for _, d in kept]


def cmd_list(args: argparse.Namespace) -> int:
    config = load(args)
    _answer(config, args)
    topic = _topic(args, config)
    found = read_newest(config, topic, args.limit or None)
    if found is None:  # as `dlq show` says, rather than an empty table
        said = f"{topic}: no such topic yet, so no dead letters (the service and the replay job create theirs)"
        print(said, file=sys.stderr if args.json else sys.stdout)
        return 0
    letters, unread = found
    letters.sort(key=lambda d: (d.timestamp_ms, d.partition, d.offset))
    copies = repeats(letters)  # among those read
    start = len(letters) - args.limit if args.limit and len(letters) > args.limit else 0
    shown = letters[start:]  # the newest, across partitions
    acked_too = _acked(config, shown)[0] if args.acked else {}
    if args.json:
        for i, letter in enumerate(shown, start):
            also = {"acked": acked_too[letter.coordinates]} if args.acked else {}
            print(json.dumps({**letter.summary(), "repeat_of": copies.get(i), **also}))
        if unread:  # a null repeat_of may be a copy of a letter not read
            print(f"repeat_of is looked for among the letters read: up to {unread} older record(s) not read (--limit 0 "
                  "reads all)", file=sys.stderr)  # fmt: skip
        return 0
    older = len(letters) - len(shown)
    title = f"{len(letters)} dead letter(s)" if not unread else f"the newest {len(shown)} dead letter(s)"
    table = Table(title=f"{topic}: {title}")
    columns = ("place", "time (UTC)", "reason", "origin", "attempts", "spout", "detail", "key", "bytes", "copy of",
               "re-driven from", *(["acked"] if args.acked else []))  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right" if column in ("attempts", "bytes") else "left")
    for i, letter in enumerate(shown, start):
        s = letter.summary()
        copy_of = copies.get(i)
        table.add_row(
            f"{letter.partition}/{letter.offset}",
            utc_time(letter.timestamp_ms),
            printable(str(s["reason"])),  # a header's: anybody's bytes
            printable(str(s["origin"])),
            "-" if s["attempts"] is None else str(s["attempts"]),
            printable(str(s["spout"] or "-")),
            preview(str(s["detail"] or "").encode(), 40) or "-",
            str(s["key"] or "-"),
            str(s["value_bytes"]),
            "/".join(copy_of.rsplit("/", 2)[1:]) if copy_of else "-",  # its place: a letter of the same topic
            printable(str(s["redriven_from"] or "-")),  # a header's: anybody's bytes
            *([_YES_NO[acked_too[letter.coordinates]]] if args.acked else []),
        )
    console = table_console()
    console.print(table)
    if both := sum(1 for a in acked_too.values() if a):
        console.print(f"{both} of them acked too ('acked': an ACK of the record, or of a replay copy of it, in its "
                      "spout's outcome topic): processed once already, re-driven they would be processed again "
                      "(redrive --skip-acked leaves them)")  # fmt: skip
    repeated = sum(1 for i in copies if i >= start)
    if repeated:
        among = " (among the letters read)" if unread else ""
        console.print(f"{repeated} of them copy an earlier letter{among} ('copy of'): the same record, dead-lettered "
                      "again when read again (a new owner of its partition, a micro-batch run again)")  # fmt: skip
    if unread:  # offsets, some of them transaction markers; a letter shown may copy one of them, not marked
        console.print(f"up to {older + unread} older record(s) not shown (--limit 0 shows all); 'copy of' marks "
                      f"copies of the letters read (up to {unread} older record(s) not read)")  # fmt: skip
    elif older:
        console.print(f"{older} older record(s) not shown (--limit 0 shows all)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    config = load(args)
    places = _places(args, config)
    _answer(config, args)
    for letter in _chosen(args, config, places):
        print(f"== {letter.coordinates}  written {utc_time(letter.timestamp_ms)} UTC")
        if letter.headers_unreadable:
            print("   headers: cannot be read (a header name is not UTF-8)")
        for key, value in letter.headers:
            text = preview(value.encode() if isinstance(value, str) else value, 0 if args.full else 200)
            print(f"   header {printable(key)}: {text}")
        print(f"   key:   {preview(letter.key, 0 if args.full else 200)}")
        print(f"   value: {preview(letter.value, 0 if args.full else 200)}  ({len(letter.value or b'')} bytes)")
    return 0


def cmd_redrive(args: argparse.Namespace) -> int:
    config = load(args)
    if bool(args.places) == bool(args.all):
        raise DlqError("name the records to re-drive (PARTITION/OFFSET ...) or give --all: one of them")
    if args.spout is not None:  # as the spouts themselves do: a name they refuse has no replay topic to read
        check_spout_name(config, args.spout)
    places = _places(args, config)
    topic = _topic(args, config)
    if topic.startswith(config.replay_prefix) and topic not in (config.replay_dlq_topic, config.dlq_topic):
        raise DlqError(f"{topic} is a replay topic, not a dead-letter topic: its records are replayed already, and "
                       "re-driven they would be replayed twice")  # fmt: skip
    _answer(config, args)  # after what is said without Kafka
    letters = _chosen(args, config, places)
    if args.all:
        # Records gone before they could be replayed, kept in part, or not the replay job's (a record produced there
        # by hand, or before a fix): left where they are, and said so. One of them must not hold back the others.
        letters, decisions, refused = those_that_can_go_back(config, letters, args.spout, again=args.again)
        for why, count in sorted(refused.items()):
            print(f"{count} record(s) skipped: {why}")
    else:
        decisions = plan(config, letters, args.spout)  # named: refused as a whole if one cannot go back
    planned = len(letters)
    if args.skip_acked:  # before the named ones' refusals: a letter left out cannot hold back the others
        letters, decisions = _leave_acked(config, letters, decisions)
    if not args.all and letters:
        refuse_copies(letters)  # read in (partition, offset) order
        if not args.again:
            refuse_in_flight(config, topic, letters, decisions, args.spout)
    if len(letters) < planned:  # said once the letters' refusals have passed
        print(f"{planned - len(letters)} record(s) skipped: acked already (an ACK of the record, or of a replay copy "
              "of it, in its spout's outcome topic)")  # fmt: skip
    if args.dry_run:
        target_partitions(config, decisions)  # refused as the real run would be
        targets = [decision.topic for decision in decisions]
    else:
        targets = [f"{topic}[{partition}]" for topic, partition in send(config, letters, decisions)]
    for letter, target in zip(letters, targets, strict=True):
        print(f"{letter.coordinates} -> {target}  origin {printable(letter.origin)}, last reason "
              f"{printable(letter.reason)}")  # fmt: skip
    print(f"{len(letters)} record(s) {'would be ' if args.dry_run else ''}re-driven")
    return 0


ACKED_HELP = ("whether each record was acked too, read from its spout's outcome and replay topics (whole: an ACK of "
              "the record or of a replay copy of it, as after a spout's restart)")  # fmt: skip
PLACE_HELP = "OFFSET (partition 0), PARTITION/OFFSET or TOPIC/PARTITION/OFFSET (as listed)"


def add_parser(sub: Any) -> None:
    dlq = sub.add_parser(
        "dlq",
        help="list, inspect and re-drive dead-lettered records",
        description=prose(acker.dlq.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, run: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=help_text)
        # The acker's and the status topic too: a spout name whose topics would meet them is refused (`--spout`).
        add_arguments(parser, ("bootstrap_servers", "replay_dlq_topic", "dlq_topic", "replay_prefix", "outcome_prefix",
                               "acker_topic", "status_topic"))  # fmt: skip
        parser.add_argument(
            "--topic",
            default=None,
            help="the dead-letter topic to read [default: the replay job's, --replay-dlq-topic, acker.replay.dlq]; "
            "the acker service's is another (--dlq-topic, acker.dlq): name it here, --topic acker.dlq",
        )
        parser.set_defaults(run=run)
        return parser

    listing = command("list", "list dead letters with their reason, origin and attempts", cmd_list)
    listing.add_argument("--limit", type=at_least(0), default=50, help="show the newest N (0: all) [default: 50]")
    listing.add_argument("--json", action="store_true", help="one JSON object a line instead of a table")
    listing.add_argument("--acked", action="store_true", help=ACKED_HELP + ": an 'acked' column (yes, no, - unknown)")
    show = command("show", "print chosen dead letters whole: headers, key and value", cmd_show)
    show.add_argument("places", nargs="+", metavar="PLACE", help=PLACE_HELP)
    show.add_argument("--full", action="store_true", help="do not shorten long values")
    redrive = command(
        "redrive", "send chosen dead letters back to their spout's replay topic for a new round of replays", cmd_redrive
    )
    redrive.add_argument("places", nargs="*", metavar="PLACE", help=PLACE_HELP)
    redrive.add_argument(
        "--all", action="store_true", help="every record of the topic (those that cannot go back: skipped, counted)"
    )
    redrive.add_argument("--skip-acked", action="store_true", help=ACKED_HELP + ": leave those that were")
    redrive.add_argument("--spout", default=None, help="send them to this spout's replay topic instead")
    redrive.add_argument("--dry-run", action="store_true", help="print where each would go, send nothing")
    redrive.add_argument(
        "--again",
        action="store_true",
        help="also those whose re-driven copy is still in their replay topic (not dead-lettered again): each such "
        "record is replayed once more",
    )
