"""Dead-letter topics: read what is there, with its context, and send chosen records back (`acker dlq`).

Two kinds of dead letters exist, and both are read the same way:

- the acker's (``dlq_topic``): acker records it could not read, with ``acker.dlq.reason``, ``acker.dlq.detail`` and
  the record's coordinates (`acker.service`);
- the replay job's (``replay_dlq_topic``): source records that failed every replay, with their origin, attempts,
  last reason and spout (`acker.retries`); and those it could not replay: no longer there (``source-missing``, no
  data), too large to publish (``too-large``, cut), with headers it cannot read (``unreadable-headers``, kept
  without them), or whose spout's replay topic is missing (``no-replay-topic``, whole).

Only the second kind can be re-driven, and of it only a letter that holds its record whole (not ``source-missing``,
``too-large`` or ``unreadable-headers``): the copy goes to the spout's replay topic as attempt 0 of its origin, so the
spout reads it again with a fresh round of replays. A letter is re-driven once a round: while its copy (or a replay
of it) is in the replay topic and no later dead letter names it, its round is not over (or it was processed), and a
second re-drive would replay the record twice; it is refused (`in_flight`) unless ``--again``. A copy gone past its
topic's retention is not seen.
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from acker.config import ServiceConfig
from acker.console import printable
from acker.errors import AckerError
from acker.headers import HeaderList, decimal, read_headers, text
from acker.kafka.clients import (
    NO_ANSWER,
    READ_TO_SETTINGS,
    AsWritten,
    KafkaClientError,
    not_its_partitions,
    partition_count,
    produce_reporting,
)
from acker.places import partition_and_offset, place_of
from acker.retries import (
    ACKER_DLQ_REASON,
    ATTEMPT,
    DETAIL,
    LAST,
    ORIGIN,
    REASON,
    REDRIVEN,
    SPOUT,
    Decision,
    NotRedrivableError,
    RetryPolicy,
    origin_partition,
    redrive,
)
from acker.topics import spout_refusal

ACKER_DETAIL = "acker.dlq.detail"  # written by acker.service
DLQ_TRUNCATED = "acker.dlq.truncated"  # on a copy whose value was cut: the whole value's length
DLQ_KEY_TRUNCATED = "acker.dlq.key-truncated"  # the same for its key
DLQ_KEPT_BYTES = 64 * 1024  # of a value and of a key, in a dead letter cut to fit its topic


def cut_copy(value: bytes | None, key: bytes | None, kept: int) -> tuple[bytes | None, bytes | None, HeaderList]:
    """A dead letter's copy of a record too large for its topic: at most ``kept`` bytes of its value and of its key,
    and the headers that give the whole length of each one cut (its coordinates say where the whole record lies)."""
    said: HeaderList = []
    if value is not None and len(value) > kept:
        said.append((DLQ_TRUNCATED, str(len(value)).encode()))
    if key is not None and len(key) > kept:
        said.append((DLQ_KEY_TRUNCATED, str(len(key)).encode()))
    return value[:kept] if value else value, key[:kept] if key else key, said


class DlqError(AckerError):
    """A dead-letter operation that cannot be done (no such topic or record)."""


@dataclass(frozen=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: HeaderList
    headers_unreadable: bool = False  # a header name is not UTF-8: the client read none (`headers` is empty)

    @property
    def coordinates(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"

    def header(self, name: str) -> str | None:
        return text(self.headers, name)

    @property
    def acker_kind(self) -> bool:
        """Dead-lettered by the acker service or a coordinated step (``acker.dlq.reason``), not by the replay job:
        the record's own headers, which it keeps, may hold a replay copy's (the replay job's letters hold none)."""
        return self.header(ACKER_DLQ_REASON) is not None

    @property
    def reason(self) -> str:
        if self.acker_kind:
            return self.header(ACKER_DLQ_REASON) or "?"
        return self.header(REASON) or "?"

    @property
    def origin(self) -> str:
        """The record it stands for: the replay origin, where a coordinated step read it, or where the acker read it.

        An acker-kind letter's own headers (``acker.dlq.topic``… from the service, ``acker.dlq.origin`` from a
        coordinated step) come before the record's, which it keeps and which may be a dead letter's too: the first
        of them says which writer's they are."""
        if self.acker_kind:
            writer = next((n for n, v in self.headers if n in ("acker.dlq.origin", "acker.dlq.topic") and v), None)
            if writer == "acker.dlq.origin" and (origin := self.header(writer)) is not None:
                return origin
        else:
            for name in (ORIGIN, "acker.dlq.origin"):
                if (origin := self.header(name)) is not None:
                    return origin
        parts = [self.header(f"acker.dlq.{n}") for n in ("topic", "partition", "offset")]
        return "/".join(parts) if all(p is not None for p in parts) else "?"  # type: ignore[arg-type]

    def summary(self) -> dict[str, object]:
        """The fields a listing shows (JSON-ready)."""
        return {
            "coordinates": self.coordinates,
            "timestamp_ms": self.timestamp_ms,
            "reason": self.reason,
            "detail": self.header(ACKER_DETAIL) or self.header(DETAIL),  # the acker's, or why the last nack failed
            "origin": self.origin,
            "attempts": decimal(self.header(ATTEMPT)),  # a number, as in the header (None if it is not one)
            "spout": self.header(SPOUT),
            "key": preview(self.key, 40),
            "value_bytes": len(self.value or b""),
            "redriven_from": self.header(REDRIVEN),  # the dead letter this record's round was re-driven from
        }


def repeats(letters: Sequence[DeadLetter]) -> dict[int, str]:
    """Which of ``letters`` (in the order written) copy an earlier one: index → the coordinates of the first copy.

    The same bad record is dead-lettered again whenever the partition it lies on is read again: by the acker's next
    owner, which replays from its recovery offset after a restart or a failover (dead letters are at-least-once;
    outcomes are read back, dead letters are not), or by a Spark job running a micro-batch again. A copy has the same
    bytes and names the same record, in every header that says where it comes from, and the same spout: records
    split from one another (an outcome record refused in halves) differ in bytes, two spouts' letters of one source
    record in spout. The reason is left out: a late nack of the same copy may give another."""
    first: dict[tuple[object, ...], str] = {}
    found: dict[int, str] = {}
    for i, letter in enumerate(letters):
        where = tuple(letter.header(name) for name in _WHERE)
        if all(w is None for w in where):  # a record written there by hand: nothing says what it stands for
            continue
        seen = first.setdefault((*where, letter.header(SPOUT), letter.value), letter.coordinates)
        if seen != letter.coordinates:
            found[i] = seen
    return found


# The headers that say which record a dead letter stands for: the replay job's, a coordinated step's, the acker's.
_WHERE = (ORIGIN, LAST, "acker.dlq.origin", "acker.dlq.topic", "acker.dlq.partition", "acker.dlq.offset")


def preview(raw: bytes | None, limit: int = 200) -> str | None:
    """Text when the bytes are UTF-8 (control characters escaped: `printable`), else hex; cut to ``limit``
    characters (0: whole)."""
    if raw is None:
        return None
    try:
        text = printable(raw.decode("utf-8"))
    except UnicodeDecodeError:
        text = "0x" + raw.hex()
    return text if not limit or len(text) <= limit else text[: limit - 1] + "…"


def parse_coordinates(text: str, topic: str | None = None) -> tuple[int, int]:
    """``OFFSET`` (partition 0), ``PARTITION/OFFSET``, or ``TOPIC/PARTITION/OFFSET`` of ``topic`` (as listings and
    re-drives print them) → (partition, offset), as `acker.places` reads them."""
    if text.count("/") < 2:
        found = partition_and_offset(text)
    elif (place := place_of(text)) is not None and place.topic != topic:
        raise DlqError(f"{text!r} is a record of {place.topic!r}, not of {topic!r} (--topic names the topic)")
    else:
        found = None if place is None else (place.partition, place.offset)
    if found is None:
        raise DlqError(f"not a record's place: {text!r} (OFFSET, PARTITION/OFFSET or TOPIC/PARTITION/OFFSET)")
    return found


def _letter(record: Message) -> DeadLetter:
    headers = read_headers(record)  # None when they cannot be read (`acker.headers.read_headers`)
    return DeadLetter(
        record.topic() or "",
        record.partition() or 0,
        record.offset() or 0,
        record.timestamp()[1],
        record.key(),
        record.value(),
        headers or [],
        headers_unreadable=headers is None,
    )


def _partitions(config: ServiceConfig, topic: str) -> int | None:
    """The partitions of dead-letter topic ``topic``; None when it does not exist. `DlqError` for any other
    failure (no answer, not allowed to read it)."""
    try:
        return partition_count(config.client(), topic)
    except KafkaClientError as error:
        if error.code in NO_ANSWER:
            raise DlqError(
                f"Kafka did not answer about {topic!r} ({error}): is it running, and reachable at "
                f"{config.bootstrap_servers}?"
            ) from None
        if error.code != KafkaError.UNKNOWN_TOPIC_OR_PART:  # e.g. not allowed to read it
            raise DlqError(f"cannot read {topic!r}: {error}") from None
        return None


def _reader(config: ServiceConfig) -> Consumer:
    """A consumer of committed records, whatever the shared settings say: the replay job writes its dead letters and
    replays in transactions, and one aborted (its batch ran again, and may have resolved its nacks otherwise) is no
    letter, nor a copy."""
    return Consumer(
        config.client(
            **{
                "group.id": f"acker-dlq-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                **READ_TO_SETTINGS,
            }
        )
    )


def read(config: ServiceConfig, topic: str, wanted: Iterable[tuple[int, int]] | None = None) -> list[DeadLetter]:
    """The dead letters of ``topic`` in (partition, offset) order: all of them up to the current end (none while the
    topic does not exist: the replay job and the service create theirs when they start), or only those at the
    ``wanted`` places (a place without a record, or in a partition the topic does not have, raises `DlqError`)."""
    partitions = _partitions(config, topic)
    if partitions is None:
        if wanted is None:
            return []
        raise DlqError(f"no dead-letter topic {topic!r}")
    wanted = None if wanted is None else set(wanted)
    if beyond := {p for p, _ in wanted or () if p >= partitions}:
        raise DlqError(not_its_partitions(topic, partitions, beyond))
    letters: list[DeadLetter] = []
    with _as_written(config) as reading:
        for p in range(partitions):
            low, high = reading.bounds(TopicPartition(topic, p))
            chosen = None if wanted is None else {o for q, o in wanted if q == p}
            first, end = (low, high) if chosen is None else (min(chosen, default=high), max(chosen, default=-1) + 1)
            for record in _past_open_transactions(reading, TopicPartition(topic, p, max(first, low)), min(end, high)):
                if chosen is None or record.offset() in chosen:
                    letters.append(_letter(record))
    missing = (wanted or set()) - {(d.partition, d.offset) for d in letters}
    if missing:
        raise DlqError(f"no record at {', '.join(f'{topic}/{p}/{o}' for p, o in sorted(missing))}")
    return letters


def read_newest(config: ServiceConfig, topic: str, newest: int | None) -> tuple[list[DeadLetter], int] | None:
    """The last ``newest`` dead letters of each partition of ``topic`` (all of them: None), so that the topic's
    newest ``newest`` are among them, as a partition's are written in time order; in (partition, offset) order, and
    how many offsets come before them unread (`newest_records`); None when the topic does not exist."""
    found = newest_records(config, topic, newest)
    return None if found is None else ([_letter(record) for record in found[0]], found[1])


def newest_records(config: ServiceConfig, topic: str, newest: int | None) -> tuple[list[Message], int] | None:
    """The last ``newest`` committed records of each partition of ``topic`` (all of them: None), in (partition,
    offset) order, and how many offsets come before them unread (older records, and the transaction markers between
    them); None when the topic does not exist. Each partition is read from its end backwards in windows doubling from
    ``newest`` offsets, as markers and aborted records take offsets too: a topic of millions of records is not read
    whole to show a few. A dead-letter topic's, or an outcome topic's (`acker.outcomes_cli`)."""
    partitions = _partitions(config, topic)
    if partitions is None:
        return None
    records: list[Message] = []
    unread = 0
    with _as_written(config) as reading:
        for p in range(partitions):
            low, high = reading.bounds(TopicPartition(topic, p))
            window = high - low if newest is None else newest
            while True:
                start = max(low, high - window)
                found = list(_past_open_transactions(reading, TopicPartition(topic, p, start), high))
                if newest is None or len(found) >= newest or start == low:
                    break
                window *= 2
            kept = found if newest is None else found[-newest:]
            records.extend(kept)
            # The records read and left out, and the offsets not read (markers and aborted records among them).
            unread += len(found) - len(kept) + start - low
    return records, unread


def every_record(config: ServiceConfig, topic: str) -> Iterator[Message] | None:
    """The committed records of ``topic`` up to its end now, partition after partition, read as they are taken; None
    when the topic does not exist."""
    partitions = _partitions(config, topic)
    if partitions is None:
        return None

    def records() -> Iterator[Message]:
        with _as_written(config) as reading:
            for p in range(partitions):
                low = reading.bounds(TopicPartition(topic, p))[0]
                yield from _past_open_transactions(reading, TopicPartition(topic, p, low))

    return records()


def _as_written(config: ServiceConfig) -> AsWritten:
    """A reader of dead letters up to their topic's end as written, committed ones only (`_reader`): a read_committed
    consumer's end is where the first transaction still open begins, and the letters committed after it (a replay
    job's driver dead mid-batch) were left out of a list without a word, and a show of one said "no record"."""
    return AsWritten(config.client(), f"acker-dlq-{uuid.uuid4().hex[:8]}")


def _past_open_transactions(reading: AsWritten, start: TopicPartition, end: int | None = None) -> Iterator[Message]:
    """`AsWritten.read` (to ``end``, or to the partition's end as written), its failure to read past a transaction
    left open said as `DlqError`."""
    try:
        yield from reading.read(start, end)
    except KafkaClientError as error:
        raise DlqError(f"{start.topic}[{start.partition}] not read to its end ({error}): a transaction left open "
                       "there (a replay job stopped mid-batch?) hides what comes after it until the broker aborts it, "
                       "or an operator, if it is hanging (README, \"A transaction that does not end\"); try again "
                       "then") from None  # fmt: skip


def _listed(items: list[str], whole_up_to: int = 20) -> str:
    """Records named in an error (``place`` or ``place: reason``): each, up to ``whole_up_to`` of them; beyond,
    runs of consecutive offsets of one partition and reason (``topic/partition/first .. topic/partition/last``)."""
    if len(items) <= whole_up_to:
        return str(items) if items else ""
    runs: list[tuple[str, str, str]] = []  # (first place, last place, reason)
    previous: tuple[str, int | None, str] | None = None
    parsed = []  # delivery reports come per target partition: in place order first
    for item in items:
        place, _, reason = item.partition(": ")
        head, _, offset = place.rpartition("/")
        parsed.append((head, decimal(offset), place, reason))
    parsed.sort(key=lambda p: (p[0], -1 if p[1] is None else p[1]))
    for head, number, place, reason in parsed:
        if runs and previous is not None and number is not None and previous == (head, number - 1, reason):
            runs[-1] = (runs[-1][0], place, reason)
        else:
            runs.append((place, place, reason))
        previous = (head, number, reason)
    shown = [(f"{a} .. {b}" if a != b else a) + (f": {why}" if why else "") for a, b, why in runs]
    return f"{len(items)} records: {'; '.join(shown)}"


def plan(config: ServiceConfig, letters: Iterable[DeadLetter], spout: str | None = None) -> list[Decision]:
    """Where each letter would go (`acker.retries.redrive`); `NotRedrivableError` for a letter that cannot."""
    return [_redrive(config, letter, spout) for letter in letters]


def _redrive(config: ServiceConfig, letter: DeadLetter, spout: str | None) -> Decision:
    """`acker.retries.redrive` of ``letter``; `NotRedrivableError` when its headers cannot be read (which say what it
    is, where it comes from, and its attempts)."""
    if letter.headers_unreadable:
        raise NotRedrivableError(f"{letter.coordinates} has headers that cannot be read (a header name is not UTF-8): "
                                 "where it comes from and its attempts are not known")  # fmt: skip
    return _redrive_headers(config, letter.coordinates, letter.headers, spout)


def _redrive_headers(config: ServiceConfig, place: str, headers: HeaderList, spout: str | None) -> Decision:
    """`acker.retries.redrive` under ``config``: a spout named by a letter's headers must be one that can exist
    (`acker.topics.spout_refusal`): a reserved name's replay topic is the replay job's dead-letter or progress topic,
    where the copy would be taken for a dead letter or a progress record, and a name too long gives no topic."""
    policy = RetryPolicy(replay_prefix=config.replay_prefix)
    return redrive(policy, place, headers, spout, refusal=functools.partial(spout_refusal, config))


def target_partitions(config: ServiceConfig, decisions: list[Decision]) -> dict[str, int]:
    """The partition count of each topic the decisions send to; `DlqError` for one that does not exist (or has no
    leader now), which is not created: a copy in a topic no spout reads (a misspelt ``--spout``) would be lost to
    the operator."""
    counts, missing = _target_counts(config, decisions)
    if missing:
        raise DlqError(f"no topic {missing[0]} (or no leader now): {_NO_REPLAY_TOPIC}")
    return counts


_NO_REPLAY_TOPIC = "a spout creates its replay topic when it starts; is its name right?"


def _target_counts(config: ServiceConfig, decisions: list[Decision]) -> tuple[dict[str, int], list[str]]:
    """The partition count of each topic the decisions send to that exists, and those that do not."""
    counts: dict[str, int] = {}
    missing: list[str] = []
    for topic in sorted({decision.topic for decision in decisions}):
        try:
            counts[topic] = partition_count(config.client(), topic)
        except KafkaClientError as error:
            if error.code != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            missing.append(topic)
    return counts, missing


def named_by(headers: Iterable[HeaderList]) -> dict[str, str | None]:
    """The dead letters that records of these ``headers`` name as re-driven (``acker.replay.redriven``), each with the
    origin the first such record names."""
    named: dict[str, str | None] = {}
    for one in headers:
        if (letter := text(one, REDRIVEN)) is not None:
            named.setdefault(letter, text(one, ORIGIN))
    return named


# Copies and later dead letters are looked for from the oldest letter's timestamp less this (producers' clocks differ).
CLOCK_SKEW_MS = 10 * 60 * 1000


def _read_from(letters: Iterable[DeadLetter]) -> int:
    """The time from which copies of ``letters``, and dead letters naming them, are looked for: each comes after its
    letter, on a clock up to `CLOCK_SKEW_MS` behind."""
    return min((letter.timestamp_ms for letter in letters), default=0) - CLOCK_SKEW_MS


def _headers_since(config: ServiceConfig, topic: str, since_ms: int) -> Iterator[tuple[str, HeaderList]]:
    """The coordinates and headers of the records of ``topic`` from the first written at ``since_ms`` or later, one
    partition after another, up to its current end; no record is kept (a replay topic may be large). Nothing when it
    does not exist; `DlqError` when where to start cannot be told (a copy there would go unseen).

    Up to the end as written, not the last stable offset: a transaction left open (a replay job's driver dead
    mid-batch) hid the copies written after it, and a letter re-driven already was re-driven again. Its end waits for
    the broker to abort it (`open_transaction_wait_s`), or the read fails (`DlqError`) rather than miss a copy."""
    partitions = _partitions(config, topic)
    if partitions is None:
        return
    with _as_written(config) as reading:
        asked = [TopicPartition(topic, p, max(0, since_ms)) for p in range(partitions)]
        for start in reading.written.offsets_for_times(asked, timeout=30):  # read_committed: none past the open one
            if start.error is not None:
                raise DlqError(f"cannot tell where to read {topic}[{start.partition}] from: {start.error}")
            if start.offset < 0:  # nothing written since
                continue
            for record in _past_open_transactions(reading, TopicPartition(topic, start.partition, start.offset)):
                yield f"{topic}/{record.partition()}/{record.offset()}", read_headers(record) or []


def in_flight(
    config: ServiceConfig,
    letters: Sequence[DeadLetter],
    decisions: Sequence[Decision],
    ended: Mapping[str, str | None],
    copies: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Of ``letters``, those re-driven already whose round is not over, or whose copy was processed: a copy, or a
    replay of one, names it and its origin in the replay topic its decision sends to, and no dead letter names it
    (``ended``, `named_by`). ``copies``: other letters of the same records (`repeats`) → the letter of ``letters``
    each copies: a copy re-driven from one of them counts for that letter (re-driven by ``--all``, the first letter
    of a record left its copy, named later, free to start a second round). Their coordinates → the place of the first
    such record. Re-driven again, the record would be replayed twice. The replay topics are read from the oldest
    letter's time on (`_read_from`)."""
    # Names and origins both: a dead-letter topic made again numbers its letters from 0 again.
    wanted = {letter.coordinates: letter.origin for letter in letters if ended.get(letter.coordinates) != letter.origin}
    found: dict[str, str] = {}
    if not wanted:
        return found
    copies = {other: letter for other, letter in (copies or {}).items() if letter in wanted}
    since = _read_from(letter for letter in letters if letter.coordinates in wanted)
    # Where they go now, their own spout's replay topic (a copy sent there before, without --spout), and every other
    # replay topic (one sent with --spout to another spout's).
    topics = {decision.topic for decision in decisions} | {
        config.replay_topic(spout)
        for letter in letters
        if letter.coordinates in wanted and (spout := letter.header(SPOUT)) and spout_refusal(config, spout) is None
    }
    topics |= _replay_topics(config)
    for topic in sorted(topics):
        for place, headers in _headers_since(config, topic, since):
            named, origin = text(headers, REDRIVEN), text(headers, ORIGIN)
            if named is None:  # a replay of the replay job's own round
                continue
            letter = named if named in wanted else copies.get(named)
            # A copy's: not once its round is over (a later dead letter names it).
            if letter is not None and origin == wanted[letter] and (letter == named or ended.get(named) != origin):
                found.setdefault(letter, place)
    return found


def _replay_topics(config: ServiceConfig) -> set[str]:
    """The topics named with the replay prefix: the spouts' replay topics, besides the dead-letter topics that may
    share the prefix (whose letters name re-driven letters too, but are no copies)."""
    reader = _reader(config)
    try:
        topics = reader.list_topics(timeout=30).topics
    except KafkaException as error:
        raise DlqError(f"cannot list the replay topics: {error}") from None
    finally:
        reader.close()
    own = {config.replay_dlq_topic, config.dlq_topic, config.replay_topic("progress")}  # the replay job's progress
    return {t for t in topics if t.startswith(config.replay_prefix)} - own


def refuse_in_flight(
    config: ServiceConfig,
    topic: str,
    letters: Sequence[DeadLetter],
    decisions: Sequence[Decision],
    spout: str | None = None,
) -> None:
    """`DlqError` naming those of ``letters`` (chosen by place in dead-letter topic ``topic``) whose record was
    re-driven already, through them or another letter of the same record and round, and whose copy is still in its
    replay topic (`in_flight`), or was dead-lettered again since by a letter that can go back: that later letter goes
    back in their stead (`those_that_can_go_back` leaves them out too). A later letter that cannot go back (its copy
    too large, say) leaves them free, as ``--all`` does. ``spout``: the one named to send them to, which a later
    letter that does not say its own would go to as well."""
    ended: dict[str, str | None] = {}
    later: dict[str, tuple[str, str | None]] = {}  # a letter re-driven → the first later letter naming it that can go
    # back, and the origin it names. The letters of the same record and round as a named one (`repeats`, told by
    # their headers alone): their re-driven copies count as its own (`in_flight`), their later letters too.
    rounds = {_round(letter.headers): letter.coordinates for letter in letters if letter.header(LAST) is not None}
    copies: dict[str, str] = {}
    for place, headers in _headers_since(config, topic, _read_from(letters)):
        if (named := text(headers, REDRIVEN)) is not None:
            ended.setdefault(named, text(headers, ORIGIN))
            if named not in later and _can_go_back(config, place, headers, spout):
                later[named] = (place, text(headers, ORIGIN))
        if text(headers, LAST) is not None and (letter := rounds.get(_round(headers))) not in (None, place):
            copies[place] = letter
    origins = {letter.coordinates: letter.origin for letter in letters}
    replaced = {
        letter: f"{letter} (dead-lettered again as {later[letter][0]})"
        for letter, origin in origins.items()
        if letter in later and later[letter][1] == origin
    }
    for place, letter in copies.items():  # another letter of its record and round was re-driven
        if place in later and later[place][1] == origins[letter]:
            replaced.setdefault(letter, f"{letter} (its record re-driven as {place}, dead-lettered again as "
                                        f"{later[place][0]})")  # fmt: skip
    if replaced:
        raise DlqError(
            f"re-driven already and dead-lettered again: {_listed(list(replaced.values()))}; re-drive the later letter "
            "instead (both re-driven, the record would be replayed twice): --again sends them once more"
        )
    flying = in_flight(config, letters, decisions, ended, copies)
    if flying:
        raise DlqError(
            "re-driven already, their copy in the replay topic and not dead-lettered again (being replayed, or "
            f"processed): {_listed([f'{letter} (copy at {place})' for letter, place in flying.items()])}; re-driven "
            "again, each record would be replayed twice: --again sends them once more"
        )


def refuse_copies(letters: Sequence[DeadLetter]) -> None:
    """`DlqError` naming those of ``letters`` (named for a re-drive, in the order written) that copy another of them
    (`repeats`): both re-driven, the record would be replayed twice."""
    copies = repeats(letters)
    if copies:
        named = [f"{letters[i].coordinates} (a copy of {first})" for i, first in sorted(copies.items())]
        raise DlqError(f"the same record named twice: {_listed(named)}; re-drive one letter of each record (both "
                       "re-driven, it would be replayed twice)")  # fmt: skip


def _can_go_back(config: ServiceConfig, place: str, headers: HeaderList, spout: str | None) -> bool:
    """Whether the dead letter at ``place`` can be re-driven (to ``spout``'s replay topic if named), as its headers
    tell (`acker.retries.redrive`)."""
    try:
        _redrive_headers(config, place, headers, spout)
    except NotRedrivableError:
        return False
    return True


def _round(headers: HeaderList) -> tuple[str | None, ...]:
    """What a replay job's dead letter says of its record and round: its origin, spout, and the place of the record's
    last copy (`repeats` compares the bytes too, which a letter's headers alone do not show)."""
    return tuple(text(headers, name) for name in (ORIGIN, SPOUT, LAST))


IN_FLIGHT = (
    "re-driven already: its copy is in its replay topic, not dead-lettered again (being replayed, or processed; "
    "--again sends it once more)"
)


COPY = "a copy of an earlier letter (the record dead-lettered again when read again): the first stands for it"


def those_that_can_go_back(
    config: ServiceConfig, letters: list[DeadLetter], spout: str | None = None, *, again: bool = False
) -> tuple[list[DeadLetter], list[Decision], Counter[str]]:
    """For a re-drive of every dead letter (``letters`` in the order written): `plan` for the letters that can go
    back (and their decisions); the others are counted by why not. Left out besides those `redrive` refuses: the
    copies of an earlier letter (`repeats`: one record, each letter re-driven, would be replayed as often), and the
    records re-driven already through any of their letters: one named by another letter, the dead letter of its
    re-driven copy (re-driving both would replay the record twice, and each round would double the copies), or
    whose copy is still in its replay topic (`in_flight`; unless ``again``); and those whose replay topic does not
    exist."""
    copies = repeats(letters)
    # Invariant: the letters of one record share their first letter's coordinates here, and only that one may go.
    first_of = {letter.coordinates: copies.get(i, letter.coordinates) for i, letter in enumerate(letters)}
    possible: list[tuple[DeadLetter, Decision]] = []
    refused = Counter[str]()
    for letter in letters:
        try:
            possible.append((letter, _redrive(config, letter, spout)))
        except NotRedrivableError as error:
            refused[str(error).removeprefix(f"{letter.coordinates} ")] += 1
    # Named only by a later letter that goes back itself: one that cannot (its copy dead-lettered as too large, say)
    # left the earlier, whole one skipped as "re-driven already", and neither went back.
    redriven = named_by(letter.headers for letter, _ in possible)
    gone_back = {  # the origin compared too: a number reused by a dead-letter topic made again names another
        first_of[letter.coordinates]
        for letter, _ in possible
        if letter.coordinates in redriven and redriven[letter.coordinates] == letter.origin
    }
    planned: list[tuple[DeadLetter, Decision]] = []
    for letter, decision in possible:
        if first_of[letter.coordinates] != letter.coordinates:
            refused[COPY] += 1
        elif letter.coordinates in gone_back:
            refused["re-driven already, and dead-lettered again (the later dead letter is re-driven)"] += 1
        else:
            planned.append((letter, decision))
    _, missing = _target_counts(config, [decision for _, decision in planned])
    for topic in missing:
        refused[f"no replay topic {topic}: {_NO_REPLAY_TOPIC}"] += sum(d.topic == topic for _, d in planned)
    kept = [(letter, decision) for letter, decision in planned if decision.topic not in missing]
    if not again:
        going = {letter.coordinates for letter, _ in kept}
        record = [(letter, decision) for letter, decision in possible if first_of[letter.coordinates] in going]
        flying = in_flight(config, [letter for letter, _ in record], [decision for _, decision in record],
                           named_by(letter.headers for letter in letters))  # fmt: skip
        flown = {first_of[coordinates] for coordinates in flying}  # a copy of any of a record's letters
        refused[IN_FLIGHT] += sum(letter.coordinates in flown for letter, _ in kept)
        kept = [(letter, decision) for letter, decision in kept if letter.coordinates not in flown]
    return [letter for letter, _ in kept], [decision for _, decision in kept], +refused


def send(config: ServiceConfig, letters: list[DeadLetter], decisions: list[Decision]) -> list[tuple[str, int]]:
    """Produce the re-driven copies and wait for their delivery; return where each went (topic, partition)."""
    counts = target_partitions(config, decisions)  # all there before anything is sent
    producer = Producer(config.producer(**{"enable.idempotence": True}))
    failures: list[str] = []
    done: list[str] = []
    places: list[tuple[str, int]] = []
    for letter, decision in zip(letters, decisions, strict=True):
        partition = origin_partition(letter.origin) % counts[decision.topic]
        places.append((decision.topic, partition))

        def delivered(error: KafkaError | None, _record: Message | None, letter: DeadLetter = letter) -> None:
            if error is not None:
                failures.append(f"{letter.coordinates}: {error.str()}")
            else:
                done.append(letter.coordinates)

        produce_reporting(
            producer, decision.topic, letter.value, delivered, key=letter.key, partition=partition,
            headers=decision.headers,
        )  # fmt: skip
    if producer.flush(30) or failures:  # those delivered are said: re-driven again, they would be replayed twice
        unknown = len(letters) - len(failures) - len(done)  # no report within 30 s: may or may not have landed
        raise DlqError(
            f"re-drive not delivered: {_listed(failures) or 'none refused'}; delivered, not to re-drive again: "
            f"{_listed(done) or 'none'}"
            + (f"; {unknown} not known (no delivery report within 30 s): they may have landed" if unknown else "")
        )
    return places
