"""Integration fixtures: one real Kafka cluster per session, fresh topics and group per test.

The cluster: ``ACKER_TEST_BOOTSTRAP_SERVERS`` names an existing one; otherwise testcontainers starts Kafka when a
Docker engine answers; otherwise a local broker starts from Maven Central jars (`acker.kafka.provision`).
"""

from __future__ import annotations

import gc
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, load_pem_private_key

from acker.config import ServiceConfig
from acker.kafka import lookups
from acker.kafka.local_broker import LocalKafkaBroker
from acker.kafka.provision import Cluster, kafka_cluster
from tests.integration.helpers import SASL_CLIENT, SASL_SERVER, service_config


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    # Topics are not created on first use: a broker that did hid that the service never created its status topic.
    with kafka_cluster(os.environ.get("ACKER_TEST_BOOTSTRAP_SERVERS"), auto_create_topics=False) as running:
        yield running
        lookups.close_all()  # the process's cached lookup clients, before the broker stops under them
        gc.collect()  # and the clients of finished tests that only a reference cycle still holds


@pytest.fixture
def bootstrap(cluster: Cluster) -> str:
    return cluster.bootstrap_servers


@pytest.fixture
def config(bootstrap: str) -> ServiceConfig:
    """A service configuration with topics and group of its own (created by the test or the service)."""
    return service_config(bootstrap)


@pytest.fixture
def sasl_client() -> Iterator[dict[str, str]]:
    """librdkafka settings of a user of a broker of its own whose client listener takes SASL/PLAIN only."""
    client, server = SASL_CLIENT, SASL_SERVER
    with LocalKafkaBroker(server_properties=server, client_properties=client) as broker:
        yield {**client, "bootstrap.servers": broker.bootstrap_servers}
        lookups.close_all()  # the lookup clients the test made for this broker
        gc.collect()  # the test's clients, before the broker stops under them


def _pem_keystore(leaf: trustme.LeafCert, path: Path, password: str = "") -> str:
    """One PEM file with ``leaf``'s key in PKCS#8 (Java reads no other) and its certificate chain: what both Kafka's
    Java side and librdkafka read as a key and certificate. With a ``password`` the key is encrypted with PBES1
    (openssl's ``-v1 PBE-SHA1-3DES``): Java's client cannot decrypt PBES2, cryptography's only PKCS#8 scheme."""
    key = load_pem_private_key(leaf.private_key_pem.bytes(), None)
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    if password:
        command = ["openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-passout", f"pass:{password}"]
        pem = subprocess.run(command, input=pem, capture_output=True, check=True).stdout
    path.write_bytes(pem + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    return str(path)


@pytest.fixture
def ssl_client(tmp_path: Path) -> Iterator[dict[str, str]]:
    """librdkafka settings of a client of a broker of its own whose client listener takes TLS with client
    certificates only (mutual TLS), both signed by a private CA; the client's key is encrypted."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    broker_keystore = _pem_keystore(ca.issue_cert("127.0.0.1", "localhost"), tmp_path / "broker.pem")
    client_keystore = _pem_keystore(ca.issue_cert("acker-client"), tmp_path / "client.pem", "key-secret")
    client = {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "ca.pem"),
              "ssl.key.location": client_keystore, "ssl.certificate.location": client_keystore,
              "ssl.key.password": "key-secret"}  # fmt: skip
    server = {"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:SSL", "ssl.client.auth": "required",
              "ssl.keystore.type": "PEM", "ssl.keystore.location": broker_keystore,
              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tmp_path / "ca.pem")}  # fmt: skip
    with LocalKafkaBroker(server_properties=server, client_properties=client) as broker:
        yield {**client, "bootstrap.servers": broker.bootstrap_servers}
        lookups.close_all()  # the lookup clients the test made for this broker
        gc.collect()  # the test's clients, before the broker stops under them
