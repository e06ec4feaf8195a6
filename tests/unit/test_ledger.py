"""The demo's books (`acker.examples.ledger`): each way the promise can break is reported."""

from __future__ import annotations

from acker.examples.ledger import Ledger


def _ledger(*sentences: bytes, poison: int | None = None) -> Ledger:
    ledger = Ledger()
    for offset, sentence in enumerate(sentences):
        ledger.written("s", 0, offset, sentence, poison=offset == poison)
    return ledger


def test_a_run_that_kept_the_promise() -> None:
    ledger = _ledger(b"a b", b"c", b"poison d", poison=2)
    ledger.max_attempts = 0  # the poison record is dead-lettered at its first nack
    ledger.outcome("s/0/0", "ACK", 12, by_acker=True, at_ms=100)
    ledger.outcome("s/0/1", "FAILED", 0, by_acker=True, at_ms=101)
    ledger.outcome("s/0/1", "REPLAYED", 0, by_acker=False, at_ms=150)
    ledger.copy("r", 0, 0, "s/0/1")
    ledger.outcome("r/0/0", "ACK", 30, by_acker=True, at_ms=300)
    ledger.outcome("s/0/2", "FAILED", 0, by_acker=True, at_ms=102)
    ledger.outcome("s/0/2", "DEAD_LETTERED", 0, by_acker=False, at_ms=160)
    ledger.dead_letter("s/0/2", "bolt split: InjectedFailureError: injected failure")
    ledger.outcome("s/0/0", "ACK", 9_000, by_acker=True, at_ms=400)  # re-decided after a failover
    for word in (b"a", b"b", b"c", b"c"):
        ledger.count(word)
    ledger.watermarks(99, {("s", 0): 0})
    ledger.watermarks(200, {("s", 0): 3})
    ledger.watermarks(310, {("s", 0): 3, ("r", 0): 1})
    report = ledger.report()
    assert report.failures == []
    assert (report.acked_first_time, report.acked_after_replay, report.replays) == (1, 1, 1)
    assert report.dead_lettered == report.poison == ["s/0/2"]
    assert report.dead_letter_details == {"s/0/2": "bolt split: InjectedFailureError: injected failure"}
    assert report.nacks == {"FAILED": 2, "TIMEOUT": 0, "OVERLOAD": 0}
    assert report.duplicate_outcomes == 1
    assert (report.latency_p50_ms, report.latency_p99_ms) == (30, 30)  # first decisions only
    assert (report.words_expected, report.words_counted, report.duplicate_words) == (3, 4, 1)
    assert report.watermarks == {"s/0": (3, 3)}


def test_lost_records_uncounted_words_and_wrong_dead_letters_are_failures() -> None:
    ledger = _ledger(b"a", b"b", b"poison", poison=2)
    ledger.outcome("s/0/0", "ACK", 1, by_acker=True, at_ms=1)
    ledger.dead_letter("s/0/1")  # not poison
    ledger.count(b"a")
    ledger.watermarks(5, {("s", 0): 2})
    report = ledger.report()
    assert report.lost == ["s/0/2"]
    assert report.unexpected_dead_letters == ["s/0/1"] and report.poison_not_dead_lettered == ["s/0/2"]
    assert report.words_lost == 1  # "b" was never counted
    assert not report.watermarks_at_end
    assert report.committed_early == ["s/0/1 (watermark 2 at 5)"]  # no done outcome was written for it
    assert len(report.failures) == 6


def test_traced_counts_are_checked_sentence_by_sentence() -> None:
    """ "the cow" counted twice (a replay) and "the" of "the moon" never: per word, the duplicate hid the loss."""
    ledger = _ledger(b"the cow", b"the moon")
    for sentence in ("s/0/0", "s/0/1"):
        ledger.outcome(sentence, "ACK", 1, by_acker=True, at_ms=1)
    for word, sentence in (
        (b"the", "s/0/0"),
        (b"cow", "s/0/0"),
        (b"the", "s/0/0"),
        (b"cow", "s/0/0"),
        (b"moon", "s/0/1"),
    ):
        ledger.count(word, sentence)
    report = ledger.report()
    assert report.words_lost == 1 and "1 word(s) of good sentences never counted" in report.failures
    untraced = _ledger(b"the cow", b"the moon")
    for word in (b"the", b"cow", b"the", b"cow", b"moon"):
        untraced.count(word)
    assert untraced.report().words_lost == 0  # what the per-word check can see


def test_where_every_count_is_traced_one_that_is_not_fails_the_run_rather_than_skip_the_early_ack_check() -> None:
    """A sentence acked before its words were counted passed unseen once the counts lost their trace: with no count
    naming its sentence, the acked-early check was skipped (and words checked over all sentences)."""
    for traced in (False, True):
        ledger = _ledger(b"a b")
        ledger.traced = traced
        ledger.outcome("s/0/0", "ACK", 1, by_acker=True, at_ms=1000)
        for word in (b"a", b"b"):
            ledger.count(word, None, 1, 2000)  # written after the ack, its sentence not said
        ledger.watermarks(3000, {("s", 0): 1})
        failures = ledger.report().failures
        assert failures == ([
            "2 count record(s) without their sentence's trace (wc.sentence) or time: the checks of acks before counts "
            "and of words by sentence cannot be made of them"
        ] if traced else [])  # fmt: skip
        ledger.count(b"a", "s/0/0", 2, 2001)  # traced, and after the ack
        assert ledger.report().acked_early == ["s/0/0 (acked at 1000; 'a' counted 0 of 1 time(s) by then)"]


def test_a_watermark_that_passes_a_record_before_its_outcome_is_an_early_commit() -> None:
    ledger = _ledger(b"a", b"b", b"c")
    ledger.outcome("s/0/0", "ACK", 1, by_acker=True, at_ms=10)
    ledger.outcome("s/0/1", "ACK", 1, by_acker=True, at_ms=50)  # done after the watermark below passed it
    ledger.outcome("s/0/2", "ACK", 1, by_acker=True, at_ms=60)
    ledger.watermarks(20, {("s", 0): 2})
    ledger.watermarks(70, {("s", 0): 3})
    assert ledger.committed_early() == ["s/0/1 (watermark 2 at 20)"]
    assert ledger.report().failures[0].startswith("committed before fully processed")


def test_replay_topic_watermarks_are_checked_against_the_copies_that_exist() -> None:
    ledger = _ledger(b"a")
    ledger.outcome("s/0/0", "FAILED", 0, by_acker=True, at_ms=1)
    ledger.outcome("s/0/0", "REPLAYED", 0, by_acker=False, at_ms=2)
    ledger.copy("r", 0, 0, "s/0/0")
    ledger.copy("r", 0, 2, "s/0/0")  # offset 1 is a transaction marker: no record, nothing to wait for
    ledger.outcome("r/0/0", "FAILED", 0, by_acker=True, at_ms=3)
    ledger.outcome("r/0/0", "REPLAYED", 0, by_acker=False, at_ms=4)
    ledger.watermarks(5, {("r", 0): 2})
    assert ledger.committed_early() == []
    ledger.watermarks(6, {("r", 0): 3})  # passes the second copy, which is not done
    assert ledger.committed_early() == ["r/0/2 (watermark 3 at 6)"]
    assert ledger.unresolved() == ["s/0/0"]


def test_a_replay_topic_watermark_short_of_its_copies_fails_the_run() -> None:
    """The source's watermark is at its end, but the replay topic's never passed its last copy (a commit job that
    froze): the run must not pass for having given up waiting."""
    ledger = _ledger(b"a")
    ledger.outcome("s/0/0", "FAILED", 0, by_acker=True, at_ms=1)
    ledger.outcome("s/0/0", "REPLAYED", 0, by_acker=False, at_ms=2)
    ledger.copy("r", 0, 0, "s/0/0")
    ledger.outcome("r/0/0", "ACK", 0, by_acker=True, at_ms=3)
    ledger.watermarks(4, {("s", 0): 1, ("r", 0): 0})
    report = ledger.report()
    assert report.copies_behind == {"r/0": (0, 1)}
    assert any(f.startswith("replay-topic watermark") for f in report.failures)
    ledger.count(b"a")
    ledger.watermarks(5, {("s", 0): 1, ("r", 0): 1})
    assert ledger.report().copies_behind == {} and ledger.report().failures == []


def test_a_good_record_dead_lettered_is_a_failure_unless_each_of_its_attempts_was_nacked() -> None:
    """Injected failures are random: a good sentence can draw one at its first attempt and at each replay."""
    ledger = _ledger(b"a", b"b", b"c")
    ledger.max_attempts = 2
    for origin, copies in (("s/0/0", 2), ("s/0/1", 1), ("s/0/2", 3)):
        ledger.outcome(origin, "FAILED", 0, by_acker=True, at_ms=1)
        for i in range(copies):
            ledger.copy("r", 0, int(origin[-1]) * 10 + i, origin)
            ledger.outcome(f"r/0/{int(origin[-1]) * 10 + i}", "TIMEOUT", 0, by_acker=True, at_ms=2)
        ledger.dead_letter(origin)
    ledger.outcome("r/0/22", "ACK", 0, by_acker=True, at_ms=3)  # s/0/2's last attempt, nacked and then acked
    ledger.watermarks(5, {("s", 0): 3})
    report = ledger.report()
    assert report.failed_every_attempt == ["s/0/0"]  # nacked at its 3 attempts; s/0/1 at only 2; s/0/2 acked once
    assert report.unexpected_dead_letters == ["s/0/1", "s/0/2"]
    assert report.words_expected == 2  # the words of s/0/1 and s/0/2 only: s/0/0 was given up on


def test_more_good_records_failed_at_every_attempt_than_the_injected_rates_explain_is_a_failure() -> None:
    """Every good sentence timed out at each attempt and was dead-lettered: "bad luck" each, and the demo said OK."""
    sentences = [b"w%d x" % i for i in range(100)]

    def run(drop_rate: float) -> list[str]:
        ledger = _ledger(*sentences)
        ledger.max_attempts, ledger.drop_rate = 1, drop_rate
        for i in range(len(sentences)):
            ledger.outcome(f"s/0/{i}", "TIMEOUT", 0, by_acker=True, at_ms=1)
            ledger.outcome(f"s/0/{i}", "REPLAYED", 0, by_acker=False, at_ms=1)
            ledger.copy("r", 0, i, f"s/0/{i}")
            ledger.outcome(f"r/0/{i}", "TIMEOUT", 0, by_acker=True, at_ms=2)
            ledger.outcome(f"r/0/{i}", "DEAD_LETTERED", 0, by_acker=False, at_ms=2)
            ledger.dead_letter(f"s/0/{i}")
        ledger.watermarks(5, {("s", 0): len(sentences), ("r", 0): len(sentences)})
        report = ledger.report()
        assert len(report.failed_every_attempt) == len(sentences)
        return report.failures

    assert any("nacked at every attempt" in f for f in run(drop_rate=0.002))  # a fault, not the rates
    assert run(drop_rate=1.0) == []  # every word dropped, as asked: each sentence dead-lettered


def test_a_last_count_below_the_times_a_word_was_counted_is_a_loss() -> None:
    """A count process that took a partition over started its words at 1: every word was counted (each sentence's
    words have their count record), yet the last count of "the" in the counts topic says 2 of its 4."""
    ledger = _ledger(b"the cow", b"the moon", b"the day", b"the end")
    for offset in range(4):
        ledger.outcome(f"s/0/{offset}", "ACK", 1, by_acker=True, at_ms=1)
    for offset, (the_count, other) in enumerate(((1, b"cow"), (2, b"moon"), (1, b"day"), (2, b"end"))):
        ledger.count(b"the", f"s/0/{offset}", the_count)
        ledger.count(other, f"s/0/{offset}", 1)
    ledger.watermarks(5, {("s", 0): 4})
    report = ledger.report()
    assert report.words_lost == 0 and report.counts_below == {"the": (2, 4)}
    assert report.failures == ["1 word(s) whose last count is below the times they were counted (last count, times "
                               "counted): {'the': (2, 4)}"]  # fmt: skip
    going_on = _ledger(b"the cow", b"the cow")  # a replay counted again: too high is at-least-once, not a loss
    for offset in range(2):
        going_on.outcome(f"s/0/{offset}", "ACK", 1, by_acker=True, at_ms=1)
    for word, value in ((b"the", 1), (b"cow", 1), (b"the", 2), (b"the", 3), (b"cow", 2), (b"cow", 3)):
        going_on.count(word, None, value)
    going_on.watermarks(5, {("s", 0): 2})
    assert going_on.report().counts_below == {} and going_on.report().failures == []


def test_a_sentence_acked_before_each_of_its_words_was_counted_is_acked_early() -> None:
    """A tree completed before its words were counted (the bug the acker rules out) passed: it was compared with the
    watermark only, which an ack lets through, and the words were counted in the end."""
    ledger = _ledger(b"the cow", b"a moon", b"a sun")
    ledger.outcome("s/0/0", "ACK", 1, by_acker=True, at_ms=100)
    ledger.outcome("s/0/0", "ACK", 1, by_acker=True, at_ms=950)  # re-decided after a failover: the first ack counts
    ledger.outcome("s/0/1", "FAILED", 1, by_acker=True, at_ms=100)
    ledger.copy("r", 0, 0, "s/0/1")
    ledger.outcome("r/0/0", "ACK", 1, by_acker=True, at_ms=300)
    ledger.outcome("s/0/2", "FAILED", 1, by_acker=True, at_ms=100)
    for offset, at in ((1, 200), (2, 400)):  # two copies of s/0/2 (a replay re-driven): the first ack counts
        ledger.copy("r", 0, offset, "s/0/2")
        ledger.outcome(f"r/0/{offset}", "ACK", 1, by_acker=True, at_ms=at)
    for word, sentence, at in ((b"the", "s/0/0", 90), (b"cow", "s/0/0", 900), (b"a", "s/0/1", 50)):
        ledger.count(word, sentence, at_ms=at)
    ledger.count(b"moon", "s/0/1", at_ms=250)  # counted in the replay, before the copy's ack
    ledger.count(b"a", "s/0/2", at_ms=50)
    ledger.count(b"sun", "s/0/2", at_ms=250)  # after the first copy's ack, before the second's
    report = ledger.report()
    assert report.acked_early == ["s/0/0 (acked at 100; 'cow' counted 0 of 1 time(s) by then)",
                                  "s/0/2 (acked at 200; 'sun' counted 0 of 1 time(s) by then)"]  # fmt: skip
    assert report.words_lost == 0 and "acked before every word was counted" in report.failures[0]


def test_the_good_records_expected_to_fail_every_attempt_take_each_word_of_a_sentence() -> None:
    """A sentence is kept at an attempt if it is not failed and none of its words is dropped."""
    ledger = _ledger(b"a b", b"c", b"poison d", poison=2)
    ledger.fail_rate, ledger.drop_rate, ledger.max_attempts = 0.5, 0.5, 1
    kept_two, kept_one = 0.5 * 0.5**2, 0.5 * 0.5  # the poison sentence is not a good record
    assert ledger.expected_failed_every_attempt() == (1 - kept_two) ** 2 + (1 - kept_one) ** 2


def test_poison_dead_lettered_before_its_replays_and_letters_nobody_could_read_are_failures() -> None:
    ledger = _ledger(b"poison a", b"poison b", poison=0)
    ledger.poison.add("s/0/1")
    ledger.max_attempts = 1
    for origin, copy in (("s/0/0", 0), ("s/0/1", None)):
        ledger.outcome(origin, "FAILED", 0, by_acker=True, at_ms=1)
        if copy is not None:
            ledger.copy("r", 0, copy, origin)
            ledger.outcome(f"r/0/{copy}", "FAILED", 0, by_acker=True, at_ms=2)
        ledger.dead_letter(origin)
    ledger.unreadable_letter("acker.dlq")
    report = ledger.report()
    assert report.poison_not_replayed == ["s/0/1"]  # nacked once, dead-lettered without its one replay
    assert report.other_dead_letters == {"acker.dlq": 1}
    assert any("before their replays" in f for f in report.failures)
    assert any("nobody could read: {'acker.dlq': 1}" in f for f in report.failures)
