"""librdkafka settings as the Java Kafka client's, for Spark's Kafka source and sink.

One ``[kafka]`` table of librdkafka settings serves the service, the stages and the Spark jobs' drivers (which commit
and look up offsets with confluent-kafka); Spark's own readers and writers are Java's client. Most settings have the
same name in both (``bootstrap.servers``, ``security.protocol``, ``sasl.mechanism``, ``ssl.keystore.password``, ...)
and pass as they are. `java_client_settings` translates the rest:

======================================================  ===========================================================
librdkafka                                              Java client
======================================================  ===========================================================
``sasl.username`` + ``sasl.password`` (PLAIN, SCRAM-*)  ``sasl.jaas.config``: the login module line
``sasl.mechanisms``                                     ``sasl.mechanism``
``ssl.ca.location`` (a PEM file of CA certificates)     ``ssl.truststore.type=PEM`` + ``ssl.truststore.location``
``ssl.ca.location=probe`` (the system's CAs)            left out: the JVM's default trust store
``ssl.ca.pem``                                          ``ssl.truststore.type=PEM`` + ``ssl.truststore.certificates``
``ssl.key.location`` = ``ssl.certificate.location``     ``ssl.keystore.type=PEM`` + ``ssl.keystore.location``,
(one PEM file: a PKCS#8 key and its certificate chain)  and ``ssl.key.password`` only if the key is encrypted
``ssl.keystore.location`` (PKCS#12)                     the same, with ``ssl.keystore.type=PKCS12``
``ssl.endpoint.identification.algorithm=none``          ``ssl.endpoint.identification.algorithm=`` (empty)
``connections.max.idle.ms=0`` (never closed)            ``connections.max.idle.ms=-1``
``sasl.kerberos.kinit.cmd``, ``...min.time.before...``  left out: the same names mean other things in Java
``enable.ssl.certificate.verification=true``            left out: Java always verifies
``ssl.providers``, ``ssl.curves.list``, ...             left out: OpenSSL's own; Java's client uses its defaults
======================================================  ===========================================================

Settings of the Java client given as they are (``java``; ``acker spark --java-kafka KEY=VALUE``) go over the
translated ones: what librdkafka's names cannot say, such as a Kerberos or OAuth login module line
(``sasl.jaas.config``: those logins are not translated) or Java's names of cipher suites.

What cannot be translated is a `ConfigError` naming what to do instead, raised before Spark starts, never a TLS
handshake failing later on an executor: a client key in a file of its own (Java's client reads a PEM key with its
certificate chain from one file), a key that is not PKCS#8 (Java reads no other PEM key), an encrypted key without
its password, a key given inline (``ssl.key.pem``, or Java's ``ssl.keystore.key``: Spark would show it among the
source's options), a key encrypted
with PBES2 (Java's client decrypts only the older PBES1 schemes), a CA directory, both ``ssl.ca.pem`` and
``ssl.ca.location``, verification turned off, a revocation list or an OpenSSL engine (Java's client has neither),
OpenSSL's cipher list unless Java's is given, and Java settings Spark sets itself (`_SPARK_REFUSES`). A SASL login
other than a user name and password without Java's ``sasl.jaas.config`` is a warning, not an error: the JVM may
name a JAAS file.
Group settings and those Spark refuses are left out (`_NOT_FOR_SPARK`); other librdkafka-only settings the Java
client logs and ignores. What the Java client itself refuses (a ``linger.ms`` of 0.5, which librdkafka takes, or a
``delivery.timeout.ms`` below ``linger.ms`` + ``request.timeout.ms``) `check_in_jvm` finds once Spark's JVM is up,
before the queries start.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JJavaError

from acker.errors import ConfigError
from spark_jobs.jvm_errors import java_message

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("spark_jobs.java_client")

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# Java settings Spark's Kafka source and sink refuse (they set them themselves).
_SPARK_REFUSES = frozenset({
    "auto.offset.reset", "enable.auto.commit", "interceptor.classes",
    "key.deserializer", "value.deserializer", "key.serializer", "value.serializer",
})  # fmt: skip

# Not for Spark's consumers, which are assigned partitions and track offsets themselves: group membership (Java
# reads partition.assignment.strategy as class names, and cooperative-sticky fails) and what Spark refuses outright;
# then librdkafka's names of what is translated.
_NOT_FOR_SPARK = _SPARK_REFUSES | {
    "logger",  # confluent-kafka's Python logger (`acker.kafka.client_log`), not a setting of either client
    "group.id", "group.instance.id",  # the acker's group: Spark's queries would share it (Spark makes its own)
    "group.protocol", "group.remote.assignor", "partition.assignment.strategy", "session.timeout.ms",
    "heartbeat.interval.ms",
    "sasl.username", "sasl.password", "sasl.mechanisms",
    "ssl.ca.location", "ssl.ca.pem", "ssl.key.location", "ssl.certificate.location", "ssl.key.password",
    "enable.ssl.certificate.verification", "ssl.cipher.suites",
    "ssl.providers", "ssl.curves.list", "ssl.sigalgs.list",  # OpenSSL's own: Java's client uses its defaults
    # Same name, another meaning: librdkafka's kinit command is a shell command line with its arguments (Java's, the
    # path of the kinit program), and its 0 of the relogin wait turns refreshes off (Java's: no wait between them).
    # Left out: a Kerberos login is Java's own sasl.jaas.config and settings, given as they are.
    "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
}  # fmt: skip

# librdkafka settings Java's client cannot be given under any name: the Java setting a user gives instead (the
# ``java`` argument of `java_client_settings`), or None where there is none, and why.
_UNTRANSLATED: dict[str, tuple[str | None, str]] = {
    "ssl.cipher.suites": ("ssl.cipher.suites", "is OpenSSL's cipher list, and Java's client takes Java's suite names"),
    "ssl.crl.location": (None, "has no equivalent in Java's client (revocation checks are the JVM's own)"),
    "ssl.engine.location": (None, "names an OpenSSL engine, which Java's client cannot use"),
    "ssl.engine.id": (None, "names an OpenSSL engine, which Java's client cannot use"),
}

_PKCS8_KEYS = ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----")
_PBES2 = bytes.fromhex("06092a864886f70d01050d")  # DER of the object identifier 1.2.840.113549.1.5.13


def java_client_settings(client: Mapping[str, Any], java: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Java Kafka client's settings for the librdkafka settings ``client`` (module docstring: the table), with
    ``java`` over them: settings of the Java client given as they are, for what librdkafka's names cannot say (a
    Kerberos or OAuth login line, Java's cipher suite names, ...)."""
    given = dict(java or {})
    if "ssl.keystore.key" in given:  # Spark's redaction (password, secret, token, ...) does not cover its name
        raise ConfigError("ssl.keystore.key would reach Spark as a source option, which Spark shows: give the key in "
                          "a file, ssl.keystore.location (ssl.keystore.type PEM or PKCS12)")  # fmt: skip
    if refused := sorted(set(given) & _SPARK_REFUSES):
        raise ConfigError(f"Spark's Kafka source and sink set these themselves and refuse them: {', '.join(refused)}")
    for name, (instead, why) in _UNTRANSLATED.items():
        if name in client and (instead is None or instead not in given):
            fix = f"give Java's {instead} as it is" if instead else "leave it out of the settings the Spark jobs read"
            raise ConfigError(f"{name} {why}: {fix} (acker spark --java-kafka KEY=VALUE)")
    if str(client.get("enable.ssl.certificate.verification", "true")).lower() in {"false", "f", "0"}:
        raise ConfigError(
            "enable.ssl.certificate.verification=false has no equivalent in Spark's Java Kafka client, which always "
            "verifies the broker's certificate: name the CA that signed it in ssl.ca.location"
        )
    settings = {k: str(v) for k, v in client.items() if k not in _NOT_FOR_SPARK}
    settings.update(_sasl(client, given))
    settings.update(_trust(client))
    settings.update(_identity(client, given))
    if str(client.get("ssl.endpoint.identification.algorithm", "")).lower() == "none":
        settings["ssl.endpoint.identification.algorithm"] = ""
    if settings.get("connections.max.idle.ms", "").strip() == "0":  # librdkafka's "never": Java's is -1, and its 0
        settings["connections.max.idle.ms"] = "-1"  # closed every connection as soon as it was idle
    return {**settings, **given}


_OWN = "acker spark --java-kafka KEY=VALUE gives it a value of its own"
_INT_MAX = 2**31 - 1


def check_in_jvm(spark: SparkSession, settings: Mapping[str, str], *, producer: bool) -> None:
    """`ConfigError` with the Java client's own words for ``settings`` (`java_client_settings`'s) that it refuses as
    Spark makes its consumer, its admin client (the source) or, where the job dead-letters malformed outcome records
    (``producer``), its producer (the sink): a value of the wrong type or outside its range, a default.api.timeout.ms
    below request.timeout.ms, a delivery.timeout.ms below linger.ms + request.timeout.ms, idempotence with acks other
    than all. Spark makes the sink's producer at the first malformed outcome record only, so such a setting stopped
    the job at whatever time that came, and every restart after it. Checked in Spark's JVM, with its client's classes
    (no connection made)."""
    jvm: Any = spark.sparkContext._jvm
    clients = jvm.org.apache.kafka.clients
    if not isinstance(clients.consumer.ConsumerConfig, JavaClass):  # no Kafka connector: the queries will say so
        return
    props = jvm.java.util.HashMap()
    for key, value in settings.items():
        props.put(key, value)
    for role, serializer in (("de", "Deserializer"), ("", "Serializer")):
        for part in ("key", "value"):  # Spark sets them (and refuses them from a user), as these
            props.put(f"{part}.{role}serializer", f"org.apache.kafka.common.serialization.ByteArray{serializer}")
    try:
        clients.consumer.ConsumerConfig(props)
        admin = clients.admin.AdminClientConfig(props)
        writer = clients.producer.ProducerConfig(props) if producer else None
    except Py4JJavaError as error:  # a ConfigException
        raise ConfigError(f"Spark's Java Kafka client refuses its settings: {java_message(error)} ({_OWN})") from None
    # What the clients' constructors refuse, and not their configs: a setting given below what another needs.
    api, request = admin.getInt("default.api.timeout.ms"), admin.getInt("request.timeout.ms")
    if settings.get("default.api.timeout.ms") is not None and api < request:
        raise ConfigError(
            f"Spark's Java Kafka client refuses default.api.timeout.ms={api} below request.timeout.ms={request}, "
            f"as Spark makes its admin client ({_OWN})"
        )
    if writer is None:
        return
    delivery, linger = writer.getInt("delivery.timeout.ms"), min(writer.getLong("linger.ms"), _INT_MAX)
    need = min(linger + writer.getInt("request.timeout.ms"), _INT_MAX)  # as the producer sums them, in an int
    if settings.get("delivery.timeout.ms") is not None and delivery < need:
        raise ConfigError(
            f"Spark's Java Kafka client refuses delivery.timeout.ms={delivery} below linger.ms + request.timeout.ms "
            f"({need}), as Spark makes its producer, at the first malformed outcome record, to dead-letter it ({_OWN})"
        )


def _sasl(client: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    """The mechanism, and the login module line of a user name and password; other mechanisms' logins (Kerberos's
    ``sasl.kerberos.*``, OAuth's ``sasl.oauthbearer.*``) are not translated, and their line must be given."""
    mechanism = _mechanism(client)
    settings = {"sasl.mechanism": mechanism} if mechanism else {}
    if "sasl.jaas.config" in given:
        return settings
    module = _LOGIN_MODULES.get(mechanism.upper())
    if "sasl.username" in client or "sasl.password" in client:
        if module is None:
            raise ConfigError(
                f"sasl.username and sasl.password need sasl.mechanism PLAIN or SCRAM-*, not {mechanism!r}"
            )
        user, password = (_jaas_quoted(str(client.get(k, ""))) for k in ("sasl.username", "sasl.password"))
        settings["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    elif str(client.get("security.protocol", "")).upper().startswith("SASL"):
        # Not refused: the JVM may name a JAAS file (-Djava.security.auth.login.config, section KafkaClient).
        log.warning(
            "the login of sasl.mechanism=%s is not translated for Spark's Java Kafka client: unless the JVM names a "
            "JAAS file, give its login module line (acker spark --java-kafka sasl.jaas.config=...)",
            mechanism or "GSSAPI",
        )
    return settings


def _mechanism(client: Mapping[str, Any]) -> str:
    """The SASL mechanism librdkafka's ``client`` names (either spelling), or "" if none (librdkafka's default: GSSAPI,
    Kerberos)."""
    return str(client.get("sasl.mechanism", client.get("sasl.mechanisms", "")))


def same_login(client: Mapping[str, Any], java: Mapping[str, str] | None = None) -> bool:
    """Whether Spark's Java Kafka client logs in to the brokers as librdkafka does with ``client``: none of its login
    given as Java's own (``java``: a login module line, a trust or key store, a protocol), the broker verified with
    the same CA certificates (not the system's: ``probe``), and a SASL login, if any, a user name and password
    (PLAIN, SCRAM-*), which `java_client_settings` translates. Then a login the brokers refuse librdkafka they refuse
    Spark's readers and writers too."""
    if any(name.startswith(("sasl.", "ssl.", "security.")) for name in java or {}):
        return False
    if str(client.get("ssl.ca.location", "")) == "probe":
        return False
    if not str(client.get("security.protocol", "")).upper().startswith("SASL"):
        return True
    return (_mechanism(client) or "GSSAPI").upper() in _LOGIN_MODULES and "sasl.username" in client


def _jaas_quoted(text: str) -> str:
    """``text`` inside a JAAS option's double quotes: the Java parser ends a quoted value at a raw line break, and an
    error naming what follows would show part of a password."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


def _trust(client: Mapping[str, Any]) -> dict[str, str]:
    """The CA certificates that verify the broker: a PEM trust store, by file or inline."""
    if "ssl.ca.pem" in client and "ssl.ca.location" in client:
        raise ConfigError("Spark's Java Kafka client takes ssl.ca.pem or ssl.ca.location, not both")
    if "ssl.ca.pem" in client:
        return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": str(client["ssl.ca.pem"])}
    location = str(client.get("ssl.ca.location", ""))
    if not location or location == "probe":
        return {}
    if Path(location).is_dir():
        raise ConfigError(
            f"ssl.ca.location={location} is a directory, and Spark's Java Kafka client reads its CA certificates "
            "from one PEM file: name a file holding them all"
        )
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": location}


def _identity(client: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    """The client's own key and certificate chain, for brokers that authenticate clients by certificate."""
    if "ssl.key.pem" in client or "ssl.certificate.pem" in client:
        raise ConfigError(
            "ssl.key.pem and ssl.certificate.pem would reach Spark as source options, which Spark shows: name a file "
            "holding the key and its certificate chain in ssl.key.location and ssl.certificate.location"
        )
    if "ssl.keystore.location" in client:
        return {"ssl.keystore.type": str(client.get("ssl.keystore.type", "PKCS12"))}
    key, chain = (str(client.get(k, "")) for k in ("ssl.key.location", "ssl.certificate.location"))
    if not key and not chain:
        return {}
    if not key or not chain or Path(key).resolve() != Path(chain).resolve():
        raise ConfigError(
            "Spark's Java Kafka client reads the client's PEM key and its certificate chain from one file: join them "
            "(cat client.key client.pem > client-keystore.pem) and name that file in both ssl.key.location and "
            f"ssl.certificate.location, which librdkafka reads as well (got {key or '-'} and {chain or '-'}); or "
            "give a PKCS#12 keystore in ssl.keystore.location, which both clients read"
        )
    try:
        text = Path(key).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise ConfigError(f"ssl.key.location={key}: {exc.strerror or exc}") from exc
    if not any(marker in text for marker in _PKCS8_KEYS):
        raise ConfigError(
            f"ssl.key.location={key} holds no PKCS#8 key (BEGIN PRIVATE KEY), the only PEM key Spark's Java Kafka "
            "client reads: convert it with openssl pkcs8 -topk8 -nocrypt, or, to keep it encrypted, "
            "openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES"
        )
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"ssl.key.location={key} holds a key but no certificate chain")
    if _pbes2(text):
        raise ConfigError(
            f"ssl.key.location={key} holds a key encrypted with PBES2 (openssl's default), which Spark's Java Kafka "
            "client cannot decrypt: encrypt it with openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES, which both clients read, "
            "or give a PKCS#12 keystore in ssl.keystore.location"
        )
    if "-----BEGIN ENCRYPTED PRIVATE KEY-----" not in text:
        # Java's client takes any password as saying the key is encrypted (librdkafka ignores one it does not need).
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": key}
    password = given.get("ssl.key.password", client.get("ssl.key.password"))
    if password is None:
        raise ConfigError(f"ssl.key.location={key} holds an encrypted key, and ssl.key.password is not given")
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": key, "ssl.key.password": str(password)}


def _pbes2(text: str) -> bool:
    """Whether the encrypted PKCS#8 key in ``text`` names PBES2 as its encryption scheme: its encryption algorithm
    identifier opens the DER structure, before the encrypted bytes."""
    begin, end = "-----BEGIN ENCRYPTED PRIVATE KEY-----", "-----END ENCRYPTED PRIVATE KEY-----"
    if begin not in text:
        return False
    body = text.split(begin, 1)[1].split(end, 1)[0]
    try:
        der = base64.b64decode("".join(body.split()), validate=True)
    except binascii.Error:
        return False  # not for this check to judge: the Java client names what it cannot read
    return _PBES2 in der[:24]
