"""The guarantee across a broker crash: the word count on a broker of its own, killed with SIGKILL mid-flight and
started again on its data (same port), every stage and the acker running on through it."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from acker.examples.wordcount import SPOUT, Topics, sentences
from acker.kafka import lookups
from acker.kafka.clients import TopicSpec, create_topics
from acker.kafka.local_broker import LocalKafkaBroker
from tests.integration.helpers import OutcomeReader, create_acker_topics, service_config
from tests.integration.test_pipeline import _pipeline, _produce, _stop


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "broker"
    lookups.close_all()  # the lookup clients made for this broker, before the next test's broker takes its port


def test_a_broker_killed_mid_flight_loses_no_sentence_and_fails_none(data_dir: Path) -> None:
    """The stages' producers are idempotent and retry while the broker is away; the acker's ticks stop with it (they
    are read back from the log), so no tree times out for the outage; the groups' coordinator comes back with the
    broker and the stages rejoin. Every sentence is acked (a tree's outcome may come twice, after the acker's
    partitions were reassigned), and every word counted at least once."""
    first = LocalKafkaBroker(data_dir=data_dir, num_partitions=2).start()
    bootstrap = first.bootstrap_servers
    config = service_config(bootstrap, partitions=2)
    topics = Topics(prefix="outage")
    create_acker_topics(config, [SPOUT])
    create_topics(config.client(), [TopicSpec(t, 2) for t in (topics.sentences, topics.split, topics.words,
                                                               topics.counts)])  # fmt: skip
    stages, counts = _pipeline(config, topics)
    reader = OutcomeReader(config, [SPOUT])
    second: LocalKafkaBroker | None = None
    try:
        before = list(sentences(3000, seed=5))
        ids = _produce(config, topics.sentences, before)
        while len(reader.seen) < 100:  # trees decided, and most still in flight
            reader.poll(0.05)
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        first.stop()  # what is left of it: the data directory is kept
        time.sleep(3)  # every client finds the broker gone
        second = LocalKafkaBroker(data_dir=data_dir, num_partitions=2).start()
        assert second.bootstrap_servers == bootstrap  # its port was still free: the clients reconnect to it
        after = list(sentences(1000, seed=6))
        ids += _produce(config, topics.sentences, after)
        reader.wait_for(ids, timeout_s=150)
    finally:
        try:
            _stop(stages)
            reader.close()
        finally:
            (second or first).stop()
    assert {m: set(seen) for m, seen in reader.seen.items() if m in ids} == {m: {"ACK"} for m in ids}
    expected = Counter(word for line in before + after for word in line.split())
    assert all(counts[word] >= times for word, times in expected.items()), "a word of an acked sentence not counted"
