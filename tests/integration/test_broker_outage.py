"""The guarantee across a broker crash: the word count on a broker of its own, killed with SIGKILL while sentences are
being written and processed, and started again on its data (same port), every stage and the acker running on through
it; the lookups, the Spark jobs and a coordinated chain through the same."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, Message, Producer

from acker.config import ServiceConfig
from acker.examples import reach
from acker.examples.reach import CHAIN, Graph, steps
from acker.examples.wordcount import Topics, sentences
from acker.kafka import coordinated_stage, lookups
from acker.kafka.clients import KafkaClientError, TopicSpec, create_topics, produce
from acker.kafka.coordinated_stage import Chain, CoordinatedStage, create_chain_topics
from acker.kafka.local_broker import NODE_ID, LocalKafkaBroker, kafka_tool_command
from acker.retries import ORIGIN
from acker.wire import encode_outcome_rows
from tests.integration.helpers import OutcomeReader, Running, create_acker_topics, read_all, service_config
from tests.integration.test_pipeline import SPOUT, _pipeline

# As the session's broker: topics are not created on first use, so that every component must make again what it
# writes to (the status topic, say) whatever the restart did.
_NO_AUTO_CREATE = {"auto.create.topics.enable": "false"}


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "broker"
    lookups.close_all()  # the lookup clients made for this broker, before the next test's broker takes its port


def _broker(data_dir: Path, **settings: Any) -> LocalKafkaBroker:
    """A broker of the test's own on ``data_dir``, started: its `crash` keeps its data and its port, where its
    `start` brings it up again and the clients find it."""
    return LocalKafkaBroker(data_dir=data_dir, server_properties=_NO_AUTO_CREATE, **settings).start()


class _Writer:
    """Writes generated sentences to the source topic from a thread, 10 every 50 ms until `finish`, across the
    broker's crash (its producer keeps what it cannot deliver, and delivers it once the broker is back); records
    their ids."""

    def __init__(self, config: ServiceConfig, topic: str) -> None:
        self.producer = Producer(config.client(**{"enable.idempotence": True}))  # its log lines to logging
        self.topic = topic
        self.lines: list[bytes] = []
        self.ids: list[str] = []
        self.failed: list[KafkaError] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, error: KafkaError | None, record: Message) -> None:
        if error is not None:
            self.failed.append(error)
        else:
            self.ids.append(f"{record.topic()}/{record.partition()}/{record.offset()}")

    def _run(self) -> None:
        generated = sentences(1_000_000, seed=5)
        while not self.stop.is_set():
            # 200 a second: more than a pipeline of threads of one process keeps up with on two cores busy with other
            # tests, what it has not read waits in the topic (the spout's max_pending bounds what is in flight).
            for line in itertools.islice(generated, 10):
                self.producer.produce(self.topic, line, on_delivery=self._delivered)
                self.lines.append(line)
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(120)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(150)
        assert not self.thread.is_alive(), "the sentences were not all delivered"
        assert not self.failed, f"sentences not delivered: {self.failed[:3]}"
        assert len(self.ids) == len(self.lines)


def test_a_broker_killed_mid_flight_loses_no_sentence_and_fails_none(data_dir: Path) -> None:
    """The stages' producers are idempotent and keep what they could not deliver; the acker's ticks stop with the
    broker (they are read back from the log), so no tree times out for the outage; the groups' coordinator comes back
    with the broker and the stages rejoin. Every sentence is acked (a tree's outcome may come twice: a spout that lost
    its partitions reads again from its watermark, which no commit job moves here), and every word counted at least
    once."""
    with contextlib.ExitStack() as cleanup:
        broker = _broker(data_dir, num_partitions=2)
        cleanup.callback(broker.stop)  # last
        config = service_config(broker.bootstrap_servers, partitions=2)
        topics = Topics(prefix="outage")
        create_acker_topics(config, [SPOUT])
        create_topics(config.client(), [TopicSpec(t, 2) for t in (topics.sentences, topics.split, topics.words,
                                                                   topics.counts)])  # fmt: skip
        # In flight at most 1,000 trees, not the default 10,000: a spout that lost its partitions in the outage reads
        # every sentence again from its watermark (none moved here), and with 10,000 trees queued in the stages half
        # the trees took 16 s on a loaded machine (2.7 s at 1,000), near the acker's timeout (30 s); CI saw trees
        # decided otherwise than acked. Storm's rule for max.spout.pending: what the topology processes well within
        # the timeout.
        stages, counts = _pipeline(config, topics, max_pending=1_000)
        for stage in stages:
            cleanup.callback(stage.stop)  # in the reverse order, each whatever the others do
        reader = OutcomeReader(config, [SPOUT])
        cleanup.callback(reader.close)
        writer = _Writer(config, topics.sentences)
        cleanup.callback(writer.stop.set)
        deadline = time.monotonic() + 90
        while len(reader.seen) < 200:  # trees decided, and sentences still coming: some always in flight
            assert time.monotonic() < deadline, "the pipeline decided nothing"
            reader.poll(0.05)
        broker.crash()
        time.sleep(3)  # every client finds the broker gone
        broker.start()  # the clients reconnect to it
        time.sleep(2)  # sentences written after the restart too
        writer.finish()
        reader.wait_for(writer.ids, timeout_s=300)  # 150 s was not enough on a busy CI machine (3x slower than usual)
    assert reader.not_just_acked(writer.ids) == {}
    expected = Counter(word for line in writer.lines for word in line.split())
    assert all(counts[word] >= times for word, times in expected.items()), "a word of an acked sentence not counted"


def test_the_lookups_answer_questions_of_group_offsets_again_after_a_broker_outage(data_dir: Path) -> None:
    """The Spark jobs' and the spouts' Kafka lookups kept one admin client for the life of the process: after it
    timed out twice while the broker was away (one Spark batch was enough), it never answered a question of group
    offsets again once the broker was back, each a timeout (the commit job stopped; the replay job, not knowing the
    watermarks, replayed every nack), or it aborted the process. A timeout now gives the next questions a new one."""
    with contextlib.ExitStack() as cleanup:
        broker = _broker(data_dir)
        cleanup.callback(broker.stop)
        client = {"bootstrap.servers": broker.bootstrap_servers}
        create_topics(client, [TopicSpec("t", 1)])
        kafka = lookups.KafkaLookups(client)
        cleanup.callback(kafka.close)
        assert kafka.committed("g", [("t", 0)]) == {("t", 0): OFFSET_INVALID}
        broker.crash()
        for _ in range(2):
            with pytest.raises(KafkaException):
                kafka.committed("g", [("t", 0)])
        broker.start()
        answers: list[object] = []
        for _ in range(3):  # the first may still find the broker's group coordinator loading
            try:
                answers.append(kafka.committed("g", [("t", 0)]))
                break
            except KafkaException as error:
                answers.append(error)
        assert answers[-1] == {("t", 0): OFFSET_INVALID}, answers


def test_a_record_written_out_and_held_through_an_outage_longer_than_a_trees_life_is_given_up(data_dir: Path) -> None:
    """A bolt's sink producer (`ServiceConfig.sink_producer`): a word's count held through a broker's outage landed
    once the broker was back, after the word's next count process had read the last counts and gone on from them,
    and the word's last count went back below the times it was counted. Given up past a tree's life (6 s here),
    it fails its trees, and nothing lands; one written once the broker is back does."""
    with contextlib.ExitStack() as cleanup:
        broker = _broker(data_dir)
        cleanup.callback(broker.stop)
        config = ServiceConfig(bootstrap_servers=broker.bootstrap_servers, timeout_s=4.0, buckets=3)
        create_topics(config.client(), [TopicSpec("counts", 1)])
        sink = Producer(config.sink_producer())
        reports: list[KafkaError | None] = []
        produce(sink, "counts", b"1", on_delivery=lambda error, _record: reports.append(error), key=b"w")
        assert sink.flush(30) == 0 and reports == [None]
        broker.crash()
        produce(sink, "counts", b"2", on_delivery=lambda error, _record: reports.append(error), key=b"w")
        time.sleep(config.tree_lifetime_s)  # and the restart's 5 s at least (the old registration expires)
        broker.start()
        # Connected again before the next count: the producer's reconnection backs off up to 10 s, and under load the
        # count written at once was given up too, waiting for it.
        sink.list_topics("counts", timeout=60)
        produce(sink, "counts", b"3", on_delivery=lambda error, _record: reports.append(error), key=b"w")
        assert sink.flush(60) == 0
        assert [r.code() if r is not None else None for r in reports] == [None, KafkaError._MSG_TIMED_OUT, None]
        assert [m.value() for m in read_all(config.client(), "counts")] == [b"1", b"3"]


# Spark's Kafka source waits for records for spark.network.timeout (120 s) before it fails a task: shortened for the
# job's JVM (pyspark starts it with these arguments; the interval of its checks must not be longer), as the Java
# client's timeouts are. Not to less: the setting is also the wait for an executor's heartbeat, late on a busy machine.
_SHORT_POLL = "--conf spark.network.timeout=30s --conf spark.network.timeoutInterval=10s pyspark-shell"


@pytest.mark.parametrize("job", ["commit", "replay"])
def test_a_spark_job_starts_again_after_a_broker_outage_and_carries_on(
    job: str, data_dir: Path, tmp_path: Path
) -> None:
    """A Kafka outage longer than Spark's Kafka timeouts failed a job's query (its source gave up on a partition's
    position), and the job stopped until someone started it again. It now starts itself again from its checkpoint
    (`spark_jobs.restarts`) and carries on once the broker is back: the commit job moves the watermark on, the replay
    job replays every nack once, those before the outage as those after. (Spark's timeouts are shortened, its Java
    client's through ``--java-kafka``, its source's wait for records through `_SHORT_POLL`: the outage is a test's, and
    short.)"""
    with contextlib.ExitStack() as cleanup:
        broker = _broker(data_dir)
        cleanup.callback(broker.stop)
        config = service_config(broker.bootstrap_servers, partitions=1)
        create_acker_topics(config, ["sp"])
        create_topics(config.client(), [TopicSpec("src", 1), TopicSpec(config.replay_topic("sp"), 1)])  # as a spout
        producer = Producer(config.client())
        cleanup.callback(producer.flush, 10)

        def decided(offsets: range) -> None:
            rows = [("ACK" if job == "commit" else "FAILED", 1 + o, f"src/0/{o}", 0) for o in offsets]
            produce(producer, config.outcome_topic("sp"), encode_outcome_rows("sp", rows))
            assert producer.flush(30) == 0

        for offset in range(20):
            produce(producer, "src", b"r%d" % offset)
        decided(range(10))
        said = tmp_path / "job.err"
        with said.open("w") as stderr:
            job_process = subprocess.Popen(
                [sys.executable, "-m", "acker.cli", "spark", job, "--bootstrap-servers", broker.bootstrap_servers,
                 "--outcome-prefix", config.outcome_prefix, "--replay-prefix", config.replay_prefix,
                 "--replay-dlq-topic", config.replay_dlq_topic, "--spout", "sp", "--checkpoint",
                 str(tmp_path / "ckpt"), "--trigger-s", "0.5", "--spark-log", str(tmp_path / "spark.log"),
                 "--java-kafka", "request.timeout.ms=4000", "--java-kafka", "default.api.timeout.ms=5000"],
                stderr=stderr, stdout=subprocess.DEVNULL, env={**os.environ, "PYSPARK_SUBMIT_ARGS": _SHORT_POLL},
            )  # fmt: skip

        @cleanup.callback
        def _stop_job() -> None:
            if job_process.poll() is None:
                job_process.kill()
                job_process.wait(30)

        kafka = lookups.KafkaLookups(config.client())
        cleanup.callback(kafka.close)

        def replayed() -> list[bytes]:
            """The origins of the copies on the replay topic, in order (read_committed)."""
            copies = read_all(config.client(), config.replay_topic("sp"), idle_s=1.0)
            origins = [dict(copy.headers() or [])[ORIGIN] for copy in copies]
            assert all(isinstance(origin, bytes) for origin in origins), origins
            return cast(list[bytes], origins)

        def carried_on(upto: int) -> bool:
            if job == "commit":
                return kafka.committed("sp.acked", [("src", 0)])[("src", 0)] == upto
            return sorted(replayed()) == sorted(b"src/0/%d" % o for o in range(upto))

        def until_carried_on(upto: int, timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while True:
                assert job_process.poll() is None, said.read_text()[-3000:]
                try:
                    if carried_on(upto):
                        return
                except KafkaException:
                    pass  # the broker restarting
                assert time.monotonic() < deadline, said.read_text()[-3000:]
                time.sleep(0.5)

        # Spark's start and its first micro-batch: on two cores beside three other tests' brokers and Spark jobs, CI saw
        # the JVM's first Kafka request 2 min after the job was started, and the first batch not done by 3 min.
        until_carried_on(10, timeout_s=360)
        broker.crash()
        deadline = time.monotonic() + 240
        while "job starts again from its checkpoint" not in said.read_text():
            assert job_process.poll() is None and time.monotonic() < deadline, said.read_text()[-3000:]
            time.sleep(1)
        broker.start()
        decided(range(10, 20))
        until_carried_on(20, timeout_s=240)
        job_process.send_signal(signal.SIGTERM)
        assert job_process.wait(120) == 0, said.read_text()[-3000:]
        if job == "replay":  # each nack replayed once: none again after its batch was started again
            assert sorted(replayed()) == sorted(b"src/0/%d" % o for o in range(20))
    assert f"acker: query acker-{job} stopped: " in said.read_text()  # said, with its cause


def _transactions_tool(broker: LocalKafkaBroker, *args: str) -> subprocess.CompletedProcess[str]:
    """Kafka's own ``kafka-transactions.sh ARGS`` run on ``broker``, its output and errors kept; one that has not ended
    in 90 s (its admin client gives up after 60) is stopped, and says so in its errors."""
    command = kafka_tool_command("org.apache.kafka.tools.TransactionsCommand",
                                 "--bootstrap-server", broker.bootstrap_servers, *args)  # fmt: skip
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    except subprocess.TimeoutExpired as timeout:
        said = timeout.stdout.decode() if isinstance(timeout.stdout, bytes) else timeout.stdout or ""
        return subprocess.CompletedProcess(command, -1, said, "not ended in 90 s")


def _abort_hanging(broker: LocalKafkaBroker) -> list[str]:
    """Abort, as an operator would with Kafka's tool (README, "A transaction that does not end"), every hanging
    transaction on ``broker``: a partition's open transaction that its coordinator does not know, which the broker
    never aborts. Returns those it aborted, as the tool lists them (topic, partition, producer, epoch, coordinator
    epoch, start offset, last written, minutes since)."""
    # Last written to over a minute ago: a transaction of the steps' lasts milliseconds, and the broker aborts one
    # after 10 s.
    found = _transactions_tool(broker, "find-hanging", "--broker-id", str(NODE_ID), "--max-transaction-timeout", "1")
    aborted = []
    for fields in (line.split() for line in found.stdout.splitlines()):
        if len(fields) != 8 or not (fields[1].isdigit() and fields[5].isdigit()):
            continue  # the header, or a line of the tool's own logging
        topic, partition, start = fields[0], fields[1], fields[5]
        done = _transactions_tool(broker, "abort", "--topic", topic, "--partition", partition, "--start-offset", start)
        if done.returncode == 0:  # else found again next time
            aborted.append(" ".join(fields))
    return aborted


def _transactions(broker: LocalKafkaBroker, topics: list[TopicSpec]) -> str:
    """What Kafka's own tool says of the transactions on ``broker``: those its coordinators know, any hanging one, and
    the producers of each partition of ``topics``, with the offset any open transaction of theirs begins at. For a
    failure's message."""
    asked = [["list"], ["find-hanging", "--broker-id", str(NODE_ID), "--max-transaction-timeout", "0"]]
    for topic in topics:
        for partition in range(topic.partitions):
            asked.append(["describe-producers", "--topic", topic.name, "--partition", str(partition)])
    said = []
    for args in asked:
        done = _transactions_tool(broker, *args)
        said.append(f"kafka-transactions.sh {' '.join(args)}:\n{done.stdout}{done.stderr[-2000:]}")
    return "\n".join(said)


def test_a_coordinated_chain_answers_exactly_after_a_broker_outage_and_no_step_hangs(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Storm's ReachTopology as a coordinated chain, asked while the broker is killed and started again 5 s later.
    Before, every step stopped or hung: a transactional call that timed out in the outage left its producer fenced
    (the broker had aborted the transaction past its timeout) and the step stopped; librdkafka blocked the others in
    `send_offsets_to_transaction` for minutes past its timeout, deaf to their stop. Now a step whose producer was
    fenced goes on with a new one (the steps' transactional ids are their own: no --instance-id), and a step whose
    call never returns stops, saying why, rather than hang: started again here, as its supervisor would, the chain
    answers every request exactly. (The transactional calls' timeout is shortened, 10 s, and a call taken as wedged
    20 s after it began: the outage is a test's, and short.) In about one run in five, Kafka 4.3.1 itself, killed
    while a step's transaction was committing, completes that commit as it starts again without writing its markers
    (it finds no leader for the partitions, its own, before it is back in the cluster's metadata, and skips them as
    deleted: its server.log says so at INFO), and their readers stop there for good (a hanging transaction): such ones
    are aborted here, as the README tells an operator to (`_abort_hanging`)."""
    monkeypatch.setattr(coordinated_stage, "TXN_CALL_S", 10.0)
    monkeypatch.setattr(coordinated_stage, "WEDGED_AFTER_S", 20.0)
    graph = Graph.generate()
    urls = sorted(graph.tweeted_by)[:12]
    exact = {url: graph.reach(url) for url in urls}
    with contextlib.ExitStack() as cleanup:
        broker = _broker(data_dir)
        cleanup.callback(broker.stop)
        config = replace(service_config(broker.bootstrap_servers, partitions=1), instance_id="")
        chain = Chain(f"reach-{os.getpid()}", CHAIN.steps)
        partitions = 3
        create_chain_topics(config, chain, partitions)
        written = [t for t in chain.topics(config, partitions) if not t.name.endswith(".dlq")]  # in transactions
        running: list[Running] = []
        stopped: list[BaseException] = []  # what the steps that stopped said

        @cleanup.callback
        def _stop_steps() -> None:  # each within the stop's wait, or "it did not stop": a step that hangs fails here
            for step in running:
                with contextlib.suppress(Exception):
                    step.stop(90)

        def supervise() -> None:
            """Start again, as a new process would, a step that stopped."""
            for i, step in enumerate(running):
                if not step.thread.is_alive():
                    assert step.error is not None, "a step ended without an error"
                    stopped.append(step.error)
                    running[i] = Running(CoordinatedStage(config, chain, i, steps(graph)[i]))

        def ask(deadline_s: float) -> dict[str, int | str]:
            answers = reach.ask(config, chain, urls, deadline_s)
            return {url: int(a or b"-1") if isinstance(a, bytes) else str(a) for url, a in answers}

        running += [Running(CoordinatedStage(config, chain, i, step)) for i, step in enumerate(steps(graph))]
        assert ask(60) == exact
        in_flight: list[object] = []  # its answers, or the error of a client that met the broker gone as it began

        def ask_through_the_outage() -> None:
            try:
                in_flight.append(ask(30))
            except KafkaClientError as error:
                in_flight.append(error)

        asked = threading.Thread(target=ask_through_the_outage, daemon=True)
        asked.start()
        time.sleep(0.3)
        broker.crash()
        time.sleep(5)
        broker.start()
        asked.join(90)  # its deadline is 30 s
        assert not asked.is_alive(), "a question asked through the outage hung"
        assert len(in_flight) == 1, "a question asked through the outage ended in an error not of Kafka's client"
        deadline = time.monotonic() + 300
        hanging: list[str] = []  # what `_abort_hanging` aborted
        while True:
            supervise()
            answers = ask(30)
            if answers == exact:
                break
            assert time.monotonic() < deadline, f"{answers}\n{stopped}\n{hanging}\n{_transactions(broker, written)}"
            if aborted := _abort_hanging(broker):
                warnings.warn(f"hanging transactions aborted with Kafka's tool: {aborted}", stacklevel=1)
                hanging += aborted
        supervise()
        for step in running:
            step.stop(90)  # within the wait: none hangs
        running.clear()
    for error in stopped:  # a step that could not go on said why
        assert isinstance(error, (KafkaException, coordinated_stage.CoordinationError)), repr(error)
