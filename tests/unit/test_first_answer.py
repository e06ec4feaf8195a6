"""`first_answer`: Kafka's first answer waited for, a refused login said as soon as the client reports it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from acker.kafka.clients import RefusedLogin, first_answer


class _Client:
    """A client whose poll serves the errors queued for its ``error_cb``, as librdkafka's does."""

    def __init__(self, error_cb: RefusedLogin, queued: list[KafkaError]) -> None:
        self.error_cb, self.queued, self.polls = error_cb, queued, 0

    def poll(self, _timeout: float) -> None:
        self.polls += 1
        for error in self.queued:
            self.error_cb(error)
        self.queued.clear()


def _timing_out(waits: list[float]) -> Callable[[float], None]:
    def ask(wait_s: float) -> None:
        waits.append(wait_s)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    return ask


def test_a_refused_login_ends_the_wait_at_the_first_attempt_that_sees_it() -> None:
    """The broker refused the handshake; each request only timed out, and the service waited its 30 s."""
    passed_on: list[KafkaError] = []
    refused = RefusedLogin(passed_on.append)
    client = _Client(refused, [KafkaError(KafkaError._TRANSPORT), KafkaError(KafkaError._AUTHENTICATION, "no")])
    waits: list[float] = []
    with pytest.raises(KafkaException) as raised:
        first_answer(_timing_out(waits), client, refused, timeout_s=30)
    assert raised.value.args[0].code() == KafkaError._AUTHENTICATION and waits == [1.0]
    assert [e.code() for e in passed_on] == [KafkaError._TRANSPORT, KafkaError._AUTHENTICATION]


def test_no_answer_is_asked_again_twice_as_long_each_time_until_the_timeout() -> None:
    refused = RefusedLogin()
    waits: list[float] = []
    with pytest.raises(KafkaException) as raised:
        first_answer(_timing_out(waits), _Client(refused, []), refused, timeout_s=0.35)
    assert raised.value.args[0].code() == KafkaError._TIMED_OUT
    assert waits[0] == pytest.approx(0.35, abs=0.05) and all(w >= 0.1 for w in waits)


def test_an_answer_returns_and_a_stop_set_returns_false_without_asking() -> None:
    refused = RefusedLogin()
    assert first_answer(lambda _wait_s: None, _Client(refused, []), refused, timeout_s=5)
    stop = threading.Event()
    stop.set()
    assert not first_answer(_timing_out([]), _Client(refused, []), refused, timeout_s=5, stop=stop)


def test_an_error_that_is_not_a_missing_answer_is_raised_at_once() -> None:
    refused = RefusedLogin()

    def ask(_wait_s: float) -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):
        first_answer(ask, _Client(refused, []), refused, timeout_s=30)


class _Rounds:
    """A client whose poll serves, for each attempt, the errors queued for it."""

    def __init__(self, error_cb: RefusedLogin, rounds: list[list[KafkaError]]) -> None:
        self.error_cb, self.rounds = error_cb, rounds

    def poll(self, _timeout: float) -> None:
        for error in self.rounds.pop(0) if self.rounds else []:
            self.error_cb(error)


_CUT = KafkaError(KafkaError._TRANSPORT, "ssl://h:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection "
                  "closed by peer: connecting to a PLAINTEXT broker listener?")  # fmt: skip
_CLOSED = KafkaError(KafkaError._TRANSPORT, "ssl://h:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed")


def test_tls_handshakes_cut_in_two_attempts_running_are_a_refused_login() -> None:
    """A TLS client at a plaintext listener: librdkafka says each handshake the listener cuts as a transport error,
    and the commands waited 10 to 60 s, then said "Kafka did not answer". Said, as an SSL error, at the second
    attempt that met one."""
    refused = RefusedLogin()
    waits: list[float] = []
    with pytest.raises(KafkaException) as raised:
        first_answer(_timing_out(waits), _Rounds(refused, [[_CUT, _CUT], [_CUT]]), refused, timeout_s=30)
    assert (raised.value.args[0].code(), raised.value.args[0].str()) == (KafkaError._SSL, _CUT.str())
    assert waits == [1.0, 2.0]


def test_a_handshake_cut_once_or_a_closed_port_is_waited_out_as_no_answer() -> None:
    """A broker going away mid-handshake (a restart, a connection limit) is no refused login: the wait goes on, to an
    answer or to its timeout, as for a port that takes no connection."""
    refused = RefusedLogin()
    asked: list[float] = []

    def answering_at_the_third(wait_s: float) -> None:
        asked.append(wait_s)
        if len(asked) < 3:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    rounds = [[_CUT], [_CLOSED], [_CUT]]
    assert first_answer(answering_at_the_third, _Rounds(refused, rounds), refused, timeout_s=30)
    refused = RefusedLogin()
    with pytest.raises(KafkaException) as raised:
        first_answer(_timing_out([]), _Rounds(refused, [[_CLOSED]] * 10), refused, timeout_s=0.35)
    assert raised.value.args[0].code() == KafkaError._TIMED_OUT
