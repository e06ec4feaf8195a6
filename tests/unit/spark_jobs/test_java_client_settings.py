"""One `[kafka]` table of librdkafka settings serves the service, the stages and the Spark jobs, whose Kafka client is
Java's: `java_client_settings` translates what is named differently, leaves out what Spark's consumers must not get,
and refuses what Java's client cannot be given before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from acker.cli import main
from acker.errors import ConfigError
from spark_jobs.java_client import java_client_settings


def test_a_user_name_and_password_become_the_java_clients_login_module_line() -> None:
    settings = java_client_settings({
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "acker", "sasl.password": 'p"w\\d\nx', "ssl.truststore.location": "/t.jks"})  # fmt: skip
    assert settings == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="acker" '
        'password="p\\"w\\\\d\\nx";',  # quote, backslash and line break escaped: the value stays one token
        "ssl.truststore.location": "/t.jks",
    }


def test_settings_named_alike_pass_as_they_are_and_group_settings_stay_behind() -> None:
    client = {"bootstrap.servers": "b:9092", "security.protocol": "PLAINTEXT", "fetch.max.wait.ms": 20}
    group = {"group.protocol": "consumer", "partition.assignment.strategy": "cooperative-sticky",
             "session.timeout.ms": "6000", "auto.offset.reset": "earliest", "enable.auto.commit": "false"}  # fmt: skip
    assert java_client_settings({**client, **group}) == {k: str(v) for k, v in client.items()}


def test_a_password_without_a_mechanism_that_takes_one_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.mechanism PLAIN or SCRAM"):
        java_client_settings({"sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"})


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _keystore(ca: trustme.CA, path: Path, *, pkcs8: bool = True, password: bytes = b"") -> Path:
    """A PEM file with a client's key (PKCS#8, or the traditional form trustme writes) and its certificate chain."""
    leaf = ca.issue_cert("acker-client")
    key = leaf.private_key_pem.bytes()
    if pkcs8:
        encryption = BestAvailableEncryption(password) if password else NoEncryption()  # PBES2, if any
        key = load_pem_private_key(key, None).private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption)
    path.write_bytes(key + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    return path


def test_a_ca_file_and_a_key_with_its_chain_become_pem_stores(ca: trustme.CA, tmp_path: Path) -> None:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    keystore = _keystore(ca, tmp_path / "client.pem")
    client = {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "ca.pem"),
              "ssl.key.location": str(keystore), "ssl.certificate.location": str(keystore),
              "ssl.key.password": "k", "ssl.endpoint.identification.algorithm": "none",
              "enable.ssl.certificate.verification": "true"}  # fmt: skip
    assert java_client_settings(client) == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tmp_path / "ca.pem"),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "",  # Java's "none"
    }


def test_inline_cas_the_systems_cas_and_a_pkcs12_keystore(ca: trustme.CA) -> None:
    pem = ca.cert_pem.bytes().decode()
    assert java_client_settings({"ssl.ca.pem": pem}) == {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pem,
    }
    assert java_client_settings({"ssl.ca.location": "probe"}) == {}  # the JVM's default trust store
    assert java_client_settings({"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "s"}) == {
        "ssl.keystore.location": "/k.p12",
        "ssl.keystore.password": "s",
        "ssl.keystore.type": "PKCS12",  # what librdkafka reads there; Java's default is JKS
    }


def test_what_javas_client_cannot_be_given_is_refused_with_what_to_do(ca: trustme.CA, tmp_path: Path) -> None:
    traditional = _keystore(ca, tmp_path / "ec.pem", pkcs8=False)
    keystore = _keystore(ca, tmp_path / "client.pem")
    pbes2 = _keystore(ca, tmp_path / "pbes2.pem", password=b"k")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    key_only = tmp_path / "key.pem"
    key_only.write_text(keystore.read_text().split("-----BEGIN CERTIFICATE-----")[0])
    cases = {
        "openssl pkcs8 -topk8": {"ssl.key.location": str(traditional), "ssl.certificate.location": str(traditional)},
        "from one file: join them": {"ssl.key.location": str(keystore), "ssl.certificate.location": "/c.pem"},
        r"got - and /c\.pem": {"ssl.certificate.location": "/c.pem"},
        "no certificate chain": {"ssl.key.location": str(key_only), "ssl.certificate.location": str(key_only)},
        "-v1 PBE-SHA1-3DES": {"ssl.key.location": str(pbes2), "ssl.certificate.location": str(pbes2)},
        "No such file": {"ssl.key.location": "/missing.pem", "ssl.certificate.location": "/missing.pem"},
        "which Spark shows": {"ssl.key.pem": "-----BEGIN PRIVATE KEY-----"},
        "is a directory": {"ssl.ca.location": str(tmp_path)},
        "always verifies": {"enable.ssl.certificate.verification": "false",
                            "ssl.ca.location": str(tmp_path / "ca.pem")},
    }  # fmt: skip
    for message, client in cases.items():
        with pytest.raises(ConfigError, match=message):
            java_client_settings(client)


def test_the_spark_command_refuses_them_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["spark", "commit", "--spout", "s", "--checkpoint", "/nowhere",
            "--kafka", "ssl.key.location=/k.pem", "--kafka", "ssl.certificate.location=/c.pem"]  # fmt: skip
    assert main(argv) == 2
    assert "from one file: join them" in capsys.readouterr().err
