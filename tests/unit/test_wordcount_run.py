"""What `acker wordcount run` says of the records it does not read (`_after_what_is_there`), on Kafka clients at the
edge."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from acker.config import ServiceConfig
from acker.examples import wordcount_cli


class _Lookups:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.advanced: dict[tuple[str, int], int] = {}

    def committed(self, _group: str, _partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {}

    def advance(self, _group: str, ends: dict[tuple[str, int], int]) -> None:
        self.advanced = dict(ends)


class _Reader:
    def __init__(self, _settings: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_records_passed_are_counted_from_the_first_that_exists_not_from_offset_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retention had deleted offsets 0 to 999 of 1,500: the run said 1,500 records were not read, of 500 there."""
    kafka = _Lookups()
    monkeypatch.setattr(wordcount_cli, "Consumer", _Reader)
    monkeypatch.setattr(wordcount_cli, "lookups", lambda _client: kafka)
    monkeypatch.setattr(wordcount_cli, "topic_partitions", lambda _c, topic: [0] if topic == "wc.sentences" else [])
    monkeypatch.setattr(wordcount_cli, "log_bounds", lambda _c, _tp: (1000, 1500))
    passed = wordcount_cli._after_what_is_there(ServiceConfig(), ["wc.sentences", "acker.replay.wc"], "g")
    assert passed == {"wc.sentences": 500, "acker.replay.wc": 0}
    assert kafka.advanced == {("wc.sentences", 0): 1500}
