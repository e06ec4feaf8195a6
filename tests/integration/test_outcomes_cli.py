"""`acker outcomes` on the real broker: what the acker service decided for a spout's records, and their replays."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from acker.cli import main
from acker.config import ServiceConfig, to_argv
from acker.core.ids import IdGenerator
from acker.core.tuple_tree import InputTuple, SpoutTree
from acker.kafka.clients import TopicSpec, create_topics, produce
from acker.retries import ATTEMPT, ORIGIN
from acker.wire import encode_outcome_rows
from tests.integration.helpers import OutcomeReader, ServiceThread, acker_client, create_acker_topics

SPOUT = "sentences"


def _outcomes(config: ServiceConfig, *args: str) -> int:
    flags, _ = to_argv(config)
    return main(["outcomes", *args, *flags])


def test_outcomes_of_a_record_show_its_nack_with_the_reason_its_resolution_and_its_replays_outcome(
    config: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    config = replace(config, timeout_s=60.0)
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(config.replay_topic(SPOUT), 1)])
    ids = IdGenerator(17)
    done, failed = SpoutTree(SPOUT, "src/0/1", ids), SpoutTree(SPOUT, "src/0/2", ids)
    copy_id = f"{config.replay_topic(SPOUT)}/0/0"
    reader = OutcomeReader(config, [SPOUT])
    service = ServiceThread(config)
    try:
        client = acker_client(config)
        split, crashed = InputTuple(done.emit(), ids), InputTuple(failed.emit(), ids)  # emitted before the inits
        client.send_all([done.init(), *split.ack()])
        client.send_all([failed.init(), *crashed.fail()], "bolt split: ValueError: bad input")
        assert client.flush() == 0
        reader.wait_for([done.msg_id, failed.msg_id], timeout_s=60)
        # The replay job's part, as it writes it: the copy, with its origin, and the nack's resolution.
        time.sleep(0.05)  # later timestamps than the nack's
        producer = Producer(config.client())
        produce(producer, config.replay_topic(SPOUT), b"the sentence", headers=[(ORIGIN, b"src/0/2"), (ATTEMPT, b"1")])
        produce(producer, config.outcome_topic(SPOUT), encode_outcome_rows(SPOUT, [("REPLAYED", 0, "src/0/2", 0)]))
        assert producer.flush(30) == 0
        time.sleep(0.05)
        again = SpoutTree(SPOUT, copy_id, ids)  # the spout reads the copy: a tree of its own, under its coordinates
        replayed = InputTuple(again.emit(), ids)
        client.send_all([again.init(), *replayed.ack()])
        assert client.flush() == 0
        reader.wait_for([copy_id], timeout_s=60)
    finally:
        service.stop()
        reader.close()

    assert _outcomes(config, SPOUT, "--msg-id", "src/0/2", "--json") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["msg_id"], r["outcome"], r["decided_by"], r["reason"], r["replay_of"]) for r in rows] == [
        ("src/0/2", "FAILED", rows[0]["decided_by"], "bolt split: ValueError: bad input", None),
        ("src/0/2", "REPLAYED", "replay job", None, None),
        (copy_id, "ACK", rows[2]["decided_by"], None, "src/0/2"),
    ]
    assert all(rows[i]["decided_by"].startswith("acker ") for i in (0, 2))

    assert _outcomes(config, SPOUT, "--msg-id", "src/0/1", "--msg-id", "src/0/9") == 1  # one has none
    out, err = capsys.readouterr()
    assert "src/0/1" in out and "ACK" in out and "no outcome of src/0/9" in err

    assert _outcomes(config, SPOUT, "--limit", "2", "--json") == 0  # the newest two
    newest = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["msg_id"], r["outcome"], r["replay_of"]) for r in newest] == [
        ("src/0/2", "REPLAYED", None),
        (copy_id, "ACK", "src/0/2"),  # read from the copy
    ]
    assert _outcomes(config, SPOUT) == 0  # the table, every outcome
    shown = capsys.readouterr().out
    assert "4 outcome(s)" in shown and "bolt split: ValueError: bad input" in shown and "replay of" in shown

    assert _outcomes(replace(config, outcome_prefix=f"{config.outcome_prefix}none."), SPOUT) == 0
    assert "no such topic yet" in capsys.readouterr().out
