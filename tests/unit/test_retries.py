"""Where a nacked record goes next (`acker.retries`): replays with backoff, dead letters, re-drives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acker.headers import HeaderList
from acker.retries import (
    ATTEMPT,
    DEAD_LETTERED,
    DETAIL,
    HEADER_KEPT_BYTES,
    LAST,
    NACK_REASON,
    NO_REPLAY_TOPIC,
    NOT_BEFORE,
    ORIGIN,
    OVERLOADS,
    REASON,
    REDRIVEN,
    REPLAYED,
    SOURCE_MISSING,
    SPOUT,
    TOO_LARGE,
    TRUNCATED,
    UNREADABLE_HEADERS,
    Backoff,
    NotRedrivableError,
    RetryPolicy,
    decide,
    origin_partition,
    redrive,
    too_large,
    unread,
    unreadable_headers,
    without_detail,
)

POLICY = RetryPolicy(max_attempts=3, backoff=Backoff(first_ms=100, factor=3.0, max_ms=500), replay_prefix="rp.")
NOW = 1_000_000


def test_a_first_nack_is_replayed_as_attempt_1_with_its_context_and_the_application_headers() -> None:
    own = [("app", b"x"), ("acker.ids", b"\x01" * 16), ("trace", None)]
    decision = decide(POLICY, "words", "src/2/7", "FAILED", headers=own, now_ms=NOW)
    assert (decision.topic, decision.resolution) == ("rp.words", REPLAYED)
    assert decision.headers == [
        ("app", b"x"),
        ("trace", None),
        (ATTEMPT, b"1"),
        (ORIGIN, b"src/2/7"),
        (REASON, b"FAILED"),
        (SPOUT, b"words"),
        (NOT_BEFORE, str(NOW + 100).encode()),
    ]


def test_a_failing_copy_counts_attempts_from_its_origin_with_exponential_backoff() -> None:
    headers: HeaderList = [("app", b"x")]
    msg_id = "src/0/1"
    delays = []
    for attempt in (1, 2, 3):
        decision = decide(POLICY, "words", msg_id, "TIMEOUT", headers=headers, now_ms=NOW)
        assert decision.resolution == REPLAYED
        got = dict(decision.headers)
        assert (got[ATTEMPT], got[ORIGIN]) == (str(attempt).encode(), b"src/0/1")
        delays.append(int(got[NOT_BEFORE]) - NOW)  # type: ignore[arg-type]
        headers, msg_id = decision.headers, f"rp.words/0/{attempt}"  # the copy is nacked in turn
    assert delays == [100, 300, 500]  # 100 · 3ⁿ⁻¹, capped at 500
    # The next nack of the third copy: no attempt left.
    letter = decide(POLICY, "words", msg_id, "FAILED", headers=headers, now_ms=NOW)
    assert (letter.topic, letter.resolution) == ("acker.replay.dlq", DEAD_LETTERED)
    got = dict(letter.headers)
    assert (got[ATTEMPT], got[ORIGIN], got[REASON], got[LAST]) == (b"3", b"src/0/1", b"FAILED", b"rp.words/0/3")
    assert NOT_BEFORE not in got and got["app"] == b"x"


def test_a_record_that_no_longer_exists_is_dead_lettered_as_source_missing() -> None:
    decision = decide(POLICY, "words", "src/0/9", "TIMEOUT", headers=None, now_ms=NOW)
    assert (decision.topic, decision.resolution) == ("acker.replay.dlq", DEAD_LETTERED)
    assert dict(decision.headers)[REASON] == SOURCE_MISSING.encode()
    assert dict(decision.headers)[NACK_REASON] == b"TIMEOUT"  # why it was to be replayed


def test_a_record_too_large_to_publish_becomes_a_dead_letter_with_its_context_and_not_its_own_headers() -> None:
    replay = decide(POLICY, "words", "src/0/1", "FAILED", headers=[("app", b"x" * 50)], now_ms=NOW)
    letter = too_large(POLICY, replay, "src/0/1", "FAILED", 2_000_000)
    assert (letter.topic, letter.resolution) == ("acker.replay.dlq", DEAD_LETTERED)
    got = dict(letter.headers)
    assert (got[REASON], got[NACK_REASON], got[TRUNCATED]) == (TOO_LARGE.encode(), b"FAILED", b"2000000")
    assert (got[ATTEMPT], got[ORIGIN], got[SPOUT], got[LAST]) == (b"0", b"src/0/1", b"words", b"src/0/1")
    assert "app" not in got and NOT_BEFORE not in got
    assert [k for k, _ in letter.headers].count(REASON) == 1
    # A copy past its last attempt: the attempts made, and the copy that failed last, as on any dead letter.
    last = decide(POLICY, "words", "rp.words/0/7", "TIMEOUT", headers=[(ATTEMPT, b"3"), (ORIGIN, b"src/0/1")],
                  now_ms=NOW)  # fmt: skip
    got = dict(too_large(POLICY, last, "rp.words/0/7", "TIMEOUT", 5).headers)
    assert (got[ATTEMPT], got[LAST]) == (b"3", b"rp.words/0/7")
    with pytest.raises(NotRedrivableError, match=TOO_LARGE):  # only part of it is kept
        redrive(POLICY, "acker.replay.dlq/0/5", letter.headers)


def test_a_too_large_records_own_replay_headers_are_cut_in_its_dead_letter() -> None:
    """An origin header of a megabyte made the dead letter itself too large: refused, it aborted the batch at every
    run, and no nack of any spout was replayed again."""
    huge = [(ORIGIN, b"o" * 1_100_000), ("acker.replay." + "n" * 2_000, b"x"), (ATTEMPT, b"1")]
    replay = decide(POLICY, "words", "rp.words/0/1", "FAILED", headers=huge, now_ms=NOW)
    letter = too_large(POLICY, replay, "rp.words/0/1", "FAILED", 1_200_000)
    got = dict(letter.headers)
    assert got[ORIGIN] == b"o" * HEADER_KEPT_BYTES and got[REASON] == TOO_LARGE.encode()
    assert sum(len(k) + len(v or b"") for k, v in letter.headers) < 2 * HEADER_KEPT_BYTES


def test_a_garbled_attempt_header_counts_as_a_first_attempt() -> None:
    decision = decide(POLICY, "words", "rp.words/0/1", "FAILED", headers=[(ATTEMPT, b"x1")], now_ms=NOW)
    assert dict(decision.headers)[ATTEMPT] == b"1"
    # "²" is a digit to str.isdigit, and int() refuses it: still a first attempt, not a crash of the job
    decision = decide(POLICY, "words", "rp.words/0/1", "FAILED", headers=[(ATTEMPT, "²".encode())], now_ms=NOW)
    assert dict(decision.headers)[ATTEMPT] == b"1"
    # 4,301 digits or more: int() raises, and the replay job's batch would fail at every retry
    decision = decide(POLICY, "words", "rp.words/0/1", "FAILED", headers=[(ATTEMPT, b"7" * 5000)], now_ms=NOW)
    assert dict(decision.headers)[ATTEMPT] == b"1"


def test_the_backoff_stays_at_its_cap_for_any_attempt() -> None:
    assert POLICY.backoff.delay_ms(1) == POLICY.backoff.first_ms
    assert POLICY.backoff.delay_ms(10**6) == POLICY.backoff.max_ms
    slow = Backoff(first_ms=120_000)  # a first delay above the default cap of a minute is the one asked for
    assert [slow.delay_ms(n) for n in (1, 2, 10**6)] == [120_000] * 3
    # None asked for: none at any step (the power overflowed past 1,024 overloads in a row, and the cap came back)
    assert [Backoff(first_ms=0).delay_ms(n) for n in (1, 1024, 1025, 10**6)] == [0] * 4


@given(st.integers(min_value=0, max_value=10), st.sampled_from(["FAILED", "TIMEOUT", "OVERLOAD"]))
def test_every_nack_is_either_replayed_or_dead_lettered_never_beyond_max_attempts(previous: int, reason: str) -> None:
    headers = [(ATTEMPT, str(previous).encode()), (ORIGIN, b"src/0/0")] if previous else []
    decision = decide(POLICY, "s", "rp.s/0/5", reason, headers=headers, now_ms=NOW)
    attempt = int(dict(decision.headers)[ATTEMPT])  # type: ignore[arg-type]
    if reason == "OVERLOAD":  # not an attempt: the record was not tried
        assert (decision.resolution, attempt) == (REPLAYED, previous)
    elif previous < POLICY.max_attempts:
        assert (decision.resolution, attempt) == (REPLAYED, previous + 1)
    else:
        assert (decision.resolution, attempt) == (DEAD_LETTERED, previous)
    assert dict(decision.headers)[ORIGIN] == (b"src/0/0" if previous else b"rp.s/0/5")


def test_overload_nacks_are_not_attempts_and_wait_longer_each_time_in_a_row() -> None:
    """An overload that outlasted the backoff (1 + 2 + 4 + 8 + 16 s by default) dead-lettered records that had never
    failed: an acker refusing to track a tree says nothing of its record."""
    headers: HeaderList = []
    delays = []
    for n in range(8):
        decision = decide(POLICY, "s", f"rp.s/0/{n}", "OVERLOAD", headers=headers, now_ms=NOW)
        got = dict(decision.headers)
        assert (decision.resolution, got[ATTEMPT], got[OVERLOADS], got[REASON]) == (
            REPLAYED, b"0", str(n + 1).encode(), b"OVERLOAD"
        )  # fmt: skip
        delays.append(int(got[NOT_BEFORE] or b"0") - NOW)
        headers = decision.headers
    assert delays == [POLICY.backoff.delay_ms(n) for n in range(1, 9)]  # 100, 300, then the cap of 500
    # A failure after them is attempt 1, with the usual delay; an overload after that starts its count again.
    failed = decide(POLICY, "s", "rp.s/0/9", "FAILED", headers=headers, now_ms=NOW)
    assert (dict(failed.headers)[ATTEMPT], OVERLOADS in dict(failed.headers)) == (b"1", False)
    again = decide(POLICY, "s", "rp.s/0/10", "OVERLOAD", headers=failed.headers, now_ms=NOW)
    assert (dict(again.headers)[ATTEMPT], dict(again.headers)[OVERLOADS]) == (b"1", b"1")


def test_a_dead_letter_standing_for_an_overloads_copy_counts_the_attempts_made_before_it() -> None:
    """An overload's copy is no attempt: a copy that cannot be made (too large, no replay topic) took one off the
    attempts all the same, as if the copy had counted one."""
    second = [(ATTEMPT, b"2"), (ORIGIN, b"src/0/1"), (SPOUT, b"s")]
    overload = decide(POLICY, "s", "rp.s/0/7", "OVERLOAD", headers=second, now_ms=NOW)
    for letter in (unread(POLICY, overload, "rp.s/0/7", "OVERLOAD"),
                   too_large(POLICY, overload, "rp.s/0/7", "OVERLOAD", 10**7)):  # fmt: skip
        got = dict(letter.headers)
        assert (got[ATTEMPT], OVERLOADS in got, got[NACK_REASON]) == (b"2", False, b"OVERLOAD")
    failed = decide(POLICY, "s", "rp.s/0/7", "FAILED", headers=second, now_ms=NOW)
    assert dict(unread(POLICY, failed, "rp.s/0/7", "FAILED").headers)[ATTEMPT] == b"2"  # attempt 3 was not made


def test_a_redriven_dead_letter_starts_a_new_round_at_attempt_0() -> None:
    letter = decide(POLICY, "words", "rp.words/0/3", "FAILED", headers=[(ATTEMPT, b"3"), (ORIGIN, b"s/1/4")], now_ms=0)
    copy = redrive(POLICY, "acker.replay.dlq/0/12", letter.headers)
    assert (copy.topic, copy.resolution) == ("rp.words", REPLAYED)
    got = dict(copy.headers)
    assert (got[ATTEMPT], got[ORIGIN], got[SPOUT]) == (b"0", b"s/1/4", b"words")
    assert got[REDRIVEN] == b"acker.replay.dlq/0/12"
    assert LAST not in got
    # Its next nack is replay attempt 1 of the same origin.
    again = decide(POLICY, "words", "rp.words/1/0", "TIMEOUT", headers=copy.headers, now_ms=0)
    assert (dict(again.headers)[ATTEMPT], dict(again.headers)[ORIGIN]) == (b"1", b"s/1/4")
    # Another spout may be named.
    assert redrive(POLICY, "d/0/1", letter.headers, spout="other").topic == "rp.other"


def test_only_dead_letters_of_the_replay_job_can_be_redriven() -> None:
    with pytest.raises(NotRedrivableError, match=r"no acker\.replay\.origin"):
        redrive(POLICY, "acker.dlq/0/3", [("acker.dlq.reason", b"undecodable")])
    # The acker's dead letter of a replayed copy keeps the copy's replay headers, every one a letter of the replay
    # job's has: refused for its own reason, not the lack of one.
    replayed = [(ORIGIN, b"s/0/1"), (SPOUT, b"words"), (LAST, b"rp.words/0/2"), (ATTEMPT, b"1")]
    with pytest.raises(NotRedrivableError, match="the acker's dead letter"):
        redrive(POLICY, "acker.dlq/0/4", [("acker.dlq.reason", b"bad-spout"), *replayed])
    with pytest.raises(NotRedrivableError, match="--spout"):
        redrive(POLICY, "d/0/3", [(ORIGIN, b"s/0/1"), (LAST, b"rp.words/0/2")])
    # A replayed copy read where its spout emitted it (a stage's input keeps the replay headers): not a dead letter.
    copy = decide(POLICY, "words", "rp.words/0/3", "FAILED", headers=[(ORIGIN, b"s/1/4")], now_ms=NOW)
    assert copy.resolution == REPLAYED
    with pytest.raises(NotRedrivableError, match="a replayed copy"):
        redrive(POLICY, "words.split/0/7", copy.headers)
    # A record gone before it could be replayed has no data to send back.
    missing = decide(POLICY, "words", "src/0/9", "TIMEOUT", headers=None, now_ms=NOW)
    with pytest.raises(NotRedrivableError, match=SOURCE_MISSING):
        redrive(POLICY, "acker.replay.dlq/0/4", missing.headers)


def test_a_record_whose_headers_cannot_be_read_is_dead_lettered_without_them_and_not_redriven() -> None:
    letter = unreadable_headers(POLICY, "words", "src/0/9", "FAILED")
    got = dict(letter.headers)
    assert (letter.topic, letter.resolution) == (POLICY.dead_letter_topic, DEAD_LETTERED)
    assert (got[REASON], got[NACK_REASON], got[ORIGIN], got[ATTEMPT], got[LAST], got[SPOUT]) == (
        UNREADABLE_HEADERS.encode(), b"FAILED", b"src/0/9", b"0", b"src/0/9", b"words"
    )  # fmt: skip
    with pytest.raises(NotRedrivableError, match=UNREADABLE_HEADERS):  # sent back, it would go without its headers
        redrive(POLICY, "acker.replay.dlq/0/5", letter.headers)


def test_another_spouts_replay_context_starts_a_new_round_here() -> None:
    """Spout A forwards a replayed record, headers and all, to a topic that spout B reads: a nack of it in B counts
    B's attempts from its own source record, not A's."""
    from_a = decide(POLICY, "a", "rp.a/0/1", "FAILED", headers=[(ATTEMPT, b"2"), (ORIGIN, b"src/0/1"), (SPOUT, b"a")],
                    now_ms=NOW).headers  # fmt: skip
    decision = decide(POLICY, "b", "mid/3/9", "TIMEOUT", headers=from_a, now_ms=NOW)
    got = dict(decision.headers)
    assert (decision.topic, got[ATTEMPT], got[ORIGIN], got[SPOUT]) == ("rp.b", b"1", b"mid/3/9", b"b")
    assert [k for k, _ in decision.headers].count(ATTEMPT) == 1  # A's context is replaced, not kept beside
    # A's context on a record in B's replay topic (written there by hand, say): B's copies say B, so a new round.
    named = dict(decide(POLICY, "b", "rp.b/0/9", "TIMEOUT", headers=from_a, now_ms=NOW).headers)
    assert (named[ATTEMPT], named[ORIGIN], named[SPOUT]) == (b"1", b"rp.b/0/9", b"b")


def test_origin_partition() -> None:
    assert origin_partition("a.b/3/17") == 3
    assert origin_partition("src/0/5") == 0
    assert origin_partition("not coordinates") == 0
    assert origin_partition("src/" + "1" * 5000 + "/5") == 0


def test_a_record_whose_replay_topic_does_not_exist_is_dead_lettered_whole_and_redriven_with_its_nacks_reason() -> None:
    """Cut after that (too large for the dead-letter topic), the letter says the nack's reason once."""
    decision = decide(POLICY, "words", "src/0/9", "TIMEOUT", headers=[("trace", b"t")], now_ms=NOW)
    letter = unread(POLICY, decision, "src/0/9", "TIMEOUT")
    got = dict(letter.headers)
    assert (letter.topic, letter.resolution) == (POLICY.dead_letter_topic, DEAD_LETTERED)
    assert (got[REASON], got[NACK_REASON], got[ATTEMPT], got["trace"]) == (
        NO_REPLAY_TOPIC.encode(),
        b"TIMEOUT",
        b"0",
        b"t",
    )
    cut = too_large(POLICY, letter, "src/0/9", "TIMEOUT", 10**7)
    assert [k for k, _ in cut.headers].count(NACK_REASON) == 1
    copy = redrive(POLICY, "acker.replay.dlq/0/5", letter.headers)
    assert (copy.topic, dict(copy.headers)[REASON]) == ("rp.words", b"TIMEOUT")


def test_the_reason_a_tree_was_failed_for_goes_on_its_replay_and_its_dead_letter() -> None:
    """``acker.replay.detail``: the last nack's, never one carried over from the copy before (whose ``acker.*``
    headers are the job's); kept by a re-drive, left out where the nack gave none."""
    replay = decide(POLICY, "w", "src/0/1", "FAILED", headers=[("app", b"x")], now_ms=NOW, detail="bolt b: E: 1")
    assert (DETAIL, b"bolt b: E: 1") in replay.headers
    again = decide(POLICY, "w", "rp.w/0/3", "TIMEOUT", headers=replay.headers, now_ms=NOW)
    assert DETAIL not in dict(again.headers)
    copy = [(ATTEMPT, b"3"), (ORIGIN, b"src/0/1"), (SPOUT, b"w")]
    letter = decide(POLICY, "w", "rp.w/0/9", "FAILED", headers=copy, now_ms=NOW, detail="bolt b: E: 2")
    assert letter.resolution == DEAD_LETTERED and dict(letter.headers)[DETAIL] == b"bolt b: E: 2"
    missing = decide(POLICY, "w", "src/0/2", "FAILED", headers=None, now_ms=NOW, detail="d")
    assert dict(missing.headers)[DETAIL] == b"d"
    assert dict(unreadable_headers(POLICY, "w", "src/0/3", "FAILED", "d").headers)[DETAIL] == b"d"
    assert dict(unread(POLICY, replay, "src/0/1", "FAILED").headers)[DETAIL] == b"bolt b: E: 1"
    assert dict(redrive(POLICY, "dlq/0/4", letter.headers).headers)[DETAIL] == b"bolt b: E: 2"


def test_a_copy_too_large_only_for_its_detail_goes_without_it() -> None:
    replay = decide(POLICY, "w", "src/0/1", "FAILED", headers=[("app", b"x")], now_ms=NOW, detail="d" * 500)
    lean = without_detail(replay)
    assert DETAIL not in dict(lean.headers) and lean.headers == [h for h in replay.headers if h[0] != DETAIL]
    assert (lean.topic, lean.resolution) == (replay.topic, replay.resolution)


def test_replay_headers_on_a_source_record_do_not_count() -> None:
    """Only a copy on the spout's replay topic is one: the spout holds no other by its headers. A source record whose
    producer wrote replay headers (a dead letter copied back by hand, results written back with headers forwarded)
    was dead-lettered at its first nack as attempt 4, under a made-up origin; and one naming this spout and a
    re-driven letter kept that header, so that `acker dlq redrive --all` skipped the real letter as re-driven."""
    spoofed = [("app", b"x"), (ATTEMPT, b"3"), (ORIGIN, b"elsewhere/0/1")]
    decision = decide(POLICY, "words", "src/0/7", "FAILED", headers=spoofed, now_ms=NOW)
    got = dict(decision.headers)
    assert (decision.resolution, got[ATTEMPT], got[ORIGIN]) == (REPLAYED, b"1", b"src/0/7")
    named = [(ATTEMPT, b"2"), (ORIGIN, b"src/0/1"), (SPOUT, b"words"), (REDRIVEN, b"acker.replay.dlq/0/12")]
    got = dict(decide(POLICY, "words", "src/0/900", "FAILED", headers=named, now_ms=NOW).headers)
    assert (got[ATTEMPT], got[ORIGIN], REDRIVEN in got) == (b"1", b"src/0/900", False)
    copy = dict(decide(POLICY, "words", "rp.words/0/3", "FAILED", headers=named, now_ms=NOW).headers)
    assert (copy[ATTEMPT], copy[ORIGIN], copy[REDRIVEN]) == (b"3", b"src/0/1", b"acker.replay.dlq/0/12")
