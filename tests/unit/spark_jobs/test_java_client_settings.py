"""One `[kafka]` table of librdkafka settings serves the service, the stages and the Spark jobs, whose Kafka client is
Java's: `java_client_settings` translates what is named differently, leaves out what Spark's consumers must not get,
and refuses what Java's client cannot be given before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
from confluent_kafka import KafkaError, KafkaException
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from acker.cli import main
from acker.config import ServiceConfig
from acker.errors import ConfigError
from spark_jobs.commit_job import OutcomeSource
from spark_jobs.java_client import java_client_settings, same_login
from tests.unit.spark_jobs.starts import started_with


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
             "session.timeout.ms": "6000", "auto.offset.reset": "earliest", "enable.auto.commit": "false",
             "group.id": "acker", "group.instance.id": "acker-1"}  # fmt: skip
    assert java_client_settings({**client, **group}) == {k: str(v) for k, v in client.items()}


def test_settings_named_alike_that_mean_something_else_in_java_are_translated_or_left_out() -> None:
    """librdkafka's connections.max.idle.ms=0 is "never close an idle connection", Java's "close it at once" (its
    "never" is -1): Spark's clients reconnected all the time. Its Kerberos kinit command is a shell command line,
    Java's the program's path; its relogin wait of 0 turns refreshes off, Java's waits none between them."""
    client = {"bootstrap.servers": "b:9092", "connections.max.idle.ms": 0, "sasl.kerberos.kinit.cmd": "kinit -R",
              "sasl.kerberos.min.time.before.relogin": "0"}  # fmt: skip
    assert java_client_settings(client) == {"bootstrap.servers": "b:9092", "connections.max.idle.ms": "-1"}
    assert java_client_settings({**client, "connections.max.idle.ms": 540000})["connections.max.idle.ms"] == "540000"
    given = {"sasl.kerberos.kinit.cmd": "/usr/bin/kinit", "connections.max.idle.ms": "0"}  # Java's own, as they are
    assert java_client_settings(client, given) == {"bootstrap.servers": "b:9092", **given}


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


# A throwaway EC key encrypted with PBES1 (openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES), password "key-secret".
PBES1_KEY = Path(__file__).parent / "data" / "pbes1-key.pem"


def test_a_ca_file_and_a_key_with_its_chain_become_pem_stores(ca: trustme.CA, tmp_path: Path) -> None:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    keystore = _keystore(ca, tmp_path / "client.pem")
    client = {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "ca.pem"),
              "ssl.key.location": str(keystore), "ssl.certificate.location": str(keystore),
              "ssl.key.password": "k", "ssl.endpoint.identification.algorithm": "none",
              "enable.ssl.certificate.verification": "true", "ssl.providers": "default"}  # fmt: skip
    assert java_client_settings(client) == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tmp_path / "ca.pem"),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        # no ssl.key.password: Java's client takes one as saying the key is encrypted, and this one is not
        "ssl.endpoint.identification.algorithm": "",  # Java's "none"
    }
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(PBES1_KEY.read_bytes() + ca.cert_pem.bytes())
    client = {"ssl.key.location": str(encrypted), "ssl.certificate.location": str(encrypted)}
    assert java_client_settings({**client, "ssl.key.password": "key-secret"}) == {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(encrypted),
        "ssl.key.password": "key-secret",
    }
    with pytest.raises(ConfigError, match=r"encrypted key, and ssl\.key\.password is not given"):
        java_client_settings(client)
    assert java_client_settings(client, {"ssl.key.password": "key-secret"})["ssl.key.password"] == "key-secret"


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


def test_javas_own_settings_go_over_the_translation_and_stand_for_what_is_not_translated() -> None:
    kerberos = 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k" principal="a@R";'
    client = {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka",
              "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"}  # fmt: skip
    java = {"sasl.jaas.config": kerberos, "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}
    assert java_client_settings(client, java) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        **java,
    }
    plain = {"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p", "security.protocol": "SASL_SSL"}
    assert java_client_settings(plain, {"sasl.jaas.config": "x"})["sasl.jaas.config"] == "x"


def test_what_javas_client_cannot_be_given_is_refused_with_what_to_do(ca: trustme.CA, tmp_path: Path) -> None:
    traditional = _keystore(ca, tmp_path / "ec.pem", pkcs8=False)
    keystore = _keystore(ca, tmp_path / "client.pem")
    pbes2 = _keystore(ca, tmp_path / "pbes2.pem", password=b"k")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    key_only = tmp_path / "key.pem"
    key_only.write_text(keystore.read_text().split("-----BEGIN CERTIFICATE-----")[0])
    ca_file = str(tmp_path / "ca.pem")
    cases = {
        "openssl pkcs8 -topk8 -nocrypt": {"ssl.key.location": str(traditional),
                                          "ssl.certificate.location": str(traditional)},
        "from one file: join them": {"ssl.key.location": str(keystore), "ssl.certificate.location": "/c.pem"},
        r"got - and /c\.pem": {"ssl.certificate.location": "/c.pem"},
        "no certificate chain": {"ssl.key.location": str(key_only), "ssl.certificate.location": str(key_only)},
        "-v1 PBE-SHA1-3DES": {"ssl.key.location": str(pbes2), "ssl.certificate.location": str(pbes2),
                              "ssl.key.password": "k"},
        "No such file": {"ssl.key.location": "/missing.pem", "ssl.certificate.location": "/missing.pem"},
        "which Spark shows": {"ssl.key.pem": "-----BEGIN PRIVATE KEY-----"},
        "is a directory": {"ssl.ca.location": str(tmp_path)},
        "not both": {"ssl.ca.location": ca_file, "ssl.ca.pem": ca.cert_pem.bytes().decode()},
        "always verifies": {"enable.ssl.certificate.verification": "f", "ssl.ca.location": ca_file},
        "revocation checks are the JVM's own": {"ssl.crl.location": "/crl.pem"},
        "OpenSSL engine": {"ssl.engine.location": "/engine.so"},
        "give Java's ssl.cipher.suites": {"ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"},
    }  # fmt: skip
    for message, client in cases.items():
        with pytest.raises(ConfigError, match=message):
            java_client_settings(client)
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.key would reach Spark as a source option"):
        java_client_settings({}, {"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----", "ssl.keystore.type": "PEM"})
    with pytest.raises(ConfigError, match=r"set these themselves and refuse them: auto\.offset\.reset, key\.deser"):
        java_client_settings({}, {"key.deserializer": "x", "auto.offset.reset": "latest", "client.id": "c"})


def test_a_sasl_login_it_cannot_translate_is_a_warning_as_the_jvm_may_name_a_jaas_file(
    caplog: pytest.LogCaptureFixture,
) -> None:
    oauth = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"}
    assert java_client_settings(oauth)["sasl.mechanism"] == "OAUTHBEARER"
    java_client_settings({"security.protocol": "SASL_PLAINTEXT"})  # librdkafka's default mechanism: GSSAPI
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [w.split(" is not")[0] for w in warnings] == [
        "the login of sasl.mechanism=OAUTHBEARER",
        "the login of sasl.mechanism=GSSAPI",
    ]
    assert all("--java-kafka sasl.jaas.config" in w for w in warnings)
    caplog.clear()
    java_client_settings(oauth, {"sasl.jaas.config": "org.apache.kafka...OAuthBearerLoginModule required;"})
    assert not caplog.records


def test_the_spark_command_refuses_them_before_spark_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_spark(*_: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr("spark_jobs.session.spark_session", no_spark)
    argv = ["spark", "commit", "--spout", "s", "--checkpoint", "/nowhere",
            "--kafka", "ssl.key.location=/k.pem", "--kafka", "ssl.certificate.location=/c.pem"]  # fmt: skip
    assert main(argv) == 2
    assert "from one file: join them" in capsys.readouterr().err
    argv = ["spark", "replay", "--spout", "dlq", "--checkpoint", "/nowhere"]  # a name the spouts refuse too
    assert main(argv) == 2
    assert "spout name 'dlq' is reserved" in capsys.readouterr().err


def test_the_spark_command_takes_javas_own_settings_from_the_environment_and_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACKER_JAVA_KAFKA_SASL_JAAS_CONFIG", "com.sun.security.auth.module.Krb5LoginModule required;")
    argv = ["spark", "commit", "--spout", "s", "--checkpoint", "/nowhere", "--kafka", "security.protocol=SASL_SSL",
            "--kafka", "sasl.mechanism=GSSAPI", "--java-kafka", " ssl.endpoint.identification.algorithm="]  # fmt: skip
    settings = started_with(monkeypatch, argv)
    assert settings.source.java_kafka == {
        "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;",
        "ssl.endpoint.identification.algorithm": "",
    }
    assert settings.source.kafka_options()["kafka.sasl.jaas.config"].startswith("com.sun.security")


def test_the_python_logger_of_the_projects_clients_stays_behind() -> None:
    client = ServiceConfig(bootstrap_servers="b:9092").client()
    assert "logger" in client
    assert java_client_settings(client) == {"bootstrap.servers": "b:9092"}


def test_the_settings_checked_are_those_sparks_readers_get() -> None:
    """Spark's own options over the translated settings, as `OutcomeSource.read` lays them: a user's isolation level
    in capitals, which Java's client refuses and librdkafka takes, never reaches Spark's readers."""
    client = {"bootstrap.servers": "k:9092", "isolation.level": "READ_COMMITTED", "fetch.max.wait.ms": "-1"}
    source = OutcomeSource(client, topics=("t",))
    assert source.java_settings() == {
        "bootstrap.servers": "k:9092", "isolation.level": "read_committed", "fetch.max.wait.ms": "20",
    }  # fmt: skip


def test_a_login_is_the_same_in_both_clients_only_where_it_is_translated() -> None:
    """Only then is a login librdkafka is refused one Spark's readers are refused too (`OutcomeSource.check_login`
    stops the job's start at it)."""
    plain = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
             "sasl.password": "p", "ssl.ca.location": "/ca.pem"}  # fmt: skip
    assert same_login({}) and same_login({"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"})
    assert same_login(plain) and same_login({**plain, "sasl.mechanism": "plain"})
    assert not same_login({**plain, "sasl.mechanism": "GSSAPI"})  # Kerberos: Java's own login line or JAAS file
    assert not same_login({"security.protocol": "SASL_SSL"})  # librdkafka's default mechanism is GSSAPI
    assert not same_login({**plain, "sasl.mechanism": "OAUTHBEARER"})
    assert not same_login({**plain, "ssl.ca.location": "probe"})  # the system's CAs, and the JVM's
    for java in ({"sasl.jaas.config": "x"}, {"ssl.truststore.location": "/t.jks"}, {"security.protocol": "SSL"}):
        assert not same_login(plain, java)
    assert same_login(plain, {"max.poll.records": "10"})


def test_the_login_check_stops_the_start_only_at_a_login_spark_would_be_refused_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused at every attempt, the job failed a minute later with Spark's trace, and its restarts began; a login
    Spark's Java client makes its own way, or Kafka not answering yet, is left for Spark to meet (said once)."""
    plain = {"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": "u", "sasl.password": "p"}  # fmt: skip
    answers: list[KafkaError | None] = []

    def answering(*_: object) -> None:
        if (error := answers.pop()) is not None:
            raise KafkaException(error)

    monkeypatch.setattr("spark_jobs.commit_job.answering", answering)
    refused = KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "Authentication failed")
    answers.append(refused)
    with pytest.raises(KafkaException):
        OutcomeSource(plain, ("acker.outcomes.s",)).check_login()
    answers.append(refused)
    assert not OutcomeSource(plain, ("acker.outcomes.s",), java_kafka={"sasl.jaas.config": "x"}).check_login()
    assert "refused the Python client's login" in caplog.text
    answers.append(KafkaError(KafkaError._TRANSPORT, "connect failed"))
    assert not OutcomeSource(plain, ("acker.outcomes.s",)).check_login()
    assert "Kafka did not answer (connect failed)" in caplog.text
    answers.append(None)
    assert OutcomeSource(plain, ("acker.outcomes.s",)).check_login()
