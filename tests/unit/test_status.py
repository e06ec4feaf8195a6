"""Reading status records (`acker.status`): anything that is not a status object is skipped, never a crash."""

from __future__ import annotations

import contextlib
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from acker import status as status_module
from acker.cli import _re_read, _standing, _status_cells, main
from acker.config import ServiceConfig
from acker.status import _status, status_key
from tests.records import Consumed


def test_only_status_objects_with_a_partition_are_read() -> None:
    status = {"topic": "acker", "partition": 3, "pending": 5, "rates": {}, "counters": {}}
    assert _status(b'{"topic": "acker", "partition": 3, "pending": 5}') == status
    assert _status(b"[1, 2]") is None  # JSON, but not an object
    assert _status(b'{"partition": "3"}') is None
    assert _status(b"\xff not json") is None
    assert _status(None) is None
    assert _status(b"[" * 3000) is None  # nested past Python's stack: a traceback of `acker status` before


def test_rates_and_counters_of_another_shape_are_left_out() -> None:
    """Another version's rates or counters (null, a list, text) would crash the table that sums them."""
    assert _status(b'{"partition": 1, "rates": null}') == {"partition": 1, "rates": {}, "counters": {}}
    assert _status(b'{"partition": 1, "rates": [1], "counters": [1]}') == {"partition": 1, "rates": {}, "counters": {}}
    assert _status(b'{"partition": 1, "rates": {"acked": 2.5, "nacked_failed": "3"}, "counters": {"acked": "x"}}') == {
        "partition": 1,
        "rates": {"acked": 2.5},
        "counters": {},
    }


def test_the_statuses_of_two_groups_for_one_partition_have_keys_of_their_own() -> None:
    """Compaction keeps one record per key: with a key of topic and partition only, one group's statuses replaced
    the other's, and `acker status --group` showed nothing for the first."""
    assert status_key("a", "acker", 3) != status_key("b", "acker", 3)
    assert status_key("a", "acker", 3) != status_key("a", "acker", 4)


def test_with_nothing_committed_or_an_offset_beyond_the_end_a_new_owner_re_reads_all_a_partition_holds() -> None:
    assert [_re_read(None, 40), _re_read(None, 0), _re_read(30, 40), _re_read(None, None)] == ["all", "0", "10", "-"]
    assert _re_read(600, 100) == "all (committed beyond the end)"  # the topic made again: -500 before


def test_pending_rates_and_read_lag_are_shown_only_while_an_owner_publishes() -> None:
    """An acker group down showed its partitions' last statuses, pending 0 and read lag 0 (stale, or released by the
    last instance to stop), while records piled up behind them: what is past is left out; what a new owner reads
    again says how far behind the group is."""
    config, now = ServiceConfig(), 1_000_000.0
    spoke = {
        "instance": "a-1",
        "time": now - 2,
        "status_interval_s": 5.0,
        "rate_window_s": 10,
        "pending": 7,
        "lag": 3,
        "rates": {"acked": 4.5, "nacked_timeout": 0.5},
        "counters": {"acked": 90},
    }
    columns = ("owner", "pending", "acked", "nacked", "acked/s", "nacked/s", "read lag", "committed", "end", "re-read")

    def row(status: dict[str, Any]) -> dict[str, str]:
        return dict(zip(columns, _status_cells(status, (100, 160), now, config), strict=True))

    current = row(spoke)
    assert current == {
        "owner": "a-1 (2s ago)",
        "pending": "7",
        "acked": "90",
        "nacked": "0",
        "acked/s": "4.5",
        "nacked/s": "0.5",
        "read lag": "3",
        "committed": "100",
        "end": "160",
        "re-read": "60",
    }
    for status, owner in (
        ({**spoke, "time": now - 21}, "a-1 (21s ago, stale)"),  # over 3 intervals and 5 s: its instance gone
        ({**spoke, "released": True}, "- (released by a-1 2s ago)"),
    ):
        past = row(status)
        assert past == {**current, "owner": owner, "pending": "-", "acked/s": "-", "nacked/s": "-", "read lag": "-"}
    assert row({**spoke, "time": now - 19})["pending"] == "7"  # not yet stale
    whenever = row({**spoke, "released": True, "time": None})  # released, whenever it was
    assert (whenever["owner"], whenever["pending"]) == ("- (released by a-1)", "-")
    assert row({}) == dict.fromkeys(columns[:7], "-") | {"committed": "100", "end": "160", "re-read": "60"}
    # `--json` says the same of each row, so that a script need not work it out from the raw status
    assert [_standing(status, now, config) for status in (spoke, {**spoke, "time": now - 21}, {})] == [
        (2.0, "current"), (21.0, "stale"), (None, "none")
    ]  # fmt: skip
    assert _standing({**spoke, "released": True, "time": None}, now, config) == (None, "released")
    assert _standing({**spoke, "time": None}, now, config) == (None, "current")  # no time: never taken for stale


def test_status_looks_topics_up_without_creating_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``allow.auto.create.topics=true`` passed through, a misspelt acker or status topic looked up by `acker
    status` was created, with the broker's defaults (one partition, not compacted)."""
    given: list[dict[str, Any]] = []

    class _Consumer:
        def __init__(self, settings: dict[str, Any]) -> None:
            given.append(settings)

        def list_topics(self, *_: Any, **__: Any) -> Any:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

        def close(self) -> None:
            pass

    monkeypatch.setattr(status_module, "Consumer", _Consumer)
    config = ServiceConfig(kafka={"allow.auto.create.topics": "true"})
    for look in (status_module.read_status, status_module.group_lag):
        with contextlib.suppress(KafkaException):
            look(config, 0.1)
    assert [settings["allow.auto.create.topics"] for settings in given] == [False, False]


def test_the_end_offsets_of_all_partitions_are_asked_within_one_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each partition's end offset was asked with a timeout of its own: with the broker that led 24 of them down,
    `acker status` said nothing for 24 timeouts. Partitions without a leader are not asked; those whose leader does
    not answer share one timeout, each waiting its share, so that the partitions after them are still shown."""
    asked: list[int] = []

    class _Consumer:  # the leader of 0-5 is down (not known yet); 6-17 answer; 18-23 have no leader
        def __init__(self, _settings: dict[str, Any]) -> None:
            pass

        def list_topics(self, topic: str, timeout: float) -> Any:
            leaders = {p: SimpleNamespace(leader=-1 if p >= 18 else 1) for p in range(24)}
            return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=leaders)})

        def committed(self, parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
            return [TopicPartition(tp.topic, tp.partition, 5) for tp in parts]

        def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
            asked.append(tp.partition)
            if tp.partition >= 6:
                return 0, 100 + tp.partition
            time.sleep(timeout)  # librdkafka waits the timeout out
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

        def close(self) -> None:
            pass

    monkeypatch.setattr(status_module, "Consumer", _Consumer)
    began = time.monotonic()
    lags = status_module.group_lag(ServiceConfig(), timeout_s=1.0)
    assert time.monotonic() - began < 1.5
    assert lags == {p: (5, 100 + p if 6 <= p < 18 else None) for p in range(24)}
    assert asked == list(range(18))


def test_the_nacked_rate_is_the_sum_of_the_rates_shown_rounded_as_they_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Summed as floats, 0.1 + 0.2 showed as 0.30000000000000004 nacked/s."""
    rates = {"acked": 3.0, "nacked_failed": 0.1, "nacked_timeout": 0.2}
    status = {"topic": "acker", "partition": 0, "pending": 1, "rate_window_s": 5.0, "time": time.time(),
              "rates": rates, "counters": {"acked": 1}}  # fmt: skip
    monkeypatch.setattr("acker.kafka.clients.answering", lambda *_: None)
    monkeypatch.setattr(status_module, "group_lag", lambda _config: {0: (1, 2)})
    monkeypatch.setattr(status_module, "read_status", lambda _config: {0: status})
    assert main(["status", "--bootstrap-servers", "127.0.0.1:1"]) == 0
    shown = capsys.readouterr().out
    assert " 0.3 " in shown and "0.3000" not in shown


@pytest.mark.parametrize("json_out", [False, True])
def test_a_status_whose_numbers_no_float_holds_is_read_without_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], json_out: bool
) -> None:
    """JSON has integers of any size: another writer's "time" or "rate_window_s" of 400 digits overflowed the
    arithmetic with them, and `acker status` stopped for every partition with a traceback."""
    huge = "1" + "0" * 400
    raw = f'{{"topic": "acker", "partition": 0, "time": {huge}, "rate_window_s": {huge}, "pending": 2, '
    status = _status(f'{raw}"rates": {{"acked": {huge}, "nacked_failed": 1.5}}}}'.encode())
    assert status == {"topic": "acker", "partition": 0, "pending": 2, "rates": {"nacked_failed": 1.5}, "counters": {}}
    monkeypatch.setattr("acker.kafka.clients.answering", lambda *_: None)
    monkeypatch.setattr(status_module, "group_lag", lambda _config: {0: (1, 2)})
    monkeypatch.setattr(status_module, "read_status", lambda _config: {0: status})
    assert main(["status", "--bootstrap-servers", "127.0.0.1:1", *(["--json"] if json_out else [])]) == 0
    assert "acker" in capsys.readouterr().out


def test_the_newest_status_of_a_partition_is_shown_whichever_status_partition_it_lies_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A status of an older version (keyed without its group) in another partition of the status topic, a day old
    and never compacted away, read after the current one: the row showed it, stale, while its owner published."""
    now = time.time()
    current = {"topic": "acker", "partition": 0, "group": "acker", "instance": "b-2", "time": now}
    old = {"topic": "acker", "partition": 0, "instance": "a-1", "time": now - 86_400}
    batches: list[list[Consumed]] = []

    class _Consumer:
        def __init__(self, _settings: dict[str, Any]) -> None:
            self.batches = list(batches)

        def assign(self, _parts: Any) -> None:
            pass

        def consume(self, _n: int, timeout: float) -> list[Consumed]:
            return self.batches.pop(0) if self.batches else []

        def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
            return [TopicPartition(tp.topic, tp.partition, 1 if not self.batches else 0) for tp in parts]

        def close(self) -> None:
            pass

    monkeypatch.setattr(status_module, "Consumer", _Consumer)
    monkeypatch.setattr(status_module, "topic_partitions", lambda *_args, **_kwargs: [0, 1])
    monkeypatch.setattr(status_module, "end_offsets", lambda *_args, **_kwargs: {0: 1, 1: 1})
    batches[:] = [[Consumed(0, 0, json.dumps(current).encode())], [Consumed(1, 0, json.dumps(old).encode())]]
    assert status_module.read_status(ServiceConfig())[0]["instance"] == "b-2"
    # Of one status partition, as written: a new owner whose clock is behind the last one's is shown all the same.
    released = {**current, "instance": "a-1", "released": True, "time": now + 2}
    batches[:] = [[Consumed(0, 0, json.dumps(released).encode())], [Consumed(0, 0, json.dumps(current).encode())]]
    assert status_module.read_status(ServiceConfig())[0]["instance"] == "b-2"


def test_pending_trees_and_lag_of_another_shape_are_left_out() -> None:
    """The table printed them as they were: text another writer put there reached the terminal, escape sequences
    and all (a screen cleared, a terminal retitled)."""
    assert _status(b'{"partition": 1, "pending": "\\u001b[2J", "lag": ["\\u001b]0;x\\u0007"]}') == {
        "partition": 1,
        "rates": {},
        "counters": {},
    }
    assert _status(b'{"partition": 1, "pending": 3, "lag": null}') == {
        "partition": 1,
        "pending": 3,
        "lag": None,
        "rates": {},
        "counters": {},
    }


def test_a_status_time_or_number_that_is_not_finite_is_left_out() -> None:
    """JSON's NaN and Infinity, which Python reads: a time of NaN made the row current for ever, and `acker status
    --json` wrote them out, which no JSON reader takes."""
    status = _status(b'{"partition": 0, "time": NaN, "pending": Infinity, "rates": {"acked": -Infinity, "x": 1.5}}')
    assert status == {"partition": 0, "time": None, "pending": None, "rates": {"x": 1.5}, "counters": {}}
    nested = _status(b'{"partition": 0, "x": {"y": NaN}}')  # another writer's field, shown by --json as it is
    assert nested is not None and json.dumps(nested["x"], allow_nan=False) == '{"y": null}'
