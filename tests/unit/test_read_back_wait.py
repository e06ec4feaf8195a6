"""A partition waiting for its read-back (`AckerService._recover`), at its edge: no Kafka, a clock of the test's."""

from __future__ import annotations

from typing import Any

import pytest

from acker import service as service_module
from acker.service import AckerService, _ReadBack


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _waiting(monkeypatch: pytest.MonkeyPatch, partitions: int) -> tuple[Any, _Clock]:
    """A service (the edge alone: no Kafka clients) whose ``partitions`` wait for their read-back, on a clock of the
    test's; its committed offsets read at once (none)."""
    clock = _Clock()
    monkeypatch.setattr(service_module, "time", clock)
    service: Any = AckerService.__new__(AckerService)
    service._to_recover = {p: _ReadBack() for p in range(partitions)}
    service._states, service._paused = dict.fromkeys(range(partitions), object()), set()
    service._read_back_starts = lambda _partitions: {}
    return service, clock


def test_a_read_back_that_failed_slowly_waits_its_delay_after_the_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The delay was counted from before the attempt: one that failed after 30 s (the committed offsets' timeout,
    a coordinator moving) was due again at once, and the loop spent the whole patience in back-to-back waits."""
    service, clock = _waiting(monkeypatch, 1)

    def timed_out(_partitions: list[int]) -> None:
        clock.now += 30.0

    service._read_back_starts = timed_out
    service._recover()
    waiting = service._to_recover[0]
    assert waiting.tries == 1 and waiting.at == clock.now + 1.0 and waiting.since == 1000.0


def test_the_read_backs_of_one_turn_of_the_loop_stop_after_a_while_and_the_others_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twelve partitions assigned at once, each read back slowly (a broker that does not answer): the loop did not
    poll again until all were done, past max.poll.interval.ms, and the instance left its group."""
    service, clock = _waiting(monkeypatch, 12)

    def slow(_partition: int, _starts: object, _gone: object, *, final: bool) -> None:
        clock.now += 25.0

    service._read_back = slow
    service._recover()
    assert sorted(service._to_recover) == list(range(3, 12))  # three started within the turn's 60 s
    service._recover()  # the next turn goes on with them
    assert sorted(service._to_recover) == list(range(6, 12))


def test_partitions_whose_read_back_fails_slowly_do_not_keep_the_others_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ten partitions whose read-back fails after 30 s, due again within seconds, came first at every turn and took
    its minute: an eleventh, read back at once, waited 11 turns (till the others gave up), paused."""
    service, clock = _waiting(monkeypatch, 11)

    def read_back(partition: int, _starts: object, _gone: object, *, final: bool) -> str | None:
        if partition == 10:
            return None
        clock.now += 30.0
        return None if final else "outcomes not read back (timed out)"

    service._read_back = read_back
    turns = 0
    while 10 in service._to_recover:
        service._recover()
        turns += 1
    assert turns <= 6  # ten slow ones, two a turn, then it: tried least first
