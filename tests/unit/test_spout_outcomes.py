"""The spout's reading of its outcome topic, at its edge (a fake consumer hands over outcome records), and its
outcome consumer's settings."""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict, deque
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from acker import fail_reasons
from acker import spout as spout_module
from acker.columnar import MessageBlock
from acker.config import ServiceConfig
from acker.core.ids import partition_of
from acker.core.messages import Init
from acker.errors import ConfigError
from acker.kafka.clients import LOOKUP_ATTEMPTS, KafkaClientError, TopicsNotCreatedError, committed_offsets
from acker.metrics import LatencyHistogram
from acker.service import failing_inits
from acker.spout import WAIT_TIMEOUTS, Spout, SpoutSettings, outcome_consumer
from acker.topics import all_topics, check_spout_name, spout_names, spout_refusal
from acker.trouble import TroubleReport
from acker.wire import ANY_CONFIGURATION, OUTCOMES_PER_RECORD, WireError, decode_outcomes, encode_outcome_rows


class _Outcomes:
    def __init__(self, *values: bytes) -> None:
        self.values = list(values)

    def consume(self, _n: int, timeout: float = 0) -> list[Message]:
        out = [Message(topic="o", partition=0, offset=i, value=v) for i, v in enumerate(self.values)]
        self.values = []
        return out


def _spout(outcomes: _Outcomes) -> Any:
    spout: Any = Spout.__new__(Spout)  # only what reading outcomes needs, the consumer a stand-in
    spout.pending, spout.counters, spout._init_attempts, spout.outcomes = {}, Counter(), {}, outcomes
    spout._started_at, spout._decided_upto, spout.acker = {}, {}, SimpleNamespace(partitions=4)
    spout._decided_margin_s = 5.0  # the longest a tree lives in the acker
    spout._pending_deadlines, spout._pending_timeout_s, spout._direct = deque(), 10.0, []
    spout._next_waiting_said, spout._direct_reasons, spout.settings = 0.0, {}, SimpleNamespace(name="s")
    spout._trouble = TroubleReport(logging.getLogger("acker.spout"), "spout s", ("unreadable_outcomes",))
    spout._told_trouble = TroubleReport(logging.getLogger("acker.spout"), "spout s", ("on_outcome_errors",))
    spout._start_trouble = TroubleReport(logging.getLogger("acker.spout"), "spout s", ("emit_errors",))
    spout._init_trouble = TroubleReport(logging.getLogger("acker.spout"), "spout s", ("init_delivery_failures",))
    spout._reports = (spout._trouble, spout._told_trouble, spout._start_trouble, spout._init_trouble)
    spout.complete_latency, spout._on_outcome, spout._told_as = LatencyHistogram(), None, {}
    spout._unresolved = OrderedDict()
    return spout


def _pending(spout: Any, msg_id: str, anchor: int, started: float) -> None:
    spout.pending[msg_id] = anchor
    spout._started_at[anchor] = started
    spout._pending_deadlines.append((started + spout._pending_timeout_s, msg_id, anchor))


def test_the_spout_times_a_tree_out_once_its_acker_partition_decided_one_started_a_trees_life_after_it() -> None:
    """Its outcome was then most likely lost (the acker, reading its partition in order, had expired it): a TIMEOUT
    of the spout's own, so that the record is replayed and the watermark moves on. Without that evidence (an acker
    behind, or down) the tree keeps its room: timed out, every pending tree would be replayed while still processed,
    again and again for the length of an outage. A tree started less than a tree's life after it is no evidence:
    trees finish out of order, and every tree such a one overtook before an acker went down was replayed at its
    timeout while the acker was away, most of them processed already."""
    p0 = [a for a in range(1, 100) if partition_of(a, 4) == 0][:4]
    p1 = next(a for a in range(1, 100) if partition_of(a, 4) == 1)
    decided = encode_outcome_rows("s", [("ACK", p0[2], "t/0/3", 5)], acker_partition=0)  # written by the acker
    spout = _spout(_Outcomes(decided))
    _pending(spout, "t/0/1", p0[0], 0.0)  # lost: a tree of its partition started 6 s after it is decided
    _pending(spout, "t/0/2", p0[1], 2.0)  # overtaken by a tree started 4 s after it: the acker went down, say
    _pending(spout, "t/0/3", p0[2], 6.0)
    _pending(spout, "t/0/4", p0[3], 7.0)  # started after the decided one
    _pending(spout, "t/1/1", p1, 0.0)  # nothing decided on its partition
    spout._read_outcomes()
    spout._expire_pending(17.5)
    assert spout._direct == [("TIMEOUT", p0[0], "t/0/1", 10_000)]
    assert set(spout.pending) == {"t/0/2", "t/0/4", "t/1/1"} and spout.counters["pending_given_up"] == 1
    assert spout.counters["pending_waiting_on_acker"] == 3
    assert sorted(d[1] for d in spout._pending_deadlines) == ["t/0/2", "t/0/4", "t/1/1"]  # asked again later


def test_the_evidence_margin_is_a_trees_life_or_a_pending_timeout_set_below_it() -> None:
    """A pending timeout below a tree's life (against the settings' advice) is still the spout's timeout: with a
    margin of a tree's life, no evidence could come before it, and every tree waited for the overdue rule
    (`WAIT_TIMEOUTS` timeouts), said as an acker down."""
    config = ServiceConfig(timeout_s=30.0, buckets=3)  # a tree lives 45 s
    assert spout_module.decided_margin_s(config, spout_module.pending_timeout_s(config)) == 45.0
    assert spout_module.decided_margin_s(config, 10.0) == 10.0
    p0 = [a for a in range(1, 100) if partition_of(a, 4) == 0][:2]
    spout = _spout(_Outcomes(encode_outcome_rows("s", [("ACK", p0[1], "t/0/2", 5)], acker_partition=0)))
    spout._decided_margin_s = spout_module.decided_margin_s(config, 10.0)
    _pending(spout, "t/0/1", p0[0], 0.0)
    _pending(spout, "t/0/2", p0[1], 12.0)  # started a pending timeout (not a tree's life) later, decided
    spout._read_outcomes()
    spout._expire_pending(10.5)
    assert spout._direct == [("TIMEOUT", p0[0], "t/0/1", 10_000)] and spout.counters["pending_given_up"] == 1


def test_only_the_outcome_of_the_tree_pending_now_frees_its_room() -> None:
    """After a rebalance a record is read again as a new tree (anchor 22); the old tree's outcome (anchor 11) and a
    replay job's REPLAYED row (anchor 0) for the same record must not take the new tree off the pending ones."""
    stale = encode_outcome_rows("s", [("TIMEOUT", 11, "t/0/5", 0), ("REPLAYED", 0, "t/0/5", 0)])
    spout = _spout(_Outcomes(stale))
    spout.pending["t/0/5"] = 22
    spout._read_outcomes()
    assert spout.pending == {"t/0/5": 22} and sum(spout.counters.values()) == 0
    spout.outcomes.values.append(encode_outcome_rows("s", [("ACK", 22, "t/0/5", 0)]))
    spout._read_outcomes()
    assert spout.pending == {} and spout.counters["acked"] == 1


def test_on_outcome_is_told_each_pending_trees_outcome_once_its_own_timeouts_too_and_its_raise_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Storm's ack and fail of a spout: the acker's outcomes of the trees pending here (not a stale tree's, nor a
    replay job's row), and the trees the spout times out itself. An exception from it is the function's trouble,
    counted and said, not the spout's end."""
    p0 = [a for a in range(1, 100) if partition_of(a, 4) == 0][:4]
    rows = [("ACK", p0[1], "t/0/2", 5), ("FAILED", p0[2], "t/0/3", 5), ("TIMEOUT", 99, "t/0/9", 5)]
    told: list[tuple[str, str]] = []

    def on_outcome(msg_id: str, outcome: str) -> None:
        told.append((msg_id, outcome))
        if outcome == "FAILED":
            raise RuntimeError("the caller is gone")

    spout = _spout(_Outcomes(encode_outcome_rows("s", rows, acker_partition=0)))
    spout._on_outcome = on_outcome
    for i, anchor in enumerate(p0[:3]):
        _pending(spout, f"t/0/{i + 1}", anchor, float(3 * i))
    spout.pending["t/0/9"] = 98  # read again as a new tree: the old tree's outcome is not this one's
    with caplog.at_level(logging.WARNING, logger="acker.spout"):
        spout._read_outcomes()
        spout._expire_pending(12.5)  # t/0/1: its partition decided a tree started 6 s after it
    assert told == [("t/0/2", "ACK"), ("t/0/3", "FAILED"), ("t/0/1", "TIMEOUT")]
    assert spout.counters["on_outcome_errors"] == 1 and spout.pending == {"t/0/9": 98}
    spout._told_trouble.check(spout.counters)
    said = [r.getMessage() for r in caplog.records if "on outcome errors" in r.getMessage()]
    assert len(said) == 1 and "t/0/3 (FAILED)" in said[0] and "the caller is gone" in said[0], said


def test_on_outcome_is_told_dead_lettered_when_the_replay_job_gives_up_on_a_record_it_was_told_a_nack_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replay job resolves each nack in the outcome topic (anchor 0): ``REPLAYED`` (the copy's outcome is told
    when it comes, under the same id) or ``DEAD_LETTERED``, the record's final outcome, told under the id its nack
    was told under (a replay's origin). A resolution of a nack told elsewhere, or forgotten, is not told; at most
    `UNRESOLVED_KEPT` nacks wait for theirs."""
    monkeypatch.setattr(spout_module, "UNRESOLVED_KEPT", 2)
    rows = [("FAILED", 5, "t/0/1", 5), ("TIMEOUT", 6, "r/0/7", 5), ("OVERLOAD", 7, "t/0/3", 5), ("ACK", 8, "t/0/4", 5)]
    told: list[tuple[str, str]] = []
    spout = _spout(_Outcomes(encode_outcome_rows("s", rows, acker_partition=0)))
    spout._on_outcome = lambda msg_id, outcome: told.append((msg_id, outcome))
    for anchor, (_, _, msg_id, _) in enumerate(rows, start=5):
        _pending(spout, msg_id, anchor, 0.0)
    spout._told_as["r/0/7"] = "t/0/2"  # a replay of t/0/2
    spout._read_outcomes()
    assert told == [("t/0/1", "FAILED"), ("t/0/2", "TIMEOUT"), ("t/0/3", "OVERLOAD"), ("t/0/4", "ACK")]
    assert list(spout._unresolved) == ["r/0/7", "t/0/3"]  # t/0/1 forgotten (2 kept here), t/0/4 acked
    resolutions = [("DEAD_LETTERED", 0, "t/0/1", 0), ("DEAD_LETTERED", 0, "r/0/7", 0), ("REPLAYED", 0, "t/0/3", 0),
                   ("DEAD_LETTERED", 0, "t/0/9", 0)]  # fmt: skip
    spout.outcomes.values.append(encode_outcome_rows("s", resolutions))
    spout._read_outcomes()
    assert told[4:] == [("t/0/2", "DEAD_LETTERED")] and not spout._unresolved
    assert spout.pending == {} and spout.counters["acked"] == 1  # resolutions count nothing


def test_an_init_reported_undelivered_after_its_tree_was_decided_is_neither_sent_again_nor_failed() -> None:
    """librdkafka reports a record it timed out as failed, though it may have been written: the tree's outcome may
    come first. Sent again then, the init opened a tree nothing acks (TIMEOUT, a replay of a done record), and its
    third report published FAILED. Inits of trees still pending are sent again, as before."""
    decided = encode_outcome_rows("s", [("ACK", 7, "t/0/1", 5)], acker_partition=3)
    spout = _spout(_Outcomes(decided))
    sent: list[Init] = []
    spout.acker = SimpleNamespace(partitions=4, send=sent.append)
    _pending(spout, "t/0/1", 7, 0.0)
    _pending(spout, "t/0/2", 9, 0.0)
    spout._read_outcomes()  # the first tree is acked: its init was written after all
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    for _ in range(3):
        spout._acker_delivery_failed(3, [Init(7, "s", "t/0/1", 3), Init(9, "s", "t/0/2", 4)], timed_out)
    assert [m.anchor for m in sent] == [9, 9]  # the pending tree's, twice; then failed
    assert spout._direct == [("FAILED", 9, "t/0/2", 0)]
    assert spout._direct_reasons == {"t/0/2": "spout s: its init could not be delivered: Local: Message timed out"}


def test_inits_not_delivered_are_said_in_one_line_a_report_interval_not_one_a_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker away fails every tree whose init runs out of attempts: a line each flooded the log."""
    spout = _spout(_Outcomes())
    spout.acker = SimpleNamespace(partitions=4, send=lambda _init: None)
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    for anchor in range(1, 51):
        _pending(spout, f"t/0/{anchor}", anchor, 0.0)
        for _ in range(3):
            spout._acker_delivery_failed(0, [Init(anchor, "s", f"t/0/{anchor}", 1)], timed_out)
    with caplog.at_level(logging.WARNING, logger="acker.spout"):
        spout._read_outcomes()
        spout._read_outcomes()  # within the interval: nothing more to say
    assert spout.counters["init_delivery_failures"] == 50 and len(spout._direct) == 50
    [said] = [r.getMessage() for r in caplog.records]
    assert "init delivery failures 50" in said and "the init of t/0/1" in said and "Message timed out" in said, said


class _SmallRecords:
    """A producer refusing at once the records above ``limit`` bytes, as librdkafka does above message.max.bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.values: list[bytes] = []
        self.kwargs: list[dict[str, Any]] = []

    def produce(self, _topic: str, value: bytes, **kwargs: Any) -> None:
        if len(value) > self.limit:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.values.append(value)
        self.kwargs.append(kwargs)


def test_the_spouts_own_outcomes_go_in_smaller_records_where_a_record_of_them_is_refused_as_too_large() -> None:
    """16,384 outcome rows make a record of about 300 KB: a producer with a lower message.max.bytes refused it at
    once, and the exception stopped the spout at every start, on the same rows."""
    spout = _spout(_Outcomes())
    spout.config, spout.settings = ServiceConfig(), SimpleNamespace(name="s")
    spout.producer, spout._direct_rows = _SmallRecords(100_000), OUTCOMES_PER_RECORD
    spout._direct = [("ACK", 0, f"topic/0/{offset}", 0) for offset in range(OUTCOMES_PER_RECORD)]
    spout._publish_direct()
    assert spout._direct == [] and len(spout.producer.values) > 1
    published = [msg_id for value in spout.producer.values for msg_id in decode_outcomes(value).msg_ids]
    assert published == [f"topic/0/{offset}" for offset in range(OUTCOMES_PER_RECORD)]  # each once, in order


class _FullQueue(_SmallRecords):
    """librdkafka's local queue full, for good (the broker away): every record refused at once."""

    def produce(self, _topic: str, value: bytes, **kwargs: Any) -> None:
        raise BufferError("Local: Queue full")

    def poll(self, timeout: float = 0) -> int:
        time.sleep(timeout)
        return 0


def test_the_spouts_own_outcomes_wait_for_room_in_a_full_queue_until_told_keeping_them_all() -> None:
    """A spout's close waited for room until librdkafka timed out what filled its queue (5 minutes by default)."""
    spout = _spout(_Outcomes())
    spout.config, spout.producer, spout._direct_rows = ServiceConfig(), _FullQueue(100_000), OUTCOMES_PER_RECORD
    spout._direct = rows = [("FAILED", 0, "t/0/1", 0), ("ACK", 0, "t/0/2", 0)]
    spout._direct_reasons = {"t/0/1": "spout s: ValueError: x"}
    started = time.monotonic()
    with pytest.raises(BufferError):
        spout._publish_direct(until=time.monotonic() + 0.2)
    assert time.monotonic() - started < 2.0
    assert spout._direct == rows and spout._direct_reasons == {"t/0/1": "spout s: ValueError: x"}  # kept, to say


def test_unreadable_outcome_records_are_skipped_counted_and_said_once_with_where_the_first_lies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another producer writing to the outcome topic: one warning line a record, unsaid where, flooded the log."""
    junk = [b"AK?junk"] * 500
    spout = _spout(_Outcomes(*junk[:3], encode_outcome_rows("s", [("ACK", 22, "t/0/5", 0)]), *junk[3:]))
    spout.pending["t/0/5"] = 22
    with caplog.at_level(logging.WARNING, logger="acker.spout"):
        spout._read_outcomes()
    assert spout.pending == {} and spout.counters["unreadable_outcomes"] == 500
    assert int(spout.complete_latency.counts.sum()) == 0  # no start time known for the tree: no latency
    [said] = [r.getMessage() for r in caplog.records]
    assert "unreadable outcomes 500" in said and "on outcome record o/0/0" in said and "wrong-record-kind" in said, said


def test_the_outcome_consumer_waits_for_about_half_a_window_of_outcomes_unless_told_otherwise() -> None:
    config = ServiceConfig(bootstrap_servers="b:9092")

    def fetch(max_pending: int, config: ServiceConfig = config) -> tuple[object, object]:
        settings = SpoutSettings("s", "in", "out", max_pending=max_pending)
        got = outcome_consumer(config, settings, "g")
        assert got["group.id"] == "g" and got["bootstrap.servers"] == "b:9092"
        return got["fetch.min.bytes"], got["fetch.wait.max.ms"]

    assert fetch(10_000) == (65536, 100)  # capped
    assert fetch(1000) == (8000, 100)  # a small window is not held for 64 KB of outcomes
    assert fetch(1) == (8, 100)
    mine = ServiceConfig(bootstrap_servers="b:9092", kafka={"fetch.min.bytes": "1", "fetch.wait.max.ms": "500"})
    assert fetch(10_000, mine) == ("1", "500")


def test_a_spout_name_must_name_topics_of_its_own() -> None:
    """A name that cannot name a topic: the acker dead-letters every record naming it, and the spout's trees are
    never answered. A reserved one: its topics would be the Spark jobs' dead-letter or progress topics."""
    config = ServiceConfig()
    check_spout_name(config, "orders.v1")
    for name in ("with space", "", "dlq", "progress"):
        with pytest.raises(ConfigError, match="spout name"):
            check_spout_name(config, name)
    with pytest.raises(ConfigError, match="reserved"):  # its replay topic would be the acker's dead-letter topic
        check_spout_name(replace(config, replay_prefix="acker.", dlq_topic="acker.x"), "x")
    with pytest.raises(ConfigError, match="too long"):  # valid, but with the prefix past Kafka's 249 characters
        check_spout_name(replace(config, outcome_prefix="p" * 60 + "."), "x" * 190)
    overlapping = replace(config, outcome_prefix="acker.")  # spout "replay.x"'s outcomes: spout "x"'s replays
    check_spout_name(overlapping, "orders")
    with pytest.raises(ConfigError, match="prefix and replay_prefix overlap"):
        check_spout_name(overlapping, "replay.x")
    with pytest.raises(ConfigError, match="reserved"):  # nor does `acker topics create --spout` make its topics
        all_topics(config, ["sentences", "dlq"])


def test_the_acker_refuses_a_spout_whose_outcome_topic_would_be_one_of_the_deployments_own() -> None:
    """The names a spout refuses because its outcome topic would meet the acker's or Spark jobs' topics under the
    prefixes used, the service refuses in an acker record too (a client of its own can send any name): with outcome
    prefix ``acker.``, spout ``status``'s outcomes were published among the status records. A name refused for its
    replay topic alone is still answered: the replay job refuses to replay into its own topics."""
    config = ServiceConfig(outcome_prefix="acker.")
    names = spout_names(config)
    for spout in ("status", "replay.dlq", "dlq", "with space"):
        with pytest.raises(WireError, match="spout name") as raised:
            names.check([spout])
        assert raised.value.reason == "bad-spout"
        assert not names.answerable(spout) and spout_refusal(config, spout) is not None
    assert names.answerable("orders") and names.answerable("replay.x")
    assert spout_refusal(config, "replay.x") is not None  # outcomes of "replay.x" are "x"'s replays: no spout takes it
    bare = spout_names(replace(config, outcome_prefix=""))
    assert not bare.answerable("acker")  # the acker topic itself
    assert not bare.answerable(".") and not bare.answerable("..")  # names Kafka refuses for a topic
    assert ANY_CONFIGURATION.answerable("status")  # what the acker refuses depends on its configuration
    block = MessageBlock.from_messages([Init(3, "orders", "t/0/1", 1), Init(5, "status", "t/0/2", 1)])
    failing = failing_inits(block, names)  # the record is dead-lettered; only "orders"'s tree is failed at once
    assert failing is not None and failing.anchors.tolist() == [3, 3]


def test_the_outcome_consumer_never_commits() -> None:
    """Its group is fresh at every start: committing left a group with offsets behind each one."""
    assert outcome_consumer(ServiceConfig(), SpoutSettings("s", "in", "out"), "g")["enable.auto.commit"] is False


@pytest.mark.parametrize(("given", "taken"), [("smallest", "earliest"), ("Beginning", "earliest"), ("end", "latest")])
def test_librdkafka_names_of_the_reset_policies_are_taken_as_them(given: str, taken: str) -> None:
    """Compared literally, "smallest" started a partition without a watermark at its end."""
    assert SpoutSettings("s", "in", "out", reset=given).reset == taken


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reset": "error"}, "reset 'error' is not earliest or latest"),
        ({"max_pending": 0}, "max_pending 0 is not a positive count"),
        ({"pending_timeout_s": -1.0}, "pending_timeout_s -1.0 is not 0 or more"),
    ],
)
def test_spout_settings_that_cannot_work_are_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SpoutSettings("s", "in", "out", **change)


def test_the_spouts_own_outcomes_are_no_evidence_and_a_tree_waits_a_few_timeouts_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A FAILED the spout published itself (an init it could not deliver: the acker partition may be down) says
    nothing of the acker. And a tree whose partition never decides a later one (its outcomes lost for good) is timed
    out after `WAIT_TIMEOUTS` timeouts all the same: else the spout would stop at max_pending for good. Said as it is:
    the warning said one timeout, and that its partition decided later trees."""
    p0 = [a for a in range(1, 100) if partition_of(a, 4) == 0][:2]
    spout = _spout(_Outcomes(encode_outcome_rows("s", [("FAILED", p0[1], "t/0/2", 0)])))  # acker_partition -1
    _pending(spout, "t/0/1", p0[0], 0.0)
    _pending(spout, "t/0/2", p0[1], 1.0)
    spout._read_outcomes()
    assert "t/0/2" not in spout.pending and spout._decided_upto == {}
    for now in range(10, 40):  # three timeouts: waiting
        spout._expire_pending(float(now))
    assert spout._direct == [] and spout.counters["pending_waiting_on_acker"] == 3
    with caplog.at_level(logging.WARNING, logger="acker.spout"):
        spout._expire_pending(WAIT_TIMEOUTS * 10.0)
    assert spout._direct == [("TIMEOUT", p0[0], "t/0/1", 10_000)] and not spout.pending
    [said] = [r.getMessage() for r in caplog.records if "timed out by the spout" in r.getMessage()]
    assert said.startswith(f"no outcome for 1 tree(s) after {WAIT_TIMEOUTS} timeouts (40 s; e.g. t/0/1)")
    assert "decided no tree started 5 s or more after them" in said


def test_a_replay_behind_a_held_one_waits_even_when_its_headers_cannot_be_read() -> None:
    """Replay-topic partition held for a backoff (paused, rewound to the held record): a record after it in the same
    batch whose headers could not be read skipped the hold, was started, and was started again once the hold ended."""

    class _Unreadable(Message):  # a header name that is not UTF-8, as the client gives it
        def headers(self) -> Any:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    spout: Any = Spout.__new__(Spout)
    spout._held, spout._replay_topic, spout._on_outcome = {("s.replay", 0): 10**13}, "s.replay", None
    started: list[tuple[int, bool]] = []
    spout._start = lambda record, _now, unreadable=False, origin=None: started.append((record.partition(), unreadable))
    spout.acker = SimpleNamespace(poll_due=lambda: False)
    behind = _Unreadable(topic="s.replay", partition=0, offset=11, value=b"x")
    elsewhere = _Unreadable(topic="s.replay", partition=1, offset=3, value=b"x")
    spout._take([behind, elsewhere], 0)
    assert started == [(1, True)]  # the held partition's waits; the other is started as unreadable, as before


def test_a_rebalance_that_assigns_nothing_asks_nothing() -> None:
    """A cooperative rebalance calls on_assign with no partitions: asking for their watermarks waited on the
    watermark group's coordinator (30 s while it moved) and then stopped the spout."""

    class _Unreachable:
        def committed(self, *_: Any, **__: Any) -> Any:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    spout: Any = Spout.__new__(Spout)
    spout._watermarks = _Unreachable()
    spout._on_assign(None, [])


class _Coordinating:
    """A consumer whose committed offsets' lookups answer each of ``answers`` in turn: an error code for the request
    (raised, as confluent-kafka raises it: not retriable, whatever the code), a partition's error code, or offset 7."""

    def __init__(self, *answers: str | int) -> None:
        self.answers, self.asked = list(answers), 0

    def committed(self, partitions: list[TopicPartition], timeout: float = 0) -> list[TopicPartition]:
        self.asked += 1
        answer = self.answers.pop(0) if self.answers else "offset"
        if isinstance(answer, int):
            raise KafkaException(KafkaError(answer, "from the broker", retriable=False))
        if answer == "partition":
            return [_with_error(tp, KafkaError.COORDINATOR_LOAD_IN_PROGRESS) for tp in partitions]
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in partitions]


def _with_error(tp: TopicPartition, code: int) -> Any:
    return SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1001, error=KafkaError(code))


def test_committed_offsets_are_asked_again_while_the_groups_coordinator_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen after a broker's restart: NOT_COORDINATOR, the group's coordinator not loaded yet, answered seconds later;
    any other error is raised at once, and the last attempt's too."""
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    moving = _Coordinating(KafkaError.NOT_COORDINATOR, "partition", KafkaError.COORDINATOR_NOT_AVAILABLE)
    [found] = committed_offsets(moving, [TopicPartition("s", 0)], 30, attempts=4)  # type: ignore[arg-type]
    assert (found.offset, moving.asked) == (7, 4)
    refused = _Coordinating(KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        committed_offsets(refused, [TopicPartition("s", 0)], 30, attempts=4)  # type: ignore[arg-type]
    assert refused.asked == 1
    once = _Coordinating(KafkaError.NOT_COORDINATOR)
    with pytest.raises(KafkaException):
        committed_offsets(once, [TopicPartition("s", 0)], 30)  # type: ignore[arg-type]
    assert once.asked == 1


def test_a_spout_assigned_while_its_watermark_groups_coordinator_moves_asks_again_then_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker just back: the watermark lookup stopped the spout at once (confluent-kafka's NOT_COORDINATOR is not
    retriable); asked `LOOKUP_ATTEMPTS` times, then stopped as at any error, rather than start elsewhere."""
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    spout: Any = Spout.__new__(Spout)
    spout._watermarks = _Coordinating(*[KafkaError.NOT_COORDINATOR] * LOOKUP_ATTEMPTS)
    with pytest.raises(KafkaClientError, match="reading the watermarks of s/0: NOT_COORDINATOR"):
        spout._on_assign(None, [TopicPartition("s", 0)])
    assert spout._watermarks.asked == LOOKUP_ATTEMPTS


def test_the_spouts_own_failed_outcomes_say_why_and_their_reasons_are_kept_only_while_undelivered() -> None:
    """The reasons of the FAILED outcomes a spout decides itself go in their record's header, by message id, and are
    forgotten once the producer takes it; given back with a record sent again. They were forgotten when a delivery
    report said it was delivered, which the spout's producer never sends (it reports failures only): one reason a
    failed record, kept for the life of the process."""
    spout = _spout(_Outcomes())
    spout.config, spout.producer, spout._direct_rows = ServiceConfig(), _SmallRecords(100_000), OUTCOMES_PER_RECORD
    spout._direct = [("FAILED", 0, "t/0/1", 0), ("ACK", 0, "t/0/2", 0), ("FAILED", 0, "t/0/3", 0)]
    spout._direct_reasons = {"t/0/1": "spout s: ValueError: x", "t/0/9": "another record's"}
    spout._publish_direct()
    [sent] = spout.producer.kwargs
    assert sent["headers"] == [(fail_reasons.HEADER, b'{"t/0/1": "spout s: ValueError: x"}')]
    assert spout._direct_reasons == {"t/0/9": "another record's"}  # taken by the producer: held by the record
    sent["on_delivery"](KafkaError(KafkaError._MSG_TIMED_OUT), None)  # sent again at the next step, with its reason
    assert "t/0/1" in spout._direct_reasons and len(spout._direct) == 3
    spout._publish_direct()
    assert spout.producer.kwargs[1]["headers"] == [(fail_reasons.HEADER, b'{"t/0/1": "spout s: ValueError: x"}')]
    assert spout._direct_reasons == {"t/0/9": "another record's"}


def test_a_burst_of_the_spouts_own_fails_goes_in_records_whose_headers_say_every_reason() -> None:
    """A header holds `fail_reasons.PER_RECORD` reasons (and `HEADER_MAX_BYTES`): a record of more FAILED rows (an
    emit function raising on every record of a burst) said the first ones, and the others' dead letters none."""
    spout = _spout(_Outcomes())
    spout.config, spout.producer, spout._direct_rows = ServiceConfig(), _SmallRecords(10**6), OUTCOMES_PER_RECORD
    count = 3 * fail_reasons.PER_RECORD + 11
    spout._direct = [("FAILED" if i % 4 else "ACK", 0, f"t/0/{i}", 0) for i in range(count)]
    spout._direct_reasons = {f"t/0/{i}": f"spout s: ValueError: {i} " + "x" * 120 for i in range(count) if i % 4}
    spout._publish_direct()
    said: dict[str, str] = {}
    for sent in spout.producer.kwargs:
        [(name, raw)] = sent["headers"]
        assert name == fail_reasons.HEADER and len(raw) <= fail_reasons.HEADER_MAX_BYTES
        said.update(fail_reasons.decode(raw))
    ids = [msg_id for value in spout.producer.values for msg_id in decode_outcomes(value).msg_ids]
    assert len(spout.producer.values) >= 3 and ids == [f"t/0/{i}" for i in range(count)] and not spout._direct
    assert said == {f"t/0/{i}": f"spout s: ValueError: {i} " + "x" * 120 for i in range(count) if i % 4}
    assert spout._direct_rows == OUTCOMES_PER_RECORD  # the records after it are not made smaller


@pytest.mark.parametrize("code", [KafkaError.POLICY_VIOLATION, KafkaError.INVALID_CONFIG])
def test_a_replay_topic_whose_limit_the_cluster_refuses_is_made_with_the_brokers_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    """A cluster that caps max.message.bytes (a policy, a managed service) with the source at the cap: the source's
    limit plus the headers' room was refused, and the spout did not start, where it started before with the
    broker's default. Any other refusal is still the spout's error."""
    made: list[dict[str, str]] = []
    refusal = [code]

    def ensure(_client: object, specs: list[Any]) -> list[str]:
        made.append(dict(specs[0].config))
        if specs[0].config:
            raise TopicsNotCreatedError({specs[0].name: KafkaError(refusal[0], "capped")}, [])
        return [specs[0].name]

    monkeypatch.setattr(spout_module, "topic_max_bytes", lambda _client, _topic: 8_000_000)
    monkeypatch.setattr(spout_module, "ensure_topics", ensure)
    config, settings = ServiceConfig(), SpoutSettings("s", "src", "out")
    with caplog.at_level(logging.WARNING, logger="acker.spout"):
        spout_module.make_replay_topic(config, settings, 3)
    assert made == [{"max.message.bytes": str(8_000_000 + spout_module.REPLAY_HEADERS_ROOM)}, {}]
    assert "max.message.bytes 8004096 refused (capped)" in caplog.text

    refusal[0] = KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(TopicsNotCreatedError):
        spout_module.make_replay_topic(config, settings, 3)
