"""Where a Kafka cluster comes from for tests, benchmarks and the demo.

In order: an existing cluster named by the caller (an environment variable, a flag); otherwise a Kafka
container through testcontainers (KRaft) when a Docker engine answers; otherwise a local broker started from
Maven Central jars (`acker.kafka.local_broker`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acker.kafka.local_broker import KAFKA_VERSION, LocalKafkaBroker

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

log = logging.getLogger(__name__)

# The same Kafka as the local broker's, Apache's own image: every test meets the same broker whichever runs it (the
# new group protocol, KIP-848, needs Kafka 4).
KAFKA_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
_PORT = 9092  # the listener clients use, mapped to a port of the host Docker picks
_STARTER = "/tmp/acker_kafka_start.sh"  # written once that port is known: Kafka must advertise it


@dataclass(frozen=True)
class Cluster:
    bootstrap_servers: str
    kind: str  # "existing", "testcontainers" or "local"
    pid: int | None = None  # of the local broker's JVM (benchmarks read its CPU time)
    local: LocalKafkaBroker | None = field(default=None, compare=False, repr=False)  # the local broker (its `crash`)


def docker_available() -> bool:
    """True when a Docker engine answers (the docker client alone is not enough)."""
    try:
        from docker.errors import DockerException  # noqa: PLC0415

        import docker  # noqa: PLC0415 - optional: comes with the test extra
    except ImportError:
        return False
    try:
        docker.from_env(timeout=3).ping()
    except (DockerException, OSError):
        return False
    return True


def container_settings(auto_create_topics: bool, partitions: int) -> dict[str, str]:
    """The environment of a single-node KRaft Kafka container (Apache's image turns ``KAFKA_*`` variables into its
    settings): a controller and a broker listener inside, the clients' listener on a port of the host, the
    settings of the local broker that a single node needs (the offsets and transaction logs with one replica: with
    Kafka's defaults of 3, no transaction can start on one broker)."""
    return {
        "CLUSTER_ID": "4L6g3nShT-eMCtK--X86sw",
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://0.0.0.0:{_PORT},BROKER://0.0.0.0:9093,CONTROLLER://0.0.0.0:9094",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "BROKER",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9094",
        "KAFKA_NUM_PARTITIONS": str(partitions),
        "KAFKA_DEFAULT_REPLICATION_FACTOR": "1",
        "KAFKA_MIN_INSYNC_REPLICAS": "1",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": str(auto_create_topics).lower(),
    }


# The image's entrypoint runs its command: Kafka starts (the image's own run script) once the starter script says
# which address to advertise; whole, that is, with its last line (a file being copied in may be seen half-written).
_READY = "#ready"
CONTAINER_COMMAND = (
    f'sh -c \'until grep -qx "{_READY}" {_STARTER} 2>/dev/null; do sleep 0.1; done; '
    f". {_STARTER}; exec /etc/kafka/docker/run'"
)


def kafka_container(auto_create_topics: bool, partitions: int) -> DockerContainer:
    """The Kafka container, not started (`_container` starts it)."""
    from testcontainers.core.container import DockerContainer  # noqa: PLC0415 - optional: the test extra

    container = DockerContainer(KAFKA_IMAGE).with_exposed_ports(_PORT)
    return container.with_envs(**container_settings(auto_create_topics, partitions)).with_command(CONTAINER_COMMAND)


def starter_script(host: str, port: int) -> bytes:
    """What the container runs before Kafka: the address clients reach it at, on the host."""
    return f"export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://{host}:{port},BROKER://localhost:9093\n{_READY}\n".encode()


@contextlib.contextmanager
def _container(auto_create_topics: bool, partitions: int, timeout_s: float = 120.0) -> Iterator[str]:
    with kafka_container(auto_create_topics, partitions) as container:
        host, port = container.get_container_host_ip(), container.get_exposed_port(_PORT)
        container.copy_into_container(starter_script(host, port), _STARTER)
        bootstrap = f"{host}:{port}"

        def status() -> str:
            container.reload()
            return container.status

        _wait_until_ready(bootstrap, timeout_s, status)
        yield bootstrap


def _wait_until_ready(bootstrap: str, timeout_s: float, status: Callable[[], str]) -> None:
    """Until the broker answers a metadata request naming itself; `RuntimeError` if its container stops first or
    it does not within ``timeout_s``."""
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": log,
        "socket.connection.setup.timeout.ms": 2000,
    }
    admin = AdminClient(settings)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if admin.list_topics(timeout=2.0).brokers:
                return
        except KafkaException as error:
            last = str(error)
        else:
            last = "metadata listed no broker"
        if status() == "exited":
            raise RuntimeError(f"the Kafka container stopped before it was ready ({last})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Kafka container was not ready within {timeout_s:.0f} s ({last})")
        time.sleep(0.2)


def creates_topics_on_first_use(bootstrap: str, timeout_s: float = 30.0) -> bool:
    """Whether the brokers at ``bootstrap`` create a topic a client asks about (``auto.create.topics.enable``, asked
    of one of them: a cluster's brokers share it)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined] # noqa: PLC0415 # documented location
        AdminClient,
        ConfigResource,
        ResourceType,
    )

    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": log}
    admin = AdminClient(settings)
    broker = min(admin.list_topics(timeout=timeout_s).brokers)
    resource = ConfigResource(ResourceType.BROKER, str(broker))
    configs = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout_s)
    return str(configs["auto.create.topics.enable"].value).lower() == "true"


def blank_bootstrap(existing: str | None) -> str | None:
    """Why ``existing``, a ``--bootstrap-servers`` given blank, is refused (None: not given, or naming something):
    `kafka_cluster` takes a blank one for "start a local broker", as it takes none, so its caller refuses it first."""
    if existing is None or existing.strip():
        return None
    return "--bootstrap-servers is empty: name at least one broker, host:port"


@contextlib.contextmanager
def kafka_cluster(
    existing: str | None = None, *, use_docker: bool = True, partitions: int = 1, auto_create_topics: bool = True
) -> Iterator[Cluster]:
    """A running cluster for the duration of the ``with`` block; a started one is stopped afterwards.

    ``auto_create_topics``: whether a started broker creates a topic on first use (Kafka's default). The integration
    tests turn it off, as many production clusters do: whatever a component writes to, it or its setup must create.
    An existing cluster is used as it is, but one that creates topics on first use is refused when
    ``auto_create_topics`` is off (`RuntimeError`): it would hide a component that writes to a topic nobody created."""
    if existing:
        if not auto_create_topics and creates_topics_on_first_use(existing):
            raise RuntimeError(
                f"the Kafka cluster at {existing} creates topics on first use (auto.create.topics.enable): the tests "
                "need one that does not (e.g. python -m acker.kafka.local_broker -p auto.create.topics.enable=false)"
            )
        yield Cluster(existing, "existing")
        return
    if use_docker and docker_available():
        log.info("starting Kafka in a container (%s)", KAFKA_IMAGE)
        with _container(auto_create_topics, partitions) as bootstrap:
            yield Cluster(bootstrap, "testcontainers")
        return
    log.info("no Docker engine: starting a local Kafka broker from Maven Central jars")
    properties = {"auto.create.topics.enable": auto_create_topics}
    with LocalKafkaBroker(num_partitions=partitions, server_properties=properties) as broker:
        yield Cluster(broker.bootstrap_servers, "local", broker.pid, broker)
