"""Thin helpers over confluent-kafka's clients: topic creation and error wrapping.

Kafka errors surface as `KafkaClientError` (an `AckerError`) that keeps librdkafka's error code and name.

A client call that raises `KafkaException` while another exception is being handled (in an ``except`` block, a
``finally`` or an ``__exit__`` left by an exception, or anything they call, delivery reports served there included)
keeps the handled one alive for good, and with it its traceback's frames and everything they held: a batch's rows, a
test's clients. The cause (confluent-kafka 2.16, CPython 3.11): the client raises with a `KafkaError` as the value, a
type flagged as an exception that is not one; CPython's implicit chaining stores the handled exception in it, where
nothing releases it. Where a program goes on after a failure, the Kafka calls that may raise are made after the
``except`` block (`after_failure` keeps the chaining the block gave), not in it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined] # documented location
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from acker.config import without_consumer_settings
from acker.errors import AckerError
from acker.kafka.client_log import serve_log_lines

log = logging.getLogger("acker.kafka")


class KafkaClientError(AckerError):
    """A Kafka operation that failed; ``code`` and ``name`` are librdkafka's."""

    def __init__(self, what: str, error: KafkaError | None, more: str = "") -> None:
        self.code = error.code() if error is not None else None
        self.name = error.name() if error is not None else "UNKNOWN"
        super().__init__(f"{what}: {self.name}: {error.str() if error is not None else 'no detail'}{more}")


class ProducerFailedError(KafkaClientError):
    """A producer that takes no more records (a fatal error, `fatal`): the process must stop, and be started again."""


class TopicsNotCreatedError(KafkaClientError):
    """Topics that could not be created (each with its error; None: no answer in time), and those that were: the
    request for all of them was sent, and one topic's failure does not undo the others'."""

    def __init__(self, failed: dict[str, KafkaError | None], created: list[str]) -> None:
        self.failed, self.created = failed, created
        (first, error), *others = failed.items()
        more = "".join(f"; creating topic {name}: {_said(other)}" for name, other in others)
        more += f" (created: {', '.join(created)})" if created else " (none created)"
        super().__init__(f"creating topic {first}", error, more)


UNANSWERED = "no answer in time"  # a topic whose creation the broker did not answer, as each report says it


def _said(error: KafkaError | None) -> str:
    return f"{error.name()}: {error.str()}" if error is not None else UNANSWERED


# A client's errors that say no broker answered (rather than that one answered no): the cluster is down, or not
# where the settings say.
NO_ANSWER = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._RESOLVE, KafkaError._ALL_BROKERS_DOWN})
# The broker answered, and refused the client's login: wrong SASL credentials or mechanism, a TLS handshake failed.
REFUSED_LOGIN = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED})


def kafka_error(error: KafkaException) -> KafkaError | None:
    """The librdkafka error a `KafkaException` carries, if it carries one."""
    return error.args[0] if error.args and isinstance(error.args[0], KafkaError) else None


# A group's coordinator elsewhere, or not loaded yet (a broker restarting): asked again a moment later, Kafka answers.
# confluent-kafka makes the error of a consumer's committed-offsets lookup not retriable (it builds the error anew),
# whatever its code: seen after a broker's restart, NOT_COORDINATOR stopped every step of a chain, whose group
# answered 4 s later.
COORDINATOR_MOVING = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
})  # fmt: skip
# A committed-offsets lookup asked in all while Kafka answers that the group's coordinator moves, 1 s apart: about
# 30 s for the coordinator to be back (seen 4 s; loading a large __consumer_offsets partition takes longer). A
# spout's watermarks at an assignment and a coordinated step's offsets are asked so.
LOOKUP_ATTEMPTS = 30


def timed_out(error: KafkaException) -> bool:
    """Whether ``error`` is librdkafka's local timeout: Kafka did not answer in time."""
    return (cause := kafka_error(error)) is not None and cause.code() == KafkaError._TIMED_OUT


def raise_for(error: KafkaError | None, what: str) -> None:
    if error is not None and error.code() != KafkaError.NO_ERROR:
        raise KafkaClientError(what, error)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int = -1  # the broker's default.replication.factor (KIP-464)
    config: Mapping[str, str] = field(default_factory=dict)


def create_topics(
    client_config: Mapping[str, Any], specs: Iterable[TopicSpec], timeout_s: float = 30.0, *, visible: bool = True
) -> list[str]:
    """Create the topics that do not exist yet; return the names created. Existing ones are left as they are. A name
    given twice is asked for once, as first given: twice in one request, the admin client crashes the process
    (confluent-kafka 2.16, reading the broker's refusal of the second). ``visible``: return once the topics created
    are in the cluster's metadata (`_await_visible`), not only once the creation is answered."""
    unique: dict[str, TopicSpec] = {}
    for spec in specs:
        unique.setdefault(spec.name, spec)
    specs = list(unique.values())
    if not specs:
        return []
    admin = AdminClient(without_consumer_settings(client_config))
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in specs],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    created: list[str] = []
    failed: dict[str, KafkaError | None] = {}
    deadline = time.monotonic() + timeout_s
    for name, future in futures.items():
        while not future.done() and time.monotonic() < deadline:
            admin.poll(0.1)  # hands over its log lines (a refused connection, ...) while it waits
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
            created.append(name)
        except KafkaException as error:
            cause = kafka_error(error)
            if cause is None or cause.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                failed[name] = cause
        except concurrent.futures.TimeoutError:
            failed[name] = None
    if failed:  # every answer waited for first: those created are said too
        raise TopicsNotCreatedError(failed, created)
    if visible:
        _await_visible(client_config, created, deadline)
    return created


def _await_visible(client_config: Mapping[str, Any], names: list[str], deadline: float) -> None:
    """Return once every topic of ``names`` has its partitions in the cluster's metadata, or at ``deadline`` (or at
    a lookup not answered). A creation is answered once the controller has the topic, and a broker's metadata may say
    for a few seconds more that it does not exist (as Kafka's Admin API says): a spout started at once on a busy
    machine was refused its source topic, just created."""
    if not names:
        return
    await_topics(metadata_admin(client_config), names, deadline)


def await_topics(handle: Consumer | Producer | AdminClient, names: Iterable[str], deadline: float) -> bool:
    """Whether every topic of ``names`` came to have its partitions in what ``handle`` is told before ``deadline``,
    asking through it (which updates what it knows: `topic_partitions`); False at the deadline, or at a lookup not
    answered (logged at debug: the topics were created all the same, the next client to look finds them, or says
    they are missing)."""
    waiting = list(names)
    try:
        while waiting:
            for name in list(waiting):
                if time.monotonic() >= deadline:
                    return False
                if topic_partitions(handle, name, max(0.1, deadline - time.monotonic())):
                    waiting.remove(name)
            if waiting:
                time.sleep(0.05)
    except KafkaException as error:
        log.debug("topics created, not found visible: %s", error)
        return False
    return True


def ensure_topics(client_config: Mapping[str, Any], specs: Iterable[TopicSpec], timeout_s: float = 30.0) -> list[str]:
    """Create those of ``specs`` that do not exist; return the names created. Each is looked for first, through a
    consumer's lookup, which creates nothing: a principal without the right to create topics is refused even for
    topics that exist."""
    missing = []
    for spec in specs:
        try:
            partition_count(client_config, spec.name, timeout_s)
        except KafkaClientError as error:
            if error.code != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            missing.append(spec)
    return create_topics(client_config, missing, timeout_s)


def delete_groups(client_config: Mapping[str, Any], groups: Iterable[str], timeout_s: float = 30.0) -> dict[str, str]:
    """Delete consumer groups (their committed offsets); return why each one not deleted was not (a group still
    with members is refused by the broker, ``GROUP_ID_NOT_FOUND`` counts as deleted)."""
    groups = list(groups)
    if not groups:
        return {}
    admin = AdminClient(without_consumer_settings(client_config))
    futures = admin.delete_consumer_groups(groups, request_timeout=timeout_s)
    return _refused(futures, KafkaError.GROUP_ID_NOT_FOUND, timeout_s)


def delete_topics(client_config: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 30.0) -> dict[str, str]:
    """Delete topics (their records); return why each one not deleted was not (``UNKNOWN_TOPIC_OR_PART`` counts as
    deleted)."""
    topics = list(topics)
    if not topics:
        return {}
    admin = AdminClient(without_consumer_settings(client_config))
    futures = admin.delete_topics(topics, operation_timeout=timeout_s, request_timeout=timeout_s)
    return _refused(futures, KafkaError.UNKNOWN_TOPIC_OR_PART, timeout_s)


def _refused(futures: Mapping[str, concurrent.futures.Future[Any]], gone: int, timeout_s: float) -> dict[str, str]:
    """Why each of an admin request's ``futures`` failed, by name; the error ``gone`` (already deleted) is none."""
    refused: dict[str, str] = {}
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as error:
            cause = kafka_error(error)
            if cause is None or cause.code() != gone:
                refused[name] = _said(cause)
        except concurrent.futures.TimeoutError:
            refused[name] = _said(None)
    return refused


def named_under(client_config: Mapping[str, Any], prefix: str, timeout_s: float = 30.0) -> tuple[list[str], list[str]]:
    """The topics and the consumer groups of the cluster named ``prefix`` or ``prefix`` then ``.`` or ``-`` and more
    (a run's, named by `acker.config.ServiceConfig.namespaced` and its stages): sorted. Topics are listed through a
    handle that creates none (`metadata_admin`)."""

    def under(name: str) -> bool:
        return name == prefix or (name.startswith(prefix) and name[len(prefix)] in ".-")

    admin = metadata_admin(client_config)
    topics = sorted(t for t in admin.list_topics(timeout=timeout_s).topics if under(t))
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    return topics, sorted(g.group_id for g in listed.valid if under(g.group_id))


# A topic's metadata errors that say it does not exist (yet); others (not authorized, ...) are errors.
_ABSENT = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE})
# Refusals no wait mends: said at once rather than asked again until a deadline.
NOT_ALLOWED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                         KafkaError.GROUP_AUTHORIZATION_FAILED})  # fmt: skip
# Consumer errors no retry mends: the broker refuses the group's settings (a session timeout outside its bounds, a
# group id it does not take). Reported as any other, the process stayed up, never in its group, reading nothing.
REFUSED_SETTINGS = frozenset({KafkaError.INVALID_SESSION_TIMEOUT, KafkaError.INVALID_GROUP_ID})
# A record refused as too large: by the producer (message.max.bytes) or by the broker (the topic's limit).
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
# What a commit made while the group rebalances is refused with (the classic protocol's, then KIP-848's): a periodic
# commit often races a process joining or leaving. Nothing is lost: the offsets are named again at the next commit.
REBALANCING = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.STALE_MEMBER_EPOCH,
})  # fmt: skip


def topic_partitions(consumer: Consumer | Producer | AdminClient, topic: str, timeout_s: float = 10.0) -> list[int]:
    """The partition numbers of ``topic``, ascending; empty when it does not exist (or not yet: no leader, no
    partitions). `KafkaException` when the cluster does not answer within ``timeout_s``, or answers with another
    error for the topic (not authorized to describe it, say: that is not a missing topic).

    Asked through a handle whose lookups create no topic: `metadata_admin`'s, or a consumer's (librdkafka's
    ``allow.auto.create.topics`` is off for a consumer unless a user turns it on). A producer or admin handle's
    metadata request, by default, lets a broker with ``auto.create.topics.enable`` create the topic it asks about,
    and a lookup must not create anything: through a producer only for a topic it writes to, to update what it knows
    (`acker.kafka.acker_client.partition_lookup`).
    """
    return sorted(_partitions(consumer, topic, timeout_s))


def _partitions(handle: Consumer | Producer | AdminClient, topic: str, timeout_s: float) -> dict[int, Any]:
    """`topic_partitions`, each partition with its metadata (leader, replicas)."""
    found = handle.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if found is None:
        return {}
    if found.error is not None:
        if found.error.code() in _ABSENT:
            return {}
        raise KafkaException(KafkaError(found.error.code(), f"topic {topic}: {found.error.str()}"))
    return dict(found.partitions)


class RefusedLogin:
    """An ``error_cb`` that keeps the first error of a login the broker refused (`REFUSED_LOGIN`), and hands every
    error on to ``given`` (the settings' own callback, if any). librdkafka says a refused login to this callback
    alone, served by a poll: a request meanwhile fails only once its time is out, as though nothing answered."""

    def __init__(self, given: object = None) -> None:
        self.error: KafkaError | None = None
        # A TLS handshake the peer cut, since `first_answer` last looked, as an SSL error. librdkafka says it as a
        # transport error ("SSL handshake failed: Disconnected: ... connecting to a PLAINTEXT broker listener?"):
        # what a TLS client at a plaintext listener meets at every attempt, but a broker going away mid-handshake
        # (a restart, a connection limit, a balancer whose backend is down) once in a while too.
        self.handshake_cut: KafkaError | None = None
        self._given = given if callable(given) else None

    def __call__(self, error: KafkaError) -> None:
        if self.error is None and error.code() in REFUSED_LOGIN:
            self.error = error
        elif error.code() == KafkaError._TRANSPORT and "SSL handshake failed" in error.str():
            self.handshake_cut = KafkaError(KafkaError._SSL, error.str())
        if self._given is not None:
            self._given(error)


def first_answer(
    ask: Callable[[float], object],
    client: Any,
    refused: RefusedLogin,
    timeout_s: float,
    stop: threading.Event | None = None,
) -> bool:
    """Make ``ask(timeout_s)``, a metadata request of ``client`` (whose ``error_cb`` is ``refused``), until Kafka
    answers: True then; False once ``stop`` is set. An attempt waits twice as long as the one before, from 1 s, and
    the client's callbacks are served between them (`serve_log_lines`): what it meets shows at once, a connection
    refused or a name that does not resolve. Raises `KafkaException`: of a refused login, as soon as the client says
    one (a wrong password, SASL against a plaintext listener: ``ask`` only timed out, for as long as it was given), or
    of TLS handshakes cut in two attempts running (`RefusedLogin.handshake_cut`: a plaintext listener, within 3 s); of
    the last attempt once ``timeout_s`` is past; and of an error that is not a missing answer (`NO_ANSWER`)."""
    deadline = time.monotonic() + timeout_s
    attempt_s = 1.0
    cut_before = False
    while stop is None or not stop.is_set():
        try:
            ask(max(0.1, min(attempt_s, deadline - time.monotonic())))
            return True
        except KafkaException as error:
            cause = kafka_error(error)
            if cause is None or cause.code() not in NO_ANSWER:
                raise
            serve_log_lines(client)
            if refused.error is not None:
                raise KafkaException(refused.error) from None
            cut, refused.handshake_cut = refused.handshake_cut, None
            if cut is not None and cut_before:
                raise KafkaException(cut) from None
            cut_before = cut is not None
            if time.monotonic() >= deadline:
                raise
        attempt_s *= 2
    return False


def answering(client_config: Mapping[str, Any], topic: str, timeout_s: float = 10.0) -> None:
    """Return once the cluster answers a metadata request about ``topic`` (whether it exists or not); `KafkaException`
    (`NO_ANSWER`) when it does not within ``timeout_s``, or, as soon as it is seen, with the error of a login the broker
    refused (`REFUSED_LOGIN`): a wrong password read as "is it running, and reachable?".

    One topic, asked by a handle that creates none (`metadata_admin`), so the answer is small whatever the
    cluster's size; one about every topic is the whole cluster's metadata, each partition of it made a Python object
    (on one local broker with 10,000 partitions: 76 to 86 ms, against 55 ms here)."""
    refused = RefusedLogin(client_config.get("error_cb"))
    admin = metadata_admin({**client_config, "error_cb": refused})
    first_answer(lambda wait_s: admin.list_topics(topic, timeout=wait_s), admin, refused, timeout_s)


def metadata_admin(client_config: Mapping[str, Any]) -> AdminClient:
    """An admin handle for metadata lookups: none of its requests creates a topic (``allow.auto.create.topics`` off,
    whatever the settings say: on, an admin or producer handle's request lets a broker that creates topics on first
    use make the topic it asks about). Not a consumer handle: it would look for a group's coordinator, and its close
    can hang (librdkafka#4041)."""
    return AdminClient({**without_consumer_settings(client_config), "allow.auto.create.topics": False})


def partition_count(client_config: Mapping[str, Any], topic: str, timeout_s: float = 10.0) -> int:
    """Partitions of ``topic``; `KafkaClientError` when it does not exist (`topic_partitions`)."""
    return len(_existing_partitions(client_config, topic, timeout_s))


def replication_factors(client_config: Mapping[str, Any], topic: str, timeout_s: float = 10.0) -> list[int]:
    """The replica counts of ``topic``'s partitions, each once, ascending (one, unless a partition was reassigned to
    more or fewer brokers); `KafkaClientError` when the cluster does not say (no such topic, no answer)."""
    return sorted(
        {len(partition.replicas) for partition in _existing_partitions(client_config, topic, timeout_s).values()}
    )


def _existing_partitions(client_config: Mapping[str, Any], topic: str, timeout_s: float) -> dict[int, Any]:
    """``topic``'s partitions with their metadata; `KafkaClientError` when it does not exist or the cluster does not
    say."""
    try:
        partitions = _partitions(metadata_admin(client_config), topic, timeout_s)
    except KafkaException as error:
        raise KafkaClientError(f"reading metadata of {topic}", kafka_error(error)) from None
    if not partitions:
        raise KafkaClientError(f"topic {topic} is not available", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    return partitions


def partitions_named(partitions: Iterable[TopicPartition]) -> str:
    """``topic/partition, ...`` in order: the partitions a process is given or gives up, as its log names them."""
    return ", ".join(sorted(f"{tp.topic}/{tp.partition}" for tp in partitions))


def not_its_partitions(topic: str, partitions: int, asked: Iterable[int]) -> str:
    """How a command says that ``topic``, with ``partitions`` partitions, has none of those ``asked``."""
    return f"{topic} has partitions 0-{partitions - 1}, not {', '.join(map(str, sorted(asked)))}"


def topic_config(client_config: Mapping[str, Any], topic: str, timeout_s: float = 10.0) -> dict[str, str]:
    """The configuration of ``topic`` as the broker reports it (its own settings and the defaults it gets);
    `KafkaClientError` when the broker does not say (no such topic, no right to describe it, no answer)."""
    admin = AdminClient(without_consumer_settings(client_config))
    return _described(admin, ConfigResource(ResourceType.TOPIC, topic), f"describing topic {topic}", timeout_s)


def broker_config(client_config: Mapping[str, Any], timeout_s: float = 10.0) -> dict[str, str]:
    """The configuration of one broker of the cluster (the lowest id), as it reports it: the defaults a topic made
    without them gets (``default.replication.factor``, ...); `KafkaClientError` when the cluster does not say."""
    admin = AdminClient(without_consumer_settings(client_config))
    try:
        nodes = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s).nodes
    except KafkaException as error:
        raise KafkaClientError("describing the cluster", kafka_error(error)) from None
    except concurrent.futures.TimeoutError:
        raise KafkaClientError("describing the cluster", KafkaError(KafkaError._TIMED_OUT)) from None
    if not nodes:
        raise KafkaClientError("describing the cluster: no broker", None)
    broker = str(min(node.id for node in nodes))
    return _described(admin, ConfigResource(ResourceType.BROKER, broker), f"describing broker {broker}", timeout_s)


def _described(admin: AdminClient, resource: ConfigResource, what: str, timeout_s: float) -> dict[str, str]:
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
    except KafkaException as error:
        raise KafkaClientError(what, kafka_error(error)) from None
    except concurrent.futures.TimeoutError:
        raise KafkaClientError(what, KafkaError(KafkaError._TIMED_OUT)) from None
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


PRODUCER_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes and batch.size


def topic_max_bytes(client_config: Mapping[str, Any], topic: str) -> int:
    """The topic's ``max.message.bytes`` (what the broker takes in one record batch); `KafkaClientError` when the
    broker does not say (`topic_config`), or says something that is not a number."""
    value = topic_config(client_config, topic).get("max.message.bytes")
    try:
        return int(value or "")
    except ValueError:
        raise KafkaClientError(f"reading max.message.bytes of {topic} ({value!r})", None) from None


def smallest_max_bytes(client_config: Mapping[str, Any], topics: Iterable[str]) -> tuple[str, int] | None:
    """Of ``topics``, the one whose ``max.message.bytes`` is the smallest, and that limit; None when no topic says
    (those that do not are left out, with a debug line)."""
    limits = {}
    for topic in topics:
        try:
            limits[topic] = topic_max_bytes(client_config, topic)
        except KafkaClientError as error:
            log.debug("max.message.bytes of %s not known (%s)", topic, error)
    if not limits:
        return None
    smallest = min(limits, key=limits.__getitem__)
    return smallest, limits[smallest]


def produce(producer: Producer, topic: str, value: bytes | None, *, until: float | None = None, **kwargs: Any) -> None:
    """``producer.produce``, waiting (and serving delivery reports) while librdkafka's local queue is full: for as long
    as it takes (librdkafka frees room as records are delivered, or fail at their ``message.timeout.ms``), or until
    ``until`` (a `time.monotonic` time), then `BufferError`, nothing produced."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            if until is not None and time.monotonic() >= until:
                raise
        wait_s = 0.05 if until is None else min(0.05, max(0.0, until - time.monotonic()))
        producer.poll(wait_s)  # the reports out of the except block: one may look a topic up (module docstring)


@contextlib.contextmanager
def after_failure(failed: BaseException) -> Iterator[None]:
    """For what a failure is handled with after its ``except`` block (module docstring): what it raises has
    ``failed`` as its context, as it had in the block."""
    try:
        yield
    except BaseException as error:
        if error is not failed and error.__context__ is None:
            error.__context__ = failed
        raise


def produce_reporting(
    producer: Producer,
    topic: str,
    value: bytes | None,
    on_delivery: Callable[[KafkaError | None, Message | None], None],
    **kwargs: Any,
) -> None:
    """`produce`; a record the producer refuses at once (too large for it, an invalid topic) is reported to
    ``on_delivery`` as a failed delivery (with no record), as the broker's refusals are (`refusal`)."""
    try:
        produce(producer, topic, value, on_delivery=on_delivery, **kwargs)
        return
    except KafkaException as refused:
        error = refusal(refused)
    on_delivery(error, None)  # out of the except block (module docstring)


def release(producer: Producer, owner: str) -> None:
    """Free a stopped owner's producer now (its threads, connections and buffers) rather than whenever the object is
    collected: a process that stops and starts stages in it kept every old one's connections open, retrying a broker
    that had gone. Only an empty producer is closed, at once: `Producer.close` flushes without a bound, and serves the
    delivery reports of anything purged before it, which would log every unsent record of a stop with the broker gone.
    One still holding records or requests (its owner has said how many records it leaves) is left to collection, which
    drops them unreported. A producer failed for good may raise its error on closing: logged, the owner's stop goes
    on."""
    if producer.flush(0):  # nothing to wait for: the owner flushed (and served the delivery reports) already
        return
    try:
        producer.close()
    except KafkaException as error:
        cause = kafka_error(error)
        log.warning("%s: its producer closed with its error: %s", owner, cause.str() if cause else error)


def fatal(error: KafkaError) -> bool:
    """Whether the client that gave ``error`` can do nothing more (an idempotent producer whose sequence broke, a
    static member fenced): the process must stop, and its supervisor start it again. After a fatal error librdkafka
    refuses every record with ``_FATAL``, an error confluent-kafka does not flag ``fatal()``."""
    return bool(error.fatal()) or error.code() == KafkaError._FATAL


def refusal(refused: KafkaException) -> KafkaError:
    """A record the producer refused at once (too large, an invalid topic, ...), as the error of a failed delivery:
    callers treat it as they treat the broker's refusals, instead of letting it raise. `KafkaClientError` when the
    producer takes nothing any more (`fatal`, `ProducerFailedError`): handled as a failed delivery, every record would
    fail, and be sent again, for ever, by a process that goes on reading without doing anything."""
    error = kafka_error(refused) or KafkaError(KafkaError._INVALID_ARG, str(refused))
    if fatal(error):
        raise ProducerFailedError("the producer takes no more records (a fatal error: restart the process)", error)
    return error


def log_bounds(consumer: Consumer, tp: TopicPartition, timeout_s: float = 30.0) -> tuple[int, int]:
    """The first and the end offset of one partition, asking again (up to ``timeout_s``) while the broker cannot
    answer: a topic just created has no leader for a moment. `KafkaClientError` when it never answers, or at once
    when it refuses the read (not authorized).

    A handle that has read a topic's bounds keeps the topic's partitions as they were: one added since is unknown
    to it (``_UNKNOWN_PARTITION``, at once, without asking the cluster) until its metadata is next refreshed, every
    5 minutes by default. Such an answer makes it look the topic up first: asked again as it was, a spout given a
    partition just added stopped after 30 s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=max(0.1, min(10.0, deadline - time.monotonic()))
            )
            return int(low), int(high)
        except KafkaException as error:  # e.g. NOT_LEADER_FOR_PARTITION, which librdkafka does not flag retriable
            cause = kafka_error(error)
        if time.monotonic() > deadline or (cause is not None and cause.code() in NOT_ALLOWED):
            raise KafkaClientError(f"reading the offsets of {tp.topic}[{tp.partition}]", cause)
        if cause is not None and cause.code() == KafkaError._UNKNOWN_PARTITION:
            with contextlib.suppress(KafkaException):  # no answer: asked again at the next round
                consumer.list_topics(tp.topic, timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        time.sleep(0.2)


TRANSACTION_TIMEOUT_MS = 60_000  # librdkafka's default transaction.timeout.ms


def open_transaction_wait_s(client: Mapping[str, Any]) -> float:
    """How long a read_committed read up to a partition's end as written (its high watermark, read by a
    read_uncommitted handle: a read_committed one says the last stable offset, where the first open transaction
    begins) may wait: until the broker aborts a transaction left open (a writer dead mid-transaction), after the
    ``transaction.timeout.ms`` these settings give (librdkafka's default if none), and a margin."""
    return int(client.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)) / 1000 + 30.0


def end_offsets(consumer: Consumer, partitions: list[TopicPartition], timeout_s: float = 30.0) -> list[int]:
    """The current end offset of each partition (see `log_bounds`)."""
    return [log_bounds(consumer, tp, timeout_s)[1] for tp in partitions]


def committed_offsets(
    consumer: Consumer, partitions: list[TopicPartition], timeout_s: float, *, attempts: int = 1
) -> list[TopicPartition]:
    """The offsets the consumer's group has committed for ``partitions`` (negative where none), asked again 1 s later
    (``attempts`` in all) while Kafka answers that the group's coordinator moves (`COORDINATOR_MOVING`).

    A partition the broker answered with an error for (its topic not to be described, say) raises `KafkaException`,
    as a request that failed does: the call gives it an offset of -1001 without raising, which reads as "none
    committed", and a watermark taken for none starts over from the first record, or is committed behind the
    group's."""
    if attempts < 1:
        raise ValueError(f"attempts: at least 1, not {attempts}")
    for attempt in range(1, attempts + 1):
        try:
            found = consumer.committed(partitions, timeout_s)
            for tp in found:
                if tp.error is not None:
                    raise KafkaException(tp.error)
            return found
        except KafkaException as error:
            cause = kafka_error(error)
            if attempt == attempts or cause is None or cause.code() not in COORDINATOR_MOVING:
                raise
            log.warning("committed offsets of %s (%s): asked again", partitions_named(partitions), cause.str())
            time.sleep(1.0)
    raise AssertionError("unreachable")  # every attempt returns or raises


def written_at_ms(record: Message) -> int | None:
    """``record``'s Kafka timestamp (when its producer wrote it, or the broker appended it), None when it has none."""
    kind, stamp = record.timestamp()
    return None if kind == TIMESTAMP_NOT_AVAILABLE else stamp


def readable(record: Message, logger: logging.Logger, what: str) -> bool:
    """Whether a consumed record is a record, not an event: False for the end of a partition, or for an error,
    logged; `KafkaClientError` for settings the broker refuses (`REFUSED_SETTINGS`), and for a fatal error, after
    which the consumer is unusable (a static member its successor fenced, say): the process must stop, so that its
    supervisor starts it again, rather than run on without reading anything, or, holding work it no longer owns, act
    on it as a zombie."""
    error = record.error()
    if error is None:
        return True
    if fatal(error):
        raise KafkaClientError(what, error)
    if error.code() in REFUSED_SETTINGS:  # asked again every few seconds, refused every time: the process waited
        raise KafkaClientError(what, error, " (the broker refuses the group's settings: correct them)")
    if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:  # a subscribed topic that does not exist (yet)
        logger.warning("%s error: %s (`acker topics create` makes the acker's own topics, with `--topic "
                       "NAME:PARTITIONS` a pipeline's)", what, error.str())  # fmt: skip
    elif error.code() != KafkaError._PARTITION_EOF:
        logger.warning("%s error: %s", what, error)
    return False


def consume_available(consumer: Consumer, max_records: int, timeout_s: float) -> list[Message]:
    """What is buffered (up to ``max_records``) at once, or else the first record to come within ``timeout_s``.

    A batch consume with a timeout waits until the batch is full or the timeout passes, which delays every record
    of a light stream by the whole timeout.
    """
    return consumer.consume(max_records, timeout=0) or consumer.consume(1, timeout=timeout_s)


# For a consumer that reads partitions to their end with `read_to`. It may then ask the broker something else: a fetch
# left waiting at the end of what it read holds the broker connection, and the next request (an offset lookup, say)
# waited behind it for the whole wait, 500 ms by default. A start below the partition's first record (deleted by
# retention, maybe since its bounds were looked up) reads from that record: librdkafka's default went to the end, and
# the read returned nothing, or what came after its end, as all that was there.
READ_TO_SETTINGS = {"fetch.wait.max.ms": 10, "auto.offset.reset": "earliest"}


def read_to(
    consumer: Consumer, start: TopicPartition, end: int, timeout_s: float = 30.0
) -> Generator[Message, None, None]:
    """The records of one partition from ``start`` up to (not including) offset ``end``, read through ``consumer``
    (assigned here, unassigned after; give it `READ_TO_SETTINGS` if it asks for more afterwards).

    Progress is the consumer's position, which also moves past transaction markers and aborted records: a
    transactional topic's last offset is a marker, and no record ever reaches it. `KafkaClientError` when the
    position stays short of ``end`` for ``timeout_s``, rather than returning less than was asked for.
    """
    if start.offset >= end:
        return
    consumer.assign([start])
    try:
        where = f"reading {start.topic}[{start.partition}]"
        tp = TopicPartition(start.topic, start.partition)
        position, deadline = start.offset, time.monotonic() + timeout_s
        while position < end:
            for record in consume_available(consumer, 500, 0.2):  # a full batch of 500 would wait out the timeout
                error = record.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaClientError(where, error)
                    continue
                if (record.offset() or 0) < end:
                    yield record
            now = consumer.position([tp])[0].offset
            if now > position:
                position, deadline = now, time.monotonic() + timeout_s
            elif time.monotonic() > deadline:
                more = _open_transaction(consumer, tp, position)
                raise KafkaClientError(f"{where}: no progress past offset {position} towards {end}", None, more)
    finally:
        consumer.unassign()


def _open_transaction(consumer: Consumer, tp: TopicPartition, position: int) -> str:
    """What a read stuck at ``position`` may wait behind, when a lookup says so: a read_committed consumer's end of a
    partition is its last stable offset, where the first transaction still open begins. (A read_uncommitted one's is
    the high watermark, which is at ``position`` or below only if the log went back, a rare case the words below
    allow for.) A transaction whose writer died is aborted by the broker after its timeout; one its coordinator does
    not know (hanging) never is, and only an operator ends it."""
    try:
        stable = consumer.get_watermark_offsets(tp, timeout=5, cached=False)[1]
    except KafkaException:
        return ""  # no answer (the broker unreachable, say): the read's own error says enough
    if stable > position:
        return ""
    return (f" (the partition ends at offset {stable} for this reader: read committed, a transaction open from there "
            f"has not ended; if its writer is gone and the broker does not abort it, Kafka's kafka-transactions.sh "
            f"find-hanging lists it and abort ends it)")  # fmt: skip


class AsWritten:
    """Reads partitions up to their ends as written, their committed records only.

    The ends are the high watermarks, asked of a read_uncommitted handle (`written`): a read_committed consumer says
    the last stable offset instead, where the first transaction still open begins (its writer died mid-transaction),
    and a read up to it misses every record committed after it. The records are read by a read_committed consumer
    (`committed`), whatever ``client`` says: an aborted record is none. Past a transaction still open the read waits
    until the broker aborts it (`open_transaction_wait_s`), then raises `KafkaClientError` rather than return less.
    Close it (or use it in a ``with``) when done."""

    def __init__(self, client: Mapping[str, Any], group_id: str) -> None:
        """``group_id``: the group whose offsets `committed` may look up; neither consumer joins it, nor commits."""
        self._settings = {**client, "group.id": group_id, "enable.auto.commit": False, **READ_TO_SETTINGS}
        self.written = Consumer({**self._settings, "isolation.level": "read_uncommitted"})
        self.wait_s = open_transaction_wait_s(client)

    @functools.cached_property
    def committed(self) -> Consumer:
        """Made when first used: a caller that asks for ends only (`bounds`) reads no record."""
        return Consumer({**self._settings, "isolation.level": "read_committed"})

    def bounds(self, tp: TopicPartition, timeout_s: float = 30.0) -> tuple[int, int]:
        """The first offset of the partition and its end as written (`log_bounds`)."""
        return log_bounds(self.written, tp, timeout_s)

    def read(self, start: TopicPartition, end: int | None = None) -> Iterator[Message]:
        """The committed records of ``start``'s partition from its offset up to ``end``, or to its end as written
        now (`read_to`)."""
        yield from read_to(self.committed, start, self.bounds(start)[1] if end is None else end, self.wait_s)

    def close(self) -> None:
        if "committed" in self.__dict__:  # made (`committed`)
            self.committed.close()
        self.written.close()

    def __enter__(self) -> AsWritten:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
