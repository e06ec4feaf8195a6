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
def _container() -> Iterator[str]:
    try:
        from testcontainers.community.kafka import KafkaContainer  # noqa: PLC0415 - testcontainers >= 4.14
    except ImportError:  # pragma: no cover - older testcontainers
        from testcontainers.kafka import KafkaContainer  # noqa: PLC0415
    with KafkaContainer(KAFKA_IMAGE).with_kraft() as container:
        yield container.get_bootstrap_server()


@contextlib.contextmanager
def kafka_cluster(existing: str | None = None, *, use_docker: bool = True, partitions: int = 1) -> Iterator[Cluster]:
    """A running cluster for the duration of the ``with`` block; a started one is stopped afterwards."""
    if existing:
        yield Cluster(existing, "existing")
        return
    if use_docker and docker_available():
        log.info("starting Kafka in a container (%s)", KAFKA_IMAGE)
        with _container() as bootstrap:
            yield Cluster(bootstrap, "testcontainers")
        return
    log.info("no Docker engine: starting a local Kafka broker from Maven Central jars")
    with LocalKafkaBroker(num_partitions=partitions) as broker:
        yield Cluster(broker.bootstrap_servers, "local", broker.pid)
