"""The DRPC client's edges, with a producer that only records (no broker): a request that was not written, and
the bookkeeping of requests sent and not waited for."""

from __future__ import annotations

import argparse
import re
import time
from typing import Any
from unittest.mock import Mock

import pytest
from confluent_kafka import KafkaError, Message, Producer

from acker import drpc
from acker.config import ServiceConfig
from acker.drpc import ANSWER_KEPT_S, DrpcClient, DrpcError
from acker.examples import reach
from acker.kafka.coordinated_stage import REQUEST, STATUS, Chain


class _Producer:
    """Reports each record's delivery (``error``) at once, or, with ``left``, never; ``queued`` more records of
    earlier sends wait in it (what its ``flush`` counts)."""

    def __init__(self, error: KafkaError | None = None, left: int = 0, queued: int = 0) -> None:
        self.error, self.left, self.queued, self.sent = error, left, queued, 0

    def produce(self, *_: Any, on_delivery: Any, **__: Any) -> None:
        self.sent += 1
        if self.left == 0:
            on_delivery(self.error, None)

    def poll(self, timeout: float) -> int:
        time.sleep(timeout)
        return 0

    def flush(self, _timeout: float) -> int:
        return self.left + self.queued

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A send waits 0.2 s for its delivery here, not 30 s; a deadline's grace is none."""
    monkeypatch.setattr(drpc, "SEND_WAIT_S", 0.2)
    monkeypatch.setattr(drpc, "GRACE_S", 0.0)


def _client(producer: _Producer | Producer) -> DrpcClient:
    client = DrpcClient.__new__(DrpcClient)
    client.chain, client.partitions, client.producer = Chain("c", 2), 1, producer  # type: ignore[assignment]
    client._answers, client._deadlines, client._unsent, client._closed = {}, {}, {}, False
    return client


@pytest.mark.parametrize(
    ("producer", "timeout_s", "reason"),
    [
        (_Producer(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), 30, "to c.step0: Broker: Topic"),
        (_Producer(left=1), 0.1, "to c.step0: not delivered before its deadline"),
    ],
)
def test_a_request_that_was_not_written_is_said_at_once(producer: _Producer, timeout_s: float, reason: str) -> None:
    """Its delivery was never looked at: the chain never saw the request, and the caller waited out its deadline
    and 5 s more for an answer that could not come, told only "no answer before its deadline"."""
    client = _client(producer)
    with pytest.raises(DrpcError, match=f"could not be sent {reason}"):
        client.send(b"url0", timeout_s=timeout_s)
    assert client._deadlines == {}


def test_a_request_not_delivered_by_its_deadline_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a timeout of 25 to 30 s (here 0.15 s, the send's wait 0.2 s, the grace 0.1 s), the send's wait ended past
    the deadline and the request was taken for one still in time: waited for, said only seconds later."""
    monkeypatch.setattr(drpc, "GRACE_S", 0.1)
    client = _client(_Producer(left=1))
    with pytest.raises(DrpcError, match=r"could not be sent to c\.step0: not delivered before its deadline"):
        client.send(b"url0", timeout_s=0.15)
    assert client._deadlines == {}


def test_a_request_the_producer_refuses_at_once_is_a_drpc_error() -> None:
    """Arguments over the producer's message.max.bytes: a `KafkaException` came through instead."""
    client = _client(Producer({"bootstrap.servers": "127.0.0.1:1", "message.max.bytes": 1000, "log_level": 0}))
    with pytest.raises(DrpcError, match=r"could not be sent to c\.step0: .*too large"):
        client.send(b"x" * 2000, timeout_s=1)
    assert client._deadlines == {}


def test_a_request_delivered_is_sent_whatever_else_waits_in_the_producer() -> None:
    """Judged by the producer's queue (its ``flush``), a request delivered at once was "not sent" while an earlier
    one, not delivered yet and waited for, was still in it: a caller that sent it again had it run twice."""
    client = _client(_Producer(queued=1))
    assert client.send(b"url0", timeout_s=0.1) in client._deadlines


def test_a_request_not_delivered_yet_while_its_deadline_is_ahead_is_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Said "could not be sent", it was still in the producer, and written a moment later, before its deadline: the
    chain ran it, and a caller that sent it again had it run twice."""
    client = _client(_Producer(left=1))
    request = client.send(b"url0", timeout_s=60)
    assert request in client._deadlines and "may still be before its deadline" in caplog.text


class _SlowToDeliver(_Producer):
    """Reports the delivery (``error``) ``after_s`` after the record was produced."""

    def __init__(self, after_s: float, error: KafkaError | None = None) -> None:
        super().__init__(error, left=1)
        self.after_s, self.at = after_s, 0.0
        self.report: Any = None

    def produce(self, *_: Any, on_delivery: Any, **__: Any) -> None:
        self.report, self.at = on_delivery, time.monotonic() + self.after_s

    def poll(self, timeout: float) -> int:
        time.sleep(timeout)
        if self.report is not None and time.monotonic() >= self.at:
            self.report(self.error, None)
            self.report = None
        return 0


def test_a_requests_wait_ends_at_its_deadline_however_long_its_send_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait was counted from the end of the send: a delivery that took 29 s of the send's 30 s kept a client of
    a chain that never answers waiting that much past the request's deadline and its grace."""
    monkeypatch.setattr(drpc, "SEND_WAIT_S", 1.0)
    client = _client(_SlowToDeliver(after_s=0.5))
    started = time.monotonic()
    request = client.send(b"url0", timeout_s=1.0)
    assert time.monotonic() - started >= 0.5  # the delivery waited for
    assert client._deadlines[request] <= started + 1.0 + 0.05  # GRACE_S is 0 here


@pytest.mark.parametrize(
    ("after_s", "error", "said"),
    [
        (0.4, KafkaError(KafkaError._MSG_TIMED_OUT), "could not be sent to c.step0: Local: Message timed out"),
        (60, None, "could not be sent to c.step0: not delivered before its deadline"),
        (0.4, None, "got no answer before its deadline (is every step of chain c running?"),
    ],
)
def test_a_request_sent_on_before_its_delivery_says_what_became_of_it_when_unanswered(
    after_s: float, error: KafkaError | None, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request `send` returned before its delivery was reported was said "got no answer before its deadline (is
    every step of chain c running?)" at the end of its wait whether its delivery failed or had not come by then: the
    chain was never asked. Delivered, it was, and that is still what is said."""
    client = _client(_SlowToDeliver(after_s, error))  # SEND_WAIT_S is 0.2 s here
    request = client.send(b"url0", timeout_s=1.0)
    monkeypatch.setattr(client, "_read_answers", time.sleep)
    monkeypatch.setattr(client, "_read_to_ends", lambda _request: None)
    with pytest.raises(DrpcError, match=re.escape(said)):
        client.wait(request)
    assert not client._deadlines and not client._unsent


def test_a_request_whose_delivery_failed_after_its_send_is_answered_if_the_chain_had_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delivery that failed for a timeout may have been written all the same: the chain's answer is waited for
    until the request's deadline, not given up at the report."""
    client = _client(_SlowToDeliver(0.4, KafkaError(KafkaError._MSG_TIMED_OUT)))  # after the send's 0.2 s
    request = client.send(b"url0", timeout_s=5.0)
    calls: list[int] = []

    def read(_timeout_s: float) -> None:
        client.producer.poll(0)  # the report comes meanwhile
        calls.append(1)
        if len(calls) == 8:  # 0.8 s: after the failed report
            client._answers[request] = ("ok", b"7")
        time.sleep(0.1)

    monkeypatch.setattr(client, "_read_answers", read)
    assert client.wait(request) == b"7"
    assert not client._deadlines and not client._unsent


def test_requests_never_waited_for_are_forgotten_once_their_time_is_out() -> None:
    """A long-lived client that sent requests and never waited for some kept each, and its answer, for good."""
    client = _client(_Producer())
    old, answered, fresh = (client.send(b"x", timeout_s=30) for _ in range(3))
    now = time.monotonic()
    client._deadlines[old] = client._deadlines[answered] = now - 1
    client._answers[answered] = ("ok", b"42")
    client.send(b"y")
    assert old not in client._deadlines and {answered, fresh} <= set(client._deadlines)
    assert client.wait(answered) == b"42"  # an answer read while waiting for another is kept a while
    client._deadlines[fresh] = now - ANSWER_KEPT_S - 1
    client._answers[fresh] = ("ok", b"7")
    client.send(b"z")
    assert fresh not in client._deadlines and fresh not in client._answers


def test_only_answers_to_this_clients_requests_waited_for_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The results topic is shared by every client: kept, other clients' answers would pile up for good (only the
    requests waited for are forgotten at their deadlines)."""
    client = _client(_Producer())
    client._read_up_to, client.consumer = {0: 0}, None  # type: ignore[assignment]  # read through the stand-in below
    mine = client.send(b"url0", timeout_s=30)

    def answer(offset: int, request: str) -> Message:
        headers = [(REQUEST, request.encode()), (STATUS, b"ok")]
        return Message(topic="c.results", partition=0, offset=offset, value=b"7", headers=headers)  # type: ignore[arg-type]

    records = [answer(0, "someone else's"), answer(1, mine), answer(2, "another")]
    monkeypatch.setattr(drpc, "consume_available", lambda *_args: records)
    client._read_answers(0.0)
    assert client._answers == {mine: ("ok", b"7")} and client._read_up_to == {0: 3}
    assert client.wait(mine) == b"7"


def test_waiting_for_a_request_this_client_does_not_know_is_a_clear_error() -> None:
    with pytest.raises(DrpcError, match="is not waited for here: not sent by this client"):
        _client(_Producer()).wait("nope")


def test_a_closed_client_says_so_when_used_again() -> None:
    client = _client(_Producer())
    mine = client.send(b"x")
    client.consumer = Mock()
    client.close()
    for use in (lambda: client.send(b"y"), lambda: client.wait(mine)):
        with pytest.raises(RuntimeError, match="this DRPC client of c is closed"):
            use()


def test_drpc_call_prints_any_answer_and_fails_only_on_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An answer that was not UTF-8 raised out of `acker drpc call` with a traceback, every other answer lost; an
    answer that began with "error:" made it exit 1; and control characters reached the terminal."""
    answers: list[tuple[str, bytes | DrpcError]] = [
        ("u\x1b[2J", b"\xff\xfe"),
        ("v", b"error: a real answer"),
        ("w", b"42"),
    ]
    monkeypatch.setattr(reach, "load", lambda _args: None)
    monkeypatch.setattr(reach, "ask", lambda *_: answers)
    args = argparse.Namespace(chain_name="c", steps=2, values=[value for value, _ in answers], deadline_s=1.0)
    assert reach._cmd_drpc(args) == 0
    assert capsys.readouterr().out.splitlines() == ["u\\x1b[2J\t\\xff\\xfe", "v\terror: a real answer", "w\t42"]
    monkeypatch.setattr(reach, "ask", lambda *_: [*answers, ("x", DrpcError("request r failed in the chain"))])
    assert reach._cmd_drpc(argparse.Namespace(**{**vars(args), "values": [*args.values, "x"]})) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "x\terror: request r failed in the chain"


def test_drpc_call_asks_a_value_given_twice_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers were kept by value: the first request of a value given twice was never waited for, one line printed."""
    client = _client(_Producer())
    monkeypatch.setattr(reach, "DrpcClient", lambda _config, _chain: client)
    waited: list[str] = []

    def wait(request: str) -> bytes:
        waited.append(request)
        return f"answer {len(waited)}".encode()

    monkeypatch.setattr(client, "wait", wait)
    monkeypatch.setattr(client, "close", lambda: None)
    answers = reach.ask(None, Chain("c", 2), ["u", "v", "u"], 5.0)  # type: ignore[arg-type]
    assert answers == [("u", b"answer 1"), ("v", b"answer 2"), ("u", b"answer 3")]
    assert len(set(waited)) == 3  # three requests, each waited for


def test_a_request_is_sent_with_a_deadline_the_steps_take() -> None:
    """A timeout of 1e9 s left a done marker at every task of every step, in memory and in its changelog, for 31
    years; the steps now dead-letter such a request, so the client refuses it first."""
    client = _client(_Producer())
    with pytest.raises(ValueError, match="86400 s at most"):
        client.send(b"url0", timeout_s=1e9)
    assert client.producer.sent == 0  # type: ignore[attr-defined]
    client.send(b"url0", timeout_s=86_400)


def test_the_client_reads_committed_answers_whatever_the_shared_settings_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``isolation.level=read_uncommitted`` among the shared settings, the client took the answer of a joining
    step's batch that was aborted (its process died before it committed), which the chain then gave otherwise."""
    given: list[dict[str, Any]] = []

    class _Consumer:
        def __init__(self, settings: dict[str, Any], _warn_after_s: float) -> None:
            given.append(settings)

        def assign(self, _partitions: Any) -> None:
            pass

    monkeypatch.setattr("acker.drpc.WatchedConsumer", _Consumer)
    monkeypatch.setattr("acker.drpc.Producer", lambda _settings: _Producer())
    monkeypatch.setattr("acker.drpc.partition_count", lambda _client, _topic: 1)
    monkeypatch.setattr("acker.drpc.answering", lambda *_: None)
    monkeypatch.setattr("acker.drpc.end_offsets", lambda _consumer, partitions: [0 for _ in partitions])
    DrpcClient(ServiceConfig(kafka={"isolation.level": "read_uncommitted"}), Chain("c", 2))
    assert given[0]["isolation.level"] == "read_committed"


def test_a_wait_calls_its_upkeep_between_reads_until_the_answer_comes() -> None:
    """`reach run` starts again a step that exited while it waits for answers (`reach.Restarting`): it has no other
    moment to, as its waits hold the main thread, where steps are started (`acker.kafka.local_broker.spawn`)."""
    client = _client(_Producer())
    request = client.send(b"url0", timeout_s=30)
    client._read_answers = lambda timeout_s: None  # type: ignore[method-assign]
    calls: list[int] = []

    def upkeep() -> None:
        calls.append(len(calls))
        if len(calls) == 3:  # the answer, read by the next read
            client._answers[request] = ("ok", b"7")

    assert client.wait(request, between=upkeep) == b"7" and len(calls) == 3
