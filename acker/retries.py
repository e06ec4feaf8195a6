"""Where a nacked record goes next: a replay for its spout with backoff, or the dead-letter topic. Pure.

The replay job (`spark_jobs.replay_job`) calls `decide` for every nack, and `acker dlq redrive` calls `redrive` for a
dead letter an operator sends back. Both carry the record's key, value and own headers unchanged, and add:

    acker.replay.attempt      the attempt this copy is (1, 2, ...); on a dead letter, the attempts made
    acker.replay.origin       the coordinates ``topic/partition/offset`` of the first record (the source record)
    acker.replay.reason       the reason of the last nack (FAILED, TIMEOUT, OVERLOAD), ``source-missing``,
                              ``too-large``, ``no-replay-topic`` or ``unreadable-headers``
    acker.replay.nack-reason  on a ``source-missing``, ``too-large``, ``no-replay-topic`` or ``unreadable-headers``
                              dead letter: the reason of the nack
    acker.replay.truncated    on a ``too-large`` dead letter: the size of the whole record (key, value, headers)
    acker.replay.detail       why the last nack's tree failed, when the stage that failed it said (a bolt's exception:
                              `acker.fail_reasons`)
    acker.replay.overloads    on a replay after OVERLOAD nacks: how many came in a row (the backoff grows with them)
    acker.replay.spout        the spout that read it, whose replay topic is ``<replay_prefix><spout>``
    acker.replay.not-before   on a replay: epoch ms before which the spout holds it (the backoff)
    acker.replay.last         on a dead letter: the coordinates of the copy that failed last
    acker.replay.redriven     on a re-driven copy: the dead letter's coordinates

Invariant: attempts count from the origin. A replayed copy that fails again is attempt n + 1 of the same origin;
after ``max_attempts`` replays the next nack dead-letters it. An OVERLOAD nack is not an attempt: the acker refused
to track the record's tree (its ``high_water``), which says nothing of the record; its copy keeps the attempt of the
copy before, and waits longer with each overload in a row (`OVERLOADS`), so that a long overload neither
dead-letters records that never failed nor brings them back every second. A re-driven dead letter starts a new
round (attempt 0 on the copy, so its next nack is replay attempt 1). Only a record of the spout's replay topic is a
copy whose context counts (`is_own_copy`): the replay headers of a source record are its producer's, and it starts a
round of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from acker.errors import AckerError
from acker.headers import HeaderList as Headers
from acker.headers import Headers as AnyHeaders
from acker.headers import HeaderValue, decimal, text
from acker.places import place_of
from acker.wire import spout_name_valid

ATTEMPT = "acker.replay.attempt"
ORIGIN = "acker.replay.origin"
REASON = "acker.replay.reason"
SPOUT = "acker.replay.spout"
NOT_BEFORE = "acker.replay.not-before"
LAST = "acker.replay.last"
REDRIVEN = "acker.replay.redriven"
NACK_REASON = "acker.replay.nack-reason"
OVERLOADS = "acker.replay.overloads"
DETAIL = "acker.replay.detail"
OVERLOAD = "OVERLOAD"  # the nack of an init the acker refused under overload
SOURCE_MISSING = "source-missing"
TOO_LARGE = "too-large"
NO_REPLAY_TOPIC = "no-replay-topic"
UNREADABLE_HEADERS = "unreadable-headers"
# On the acker's dead letters (`acker.service`, `acker.kafka.coordinated_stage`), never on the replay job's: they keep
# the record's own headers, a replay copy's among them, and cannot be re-driven.
ACKER_DLQ_REASON = "acker.dlq.reason"
TRUNCATED = "acker.replay.truncated"  # on a too-large dead letter: the record's size (key, value, headers), in bytes
# Dead letters without the record's whole data: they cannot be re-driven.
NO_DATA = (SOURCE_MISSING, TOO_LARGE, UNREADABLE_HEADERS)
REPLAYED, DEAD_LETTERED = "REPLAYED", "DEAD_LETTERED"  # the outcomes that resolve a nacked offset
RESOLUTIONS = frozenset({REPLAYED, DEAD_LETTERED})  # the replay job's rows in an outcome topic


class NotRedrivableError(AckerError):
    """A dead letter that `redrive` cannot send back (it is not a record the replay job dead-lettered)."""


HEADER_KEPT_BYTES = 1024  # of each replay header a too-large record's dead letter copies from it (`too_large`)

# A replay's not-before further away is not believed by a spout (a corrupt header must not hold a partition): every
# backoff is below it (60 s, or the first delay where that is more, and `--backoff-ms` is below this).
MAX_HOLD_MS = 86_400_000


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt ``n`` (1-based): ``first_ms * factor ** (n - 1)``, at most ``max_ms`` (or ``first_ms``
    where that is more: the first delay is the one asked for).

    Keep ``max_ms`` under a day: a spout takes a not-before further away for a corrupt header and does not wait
    (`MAX_HOLD_MS`)."""

    first_ms: int = 1_000
    factor: float = 2.0
    max_ms: int = 60_000

    def delay_ms(self, attempt: int) -> int:
        cap = max(self.max_ms, self.first_ms)
        if self.first_ms == 0:  # no backoff, at every step (the power alone overflows past 1,024 of them)
            return 0
        try:
            return int(min(cap, self.first_ms * self.factor ** max(0, attempt - 1)))
        except OverflowError:  # a float power past ~1e308, times at least 1 ms: far past the cap
            return cap


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    backoff: Backoff = Backoff()
    replay_prefix: str = "acker.replay."
    dead_letter_topic: str = "acker.replay.dlq"

    def replay_topic(self, spout: str) -> str:
        return self.replay_prefix + spout


@dataclass(frozen=True)
class Decision:
    """Publish the record (its key and value) to ``topic`` with ``headers``; resolve the nack as ``resolution``."""

    topic: str
    headers: Headers
    resolution: str  # REPLAYED or DEAD_LETTERED


def _own(headers: Sequence[tuple[str, HeaderValue]]) -> Headers:
    """The application's headers: everything but this module's (and the anchor header)."""
    return [(k, v) for k, v in headers if not k.startswith("acker.")]


def _context(origin: str, attempt: int, reason: str, spout: str, detail: str | None = None) -> Headers:
    context: Headers = [
        (ATTEMPT, str(attempt).encode()),
        (ORIGIN, origin.encode()),
        (REASON, reason.encode()),
        (SPOUT, spout.encode()),
    ]
    if detail:
        context.append((DETAIL, detail.encode()))
    return context


def is_own_copy(policy: RetryPolicy, spout: str, msg_id: str, headers: AnyHeaders | None) -> bool:
    """Whether the record ``msg_id`` is a copy ``spout`` replays (or one re-driven to it), whose replay headers count:
    it lies on the spout's replay topic, and its headers, if they name a spout, name this one. A record of the
    source topic is never one, whatever its producer wrote (another spout's replay forwarded downstream, a dead
    letter copied back by hand): the spout itself holds only its replay topic's records (`acker.spout`)."""
    owner = text(headers, SPOUT)
    # The replay topic's name as the spout's would be, even one Kafka refuses (too long, a space: `acker.places`
    # would take no such place), so that what cannot go back is said as such.
    return msg_id.rsplit("/", 2)[0] == policy.replay_topic(spout) and (owner is None or owner == spout)


def decide(
    policy: RetryPolicy,
    spout: str,
    msg_id: str,
    reason: str,
    *,
    headers: Sequence[tuple[str, HeaderValue]] | None,
    now_ms: int,
    detail: str | None = None,
) -> Decision:
    """Where the nacked record ``msg_id`` (its coordinates) goes next. ``headers`` are the record's own, or None
    when the record no longer exists (deleted by retention): then it is dead-lettered as ``source-missing``.
    ``detail``: why its tree failed, if the nack says (`DETAIL`)."""
    if headers is None:  # nothing to read the origin and the attempts from: the nacked coordinates stand for both
        letter = [*_context(msg_id, 0, SOURCE_MISSING, spout, detail), (NACK_REASON, reason.encode())]
        letter.append((LAST, msg_id.encode()))
        return Decision(policy.dead_letter_topic, letter, DEAD_LETTERED)
    own = is_own_copy(policy, spout, msg_id, headers)
    # Not a copy of this spout's: the record starts its own round here, whatever replay headers it carries.
    previous, origin = (text(headers, ATTEMPT), text(headers, ORIGIN) or msg_id) if own else (None, msg_id)
    previous_attempt = decimal(previous)
    # The application's headers, and the dead letter a re-driven copy came from: its replays and its next dead
    # letter say so, and a re-drive of all the dead letters leaves out the one re-driven already (`acker.dlq`).
    kept = _own(headers) + ([(k, v) for k, v in headers if k == REDRIVEN] if own else [])
    if reason == OVERLOAD:  # not an attempt (see the module's invariant)
        overloads = (decimal(text(headers, OVERLOADS)) or 0) + 1 if previous is not None else 1
        not_before = now_ms + policy.backoff.delay_ms(overloads)
        context = _context(origin, previous_attempt or 0, reason, spout, detail)
        copy = [*kept, *context, (OVERLOADS, str(overloads).encode()), (NOT_BEFORE, str(not_before).encode())]
        return Decision(policy.replay_topic(spout), copy, REPLAYED)
    attempt = previous_attempt + 1 if previous_attempt is not None else 1
    if attempt > policy.max_attempts:
        letter = [*kept, *_context(origin, attempt - 1, reason, spout, detail), (LAST, msg_id.encode())]
        return Decision(policy.dead_letter_topic, letter, DEAD_LETTERED)
    not_before = now_ms + policy.backoff.delay_ms(attempt)
    replay = [*kept, *_context(origin, attempt, reason, spout, detail), (NOT_BEFORE, str(not_before).encode())]
    return Decision(policy.replay_topic(spout), replay, REPLAYED)


def unreadable_headers(
    policy: RetryPolicy, spout: str, msg_id: str, reason: str, detail: str | None = None
) -> Decision:
    """The dead letter standing for the nacked record ``msg_id``, whose headers cannot be read (a header name that is
    not UTF-8, `acker.headers.read_headers`): a copy without them would lose them, and its attempts cannot be read.
    Reason ``unreadable-headers``, origin and attempt the nacked coordinates and 0 (as for ``source-missing``); the
    caller keeps its key and value. The nacked coordinates say where the record lies whole."""
    context = _context(msg_id, 0, UNREADABLE_HEADERS, spout, detail)
    letter = [*context, (NACK_REASON, reason.encode()), (LAST, msg_id.encode())]
    return Decision(policy.dead_letter_topic, letter, DEAD_LETTERED)


def instead(
    policy: RetryPolicy,
    decision: Decision,
    msg_id: str,
    reason: str,
    why: str,
    *,
    own: bool = True,
    extra: Headers | None = None,
) -> Decision:
    """The dead letter standing for the nacked record ``msg_id`` where ``decision`` cannot be carried out (``why``,
    its reason): the replay headers (origin, the attempts made, spout, the last copy), the record's own unless not
    ``own``, the nack's reason, and ``extra``."""
    dropped = (REASON, NACK_REASON, NOT_BEFORE, LAST, OVERLOADS)  # said again below, or of a replay not made
    ours = [(k, v) for k, v in decision.headers if (own or k.startswith("acker.")) and k not in dropped]
    # The replay it was to be was not made: its attempt was not either (an overload's copy counts none).
    if decision.resolution == REPLAYED and text(decision.headers, REASON) != OVERLOAD:
        attempt = decimal(text(ours, ATTEMPT)) or 1
        ours = [(k, str(attempt - 1).encode() if k == ATTEMPT else v) for k, v in ours]
    letter = [*ours, (REASON, why.encode()), (NACK_REASON, reason.encode()), *(extra or []), (LAST, msg_id.encode())]
    return Decision(policy.dead_letter_topic, letter, DEAD_LETTERED)


def too_large(policy: RetryPolicy, decision: Decision, msg_id: str, reason: str, size: int) -> Decision:
    """The dead letter standing for the nacked record ``msg_id`` of ``size`` bytes, too large to publish where
    ``decision`` sends it: without the record's own headers, which may be what is too large, reason ``too-large``;
    the caller keeps as much of its key and value as the dead-letter topic takes. The replay headers it copies from
    the record are cut to `HEADER_KEPT_BYTES` each (names longer than that dropped): a record's own ``acker.replay.*``
    header can be what is too large (an origin of a megabyte), and a dead letter refused aborted its batch at every
    run, no nack of any spout replayed again."""
    letter = instead(policy, decision, msg_id, reason, TOO_LARGE, own=False, extra=[(TRUNCATED, str(size).encode())])
    cut = [
        (k, v[:HEADER_KEPT_BYTES] if isinstance(v, str | bytes) else v)
        for k, v in letter.headers
        if len(k) <= HEADER_KEPT_BYTES
    ]
    return Decision(letter.topic, cut, letter.resolution)


def without_detail(decision: Decision) -> Decision:
    """``decision`` without its `DETAIL`: for a copy that only the detail makes too large for its topic (a diagnosis
    must not turn a replay into a ``too-large`` dead letter)."""
    return Decision(decision.topic, [(k, v) for k, v in decision.headers if k != DETAIL], decision.resolution)


def unread(policy: RetryPolicy, decision: Decision, msg_id: str, reason: str) -> Decision:
    """The dead letter standing for the nacked record ``msg_id``, whose replay ``decision`` would send to a replay
    topic that does not exist: no spout reads it (the job's replay prefix is not the spouts', or the spout has not run
    since the topic was deleted). Made there, the copy would be lost, and its original taken as done. Reason
    ``no-replay-topic``; the record whole, so that ``acker dlq redrive`` can send it to the right topic."""
    return instead(policy, decision, msg_id, reason, NO_REPLAY_TOPIC)


def unnameable(spout: str) -> str | None:
    """Why no replay topic can have spout ``spout``'s name, as far as the name alone tells, None when one may."""
    return None if spout_name_valid(spout) else f"no topic can have the name {spout[:80]!r}"


def redrive(
    policy: RetryPolicy,
    letter: str,
    headers: Sequence[tuple[str, HeaderValue]],
    spout: str | None = None,
    *,
    refusal: Callable[[str], str | None] = unnameable,
) -> Decision:
    """Send the dead letter at coordinates ``letter`` back to its spout's replay topic (or ``spout``'s), as attempt 0
    of its origin: its next nack starts a new round of ``max_attempts`` replays. ``refusal``: why a spout cannot be
    the copy's (a deployment's: `acker.topics.spout_refusal`, whose reserved names' replay topics are the replay
    job's own dead-letter or progress topic), None when it can."""
    origin = text(headers, ORIGIN)
    spout = spout or text(headers, SPOUT)
    if origin is None:
        raise NotRedrivableError(f"{letter} has no {ORIGIN} header: it was not dead-lettered by the replay job")
    if text(headers, ACKER_DLQ_REASON) is not None:  # its replay headers are the record's own, which it keeps
        raise NotRedrivableError(f"{letter} is the acker's dead letter ({ACKER_DLQ_REASON}), not the replay job's: "
                                 "the record it copies is at its place in the acker's input")  # fmt: skip
    if not spout:
        raise NotRedrivableError(f"{letter} does not say which spout read it ({SPOUT}): name one with --spout")
    reason = text(headers, REASON) or ""
    if reason == NO_REPLAY_TOPIC:  # not a nack's reason: the nack's is kept beside it
        reason = text(headers, NACK_REASON) or reason
    if reason == SOURCE_MISSING:
        raise NotRedrivableError(f"{letter} stands for a record that no longer exists ({SOURCE_MISSING}): no data")
    if reason == TOO_LARGE:
        raise NotRedrivableError(f"{letter} holds only part of a record too large to replay ({TOO_LARGE})")
    if reason == UNREADABLE_HEADERS:
        raise NotRedrivableError(f"{letter} holds a record without its headers, which could not be read "
                                 f"({UNREADABLE_HEADERS}): its origin holds it whole")  # fmt: skip
    if text(headers, LAST) is None:  # every dead letter of the replay job's says which copy was nacked last
        raise NotRedrivableError(f"{letter} has no {LAST} header: a replayed copy (a stage's input keeps its spout's "
                                 "replay headers), not a dead letter")  # fmt: skip
    why = refusal(spout)  # a header's may name any spout (`--spout` is checked before)
    if why is not None:
        raise NotRedrivableError(f"{letter} names a spout its copy cannot go back to: {why}")
    copy = [*_own(headers), *_context(origin, 0, reason, spout, text(headers, DETAIL)), (REDRIVEN, letter.encode())]
    return Decision(policy.replay_topic(spout), copy, REPLAYED)


def origin_partition(coordinates: str) -> int:
    """The partition of place ``topic/partition/offset`` (`acker.places`), 0 if it is none."""
    place = place_of(coordinates)
    return 0 if place is None else place.partition
