"""Where a Kafka cluster comes from for tests, benchmarks and the demo.

In order: an existing cluster named by the caller (an environment variable, a flag); otherwise a Kafka
container through testcontainers (KRaft) when a Docker engine answers; otherwise a local broker started from
Maven Central jars (`acker.kafka.local_broker`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from acker.kafka.local_broker import LocalKafkaBroker

log = logging.getLogger(__name__)

KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.0"


@dataclass(frozen=True)
class Cluster:
    bootstrap_servers: str
    kind: str  # "existing", "testcontainers" or "local"
    pid: int | None = None  # of the local broker's JVM (benchmarks read its CPU time)


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


@contextlib.contextmanager
def _container(auto_create_topics: bool) -> Iterator[str]:
    try:
        from testcontainers.community.kafka import KafkaContainer  # noqa: PLC0415 - testcontainers >= 4.14
    except ImportError:  # pragma: no cover - older testcontainers
        from testcontainers.kafka import KafkaContainer  # noqa: PLC0415
    container = KafkaContainer(KAFKA_IMAGE).with_kraft()
    container.with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", str(auto_create_topics).lower())
    with container:
        yield container.get_bootstrap_server()


@contextlib.contextmanager
def kafka_cluster(
    existing: str | None = None, *, use_docker: bool = True, partitions: int = 1, auto_create_topics: bool = True
) -> Iterator[Cluster]:
    """A running cluster for the duration of the ``with`` block; a started one is stopped afterwards.

    ``auto_create_topics``: whether a started broker creates a topic on first use (Kafka's default). The integration
    tests turn it off, as many production clusters do: whatever a component writes to, it or its setup must create.
    An existing cluster is used as it is."""
    if existing:
        yield Cluster(existing, "existing")
        return
    if use_docker and docker_available():
        log.info("starting Kafka in a container (%s)", KAFKA_IMAGE)
        with _container(auto_create_topics) as bootstrap:
            yield Cluster(bootstrap, "testcontainers")
        return
    log.info("no Docker engine: starting a local Kafka broker from Maven Central jars")
    properties = {"auto.create.topics.enable": auto_create_topics}
    with LocalKafkaBroker(num_partitions=partitions, server_properties=properties) as broker:
        yield Cluster(broker.bootstrap_servers, "local", broker.pid)
