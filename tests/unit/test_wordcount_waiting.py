"""What `acker wordcount run` says while it waits for outcomes (`Waiting`), on a clock and a broker of the test's."""

from __future__ import annotations

from acker.config import ServiceConfig
from acker.examples.wordcount_cli import STALL_S, Waiting


class _Broker:
    def __init__(self) -> None:
        self.up, self.asked = True, 0

    def answers(self) -> bool:
        self.asked += 1
        return self.up


def _waiting(config: ServiceConfig, total: int) -> tuple[list[float], _Broker, Waiting]:
    """A `Waiting` for ``total`` sentences on a clock (``now[0]``) and a broker of the test's."""
    now, broker = [0.0], _Broker()
    return now, broker, Waiting(config, total, broker.answers, clock=lambda: now[0])


def test_a_broker_gone_is_said_instead_of_blaming_timeouts_and_its_return_too() -> None:
    """The broker went away with 7 of 10 sentences decided: the run said the 3 trees waited for their timeout (a
    message dropped or lost in a crash) and waited out --max-wait-s, when every stage was waiting for the broker."""
    config = ServiceConfig(timeout_s=30.0)
    now, broker, waiting = _waiting(config, 10)
    assert waiting.lines(7) == ["7/10 sentences decided"]
    broker.up = False
    now[0] = STALL_S / 2
    assert waiting.lines(7) == [] and broker.asked == 0  # still moving, as far as anyone can tell
    now[0] = STALL_S + 1
    assert waiting.lines(7) == [f"the broker at {config.bootstrap_servers} does not answer: every stage waits for it, "
                                "and no tree times out for the outage"]  # fmt: skip
    assert [waiting.down] == [True]  # a list: mypy would take it as True from here on
    now[0] += 1
    assert waiting.lines(7) == [] and broker.asked == 1  # asked again only every STALL_S
    now[0] += STALL_S
    assert waiting.lines(7) == [] and broker.asked == 2  # said once
    broker.up = True
    now[0] += STALL_S
    assert waiting.lines(7) == [f"the broker at {config.bootstrap_servers} answers again"]
    assert not waiting.down
    now[0] += STALL_S / 2
    assert waiting.lines(7) == []  # the stages get their time to go on before trees are said to wait
    now[0] += STALL_S
    assert waiting.lines(7)[0].startswith("3 trees wait for their timeout")
    now[0] += STALL_S
    assert waiting.lines(7) == []  # each said once
    assert waiting.lines(10) == ["10/10 sentences decided"]


def test_trees_waiting_with_the_broker_there_are_said_to_wait_for_their_timeout_once_per_stall() -> None:
    now, broker, waiting = _waiting(ServiceConfig(timeout_s=30.0, buckets=3), 4)
    assert waiting.lines(0) == ["0/4 sentences decided"]
    now[0] = STALL_S + 1
    assert waiting.lines(0) == [  # none decided yet: the stages may still be starting (said 4 trees waited)
        "no sentence decided yet: the stages may still be starting, or the trees wait for their timeout (a message "
        "dropped or lost in a crash), 30 to 45 s after they opened"
    ]
    now[0] += STALL_S
    assert waiting.lines(0) == []
    assert waiting.lines(1) == ["1/4 sentences decided"]  # moved: a new stall is said again
    now[0] += STALL_S + 1
    assert waiting.lines(1) == [
        "3 trees wait for their timeout (a message dropped or lost in a crash): 30 to 45 s after they opened"
    ]
    assert broker.asked == 3


def test_outcomes_coming_after_an_outage_say_the_broker_answers_again_before_any_stall_asks() -> None:
    """Only a stall asked the broker: outcomes coming again within `STALL_S` of its return left it down for good, and
    the run said at the end that the broker did not answer, with every sentence decided."""
    config = ServiceConfig(timeout_s=30.0)
    now, broker, waiting = _waiting(config, 10)
    assert waiting.lines(0) == ["0/10 sentences decided"]
    broker.up = False
    now[0] = STALL_S + 1
    assert waiting.lines(0)[0].startswith(f"the broker at {config.bootstrap_servers} does not answer")
    broker.up = True
    now[0] += 1
    assert waiting.lines(5) == ["5/10 sentences decided", f"the broker at {config.bootstrap_servers} answers again"]
    assert not waiting.down
    now[0] += 1
    assert waiting.lines(10) == ["10/10 sentences decided"] and broker.asked == 1
