"""`acker dlq list|show|redrive` on the real broker: dead letters of the replay job and of the acker service."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

import acker.dlq
from acker.cli import main
from acker.config import ServiceConfig, to_argv
from acker.core.ids import IdGenerator
from acker.kafka.clients import AsWritten, KafkaClientError, TopicSpec, create_topics, log_bounds, produce, read_to
from acker.retries import ATTEMPT, ORIGIN, REASON, REDRIVEN, SPOUT, RetryPolicy, decide, redrive, too_large
from acker.wire import encode_outcome_rows
from tests.integration.helpers import (
    ServiceThread,
    create_acker_topics,
    produce_with_header_name,
    read_partition,
    send,
)
from tests.integration.test_bad_input_and_operations import _dead_letters
from tests.integration.test_service import _tree_messages


def _dlq(config: ServiceConfig, *args: str) -> int:
    flags, _ = to_argv(config)
    return main(["dlq", *args, *flags])


@pytest.fixture
def letters(config: ServiceConfig) -> ServiceConfig:
    """Two dead letters of the replay job (as it writes them) in the replay dead-letter topic of ``config``."""
    config = replace(config, replay_dlq_topic=f"{config.group}.replay-dlq", replay_prefix=f"{config.group}.rp.")
    create_topics(config.client(), [TopicSpec(config.replay_dlq_topic, 1), TopicSpec(config.replay_topic("sp"), 2)])
    policy = RetryPolicy(max_attempts=2, replay_prefix=config.replay_prefix, dead_letter_topic=config.replay_dlq_topic)
    producer = Producer(config.client())
    for i, (msg_id, reason) in enumerate((("src/1/7", "FAILED"), ("src/0/3", "TIMEOUT"))):
        tried = [("app", b"a"), (ATTEMPT, b"2"), (ORIGIN, msg_id.encode())]
        letter = decide(policy, "sp", f"{config.replay_prefix}sp/0/{i}", reason, headers=tried, now_ms=0)
        assert letter.topic == config.replay_dlq_topic
        produce(producer, letter.topic, f"value-{i}".encode(), key=f"key-{i}".encode(), headers=letter.headers)
    assert producer.flush(30) == 0
    return config


def test_list_shows_each_dead_letter_with_its_reason_origin_and_attempts(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _dlq(letters, "list", "--json") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["coordinates"], r["reason"], r["origin"], r["attempts"], r["spout"], r["key"]) for r in rows] == [
        (f"{letters.replay_dlq_topic}/0/0", "FAILED", "src/1/7", 2, "sp", "key-0"),
        (f"{letters.replay_dlq_topic}/0/1", "TIMEOUT", "src/0/3", 2, "sp", "key-1"),
    ]
    assert _dlq(letters, "list") == 0  # the table
    assert "2 dead letter(s)" in capsys.readouterr().out
    for place in ("0/1", f"{letters.replay_dlq_topic}/0/1"):  # as given, or as listed
        assert _dlq(letters, "show", place) == 0
        shown = capsys.readouterr().out
        assert "header acker.replay.origin: src/0/3" in shown and "value: value-1" in shown and "header app: a" in shown


def test_list_marks_a_record_dead_lettered_again_after_a_restart_as_a_copy(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """The acker's next owner replays its partition from the recovery offset, which a pending tree holds before a bad
    record: the record is dead-lettered again (dead letters are at-least-once). `dlq list` said nothing of it, and two
    letters read as two bad records."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    _, head, _ = _tree_messages("src/0/1", IdGenerator(3))
    send(config, head)  # pending: it holds the recovery offset at its record
    producer = Producer(config.client())
    produce(producer, config.acker_topic, b"not an acker record", partition=0)
    assert producer.flush(30) == 0
    for letters in (1, 2):  # a clean stop, and a start again
        service = ServiceThread(config)
        try:
            assert len(_dead_letters(config, letters)) == letters
        finally:
            service.stop()
    assert _dlq(config, "list", "--json", "--topic", config.dlq_topic) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["origin"] for r in rows] == [f"{config.acker_topic}/0/1"] * 2
    assert [r["repeat_of"] for r in rows] == [None, rows[0]["coordinates"]]
    assert _dlq(config, "list", "--topic", config.dlq_topic) == 0
    assert "1 of them copy an earlier letter" in capsys.readouterr().out


def test_what_a_record_holds_is_shown_as_text_never_as_markup_or_terminal_codes(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key ``[/oops]`` made `dlq list` fail with rich's MarkupError (a traceback, no table) for as long as the record
    was listed; escape sequences in a key, value or header were printed raw (clearing the screen, retitling the
    terminal)."""
    tried = [(ATTEMPT, b"2"), (ORIGIN, b"src/0/9\x1b]0;pwned\x07"), ("h", b"\x1b[31mX"), ("n\x1b[2J", b"x")]
    policy = RetryPolicy(2, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic)
    letter = decide(policy, "sp", f"{letters.replay_prefix}sp/0/9", "FAILED", headers=tried, now_ms=0)
    producer = Producer(letters.client())
    produce(producer, letter.topic, b"\x1b[2Jclear", key=b"[/oops]\x1b]0;pwned\x07", headers=letter.headers)
    assert producer.flush(30) == 0
    assert _dlq(letters, "list") == 0
    listed = capsys.readouterr().out
    assert "[/oops]\\x1b]0;pw" in listed and "\x1b" not in listed
    assert _dlq(letters, "show", "0/2") == 0
    shown = capsys.readouterr().out
    assert "value: \\x1b[2Jclear" in shown and "header h: \\x1b[31mX" in shown and "\x1b" not in shown
    assert "header n\\x1b[2J: x" in shown
    assert _dlq(letters, "redrive", "2", "--dry-run") == 0
    assert "origin src/0/9\\x1b]0;pwned\\x07" in (said := capsys.readouterr().out) and "\x1b" not in said


def test_a_letter_whose_headers_cannot_be_read_says_so_and_is_not_re_driven(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header name that is not UTF-8 (a C or Go producer's): `show` printed the letter without a header line and
    without a word, and `redrive` refused it as "not dead-lettered by the replay job"."""
    at = produce_with_header_name(letters.client(), letters.replay_dlq_topic, 0, name=b"\xff", value=b"v")
    assert at == f"{letters.replay_dlq_topic}/0/2"
    assert _dlq(letters, "show", "2") == 0
    assert "headers: cannot be read (a header name is not UTF-8)" in capsys.readouterr().out
    assert _dlq(letters, "redrive", "2") == 2
    assert "has headers that cannot be read" in capsys.readouterr().err
    assert _dlq(letters, "redrive", "--all", "--dry-run") == 0
    assert "1 record(s) skipped: has headers that cannot be read" in capsys.readouterr().out


def test_list_limit_shows_the_newest_across_partitions(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """It showed the highest partition's records, whatever their age."""
    topic = f"{config.group}.dlq2"
    create_topics(config.client(), [TopicSpec(topic, 2)])
    producer = Producer(config.client())
    now_ms = int(time.time() * 1000)
    for partition, age_ms in ((1, 86_400_000), (1, 86_300_000), (0, 2_000), (0, 1_000)):
        producer.produce(topic, b"v", partition=partition, timestamp=now_ms - age_ms)
    assert producer.flush(30) == 0
    assert _dlq(config, "list", "--json", "--topic", topic, "--limit", "2") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["coordinates"] for row in rows] == [f"{topic}/0/0", f"{topic}/0/1"]


def test_list_limit_reads_the_newest_from_the_end_past_transaction_markers(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It read the whole topic to show a few; read from the end, a window of ``--limit`` offsets holds fewer
    records where each transaction's marker takes an offset (as in the replay job's dead-letter topic)."""
    topic = f"{config.group}.dlq3"
    create_topics(config.client(), [TopicSpec(topic, 1)])
    producer = Producer(config.client(**{"transactional.id": f"{config.group}.letters"}))
    producer.init_transactions(30)
    for i in range(10):  # offsets 0, 2, ..., 18, each followed by its commit marker
        producer.begin_transaction()
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode())
        producer.commit_transaction(30)
    read, made = acker.dlq._past_open_transactions, []

    def counted(*args: Any) -> Iterator[Message]:
        for record in read(*args):
            made.append(record.offset())
            yield record

    monkeypatch.setattr(acker.dlq, "_past_open_transactions", counted)
    assert _dlq(config, "list", "--json", "--topic", topic, "--limit", "3") == 0
    said = capsys.readouterr()
    assert [json.loads(line)["key"] for line in said.out.splitlines()] == ["k7", "k8", "k9"]
    # A null repeat_of is not "no copy" of a letter not read (offsets 0-13: 7 records, 7 markers).
    assert "repeat_of is looked for among the letters read: up to 14 older record(s) not read" in said.err
    assert made == [18, 14, 16, 18]  # offsets 17-19 held 1 record, 14-19 the 3 asked for
    assert _dlq(config, "list", "--topic", topic, "--limit", "3") == 0
    out = capsys.readouterr().out
    assert "the newest 3 dead letter(s)" in out and "up to 14 older record(s) not shown" in out
    assert "'copy of' marks copies of the letters read (up to 14 older record(s) not read)" in out.replace("\n", " ")
    assert _dlq(config, "list", "--topic", topic, "--limit", "0") == 0
    said = capsys.readouterr()
    assert "10 dead letter(s)" in said.out and "not read" not in said.out + said.err


def test_a_redrive_delivered_in_part_says_which_records_went(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Re-driven again after a partial failure, the delivered ones would be replayed twice: they are named."""
    spout = "small"
    replay_topic = letters.replay_topic(spout)
    create_topics(letters.client(), [TopicSpec(replay_topic, 2, config={"max.message.bytes": "1000"})])
    topic = f"{letters.group}.dlq3"
    create_topics(letters.client(), [TopicSpec(topic, 1)])
    policy = RetryPolicy(max_attempts=0, replay_prefix=letters.replay_prefix, dead_letter_topic=topic)
    producer = Producer(letters.client())
    for i, size in enumerate((10, 3_000)):  # to partitions 0 and 1 (their origins'), in batches of their own
        origin = f"src/{i}/{i}"
        letter = decide(policy, spout, origin, "FAILED", headers=[(ORIGIN, origin.encode())], now_ms=0)
        produce(producer, topic, b"x" * size, headers=letter.headers)
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "--all", "--topic", topic) == 2
    error = capsys.readouterr().err
    assert f"{topic}/0/1: " in error and f"delivered, not to re-drive again: ['{topic}/0/0']" in error
    assert [value for _, _, value in read_partition(letters, replay_topic, 0)] == [b"x" * 10]


def test_a_redrive_the_producer_refuses_at_once_names_the_records_delivered(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy larger than the producer takes raised out of the loop: the copies sent before it went, unnamed."""
    topic = f"{letters.group}.dlq4"
    create_topics(letters.client(), [TopicSpec(topic, 1, config={"max.message.bytes": "3000000"})])
    policy = RetryPolicy(max_attempts=0, replay_prefix=letters.replay_prefix, dead_letter_topic=topic)
    producer = Producer(letters.client(**{"message.max.bytes": 3_000_000}))
    for i, size in enumerate((10, 2_000_000, 10)):
        origin = f"src/0/{i}"
        letter = decide(policy, "sp", origin, "FAILED", headers=[(ORIGIN, origin.encode())], now_ms=0)
        produce(producer, topic, b"x" * size, headers=letter.headers)
        assert producer.flush(30) == 0  # one batch each
    assert _dlq(letters, "redrive", "--all", "--topic", topic) == 2
    error = capsys.readouterr().err
    assert f"{topic}/0/1: " in error and f"delivered, not to re-drive again: ['{topic}/0/0', '{topic}/0/2']" in error
    assert [value for _, _, value in read_partition(letters, letters.replay_topic("sp"), 0)] == [b"x" * 10] * 2


def test_redrive_sends_the_record_back_to_its_spout_as_a_new_round(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    replay_topic = letters.replay_topic("sp")
    assert _dlq(letters, "redrive", "0", "--dry-run") == 0
    assert "would be re-driven" in capsys.readouterr().out
    assert read_partition(letters, replay_topic, 1) == []
    assert _dlq(letters, "redrive", "0") == 0
    assert f"-> {replay_topic}[1]" in capsys.readouterr().out  # the origin's partition, src/1/7
    copies = read_partition(letters, replay_topic, 1)
    assert [value for _, _, value in copies] == [b"value-0"]
    consumer_view = _headers_of(letters, replay_topic, 1)
    assert consumer_view[ATTEMPT] == b"0" and consumer_view[ORIGIN] == b"src/1/7" and consumer_view[SPOUT] == b"sp"
    assert consumer_view[REASON] == b"FAILED" and consumer_view["app"] == b"a"
    assert consumer_view[REDRIVEN] == f"{letters.replay_dlq_topic}/0/0".encode()


def test_a_letter_is_re_driven_once_a_round_unless_again(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Re-driven twice (a command run again, a second operator), each record was replayed twice: its copy is in the
    replay topic, not dead-lettered again, so its round is not over (or it was processed)."""
    replays = [letters.replay_topic("sp")]
    assert _dlq(letters, "redrive", "0") == 0
    capsys.readouterr()
    assert _dlq(letters, "redrive", "0", "1") == 2  # named: refused as a whole, nothing sent
    error = capsys.readouterr().err
    assert f"{letters.replay_dlq_topic}/0/0 (copy at {replays[0]}/1/0)" in error and "--again" in error
    assert _dlq(letters, "redrive", "--all", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "1 record(s) skipped: re-driven already: its copy is in its replay topic" in out
    assert "1 record(s) would be re-driven" in out
    assert _dlq(letters, "redrive", "--all") == 0
    assert "1 record(s) re-driven" in capsys.readouterr().out  # the other one, 0/1
    assert _dlq(letters, "redrive", "--all") == 0
    assert "2 record(s) skipped: re-driven already" in capsys.readouterr().out
    assert _dlq(letters, "redrive", "0", "--again") == 0
    origins = sorted(h[ORIGIN] for p in (0, 1) for h in _every_headers(letters, replays[0], p))
    assert origins == [b"src/0/3", b"src/1/7", b"src/1/7"]


def test_a_letter_re_driven_to_its_spout_is_not_sent_again_to_another(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --spout, only that spout's replay topic was looked at: the copy sent before to the letter's own spout
    went unseen, and the record was replayed by both."""
    create_topics(letters.client(), [TopicSpec(letters.replay_topic("other"), 1)])
    assert _dlq(letters, "redrive", "0") == 0
    capsys.readouterr()
    assert _dlq(letters, "redrive", "0", "--spout", "other") == 2
    assert f"(copy at {letters.replay_topic('sp')}/1/0)" in capsys.readouterr().err
    assert read_partition(letters, letters.replay_topic("other"), 0) == []


def test_a_letter_re_driven_to_another_spout_is_not_sent_again_to_its_own(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the topic a re-drive sends to and the letter's own spout's were looked at: a copy sent before with
    --spout to another spout's went unseen, and the record was replayed by both."""
    create_topics(letters.client(), [TopicSpec(letters.replay_topic("other"), 1)])
    assert _dlq(letters, "redrive", "0", "--spout", "other") == 0
    capsys.readouterr()
    assert _dlq(letters, "redrive", "0") == 2
    assert f"(copy at {letters.replay_topic('other')}/0/0)" in capsys.readouterr().err
    assert _dlq(letters, "redrive", "--all") == 0
    assert "1 record(s) skipped: re-driven already" in capsys.readouterr().out  # 0/1 went back
    origins = [h[ORIGIN] for p in (0, 1) for h in _every_headers(letters, letters.replay_topic("sp"), p)]
    assert origins == [b"src/0/3"]


def _dead_lettered_again(letters: ServiceConfig) -> None:
    """The copy of letter 0/0 re-driven failed every replay: dead-lettered again, as 0/2, which names 0/0."""
    [copy] = _every_headers(letters, letters.replay_topic("sp"), 1)
    policy = RetryPolicy(
        max_attempts=0, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    again = decide(policy, "sp", f"{letters.replay_topic('sp')}/1/0", "FAILED", headers=list(copy.items()), now_ms=0)
    producer = Producer(letters.client())
    produce(producer, again.topic, b"value-0", headers=again.headers)
    assert producer.flush(30) == 0


def test_a_letter_dead_lettered_again_is_not_re_driven_by_name_beside_the_later_letter(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--all` left such a letter out, but named it went back: the later letter's copy and its own both replayed."""
    assert _dlq(letters, "redrive", "0") == 0
    _dead_lettered_again(letters)
    capsys.readouterr()
    assert _dlq(letters, "redrive", "0", "2") == 2  # both at once
    assert f"{letters.replay_dlq_topic}/0/0 (dead-lettered again as {letters.replay_dlq_topic}/0/2)" in (
        capsys.readouterr().err
    )
    assert _dlq(letters, "redrive", "2") == 0
    assert _dlq(letters, "redrive", "0") == 2  # after it
    origins = [h[ORIGIN] for p in (0, 1) for h in _every_headers(letters, letters.replay_topic("sp"), p)]
    assert origins == [b"src/1/7", b"src/1/7"]  # the first re-drive's copy, and the later letter's


def test_a_letter_at_a_place_an_older_letter_had_is_re_driven_by_all(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead-letter topic made again numbers its letters from 0 again: a later letter naming this place, of another
    origin, stands for an older letter's copy, and left this one out of every `--all` for good."""
    policy = RetryPolicy(
        max_attempts=0, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    older = [(ATTEMPT, b"0"), (ORIGIN, b"src/9/9"), (SPOUT, b"sp"),
             (REDRIVEN, f"{letters.replay_dlq_topic}/0/0".encode())]  # fmt: skip
    again = decide(policy, "sp", f"{letters.replay_topic('sp')}/0/0", "FAILED", headers=older, now_ms=0)
    producer = Producer(letters.client())
    produce(producer, again.topic, b"older", headers=again.headers)
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "--all") == 0
    assert "3 record(s) re-driven" in capsys.readouterr().out


def test_a_copy_of_another_letter_at_the_same_place_does_not_hold_a_letter_back(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead-letter topic made again numbers its letters from 0 again: a copy still in the replay topic that names
    this place but another origin is an older letter's."""
    producer = Producer(letters.client())
    older = [(ORIGIN, b"src/9/9"), (REDRIVEN, f"{letters.replay_dlq_topic}/0/1".encode())]
    produce(producer, letters.replay_topic("sp"), b"older", headers=older, partition=0)
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "1") == 0  # origin src/0/3
    assert "1 record(s) re-driven" in capsys.readouterr().out


def test_redrive_all_sends_those_that_can_go_back_and_says_which_cannot(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """One record there that is not the replay job's (produced by hand, say) refused the whole set; so did one whose
    spout's replay topic does not exist, or cannot (a name no topic can have), each with a Kafka error and
    nothing sent. A spout name no spout can have (the replay job dead-letters its nacks whole, `no-replay-topic`) sent
    the copy to the replay job's own progress topic."""
    progress = letters.replay_topic("progress")  # the replay job's: not a spout's replay topic
    create_topics(letters.client(), [TopicSpec(progress, 1)])
    producer = Producer(letters.client())
    produce(producer, letters.replay_dlq_topic, b"by hand", headers=[("app", b"x")])
    policy = RetryPolicy(
        max_attempts=1, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    for spout in ("gone", "sen tences", "progress"):
        tried = [(ATTEMPT, b"1"), (ORIGIN, b"src/0/5")]
        letter = decide(policy, spout, f"{policy.replay_topic(spout)}/0/1", "FAILED", headers=tried, now_ms=0)
        produce(producer, letter.topic, b"elsewhere", headers=letter.headers)
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "--all") == 0
    out = capsys.readouterr().out
    assert "1 record(s) skipped: has no acker.replay.origin header" in out and "2 record(s) re-driven" in out
    assert f"1 record(s) skipped: no replay topic {letters.replay_topic('gone')}: a spout creates" in out
    cannot = "1 record(s) skipped: names a spout its copy cannot go back to: spout name"
    assert f"{cannot} 'sen tences' cannot name a topic" in out
    assert f"{cannot} 'progress' is reserved" in out
    assert read_partition(letters, progress, 0) == []
    replayed = read_partition(letters, letters.replay_topic("sp"), 0) + read_partition(
        letters, letters.replay_topic("sp"), 1
    )
    assert sorted(value or b"" for _, _, value in replayed) == [b"value-0", b"value-1"]


def test_redrive_all_skips_a_letter_whose_spouts_replay_topic_name_would_be_too_long(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spout name of 200 characters under a long replay prefix: the broker refused the topic's name, and the error
    stopped the whole re-drive, the other letters unsent."""
    longer = replace(letters, replay_prefix=f"{letters.replay_prefix}{'p' * 40}.")
    create_topics(longer.client(), [TopicSpec(longer.replay_topic("sp"), 1)])
    policy = RetryPolicy(max_attempts=1, replay_prefix=longer.replay_prefix, dead_letter_topic=longer.replay_dlq_topic)
    tried = [(ATTEMPT, b"1"), (ORIGIN, b"src/0/5")]
    letter = decide(policy, "s" * 200, f"{policy.replay_topic('s' * 200)}/0/1", "FAILED", headers=tried, now_ms=0)
    assert letter.topic == longer.replay_dlq_topic
    producer = Producer(longer.client())
    produce(producer, letter.topic, b"long", headers=letter.headers)
    assert producer.flush(30) == 0
    assert _dlq(longer, "redrive", "--all") == 0
    out = capsys.readouterr().out
    assert f"1 record(s) skipped: names a spout its copy cannot go back to: spout name '{'s' * 80}' is too long" in out
    assert "2 record(s) re-driven" in out
    assert sorted(value or b"" for _, _, value in read_partition(longer, longer.replay_topic("sp"), 0)) == [
        b"value-0",
        b"value-1",
    ]


def test_a_dead_letter_re_driven_and_dead_lettered_again_is_re_driven_once(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replays of a re-driven copy dropped its `acker.replay.redriven` header: its next dead letter looked like
    a first one, and `redrive --all` sent both it and the letter it came from: two copies of the record, then four."""
    assert _dlq(letters, "redrive", "0") == 0  # value-0, origin src/1/7
    [(_, _, value)] = read_partition(letters, letters.replay_topic("sp"), 1)
    copy = _headers_of(letters, letters.replay_topic("sp"), 1)
    policy = RetryPolicy(
        max_attempts=1, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    replay = decide(policy, "sp", f"{letters.replay_topic('sp')}/1/0", "FAILED", headers=list(copy.items()), now_ms=0)
    again = decide(policy, "sp", f"{letters.replay_topic('sp')}/1/1", "FAILED", headers=replay.headers, now_ms=0)
    assert again.topic == letters.replay_dlq_topic and dict(again.headers)[REDRIVEN] == copy[REDRIVEN]
    producer = Producer(letters.client())
    produce(producer, again.topic, value, headers=again.headers)  # the copy failed every replay: a dead letter
    assert producer.flush(30) == 0
    capsys.readouterr()
    assert _dlq(letters, "list", "--json") == 0  # the new letter says which one its round was re-driven from
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [letter["redriven_from"] for letter in listed] == [None] * (len(listed) - 1) + [copy[REDRIVEN].decode()]
    assert _dlq(letters, "list") == 0
    assert f"{letters.replay_dlq_topic}/0/0" in capsys.readouterr().out  # its column in the table
    assert _dlq(letters, "redrive", "--all") == 0
    out = capsys.readouterr().out
    assert "1 record(s) skipped: re-driven already, and dead-lettered again" in out and "2 record(s) re-driven" in out
    origins = [h[ORIGIN] for p in (0, 1) for h in _every_headers(letters, letters.replay_topic("sp"), p)]
    assert sorted(origins) == [b"src/0/3", b"src/1/7", b"src/1/7"]  # the first re-drive's copy, and one more


def test_a_letter_named_only_by_a_later_one_that_cannot_go_back_goes_back_itself(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """The re-driven copy of letter 0/1 came back dead-lettered as too large (only part of it kept): 0/1 was skipped
    as "re-driven already" and the later letter refused, so neither went back."""
    policy = RetryPolicy(
        max_attempts=3, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    copy = [
        (ATTEMPT, b"0"),
        (ORIGIN, b"src/0/3"),
        (SPOUT, b"sp"),
        (REDRIVEN, f"{letters.replay_dlq_topic}/0/1".encode()),
    ]
    replay = decide(policy, "sp", f"{letters.replay_topic('sp')}/0/0", "FAILED", headers=copy, now_ms=0)
    cut = too_large(policy, replay, f"{letters.replay_topic('sp')}/0/0", "FAILED", 10**7)
    assert dict(cut.headers)[REDRIVEN] == f"{letters.replay_dlq_topic}/0/1".encode()
    producer = Producer(letters.client())
    produce(producer, letters.replay_topic("sp"), b"value-1", headers=copy, partition=0)  # its round: over
    produce(producer, cut.topic, b"value-1 in part", headers=cut.headers)
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "--all") == 0
    out = capsys.readouterr().out
    assert "2 record(s) re-driven" in out and "re-driven already" not in out and "1 record(s) skipped" in out
    replayed = read_partition(letters, letters.replay_topic("sp"), 0) + read_partition(
        letters, letters.replay_topic("sp"), 1
    )
    assert sorted(value or b"" for _, _, value in replayed) == [b"value-0", b"value-1", b"value-1"]


def test_a_letter_named_by_a_later_one_that_cannot_go_back_goes_back_by_name_too(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Letter 0/1 re-driven, its copy dead-lettered as too large (0/2, only part of it kept): named, 0/1 was refused
    ("re-drive the later letter instead"), and the later letter was refused as too large: only --again sent it, which
    the message said would replay the record twice. `--all` sends it."""
    policy = RetryPolicy(
        max_attempts=3, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    assert _dlq(letters, "redrive", "1") == 0
    [copy] = _every_headers(letters, letters.replay_topic("sp"), 0)
    replay = decide(policy, "sp", f"{letters.replay_topic('sp')}/0/0", "FAILED", headers=list(copy.items()), now_ms=0)
    cut = too_large(policy, replay, f"{letters.replay_topic('sp')}/0/0", "FAILED", 10**7)
    producer = Producer(letters.client())
    produce(producer, cut.topic, b"part", headers=cut.headers)
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "2") == 2  # the later letter: too large
    assert _dlq(letters, "redrive", "1") == 0
    origins = [h[ORIGIN] for h in _every_headers(letters, letters.replay_topic("sp"), 0)]
    assert origins == [b"src/0/3", b"src/0/3"]


def test_a_copy_letter_of_a_record_re_driven_through_another_is_not_re_driven_beside_the_later_letter(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """0/2 is a copy of letter 0/0 (the same record and round, dead-lettered again when read again). 0/0 re-driven,
    its copy failed again (0/3 names 0/0): 0/0 was refused by name, but 0/2 went back, and 0/3 after it: the record in
    two rounds at once."""
    [first] = _every_headers(letters, letters.replay_dlq_topic, 0)[:1]
    producer = Producer(letters.client())
    produce(producer, letters.replay_dlq_topic, b"value-0", key=b"key-0", headers=list(first.items()))
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "0") == 0
    [copy] = _every_headers(letters, letters.replay_topic("sp"), 1)
    failing = RetryPolicy(
        max_attempts=0, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    again = decide(failing, "sp", f"{letters.replay_topic('sp')}/1/0", "FAILED", headers=list(copy.items()), now_ms=0)
    produce(producer, again.topic, b"value-0", headers=again.headers)  # 0/3, naming 0/0
    assert producer.flush(30) == 0
    capsys.readouterr()
    topic = letters.replay_dlq_topic
    assert _dlq(letters, "redrive", "2") == 2
    said = capsys.readouterr().err
    assert f"{topic}/0/2 (its record re-driven as {topic}/0/0, dead-lettered again as {topic}/0/3)" in said
    assert _dlq(letters, "redrive", "3") == 0  # the later letter goes back
    origins = [h[ORIGIN] for p in (0, 1) for h in _every_headers(letters, letters.replay_topic("sp"), p)]
    assert origins == [b"src/1/7", b"src/1/7"]  # 0/0's copy, and 0/3's


def test_bad_requests_are_refused_with_a_clear_message_and_send_nothing(
    config: ServiceConfig, letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    # A dead letter of the acker service itself (an unreadable acker record) lists, but cannot be re-driven: also
    # one of a spout's replay copy written there by mistake, whose replay headers the letter keeps as its own (it
    # was listed with their reason and origin, and re-driven).
    create_acker_topics(config)
    producer = Producer(config.client())
    copy = [(ATTEMPT, b"2"), (ORIGIN, b"src/0/1"), (REASON, b"FAILED"), (SPOUT, b"sp")]
    produce(producer, config.acker_topic, b"garbage", partition=0, headers=copy)
    assert producer.flush(30) == 0
    service = ServiceThread(config)
    try:
        assert _dead_letters(config, 1)
    finally:
        service.stop()
    assert _dlq(config, "list", "--json", "--topic", config.dlq_topic) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (row["reason"], row["origin"]) == ("bad-magic", f"{config.acker_topic}/0/0")
    assert _dlq(config, "redrive", "0/0", "--topic", config.dlq_topic) == 2  # named: refused
    assert "is the acker's dead letter (acker.dlq.reason), not the replay job's" in capsys.readouterr().err
    assert _dlq(config, "redrive", "--all", "--topic", config.dlq_topic) == 0  # all: skipped, and said so
    out = capsys.readouterr().out
    assert "1 record(s) skipped: is the acker's dead letter" in out and "0 record(s) re-driven" in out
    assert _dlq(letters, "show", "0/99") == 2
    assert f"no record at {letters.replay_dlq_topic}/0/99" in capsys.readouterr().err
    assert _dlq(letters, "show", "5/0", "3/1") == 2  # partitions it does not have: said as such, not as records
    assert f"{letters.replay_dlq_topic} has partitions 0-0, not 3, 5" in capsys.readouterr().err
    assert _dlq(letters, "list", "--json", "--topic", "no-such-topic") == 0  # none yet, as on a fresh install
    out, err = capsys.readouterr()
    assert out == "" and "no-such-topic: no such topic yet" in err
    assert _dlq(letters, "list", "--topic", "no-such-topic") == 0  # the table says why it is empty
    assert "no-such-topic: no such topic yet, so no dead letters" in capsys.readouterr().out
    assert _dlq(letters, "show", "0/0", "--topic", "no-such-topic") == 2  # but a place in it is an error
    assert "no dead-letter topic 'no-such-topic'" in capsys.readouterr().err
    assert _dlq(letters, "redrive", "--all", "--topic", "no-such-topic") == 2  # not "0 re-driven": a typo?
    assert "no dead-letter topic 'no-such-topic'" in capsys.readouterr().err
    replays = letters.replay_topic("sp")  # a live replay topic: its records are replayed already
    assert _dlq(letters, "redrive", "--all", "--dry-run", "--topic", replays) == 2
    assert f"{replays} is a replay topic, not a dead-letter topic" in capsys.readouterr().err
    assert _dlq(letters, "show", "other.dlq/0/0") == 2  # a place as listed, of another topic
    assert f"is a record of 'other.dlq', not of '{letters.replay_dlq_topic}'" in capsys.readouterr().err
    assert _dlq(letters, "redrive") == 2
    # A spout name no spout can have, or one without a replay topic (a typo): the copies would go where nobody
    # reads them (the redrive used to create the topic), or into the dead-letter topic itself.
    assert _dlq(letters, "redrive", "0", "--spout", "dlq") == 2
    assert "is reserved" in capsys.readouterr().err
    assert _dlq(letters, "redrive", "0", "--spout", "sq") == 2
    assert f"no topic {letters.replay_topic('sq')}" in capsys.readouterr().err
    assert _dlq(letters, "redrive", "0", "--spout", "sq", "--dry-run") == 2  # refused as the real run is
    assert f"no topic {letters.replay_topic('sq')}" in capsys.readouterr().err
    assert _dlq(letters, "list", "--json", "--topic", letters.replay_topic("sq")) == 0  # still not created
    assert capsys.readouterr().out == ""
    assert read_partition(letters, letters.replay_topic("sp"), 0) == []
    assert read_partition(letters, letters.replay_topic("sp"), 1) == []


def _every_headers(config: ServiceConfig, topic: str, partition: int) -> list[dict[str, bytes]]:
    consumer = Consumer(config.client(**{"group.id": "h", "enable.auto.commit": False}))
    try:
        end = log_bounds(consumer, TopicPartition(topic, partition))[1]
        return [dict(r.headers() or []) for r in read_to(consumer, TopicPartition(topic, partition, 0), end)]  # type: ignore[arg-type]
    finally:
        consumer.close()


def _headers_of(config: ServiceConfig, topic: str, partition: int) -> dict[str, bytes]:
    consumer = Consumer(config.client(**{"group.id": "h", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, partition, 0)])
    try:
        for _ in range(50):
            for record in consumer.consume(1, timeout=0.2):
                if record.error() is None:
                    return dict(record.headers() or [])  # type: ignore[arg-type]
        raise AssertionError("no record")
    finally:
        consumer.close()


def _left_open(letters: ServiceConfig, topic: str, partition: int, value: bytes) -> Producer:
    """A producer whose transaction holds ``value`` on ``topic``'s ``partition``, left open (as by a replay job's
    driver dead mid-batch), and not aborted by the broker for ten minutes: the caller aborts it."""
    stuck = Producer(
        letters.client(**{"transactional.id": f"stuck-{letters.group}", "transaction.timeout.ms": 600_000})
    )
    stuck.init_transactions(30)
    stuck.begin_transaction()
    stuck.produce(topic, value, partition=partition)
    assert stuck.flush(30) == 0
    return stuck


def test_a_letter_re_driven_behind_a_transaction_left_open_is_not_re_driven_again(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay job's transaction left open on the replay topic (its driver died mid-batch) hid the copy re-driven
    after it from a read up to the last stable offset: the letter was re-driven a second time. The read now goes to
    the end as written, waiting for the broker to abort the transaction (here it is aborted after 3 s)."""
    replay_topic = letters.replay_topic("sp")
    stuck = _left_open(letters, replay_topic, 1, b"a replay in a transaction")
    letter = f"{letters.replay_dlq_topic}/0/0"
    [dead] = [h for h in _every_headers(letters, letters.replay_dlq_topic, 0) if h[ORIGIN] == b"src/1/7"]
    copy = redrive(RetryPolicy(replay_prefix=letters.replay_prefix), letter, list(dead.items()))
    producer = Producer(letters.client())  # re-driven (as `redrive` writes it): after the open transaction
    produce(producer, copy.topic, b"value-0", key=b"key-0", partition=1, headers=copy.headers)
    assert producer.flush(30) == 0
    aborting = threading.Timer(3.0, stuck.abort_transaction, args=(30,))
    aborting.start()
    try:
        assert _dlq(letters, "redrive", "0") == 2
    finally:
        aborting.join()
    assert f"{letter} (copy at {replay_topic}/1/1)" in capsys.readouterr().err


def test_letters_behind_a_transaction_left_open_are_listed_and_shown(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transaction left open on the dead-letter topic (a replay job's driver dead mid-batch) ended `dlq list` at
    the letters before it, without a word, and `dlq show` of a letter after it said there was no record there. They
    read to the end as written now, waiting for the broker to abort it (here it is aborted after 3 s)."""
    topic = letters.replay_dlq_topic
    stuck = _left_open(letters, topic, 0, b"a letter in a transaction")  # offset 2
    [dead] = _every_headers(letters, topic, 0)[:1]
    producer = Producer(letters.client())
    produce(producer, topic, b"after", key=b"k", partition=0, headers=list(dead.items()))  # offset 3
    assert producer.flush(30) == 0
    aborting = threading.Timer(3.0, stuck.abort_transaction, args=(30,))
    aborting.start()
    try:
        assert _dlq(letters, "list", "--json", "--limit", "0") == 0
        listed = sorted(json.loads(line)["coordinates"] for line in capsys.readouterr().out.splitlines())
    finally:
        aborting.join()
    assert listed == [f"{topic}/0/0", f"{topic}/0/1", f"{topic}/0/3"]  # the aborted one is no letter
    assert _dlq(letters, "show", "0/3") == 0
    assert "after" in capsys.readouterr().out


def test_a_read_stuck_behind_a_transaction_that_does_not_end_says_where_and_how_to_end_it(
    letters: ServiceConfig,
) -> None:
    """A read to a partition's end as written that waited past the broker's abort of an open transaction failed with
    "no progress past offset N towards M" and no more: whether its writer was slow or the transaction hanging, an
    operator could not tell. It now names the offset the open transaction begins at, and Kafka's tool that ends it."""
    topic = letters.replay_dlq_topic
    stuck = _left_open(letters, topic, 0, b"a letter in a transaction")  # offset 2, after the fixture's two letters
    try:
        with AsWritten(letters.client(), letters.group) as reading:
            reading.wait_s = 2.0  # not the broker's abort, ten minutes away
            with pytest.raises(KafkaClientError) as raised:
                list(reading.read(TopicPartition(topic, 0, 0)))
    finally:
        stuck.abort_transaction(30)
    said = str(raised.value)
    assert "no progress past offset 2 towards 3" in said, said
    assert "ends at offset 2 for this reader: read committed, a transaction open from there has not ended" in said, said
    assert "find-hanging" in said, said


def test_a_letter_of_an_aborted_transaction_is_no_letter_whatever_the_shared_settings(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay job's batch whose transaction was aborted ran again, and may have resolved its nacks otherwise (a
    watermark passed, another --max-attempts): its dead letter is none. With ``isolation.level`` read_uncommitted
    among the shared settings, the tools listed it, and re-drove a record already done."""
    aborted = Producer(letters.client(**{"transactional.id": f"aborted-{letters.group}"}))
    aborted.init_transactions(30)
    aborted.begin_transaction()
    policy = RetryPolicy(
        max_attempts=2, replay_prefix=letters.replay_prefix, dead_letter_topic=letters.replay_dlq_topic
    )
    tried = [(ATTEMPT, b"2"), (ORIGIN, b"src/0/9")]
    letter = decide(policy, "sp", f"{letters.replay_prefix}sp/0/5", "FAILED", headers=tried, now_ms=0)
    produce(aborted, letter.topic, b"aborted", headers=letter.headers)
    assert aborted.flush(30) == 0
    aborted.abort_transaction(30)
    shared = replace(letters, kafka={**letters.kafka, "isolation.level": "read_uncommitted"})
    for name, value in to_argv(shared)[1].items():  # the shared settings, as a child process gets them
        monkeypatch.setenv(name, value)
    assert _dlq(shared, "list", "--json") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["origin"] for r in rows] == ["src/1/7", "src/0/3"]
    assert _dlq(shared, "redrive", "--all") == 0
    assert "2 record(s) re-driven" in capsys.readouterr().out


def test_a_letter_whose_record_was_acked_too_is_marked_and_left_by_a_redrive_that_skips_acked(
    letters: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    # After a spout's restart: src/1/7 acked, read again from the watermark, and that copy dead-lettered; src/0/3
    # failed alone; src/0/2 acked once at its place, by another topic of the name (ten minutes before this one's
    # record was written); src/0/1, written twenty minutes ago, has a copy written now, at a place whose ACK is ten
    # minutes old (another copy's, in the replay topic before it was made again), and src/0/2 a copy half an hour
    # old acked now; the fixture's two letters name records of a topic that does not exist (not known); a letter
    # that names no spout, one of the acker's that names one (a replay copy's headers, forwarded), and one of the
    # record once at src/1/7 (older than this one): not known either.
    src, outcomes = f"{letters.group}.src", letters.outcome_topic("sp")
    replay_topic = letters.replay_topic("sp")
    create_topics(letters.client(), [TopicSpec(outcomes, 2), TopicSpec(src, 2)])
    now_ms = int(time.time() * 1000)
    producer = Producer(letters.client())
    for partition, offset in [(0, o) for o in range(4)] + [(1, o) for o in range(8)]:
        written = now_ms - 1_200_000 if (partition, offset) == (0, 1) else now_ms
        produce(producer, src, b"a sentence", partition=partition, timestamp=written)
    produce(producer, replay_topic, b"a sentence", headers=[(ORIGIN, f"{src}/0/1".encode())], partition=0)
    # A copy of src/0/2 of the replay topic before it was made again (half an hour old), acked now.
    produce(producer, replay_topic, b"a sentence", headers=[(ORIGIN, f"{src}/0/2".encode())], partition=0,
            timestamp=now_ms - 1_800_000)  # fmt: skip
    dlq, replay_prefix = letters.replay_dlq_topic, letters.replay_prefix
    policy = RetryPolicy(max_attempts=2, replay_prefix=replay_prefix, dead_letter_topic=dlq)
    for i, origin in enumerate((f"{src}/1/7", f"{src}/0/3", f"{src}/0/2", f"{src}/0/1")):
        tried = [(ATTEMPT, b"2"), (ORIGIN, origin.encode())]
        letter = decide(policy, "sp", f"{replay_topic}/0/{10 + i}", "FAILED", headers=tried, now_ms=0)
        produce(producer, letter.topic, b"a sentence", headers=letter.headers)
    produce(producer, dlq, b"no spout", headers=[("acker.dlq.reason", b"malformed")])
    acker_letter = [("acker.dlq.reason", b"malformed"), ("acker.dlq.origin", f"{src}/1/7".encode()), (SPOUT, b"sp")]
    produce(producer, dlq, b"a sentence", headers=acker_letter)
    # A letter of the record once at src/1/7 (written before this one, half an hour ago), of the same value.
    produce(producer, dlq, b"a sentence", headers=decide(policy, "sp", f"{replay_topic}/0/20", "FAILED", headers=[
        (ATTEMPT, b"2"), (ORIGIN, f"{src}/1/7".encode())], now_ms=0).headers, timestamp=now_ms - 1_800_000)  # fmt: skip
    produce(producer, outcomes, encode_outcome_rows("sp", [("ACK", 1, f"{src}/1/7", 5)]), partition=1)
    produce(producer, outcomes, encode_outcome_rows("sp", [("FAILED", 2, f"{src}/0/3", 5)]), partition=0)
    produce(producer, outcomes, b"not an outcome record", partition=0)
    old = {"timestamp": now_ms - 600_000, "partition": 0}  # ten minutes ago
    produce(producer, outcomes, encode_outcome_rows("sp", [("ACK", 3, f"{src}/0/2", 5)]), **old)
    produce(producer, outcomes, encode_outcome_rows("sp", [("ACK", 4, f"{replay_topic}/0/0", 5)]), **old)
    produce(producer, outcomes, encode_outcome_rows("sp", [("ACK", 6, f"{replay_topic}/0/1", 5)]), partition=0)
    assert producer.flush(30) == 0

    def marks() -> list[tuple[str, bool | None]]:
        assert _dlq(letters, "list", "--acked", "--json") == 0
        return [(r["origin"], r["acked"]) for r in map(json.loads, capsys.readouterr().out.splitlines())]

    assert marks() == [
        (f"{src}/1/7", None),  # of the record once there: oldest, listed first
        ("src/1/7", None),  # the fixture's: no such record
        ("src/0/3", None),
        (f"{src}/1/7", True),
        (f"{src}/0/3", False),
        (f"{src}/0/2", False),  # the ACKs of another record, and of a copy of it
        (f"{src}/0/1", False),  # the ACK of another copy
        ("?", None),  # names no spout
        (f"{src}/1/7", None),  # the acker's
    ]
    assert _dlq(letters, "list", "--acked", "--json") == 0
    err = capsys.readouterr().err
    assert f"1 record(s) of {outcomes} could not be read (the first at {outcomes}/0/1" in err
    assert "2 record(s) of spout sp could not be read now, so whether they were acked is not known (src[" in err
    assert "1 letter(s) are not of the record now at their origin's place" in err
    assert _dlq(letters, "list", "--json") == 0  # without --acked, nothing is read but the letters
    assert all("acked" not in json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert _dlq(letters, "list", "--acked") == 0
    assert "1 of them acked too" in capsys.readouterr().out

    # src/0/3's replay copy acked: its record was processed once too.
    copy = [(ORIGIN, f"{src}/0/3".encode()), (ATTEMPT, b"1")]
    produce(producer, replay_topic, b"a sentence", headers=copy, partition=0)
    produce(producer, outcomes, encode_outcome_rows("sp", [("ACK", 5, f"{replay_topic}/0/2", 5)]), partition=0)
    assert producer.flush(30) == 0
    assert marks()[4] == (f"{src}/0/3", True)

    assert _dlq(letters, "redrive", "--all", "--skip-acked", "--dry-run") == 0
    said = capsys.readouterr().out
    # Letters 2 and 3 acked; 6 and 7 no letters of the replay job; the rest not acked, or not known.
    assert "2 record(s) skipped: acked already" in said and "5 record(s) would be re-driven" in said
    assert _dlq(letters, "redrive", "2", "--skip-acked") == 0  # named, and acked: left
    assert "0 record(s) re-driven" in capsys.readouterr().out
    assert _dlq(letters, "redrive", "--all", "--skip-acked") == 0
    capsys.readouterr()
    sent = {(h[REDRIVEN].decode(), h[ORIGIN].decode())
            for p in (0, 1) for h in _every_headers(letters, replay_topic, p) if REDRIVEN in h}  # fmt: skip
    assert sent == {
        (f"{dlq}/0/0", "src/1/7"),
        (f"{dlq}/0/1", "src/0/3"),
        (f"{dlq}/0/4", f"{src}/0/2"),
        (f"{dlq}/0/5", f"{src}/0/1"),
        (f"{dlq}/0/8", f"{src}/1/7"),
    }  # each letter with its own origin

    # src/0/1 acked now, while its letter's copy is in flight: named with --skip-acked, it is left out, and does not
    # hold back the command; without, it is refused as in flight, as is src/0/2's (not acked) with it.
    produce(producer, outcomes, encode_outcome_rows("sp", [("ACK", 7, f"{src}/0/1", 5)]), partition=0)
    assert producer.flush(30) == 0
    assert _dlq(letters, "redrive", "5") == 2
    assert f"{dlq}/0/5" in capsys.readouterr().err
    assert _dlq(letters, "redrive", "5", "--skip-acked", "--dry-run") == 0
    said = capsys.readouterr().out
    assert "1 record(s) skipped: acked already" in said and "0 record(s) would be re-driven" in said
    assert _dlq(letters, "redrive", "5", "4", "--skip-acked", "--dry-run") == 2
    said, refused = capsys.readouterr()
    assert f"{dlq}/0/4" in refused and f"{dlq}/0/5" not in refused and "skipped" not in said

    # An outcome or replay topic that does not exist (another prefix, mistyped): not known, never "none acked".
    for elsewhere in (replace(letters, outcome_prefix=f"{letters.group}.none."),
                      replace(letters, replay_prefix=f"{letters.group}.none.")):  # fmt: skip
        assert _dlq(elsewhere, "list", "--acked", "--json") == 0
        out, err = capsys.readouterr()
        assert {r["acked"] for r in map(json.loads, out.splitlines())} == {None}
        assert f"no topic {letters.group}.none.sp: whether the records of spout sp were acked is not known" in err
    assert _dlq(replace(letters, outcome_prefix=f"{letters.group}.none."), "redrive", "--all", "--skip-acked") == 2
    assert "which records were acked is not known; nothing re-driven" in capsys.readouterr().err
