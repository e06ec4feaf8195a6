"""The local Kafka broker (acker.kafka.local_broker): a real broker that serves clients and leaves nothing
running, however its owner ends (stop(), atexit, SIGINT/SIGTERM of the CLI, SIGKILL of the owner)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where the type stubs export it (confluent_kafka.admin does not)

from acker.kafka import local_broker as local_broker_module
from acker.kafka.local_broker import (
    KAFKA_VERSION,
    POM_PATH,
    KafkaBrokerError,
    LocalKafkaBroker,
    _login_hint,
    free_ports,
    kafka_tool_command,
)
from acker.kafka.provision import kafka_cluster
from tests.integration.helpers import SASL_CLIENT, SASL_SERVER

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def broker_jvms(marker: str | Path = "", *, parent: int | None = None) -> list[int]:
    """Pids of live (non-zombie) kafka.Kafka processes whose command line mentions ``marker`` (e.g. a data
    dir) and, if given, whose parent is ``parent``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if "kafka.Kafka" not in cmdline or str(marker) not in cmdline or state == "Z":
            continue
        if parent is None or ppid == parent:
            pids.append(int(entry.name))
    return pids


def wait_until_gone(marker: str | Path, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := broker_jvms(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def produce_and_consume(bootstrap: str, topic: str, count: int, partitions: int) -> list[tuple[int, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"record-{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0
    return consume(bootstrap, topic, count)


def consume(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=count, timeout=1.0):
                assert msg.error() is None, msg.error()
                partition, value = msg.partition(), msg.value()
                assert partition is not None and value is not None
                got.append((partition, value))
        return got
    finally:
        consumer.close()


@pytest.fixture
def broker() -> Iterator[LocalKafkaBroker]:
    with LocalKafkaBroker(num_partitions=2) as b:
        yield b


def test_serves_admin_producer_and_consumer_then_stops_without_a_trace(broker: LocalKafkaBroker) -> None:
    assert broker.is_running()
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) == broker.port
    data_dir, pid = broker.data_dir, broker.pid
    assert pid is not None and broker_jvms(data_dir) == [pid]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    futures = admin.create_topics([NewTopic("events", num_partitions=3, replication_factor=1)])
    futures["events"].result(timeout=30)
    # Created is not yet in every answer: a broker's metadata cache follows the controller a moment later.
    deadline = time.monotonic() + 30
    while "events" not in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(admin.list_topics(timeout=10).topics["events"].partitions) == 3

    got = produce_and_consume(broker.bootstrap_servers, "events", count=9, partitions=3)
    assert sorted(v for _, v in got) == sorted(f"record-{i}".encode() for i in range(9))
    assert {p for p, _ in got} == {0, 1, 2}

    # Auto-created topics get num_partitions.
    produce_and_consume(broker.bootstrap_servers, "auto-created", count=2, partitions=2)
    assert len(admin.list_topics(timeout=10).topics["auto-created"].partitions) == 2

    # Kafka's own tools run from the same jars and see what the clients did.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "tool-check"})
    consumer.commit(offsets=[TopicPartition("events", 0, 2)], asynchronous=False)
    consumer.close()
    tool = kafka_tool_command(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        *("--bootstrap-server", broker.bootstrap_servers, "--describe", "--group", "tool-check"),
    )
    described = subprocess.run(tool, capture_output=True, text=True, timeout=60, check=True).stdout
    row = next(line.split() for line in described.splitlines() if line.startswith("tool-check"))
    assert row[:4] == ["tool-check", "events", "0", "2"]

    broker.stop()
    assert not broker.is_running() and broker.pid is None
    assert not group_alive(pid)
    assert broker_jvms(data_dir) == []
    assert not data_dir.exists()
    broker.stop()  # idempotent
    with pytest.raises(KafkaBrokerError):
        _ = broker.bootstrap_servers


def test_a_port_another_broker_answers_on_is_given_up_for_new_ones(
    broker: LocalKafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's broker took the picked port before this one's JVM bound it: the other answered, was taken
    for this one (`start` returned at once), and this one died of the port in use."""
    taken = int(broker.bootstrap_servers.rsplit(":", 1)[1])
    picks: list[int] = []
    real = local_broker_module.free_ports

    def first_taken(count: int) -> list[int]:
        picks.append(count)
        ports = real(count)
        return [taken, *ports[1:]] if len(picks) == 1 else ports

    monkeypatch.setattr(local_broker_module, "free_ports", first_taken)
    second = LocalKafkaBroker()
    try:
        second.start()
        assert second.bootstrap_servers != broker.bootstrap_servers and len(picks) == 2
        cluster = AdminClient({"bootstrap.servers": second.bootstrap_servers}).list_topics(timeout=10).cluster_id
        assert cluster == second._formatted_cluster_id() and second.is_running()
    finally:
        second.stop()


def test_a_broker_whose_log_dirs_are_given_starts_there(tmp_path: Path) -> None:
    """Its own cluster id was read from the default log dir only: with ``log.dirs`` given, the broker took itself
    for another cluster on its port, and the retry failed to format the dir again."""
    logs = {"log.dirs": str(tmp_path / "logs")}
    with LocalKafkaBroker(server_properties=logs) as broker:
        assert broker.is_running() and (tmp_path / "logs" / "meta.properties").is_file()
        produce_and_consume(broker.bootstrap_servers, "kept", count=1, partitions=1)
    # Started again there (a temporary data dir, or one given, twice): formatted already, not again (Kafka refused
    # the new cluster id: "Invalid cluster.id"), and its records are there.
    with LocalKafkaBroker(server_properties=logs) as again:
        assert [v for _, v in consume(again.bootstrap_servers, "kept", 1)] == [b"record-0"]
    for _ in range(2):
        with LocalKafkaBroker(data_dir=tmp_path / "given", server_properties=logs) as given:
            assert [v for _, v in consume(given.bootstrap_servers, "kept", 1)] == [b"record-0"]


def test_a_broker_given_relative_log_dirs_keeps_them_where_its_caller_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative ``log.dirs`` named one directory for the JVM (run in the broker's data dir) and another for the
    check of formatted storage (this process's directory): the storage went into each start's temporary data dir,
    and with it the records."""
    monkeypatch.chdir(tmp_path)
    logs = {"log.dirs": "logs"}
    with LocalKafkaBroker(server_properties=logs) as broker:
        assert (tmp_path / "logs" / "meta.properties").is_file()
        produce_and_consume(broker.bootstrap_servers, "kept", count=1, partitions=1)
    with LocalKafkaBroker(server_properties=logs) as again:
        assert [v for _, v in consume(again.bootstrap_servers, "kept", 1)] == [b"record-0"]


def test_an_existing_cluster_that_creates_topics_on_first_use_is_refused_for_the_tests(
    broker: LocalKafkaBroker, bootstrap: str
) -> None:
    """The tests' premise is a cluster that does not (a component that never created what it writes to is caught):
    the local broker's own default, and Kafka's, is to create them, which hid such a test's failure on a cluster
    named by ACKER_TEST_BOOTSTRAP_SERVERS."""
    with (
        pytest.raises(RuntimeError, match="creates topics on first use"),
        kafka_cluster(broker.bootstrap_servers, auto_create_topics=False),
    ):
        pass
    with kafka_cluster(broker.bootstrap_servers) as used:  # used as it is where creating them is fine
        assert used.bootstrap_servers == broker.bootstrap_servers
    with kafka_cluster(bootstrap, auto_create_topics=False) as used:  # the tests' own
        assert used.bootstrap_servers == bootstrap


def test_pom_and_module_agree_on_the_kafka_version() -> None:
    assert f"<kafka.version>{KAFKA_VERSION}</kafka.version>" in POM_PATH.read_text()


def test_restart_on_a_kept_data_dir_keeps_records_and_port(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    with LocalKafkaBroker(data_dir=data_dir) as first:
        bootstrap = first.bootstrap_servers
        produce_and_consume(bootstrap, "kept", count=3, partitions=1)
    assert data_dir.is_dir() and broker_jvms(data_dir) == []
    with LocalKafkaBroker(data_dir=data_dir) as second:
        assert second.bootstrap_servers == bootstrap  # its port was still free
        assert sorted(v for _, v in consume(second.bootstrap_servers, "kept", 3)) == [
            b"record-0",
            b"record-1",
            b"record-2",
        ]
    assert broker_jvms(data_dir) == []


def test_the_controller_port_asked_for_is_the_one_it_listens_on(tmp_path: Path) -> None:
    """A user keeping a broker within a range of ports had to rewrite ``listeners`` and the quorum's bootstrap with
    ``-p`` to place the controller, which listened on any free port."""
    port, cport = free_ports(2)
    with LocalKafkaBroker(port=port, controller_port=cport, data_dir=tmp_path / "broker") as broker:
        assert (broker.port, broker.controller_port) == (port, cport)
        produce_and_consume(broker.bootstrap_servers, "placed", count=1, partitions=1)
        with pytest.raises(KafkaBrokerError, match=f"controller port {cport} on 127.0.0.1 is in use"):
            LocalKafkaBroker(controller_port=cport).start()
    with pytest.raises(ValueError, match="both"):
        LocalKafkaBroker(port=port, controller_port=port)


def test_a_crashed_broker_starts_again_on_its_data_and_port_and_its_temporary_dir_goes_at_the_stop() -> None:
    """`crash` (the demo's --kill-broker, the outage tests): SIGKILL to the JVM, the data kept for the next `start`
    on the same port, even in a temporary data dir and past a start that fails, which the final `stop` removes as
    ever; a broker started after that stop is a new one."""
    broker = LocalKafkaBroker().start()
    try:
        bootstrap, data_dir, pid = broker.bootstrap_servers, broker.data_dir, broker.pid
        produce_and_consume(bootstrap, "kept", count=3, partitions=1)
        broker.crash()
        assert pid is not None and not group_alive(pid) and not broker.is_running()
        assert data_dir.is_dir() and broker_jvms(data_dir) == []
        with pytest.raises(KafkaBrokerError):
            broker.crash()  # not running
        with socket.socket() as holder:  # its port taken meanwhile: that start fails, and the data is kept
            holder.bind(("127.0.0.1", broker_port(bootstrap)))
            holder.listen()
            with pytest.raises(KafkaBrokerError, match="in use"):
                broker.start()
        assert data_dir.is_dir()
        broker.start()
        assert broker.bootstrap_servers == bootstrap and broker.data_dir == data_dir
        assert sorted(v for _, v in consume(bootstrap, "kept", 3)) == [b"record-0", b"record-1", b"record-2"]
    finally:
        broker.stop()
    assert not data_dir.exists() and broker_jvms(data_dir) == []
    with socket.socket() as holder:  # the crashed broker's port is not asked for again
        holder.bind(("127.0.0.1", broker_port(bootstrap)))
        holder.listen()
        try:
            assert broker.start().data_dir != data_dir
        finally:
            broker.stop()


def broker_port(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def test_a_second_start_on_a_data_dir_in_use_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """It wrote its own ports and properties into the running broker's directory before Kafka's lock refused its JVM:
    the running broker's next start on the directory came up on the second one's ports."""
    data_dir = tmp_path / "broker"
    with LocalKafkaBroker(data_dir=data_dir) as first:
        bootstrap = first.bootstrap_servers
        ports = (data_dir / "ports").read_text()
        properties = (data_dir / "server.properties").read_text()
        with pytest.raises(KafkaBrokerError, match=f"data dir {data_dir} is in use by another broker"):
            LocalKafkaBroker(data_dir=data_dir).start()
        assert (data_dir / "ports").read_text() == ports
        assert (data_dir / "server.properties").read_text() == properties
        produce_and_consume(bootstrap, "still", count=1, partitions=1)
    with LocalKafkaBroker(data_dir=data_dir) as again:  # the lock went with the first, its ports are kept
        assert again.bootstrap_servers == bootstrap


def test_a_broker_that_cannot_start_raises_with_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "bad"
    broker = LocalKafkaBroker(data_dir=data_dir, server_properties={"num.io.threads": "not-a-number"})
    with pytest.raises(KafkaBrokerError, match=r"num\.io\.threads"):
        broker.start()
    assert not broker.is_running()
    assert broker_jvms(data_dir) == []


def test_a_failed_start_on_a_kept_data_dir_is_told_by_its_own_log_not_an_earlier_runs(tmp_path: Path) -> None:
    """The logs of a kept data dir follow earlier runs': an old "Address already in use" made any failure a port
    taken, said so, and started the JVM three times."""
    data_dir = tmp_path / "kept"
    with LocalKafkaBroker(data_dir=data_dir):
        pass
    with open(data_dir / "server.log", "a") as server_log:
        server_log.write("java.net.BindException: Address already in use\n")
    broker = LocalKafkaBroker(data_dir=data_dir, server_properties={"num.io.threads": "not-a-number"})
    with pytest.raises(KafkaBrokerError, match=r"num\.io\.threads") as raised:
        broker.start()
    assert "a port was taken" not in str(raised.value) and "Address already in use" not in str(raised.value)


def python(*args: str) -> subprocess.Popen[str]:
    """``sys.executable *args`` with this checkout importable."""
    path = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


OWNER = """
    import sys, threading, time
    from acker.kafka.local_broker import LocalKafkaBroker
    started = []
    start = lambda: started.append(LocalKafkaBroker().start())
    if "{thread}" == "thread":  # a worker thread that ends once the broker is up
        worker = threading.Thread(target=start)
        worker.start()
        worker.join()
    else:
        start()
    broker = started[0]
    print(broker.pid, broker.data_dir, flush=True)
    if "{mode}" == "hang":
        time.sleep(600)
"""


def owner_broker(proc: subprocess.Popen[str]) -> tuple[int, Path]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else "no output"
    pid, data_dir = line.split(maxsplit=1)
    return int(pid), Path(data_dir.strip())


def test_atexit_stops_a_broker_its_owner_forgot() -> None:
    proc = python("-c", textwrap.dedent(OWNER.format(mode="exit", thread="main")))
    pid, data_dir = owner_broker(proc)
    assert proc.wait(timeout=60) == 0
    assert not group_alive(pid)
    assert broker_jvms(data_dir) == []
    assert not data_dir.exists()


@pytest.mark.parametrize("thread", ["main", "thread"])
def test_broker_dies_with_a_killed_owner(thread: str) -> None:
    """Started from a worker thread too: it got no PR_SET_PDEATHSIG (it fires when the thread that forked ends), and
    outlived its owner, heap and ports with it. Nor does the worker thread's end stop it."""
    proc = python("-c", textwrap.dedent(OWNER.format(mode="hang", thread=thread)))
    pid, data_dir = owner_broker(proc)
    try:
        assert broker_jvms(data_dir) == [pid]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert wait_until_gone(data_dir) == []  # PR_SET_PDEATHSIG: the JVM got SIGTERM
    finally:
        for left in broker_jvms(data_dir):
            os.kill(left, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(data_dir)], check=False)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_runs_until_interrupted(sig: signal.Signals) -> None:
    proc = python("-m", "acker.kafka.local_broker", "--partitions", "2")
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        assert bootstrap.startswith("127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert list(metadata.brokers) == [1]
        (jvm,) = broker_jvms(parent=proc.pid)
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        assert not group_alive(jvm)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_runs_a_broker_whose_listener_takes_logins_only() -> None:
    """Its readiness check was refused the login, said as "Broker transport failure" after the whole startup
    timeout (180 s): the check's client settings are given with --client."""
    server = [f"-p{key}={value}" for key, value in SASL_SERVER.items()]
    client = [f"--client={key}={value}" for key, value in SASL_CLIENT.items()]
    proc = python("-m", "acker.kafka.local_broker", *server, *client)
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        assert bootstrap.startswith("127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        metadata = AdminClient({**SASL_CLIENT, "bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert list(metadata.brokers) == [1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _login_hint(SASL_SERVER, {}).startswith(" (its listeners take logins: give the readiness check's")
    assert _login_hint(SASL_SERVER, SASL_CLIENT) == _login_hint({}, {}) == ""
