"""Helpers of the integration tests: run acker instances, feed them, read what they publish."""

from __future__ import annotations

import ctypes
import glob
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

from acker import fail_reasons
from acker.config import ServiceConfig, to_argv
from acker.core.messages import TreeMessage
from acker.kafka.acker_client import AckerClient
from acker.kafka.clients import TopicSpec, consume_available, create_topics, log_bounds, partition_count
from acker.kafka.local_broker import pdeathsig_preexec
from acker.service import AckerService
from acker.wire import decode_outcomes


def service_config(bootstrap: str, partitions: int = 4) -> ServiceConfig:
    """A test's service configuration: topics and group of its own (created by the test or the service)."""
    run = uuid.uuid4().hex[:10]
    return ServiceConfig(
        bootstrap_servers=bootstrap,
        partitions=partitions,
        timeout_s=30.0,
        commit_interval_s=0.2,
        status_interval_s=0.5,
        metrics_port=0,
        instance_id=f"test-{run}",
        # A killed instance's partitions move after the session timeout: the broker's minimum, not 45 s.
        kafka={"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"},
    ).namespaced(f"run-{run}")


class Runnable(Protocol):
    def run(self, stop: threading.Event) -> None: ...


class Running:
    """A service, spout or bolt running in a thread of the test process until `stop`."""

    def __init__(self, runnable: Runnable) -> None:
        self.runnable = runnable
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.runnable.run(self.stop_event)
        except BaseException as error:  # reported by stop()
            self.error = error

    def stop(self, timeout_s: float = 60.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "it did not stop"
        if self.error is not None:
            raise self.error


class ServiceThread(Running):
    """An acker instance in a thread of the test process."""

    def __init__(self, config: ServiceConfig) -> None:
        self.service = AckerService(config)
        super().__init__(self.service)


class ServiceProcess:
    """An acker instance as a separate `acker run` process (for kill -9)."""

    def __init__(self, config: ServiceConfig, log_path: str, *extra: str) -> None:
        flags, env = to_argv(replace(config, metrics_port=0, instance_id=f"proc-{uuid.uuid4().hex[:6]}"))
        args = [sys.executable, "-m", "acker.cli", "run", *flags, *extra]
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        # It dies with the test process, even one killed (a CI time limit). In the child the hook only calls prctl
        # and getppid: fork-safe with threads.
        preexec = pdeathsig_preexec()
        self.process = subprocess.Popen(
            args, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **env},
            preexec_fn=preexec,  # noqa: PLW1509
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL; nothing to do if it has exited. Called again in a test's ``finally``: a test that failed before
        its kill left the process running after pytest, retrying a broker that was gone."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.log.close()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.log.close()
        return code


def create_acker_topics(config: ServiceConfig, spouts: Iterable[str] = ("sentences",)) -> None:
    """The acker, dead-letter and outcome topics, created before any reader subscribes (as `acker topics create`
    does): a reader that subscribes to a topic before it exists may see it with only some of its partitions."""
    create_topics(
        config.client(),
        [
            TopicSpec(config.acker_topic, config.partitions),
            TopicSpec(config.dlq_topic, 1),
            *(TopicSpec(config.outcome_topic(s), config.partitions) for s in spouts),
        ],
    )


def acker_client(config: ServiceConfig) -> AckerClient:
    return AckerClient(Producer(config.client(**{"enable.idempotence": True})), config.acker_topic, config.partitions)


def send(config: ServiceConfig, messages: Iterable[TreeMessage], client: AckerClient | None = None) -> None:
    """Send and wait until every record is delivered."""
    client = client or acker_client(config)
    client.send_all(messages)
    assert client.flush() == 0


class OutcomeReader:
    """Reads the outcome topics of the given spouts from the beginning; accumulates every outcome seen."""

    def __init__(self, config: ServiceConfig, spouts: Iterable[str], isolation: str = "read_committed") -> None:
        self.consumer = Consumer(
            config.client(
                **{
                    "group.id": f"reader-{uuid.uuid4().hex}",
                    "auto.offset.reset": "earliest",
                    "topic.metadata.refresh.interval.ms": 1000,
                    "isolation.level": isolation,
                }
            )
        )
        self.consumer.subscribe([config.outcome_topic(s) for s in spouts])
        self.seen: dict[str, list[str]] = defaultdict(list)  # msg_id → outcomes, in arrival order
        self.reasons: dict[str, list[str]] = defaultdict(list)  # msg_id → the reasons its FAILED outcomes gave
        self.latencies: list[int] = []

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for record in self.consumer.consume(500, timeout=0.1):
                if record.error() is not None:
                    continue
                decoded = decode_outcomes(record.value() or b"")
                reasons = fail_reasons.decode(dict(record.headers() or []).get(fail_reasons.HEADER))
                for outcome, msg_id, latency in zip(decoded.outcomes, decoded.msg_ids, decoded.latency_ms, strict=True):
                    self.seen[msg_id].append(outcome)
                    self.latencies.append(latency)
                    if msg_id in reasons:
                        self.reasons[msg_id].append(reasons[msg_id])

    def wait_for(self, msg_ids: Iterable[str], timeout_s: float = 60.0) -> None:
        wanted = set(msg_ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not wanted <= self.seen.keys():
            self.poll(0.2)
        missing = wanted - self.seen.keys()
        assert not missing, f"{len(missing)} trees without an outcome, e.g. {sorted(missing)[:5]}"

    def not_just_acked(self, msg_ids: Iterable[str]) -> dict[str, list[str]]:
        """Each tree of ``msg_ids`` whose outcomes were not acks alone, and each tree not of them that had one: empty
        when the trees were all acked and nothing else was decided. (Small where a comparison of every tree's outcomes
        was thousands of lines of diff, the one difference lost among them.)"""
        wanted = set(msg_ids)
        odd = {m: sorted(set(seen)) for m, seen in self.seen.items() if m not in wanted or set(seen) != {"ACK"}}
        return odd | {m: [] for m in wanted - self.seen.keys()}

    def close(self) -> None:
        self.consumer.close()


def read_partition(config: ServiceConfig, topic: str, partition: int) -> list[tuple[int, int, bytes | None]]:
    """Every record (offset, timestamp, value) of one partition, from the beginning to its current end."""
    consumer = Consumer(config.client(**{"group.id": f"dump-{uuid.uuid4().hex}", "enable.auto.commit": False}))
    try:
        end = log_bounds(consumer, TopicPartition(topic, partition))[1]
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[int, int, bytes | None]] = []
        deadline = time.monotonic() + 60
        while out[-1:] == [] or out[-1][0] + 1 < end:
            if end == 0:
                break
            assert time.monotonic() < deadline, f"{topic}/{partition}: read up to {out[-1:]} of {end} in 60 s"
            for record in consumer.consume(1000, timeout=1):
                if record.error() is None:
                    out.append((record.offset() or 0, record.timestamp()[1], record.value()))
        return out
    finally:
        consumer.close()


def add_partitions(client: dict[str, Any], topic: str, count: int, timeout_s: float = 30.0) -> None:
    """Grow ``topic`` to ``count`` partitions, returning once a new handle's metadata shows them all. The broker
    answers the request before its metadata has them: a producer made at once then found the old count about one
    time in thirty, and failed a record written to a new partition (``_UNKNOWN_PARTITION``, a delivery report only:
    its flush returned 0)."""
    admin = AdminClient(dict(client))  # held: a handle destroyed fails its futures (_DESTROY)
    admin.create_partitions([NewPartitions(topic, count)])[topic].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while (seen := partition_count(client, topic)) < count:
        assert time.monotonic() < deadline, f"{topic}: {seen} partitions seen, {count} made"
        time.sleep(0.1)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read_all(client: dict[str, Any], topic: str, partition: int = 0, idle_s: float = 5.0) -> list[Message]:
    """Every record of one partition that a read_committed consumer reads now (to its end, or until nothing comes
    for ``idle_s``).

    Its end is the log's, not the first end of partition it is told of: that one is the last stable offset, and a
    transaction's commit returns before its markers are written. Read at once after a commit, under load, its
    records lay past that end for a moment, and the read found none of them."""
    consumer = Consumer({**client, "group.id": f"r-{uuid.uuid4().hex}", "enable.partition.eof": True,
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[Message] = []
    try:
        while True:
            records = consume_available(consumer, 500, idle_s)  # a full batch of 500 would wait out ``idle_s``
            if not records:
                return out
            for record in records:
                error = record.error()
                if error is None:
                    out.append(record)
                elif error.code() != KafkaError._PARTITION_EOF or not _short_of_the_log_end(consumer, record):
                    return out
    finally:
        consumer.close()


def _short_of_the_log_end(consumer: Consumer, eof: Message) -> bool:
    """Whether an end of partition a read_committed consumer was told of lies short of the log's end (its high
    watermark, as the fetch that told it gave it: the watermarks asked of the broker would be the stable ones)."""
    high = consumer.get_watermark_offsets(TopicPartition(eof.topic() or "", eof.partition() or 0), cached=True)[1]
    return (eof.offset() or 0) < high


def produce_with_header_name(
    client: dict[str, Any], topic: str, partition: int, *, name: bytes, value: bytes, key: bytes | None = None
) -> str:
    """Produce one record with a header named ``name`` as raw bytes, through librdkafka's C API (the confluent-kafka
    build's own library, called with ctypes), and wait for its delivery. Kafka takes any bytes as a header's name
    and a C or Go producer writes them as given, but the Python client only writes UTF-8 names: this is how a test
    gets a record whose header name is not UTF-8. Returns its coordinates ``topic/partition/offset``, read as the
    partition's end after the delivery: nothing else may write to the partition meanwhile."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(glob.glob(str(libs / "librdkafka*.so*")))
    lib = ctypes.CDLL(found[0] if found else "librdkafka.so.1")
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_headers_new.restype = ctypes.c_void_p
    lib.rd_kafka_produceva.restype = ctypes.c_void_p
    lib.rd_kafka_error_string.restype = ctypes.c_char_p
    errstr = ctypes.create_string_buffer(512)
    conf = ctypes.c_void_p(lib.rd_kafka_conf_new())
    for setting, setting_value in client.items():
        if setting == "logger" or callable(setting_value):  # the Python client's own, not librdkafka's
            continue
        if lib.rd_kafka_conf_set(conf, str(setting).encode(), str(setting_value).encode(), errstr, 512) != 0:
            raise RuntimeError(f"{setting}: {errstr.value.decode()}")
    handle = lib.rd_kafka_new(0, conf, errstr, 512)  # 0: a producer; it owns conf from here
    if not handle:
        raise RuntimeError(errstr.value.decode())
    producer = ctypes.c_void_p(handle)

    class Bytes(ctypes.Structure):
        _fields_ = [("ptr", ctypes.c_char_p), ("size", ctypes.c_size_t)]

    class Value(ctypes.Union):
        _fields_ = [("cstr", ctypes.c_char_p), ("i32", ctypes.c_int32), ("mem", Bytes), ("ptr", ctypes.c_void_p),
                    ("pad", ctypes.c_char * 64)]  # fmt: skip

    class VarArg(ctypes.Structure):  # rd_kafka_vu_t
        _fields_ = [("vtype", ctypes.c_int), ("u", Value)]

    headers = ctypes.c_void_p(lib.rd_kafka_headers_new(ctypes.c_size_t(1)))
    lib.rd_kafka_header_add(headers, name, ctypes.c_ssize_t(len(name)), b"v", ctypes.c_ssize_t(1))
    args = [(1, "cstr", topic.encode()), (3, "i32", partition), (4, "mem", Bytes(value, len(value))),
            (10, "ptr", headers)]  # fmt: skip  # RD_KAFKA_VTYPE_TOPIC, _PARTITION, _VALUE, _HEADERS
    if key is not None:
        args.append((5, "mem", Bytes(key, len(key))))  # RD_KAFKA_VTYPE_KEY
    array = (VarArg * len(args))()
    for slot, (vtype, field, arg) in zip(array, args, strict=True):
        slot.vtype = vtype
        setattr(slot.u, field, arg)
    try:
        error = lib.rd_kafka_produceva(producer, array, ctypes.c_size_t(len(args)))
        if error:
            raise RuntimeError(lib.rd_kafka_error_string(ctypes.c_void_p(error)).decode())
        if lib.rd_kafka_flush(producer, 30_000) != 0:
            raise RuntimeError(f"a record with header name {name!r} was not delivered to {topic} in 30 s")
    finally:
        lib.rd_kafka_destroy(producer)
    consumer = Consumer({**client, "group.id": f"end-{uuid.uuid4().hex}"})
    try:
        end = log_bounds(consumer, TopicPartition(topic, partition))[1]
    finally:
        consumer.close()
    return f"{topic}/{partition}/{end - 1}"


# A broker whose client listener takes SASL/PLAIN only (server.properties), and a user of it (librdkafka settings).
SASL_SERVER = {
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.plaintext.plain.sasl.jaas.config": (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_acker="acker-secret";'
    ),
}
SASL_CLIENT = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "acker",
               "sasl.password": "acker-secret"}  # fmt: skip
