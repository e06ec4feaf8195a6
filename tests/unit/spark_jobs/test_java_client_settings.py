"""One `[kafka]` table of librdkafka settings serves the service, the stages and the Spark jobs, whose Kafka client is
Java's: `java_client_settings` translates what is named differently and leaves out what Spark's consumers must not
get."""

from __future__ import annotations

import pytest

from spark_jobs.commit_job import java_client_settings


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
    with pytest.raises(ValueError, match=r"sasl\.mechanism PLAIN or SCRAM"):
        java_client_settings({"sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"})
