"""A spout whose producer takes no more records (a fatal error: `ProducerFailedError`) stops, at its edge (stand-ins
for the clients): it neither blames a record for it nor keeps its groups waiting."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict, deque
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from acker.core.ids import IdGenerator
from acker.kafka.clients import ProducerFailedError
from acker.spout import Spout
from acker.trouble import TroubleReport

_REFUSED = ProducerFailedError("the producer takes no more records", KafkaError(KafkaError._FATAL, "fenced"))


class _Closing:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _refusing(*_args: object, **_kwargs: object) -> int:
    raise _REFUSED


def test_a_spout_whose_producer_failed_for_good_still_leaves_its_groups_as_it_closes() -> None:
    """The close's flush raised, and nothing after it ran: the source, replay and outcome consumers stayed in their
    groups until their sessions timed out, and another process waited that long for the partitions."""
    spout: Any = Spout.__new__(Spout)
    spout._closed, spout.acker = False, SimpleNamespace(flush=_refusing)
    spout.replays, spout.consumer, spout.outcomes, spout._watermarks = _Closing(), _Closing(), _Closing(), _Closing()
    with pytest.raises(ProducerFailedError):
        spout.close()
    assert [c.closed for c in (spout.replays, spout.consumer, spout.outcomes, spout._watermarks)] == [True] * 4


@pytest.mark.parametrize("tracked", [True, False], ids=["tracked", "untracked"])
def test_a_producer_that_takes_no_more_records_stops_the_spout_instead_of_failing_the_record(tracked: bool) -> None:
    """Raised by an emit, it was taken for the emit function's fault: the record counted an emit error and failed
    (told FAILED to on_outcome, untracked), though nothing was wrong with it; it is read again at the next start."""
    spout: Any = Spout.__new__(Spout)
    spout.settings = SimpleNamespace(name="s", tracked=tracked)
    spout.counters, spout.pending, spout._started_at, spout._told_as = Counter(), {}, {}, {}
    spout._ids, spout._outputs = IdGenerator(1), SimpleNamespace(seen={"out"})
    spout.acker = SimpleNamespace(produce_anchored=_refusing, send=_refusing, send_all=_refusing)
    spout._pending_deadlines, spout._pending_timeout_s, spout._unresolved = deque(), 100.0, OrderedDict()
    spout._direct, spout._direct_reasons = [], {}
    spout._told_trouble = TroubleReport(logging.getLogger("acker.spout"), "spout s", ("on_outcome_errors",))
    told: list[object] = []
    spout._on_outcome = lambda msg_id, outcome: told.append((msg_id, outcome))
    spout._emit = lambda _record, emitter: emitter.emit("out", b"v")
    with pytest.raises(ProducerFailedError):
        spout._start(Message(topic="src", partition=0, offset=0, value=b"v"), 0.0)
    assert spout.counters == Counter({"read": 1}) and told == []
