"""Typed configuration, built once at the edge: defaults < TOML file < environment < command-line flags.

Every setting has one environment variable, ``ACKER_<NAME>`` (upper case), and one flag, ``--<name>`` (dashes),
both shown by ``--help``. librdkafka settings pass through untouched, so SASL/SSL and every other client option
work without code changes: ``--kafka key=value`` (repeatable), ``ACKER_KAFKA_<KEY>`` (``_`` becomes ``.``, e.g.
``ACKER_KAFKA_SASL_MECHANISM``), or a ``[kafka]`` table in the file. Values of settings whose name suggests a
secret are never printed (`ServiceConfig.redacted`).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import socket
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from acker.core.tracker import TrackerConfig
from acker.errors import ConfigError
from acker.kafka.client_log import client_logger
from acker.places import topic_name_problem

log = logging.getLogger("acker.config")

ENV_PREFIX = "ACKER_"
KAFKA_ENV_PREFIX = "ACKER_KAFKA_"
# Environment variables of ours that are not settings: librdkafka's, the Java client's (Spark), the jar cache's, the
# tests'.
_OTHER_ENV = ("kafka_", "java_kafka_", "cache_dir", "test_")
_SECRET_WORDS = ("password", "secret", "jaas", "token", "key.pem", "private", "credentials", "oauthbearer.config")
# librdkafka pauses a partition's fetching for fetch.queue.backoff.ms (1 s by default) whenever its local queue is
# over queued.min.messages or queued.max.messages.kbytes: a consumer catching up on a backlog (a service after a
# restart, a bolt behind its input) then drains its queue and waits, idle, for the rest of the second. 20 ms keeps
# the fetcher just ahead; it costs a check every 20 ms only while the queue is full.
CONSUMER_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 20}
# A spout or a bolt produces a stream: librdkafka gathers each partition's messages for linger.ms before a produce
# request. At 5 ms (librdkafka's default) each stage sent ~200 small requests a second. At 20 ms (Kafka Streams uses
# 100) the word count sent a quarter (untracked) to two fifths (tracked) as many, the broker's CPU per word fell by
# half or more, and the untracked pipeline ran a third faster (docs/benchmarks.md), for at most 15 ms more latency
# per stage.
STAGE_PRODUCER_DEFAULTS: dict[str, Any] = {"linger.ms": 20}
_MESSAGE_TIMEOUT_MAX_MS = 2**31 - 1  # librdkafka's largest message.timeout.ms
_MESSAGE_TIMEOUT_NAMES = ("message.timeout.ms", "delivery.timeout.ms")  # librdkafka's names of one setting
_LINGER_NAMES = ("linger.ms", "queue.buffering.max.ms")  # the same
# A static member's id (KIP-345), one process's own: two processes that share it fence each other out of their group.
STATIC_MEMBER_ID = "group.instance.id"
_STATIC_ID_MAX = 249  # Kafka's Java client (Spark's) refuses a longer id, and characters other than these:
_STATIC_ID_REFUSED = re.compile(r"[^A-Za-z0-9._-]")
# librdkafka settings the project reads as numbers itself (whole numbers; linger as any number): librdkafka takes
# "90000.0" or "60000abc" (it reads the number they start with), Python's int() neither, and one such value (a TOML
# float: 9e4) stopped every tool that read it with a traceback (`open_transaction_wait_s`, `fitted_batch_size`).
_WHOLE_NUMBER_SETTINGS = ("transaction.timeout.ms", "message.max.bytes", "batch.size")
_WHOLE = re.compile(r"-?(0|[1-9][0-9]*)")
_DECIMAL_NUMBER = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")  # read alike by float() and strtod
TIMEOUT_MAX_S = 30 * 86_400  # the longest timeout_s: a tree that lives longer is better failed and replayed
INTERVAL_MIN_S = 0.01  # the shortest commit_interval_s and status_interval_s
# The most buckets: every new tree is looked for among the tombstones of each bucket, one cache miss each, and every
# bucket's set is as large as the fullest (docs/benchmarks.md, "Buckets"); 32 makes expiry exact within 3.2 %.
BUCKETS_MAX = 32
# delivery.report.only.error, not a pass-through setting: the stages act on failed deliveries only, and report only
# those (the Python client still frees every message's state in poll, but calls Python for failures alone); every
# other producer of the project acts on successful ones too (the service commits its recovery offsets once its
# outcomes are delivered, `acker wordcount produce` names the records it wrote, `acker dlq redrive` those re-driven).
_ONLY_ERRORS = "delivery.report.only.error"

# librdkafka's consumer-only settings (scope "C" in its CONFIGURATION.md) that users pass to every client: a producer
# or an admin client given one ignores it with a warning (`without_consumer_settings` leaves them out).
CONSUMER_ONLY = frozenset(
    {
        "group.id", "group.instance.id", "group.protocol", "group.remote.assignor", "partition.assignment.strategy",
        "session.timeout.ms", "heartbeat.interval.ms", "coordinator.query.interval.ms", "max.poll.interval.ms",
        "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store", "auto.offset.reset",
        "queued.min.messages", "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms",
        "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes",
        "fetch.error.backoff.ms", "isolation.level", "enable.partition.eof", "check.crcs",
    }
)  # fmt: skip


def without_consumer_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` for a producer or an admin client (librdkafka makes an admin client a producer): without
    `CONSUMER_ONLY`."""
    return {k: v for k, v in settings.items() if k not in CONSUMER_ONLY}


# Settings of the classic group protocol that the new one (group.protocol=consumer, KIP-848) keeps on the broker:
# librdkafka refuses a client given any of them with it.
# Settings of confluent-kafka's Python layer that take a Python function: none can come from a file or a flag.
_PYTHON_CALLABLES = ("error_cb", "throttle_cb", "stats_cb", "oauth_cb", "on_commit", "on_delivery", "logger")
_CLASSIC_GROUP_SETTINGS = ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms")


def _new_group_protocol(settings: Mapping[str, Any]) -> bool:
    """Whether librdkafka settings choose the new group protocol (KIP-848)."""
    return str(settings.get("group.protocol", "classic")).lower() == "consumer"


def _setting(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServiceConfig:
    """Everything the acker service and its commands need. Build it with `load`."""

    bootstrap_servers: str = _setting("127.0.0.1:9092", "Kafka bootstrap servers")
    acker_topic: str = _setting("acker", "the acker topic (partitioned by anchor)")
    group: str = _setting("acker", "consumer group of the acker instances")
    outcome_prefix: str = _setting("acker.outcomes.", "outcome topic of spout S is <outcome-prefix>S")
    replay_prefix: str = _setting("acker.replay.", "replay topic of spout S (written by the replay job) is <prefix>S")
    dlq_topic: str = _setting("acker.dlq", "dead-letter topic for records the acker cannot read")
    replay_dlq_topic: str = _setting(
        "acker.replay.dlq", "dead-letter topic of records that failed every replay (written by the replay job)"
    )
    status_topic: str = _setting("acker.status", "compacted topic where instances publish per-partition status")
    partitions: int = _setting(8, "partitions of the acker topic and of the outcome topics created")
    replication_factor: int = _setting(
        -1, "replication factor of the topics created (-1: the broker's default.replication.factor)"
    )
    buckets: int = _setting(3, "timeout buckets: a tree expires on the buckets-th tick after its opening (2 to 32)")
    timeout_s: float = _setting(30.0, "message timeout T: trees expire between T and T*(1+1/(buckets-1))")
    high_water: int = _setting(0, "pending trees per partition at which new inits are nacked 'overload' (0 = off)")
    relocate_on_update: bool = _setting(False, "every update restarts a tree's timeout, not only reset-timeout")
    commit_interval_s: float = _setting(1.0, "how often each partition's recovery offset is committed")
    status_interval_s: float = _setting(2.0, "how often per-partition status is published")
    ack_linger_ms: int = _setting(
        20, "spouts and bolts gather acker messages per acker partition this long before sending a record"
    )
    tracker_threads: int = _setting(
        2, "threads of `acker run` deciding the records of its partitions in parallel when it catches up (1 = off)"
    )
    outcome_topics_per_hour: int = _setting(
        20, "outcome topics of new spout names an instance creates per hour at most (0: only spouts create theirs)"
    )
    open_transaction_warn_s: float = _setting(
        60.0, "a stage warns when a transaction open on a partition it reads has held its reads this long (0 = never)"
    )
    metrics_port: int = _setting(9400, "Prometheus metrics port (0 = off)")
    instance_id: str = _setting("", "name of this instance in status and logs (default: host:pid)")
    kafka: Mapping[str, str] = field(default_factory=dict, metadata={"help": "librdkafka settings"})

    def __repr__(self) -> str:  # secrets of the pass-through settings never show, however the object is printed
        return f"ServiceConfig({', '.join(f'{name}={value!r}' for name, value in self.redacted().items())})"

    def __post_init__(self) -> None:
        for name in ("acker_topic", "dlq_topic", "replay_dlq_topic", "status_topic", "outcome_prefix", "replay_prefix"):
            topic = getattr(self, name) + ("s" if name.endswith("_prefix") else "")  # a prefix: with a spout's name
            if (problem := topic_name_problem(topic)) is not None:
                raise ConfigError(f"{name}: {problem}")
        self._check_topics_apart()
        if not self.group.strip():  # librdkafka aborts the process on an empty group.id
            raise ConfigError("group is empty: name the acker instances' consumer group")
        if not 0 <= self.high_water < 2**63:  # before the tracker's check, which speaks of its own None
            raise ConfigError(f"high_water must be 0 (off) or more, below 2**63, got {self.high_water}")
        if not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap_servers is empty: name at least one broker, host:port")
        if not 2 <= self.buckets <= BUCKETS_MAX:  # before the tracker's check, which speaks of its own maximum
            why = (": each bucket slows every new tree down (its tombstones are looked through), and 32 make expiry "
                   "exact within 3.2 %") if self.buckets > BUCKETS_MAX else ""  # fmt: skip
            raise ConfigError(f"buckets must be between 2 and {BUCKETS_MAX}, got {self.buckets}{why}")
        self.tracker_config()  # validates the rest
        callables = sorted(set(self.kafka) & set(_PYTHON_CALLABLES))
        if callables:
            raise ConfigError(f"{', '.join(callables)}: confluent-kafka takes a Python function there, not a setting")
        if "bootstrap.servers" in self.kafka:  # `client` would put `bootstrap_servers` over it, silently
            raise ConfigError("give the bootstrap servers as bootstrap_servers, not as the librdkafka setting")
        if "group.id" in self.kafka:  # every consumer sets its own (the service's is `group`): it would be ignored
            raise ConfigError("group.id: give the acker instances' group as group; every other consumer (spouts, "
                              "bolts, the jobs) names its own")  # fmt: skip
        self._check_numbers()
        if "transactional.id" in self.kafka:  # every other producer would fail its first write ("Erroneous state")
            raise ConfigError("transactional.id: the producers that write in transactions (the replay job, coordinated "
                              "steps) set their own, one each; the others must not have one")  # fmt: skip
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be a port number (0 to 65535, 0 = off), got {self.metrics_port}")
        for name in ("timeout_s", "commit_interval_s", "status_interval_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value}")
        if not math.isfinite(self.open_transaction_warn_s) or self.open_transaction_warn_s < 0:
            raise ConfigError(f"open_transaction_warn_s must be 0 (never) or a positive number of seconds, got "
                              f"{self.open_transaction_warn_s}")  # fmt: skip
        if self.timeout_s > TIMEOUT_MAX_S:  # times are kept in milliseconds, in 64 bits
            raise ConfigError(f"timeout_s must be {TIMEOUT_MAX_S} s (30 days) at most, got {self.timeout_s}")
        if self.tick_interval_s < 0.001:
            raise ConfigError(f"timeout_s {self.timeout_s} leaves less than 1 ms between ticks")
        for name in ("commit_interval_s", "status_interval_s"):  # each a Kafka request, per turn of the loop
            if getattr(self, name) < INTERVAL_MIN_S:
                raise ConfigError(f"{name} must be {INTERVAL_MIN_S} s or more, got {getattr(self, name)}")
        if not 0 <= self.ack_linger_ms < self.timeout_s * 1000:  # held longer, every tree would time out
            raise ConfigError(f"ack_linger_ms must be 0 or more and below timeout_s ({self.timeout_s * 1000:g} ms), "
                              f"got {self.ack_linger_ms}")  # fmt: skip
        # librdkafka's NewTopic refuses more, with a traceback: partitions 1 to 100,000, replicas 1 to 10,000 (or -1:
        # the broker's default.replication.factor, KIP-464; 1, the default before, left a production cluster's acker,
        # outcome and dead-letter topics on one disk each).
        if not 1 <= self.partitions <= 100_000 or not (self.replication_factor == -1 or
                                                        1 <= self.replication_factor <= 10_000):  # fmt: skip
            raise ConfigError(
                f"partitions must be 1 to 100000 and replication_factor -1 (the broker's default) or 1 to 10000, got "
                f"{self.partitions} and {self.replication_factor}"
            )
        if self.outcome_topics_per_hour < 0:
            raise ConfigError(f"outcome_topics_per_hour must be 0 (none) or more, got {self.outcome_topics_per_hour}")
        if self.tracker_threads < 1:
            raise ConfigError(f"tracker_threads must be at least 1, got {self.tracker_threads}")
        if _new_group_protocol(self.kafka):
            classic_only = sorted(set(self.kafka) & set(_CLASSIC_GROUP_SETTINGS))
            if classic_only:  # else every client built from these settings is refused, one by one
                raise ConfigError(f"group.protocol=consumer leaves {', '.join(classic_only)} to the broker: remove it")

    def _check_numbers(self) -> None:
        """The librdkafka settings read here as numbers are numbers Python reads as librdkafka does."""
        for name in _WHOLE_NUMBER_SETTINGS:
            if name in self.kafka and not _whole(self.kafka[name]):
                raise ConfigError(f"{name} must be a whole number (as 60000), got {self.kafka[name]!r}")
        for name in _LINGER_NAMES:
            if name in self.kafka and not _number(self.kafka[name]):
                raise ConfigError(f"{name} must be a number of milliseconds (as 20 or 0.5), got {self.kafka[name]!r}")

    def _check_topics_apart(self) -> None:
        """The topics read back each of its own: the dead letters written into the acker topic (or the status
        topic) were read back as bad input and dead-lettered again, without end; one prefix for outcomes and replays
        made a spout read its outcomes as replays. Dead letters of every kind may share a topic. (A spout whose topics
        would meet these is refused by name: `acker.topics.check_spout_name`.)"""
        names = {name: getattr(self, name) for name in ("acker_topic", "status_topic", "dlq_topic", "replay_dlq_topic")}
        names |= {"the replay job's progress topic": self.replay_topic("progress"),
                  "the Spark jobs' dead-letter topic": self.outcome_topic("dlq")}  # fmt: skip
        read = {"acker_topic", "status_topic", "the replay job's progress topic"}  # read back: of their own
        for i, (name, topic) in enumerate(names.items()):
            for other, same in list(names.items())[i + 1 :]:
                if topic == same and read & {name, other}:  # dead letters may share a topic
                    raise ConfigError(f"{name} and {other} are both {topic!r}: the first must be a topic of its own")
        if self.outcome_prefix == self.replay_prefix:  # overlapping ones reserve spout names (`check_spout_name`)
            raise ConfigError(f"outcome_prefix and replay_prefix are both {self.outcome_prefix!r}: a spout's outcome "
                              "topic would be its replay topic")  # fmt: skip

    @property
    def tick_interval_s(self) -> float:
        """``T / (buckets - 1)``: with one tick per interval a pending tree lives between T and T·(1 + 1/(B−1))."""
        return self.timeout_s / (self.buckets - 1)

    @property
    def tree_lifetime_s(self) -> float:
        """The longest a pending tree lives, ``T + T / (buckets - 1)`` (`tick_interval_s`), as the acker's ticks
        count it: unless kept alive (``reset_timeout``, or an update with ``relocate_on_update``), its outcome is
        decided by then on an acker that keeps up with its ticks."""
        return self.timeout_s + self.tick_interval_s

    def failing_over_fast(self) -> ServiceConfig:
        """This configuration with a 6 s group session (heartbeats every 0.5 s), for runs that crash processes on
        purpose (the demo, ``acker wordcount run``): a dead member's partitions move after a few seconds instead of
        45, well within a tree's timeout. Settings of the user's own come first; with the new group protocol the
        broker keeps the session, and nothing changes."""
        if _new_group_protocol(self.kafka):
            return self
        return replace(self, kafka={"session.timeout.ms": "6000", "heartbeat.interval.ms": "500", **self.kafka})

    def namespaced(self, prefix: str) -> ServiceConfig:
        """This configuration with every topic and the group named under ``prefix`` (a demo, a test or a benchmark
        run of its own on a shared cluster): ``<prefix>.acker``, ``<prefix>.outcomes.<spout>``, ..."""
        return replace(
            self,
            acker_topic=f"{prefix}.acker",
            group=f"{prefix}.acker",
            outcome_prefix=f"{prefix}.outcomes.",
            replay_prefix=f"{prefix}.replay.",
            dlq_topic=f"{prefix}.acker.dlq",
            replay_dlq_topic=f"{prefix}.replay.dlq",
            status_topic=f"{prefix}.status",
        )

    def tracker_config(self) -> TrackerConfig:
        return TrackerConfig(self.buckets, self.high_water or None, self.relocate_on_update)

    def outcome_topic(self, spout: str) -> str:
        return self.outcome_prefix + spout

    def replay_topic(self, spout: str) -> str:
        return self.replay_prefix + spout

    def client(self, **overrides: Any) -> dict[str, Any]:
        """A librdkafka configuration: the pass-through settings, the bootstrap servers, then ``overrides``; and
        confluent-kafka's ``logger``, so that the client's log lines go to Python's logging, repeats held back
        (`acker.kafka.client_log`), rather than each to stderr."""
        return {**self.kafka, "bootstrap.servers": self.bootstrap_servers, "logger": client_logger(), **overrides}

    def producer(self, **overrides: Any) -> dict[str, Any]:
        """`client` for a producer: without the pass-through settings that only consumers read (`CONSUMER_ONLY`),
        which librdkafka would warn about in every producer (e.g. ``session.timeout.ms``, set for faster
        failover). Every delivery is reported (`_ONLY_ERRORS`)."""
        return {**without_consumer_settings(self.client()), **overrides, _ONLY_ERRORS: False}

    def stream_consumer(self, defaults: Mapping[str, Any] | None = None, /, **overrides: Any) -> dict[str, Any]:
        """`client` for a consumer that streams a topic (the service, spouts, bolts, steps): `CONSUMER_DEFAULTS`,
        then the caller's ``defaults``, first, so that the pass-through settings can change them.

        With Kafka's new group protocol (``group.protocol: consumer`` in the pass-through settings, KIP-848) the
        broker assigns partitions, incrementally as the cooperative assignor does; a client-side
        ``partition.assignment.strategy`` is then refused by the client, and is left out."""
        merged = {**CONSUMER_DEFAULTS, **(defaults or {}), **self.client(**overrides)}
        if _new_group_protocol(merged):
            merged.pop("partition.assignment.strategy", None)  # the callers' own (the pass-through may not hold it)
        return merged

    @staticmethod
    def incremental_assignment(consumer_settings: Mapping[str, Any]) -> bool:
        """Whether a consumer with these settings is given partitions incrementally (each assignment only adds, each
        revocation only takes away): with a cooperative assignor, or with the new group protocol. Its rebalance
        callback must then call ``incremental_assign``; the client refuses ``assign`` there."""
        strategy = str(consumer_settings.get("partition.assignment.strategy", ""))
        return _new_group_protocol(consumer_settings) or "cooperative" in strategy

    def stage_producer(self, **overrides: Any) -> dict[str, Any]:
        """`client` for the producer of a spout or a bolt: `STAGE_PRODUCER_DEFAULTS` first, so that the pass-through
        settings can change them, and idempotence always (a data message or an acker record written twice or out
        of order would cancel an edge of the XOR ledger: its tree would time out and be replayed). Failed
        deliveries alone are reported (`_ONLY_ERRORS`)."""
        return {**STAGE_PRODUCER_DEFAULTS, **self.producer(**overrides), _ONLY_ERRORS: True, "enable.idempotence": True}

    def sink_producer(self, **overrides: Any) -> dict[str, Any]:
        """`stage_producer`, reporting every delivery: for the records a bolt writes out of the pipeline, each of
        which is acked in its trees when its delivery is reported (`acker.bolt`).

        A record not delivered within the longest a tree lives untouched (`tree_lifetime_s`; 1 s at least, above
        ``linger.ms``, 24.8 days at most) is given up (``message.timeout.ms``), unless the pass-through settings give
        that setting (or ``delivery.timeout.ms``), and fails its trees: held through a broker's outage, it landed
        late, after the input's next owner (the session had expired) read what was written and went on from it (a
        word's count went back: `acker.examples.wordcount`). The cost: the acker's clock stops while the broker is
        away (its ticks stop), so a tree that waited out an outage longer than that has not timed out, nor has one
        kept alive by ``reset_timeout``, and it fails for it: its source record is replayed, where it would have
        completed. A record of an input without anchors has no tree: given up, it is lost."""
        settings = self.stage_producer(**overrides)
        if any(name in self.kafka for name in _MESSAGE_TIMEOUT_NAMES):
            return {**settings, _ONLY_ERRORS: False}
        # 1 s at least (librdkafka looks for records past their timeout once a second) and above linger.ms, which
        # librdkafka requires; at most its own most (24.8 days: a timeout_s of 30 days with 3 buckets lives 45).
        linger_ms = max((float(settings[n]) for n in _LINGER_NAMES if n in settings), default=0.0)  # either may win
        least = max(1000, math.floor(linger_ms) + 1)
        given_up = min(_MESSAGE_TIMEOUT_MAX_MS, max(least, math.ceil(1000 * self.tree_lifetime_s)))
        return {**settings, "message.timeout.ms": given_up, _ONLY_ERRORS: False}

    @property
    def static_member_id(self) -> str:
        """The processes' static member id (`STATIC_MEMBER_ID` among the librdkafka settings), "" when dynamic."""
        return str(self.kafka.get(STATIC_MEMBER_ID, ""))

    @property
    def instance(self) -> str:
        """The name of this instance in status and logs: ``instance_id``, or ``host:pid``."""
        return self.instance_id or f"{socket.gethostname()}:{os.getpid()}"

    def redacted(self) -> dict[str, Any]:
        """The configuration as a dict that is safe to log (with the instance's name, its default too)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "kafka"}
        out["instance_id"] = self.instance
        out["kafka"] = {k: ("***" if _is_secret(k) else v) for k, v in self.kafka.items()}
        return out

    def hide_secrets(self, text: str) -> str:
        """``text`` (a Kafka client's error) with each secret librdkafka setting's value, and each word of it, as
        ``***``: librdkafka quotes the part of a setting it cannot parse (``sasl.oauthbearer.config``'s, say). A value
        shorter than `_HIDDEN_WORD_MIN` is hidden only where it stands apart, not inside a word: a password ``b``
        hidden everywhere would leave ``/***ootstrap`` of the error's own words."""
        pieces = set()
        for key, value in self.kafka.items():
            if _is_secret(key) and value:
                pieces.add(value)
                pieces.update(word for word in re.split(r"[\s=,;:'\"]+", value) if len(word) >= _HIDDEN_WORD_MIN)
        for piece in sorted(pieces, key=len, reverse=True):  # the whole value before its words
            if len(piece) >= _HIDDEN_WORD_MIN:
                text = text.replace(piece, "***")
            else:
                text = re.sub(rf"(?<!\w){re.escape(piece)}(?!\w)", "***", text)
        return text


# The shortest word of a secret value hidden in a client's error (`hide_secrets`): shorter ones tell little, and
# hiding them would hide every such piece of the error's own words.
_HIDDEN_WORD_MIN = 4


def _is_secret(key: str) -> bool:
    key = key.lower()
    return any(word in key for word in _SECRET_WORDS)


def _convert(name: str, raw: object, kind: type, where: str = "") -> Any:
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(text)
        if kind is int and (isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer())):
            raise ValueError(raw)  # TOML's true or 2.7 for a count: refused, not read as 1 or 2
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise TypeError(raw)  # TOML's true for seconds, or a list or a table for a name: refused, not read
        return kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"setting {name}{where and f' (from {where})'}: cannot read {raw!r} as {kind.__name__}"
        ) from None


_TYPES: dict[str, type] = {
    f.name: {"str": str, "int": int, "float": float, "bool": bool}[str(f.type)]
    for f in fields(ServiceConfig)
    if f.name != "kafka"
}


_SETTING_FLAGS = frozenset({"--config", "--kafka", *("--" + name.replace("_", "-") for name in _TYPES)})
# How the settings show in a usage line: once, after the command's own arguments.
_SETTINGS_IN_USAGE = argparse.Action([], dest="settings", nargs="?", metavar="settings")


class _UsageWithoutSettings(argparse.HelpFormatter):
    """A usage line that names the command's own options and arguments, and the settings as one ``[settings]``: two
    dozen flags there would bury the few that are the command's. The help lists every setting in its group."""

    def add_usage(
        self, usage: str | None, actions: Iterable[argparse.Action], groups: Iterable[Any], prefix: str | None = None
    ) -> None:
        actions = list(actions)
        own = [action for action in actions if not _SETTING_FLAGS.intersection(action.option_strings)]
        if len(own) < len(actions):
            own.append(_SETTINGS_IN_USAGE)
        super().add_usage(usage, own, groups, prefix)


class _RawUsageWithoutSettings(_UsageWithoutSettings, argparse.RawDescriptionHelpFormatter):
    """The same, for a command whose description is laid out by hand."""


# The settings a process of a bolt, and of a spout, reads: the only ones the help of a command running one lists.
# The deployment's topics among them: neither writes to those (`acker.topics.output_refusal`).
BOLT_SETTINGS = (
    "bootstrap_servers",
    "acker_topic",
    "ack_linger_ms",
    "timeout_s",
    "buckets",
    "open_transaction_warn_s",
    "outcome_prefix",
    "replay_prefix",
    "dlq_topic",
    "replay_dlq_topic",
    "status_topic",
)
SPOUT_SETTINGS = (*BOLT_SETTINGS, "partitions", "replication_factor")


def add_arguments(parser: argparse.ArgumentParser, shown: Iterable[str] | None = None) -> None:
    """Add ``--config``, one flag per setting (its help names its environment variable) and ``--kafka``, in a group
    of their own, after the command's own options (every command takes them all, so that one list of settings serves
    every command; most concern `acker run`). ``shown``: the settings the command uses, the only ones its help lists
    (None: all). The parser's usage line shows them as one ``[settings]``: its formatter becomes the plain one, or
    the one for descriptions laid out by hand if it was that (no command uses another)."""
    given = parser.formatter_class
    raw = isinstance(given, type) and issubclass(given, argparse.RawDescriptionHelpFormatter)
    parser.formatter_class = _RawUsageWithoutSettings if raw else _UsageWithoutSettings
    listed = None if shown is None else set(shown)
    about = "shared by every command, each also from --config FILE or its environment variable"
    if listed is not None:  # two dozen settings of the service buried the few a command such as status reads
        about += (
            "; those this command uses are listed (it takes the others of acker run --help too, and checks them: "
            "a value no command could run with stops it, but it does not use them)"
        )
    group = parser.add_argument_group("settings", about)
    group.add_argument("--config", metavar="FILE", help=f"TOML configuration file [env: {ENV_PREFIX}CONFIG]")
    for f in fields(ServiceConfig):
        if f.name == "kafka":
            continue
        flag = "--" + f.name.replace("_", "-")
        env = ENV_PREFIX + f.name.upper()
        text = f"{f.metadata['help']} [env: {env}; default: {f.default!r}]"
        if listed is not None and f.name not in listed:
            text = argparse.SUPPRESS
        if _TYPES[f.name] is bool:
            group.add_argument(flag, dest=f.name, default=None, action=argparse.BooleanOptionalAction, help=text)
        else:
            group.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=text)
    group.add_argument(
        "--kafka",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a librdkafka setting, repeatable (e.g. security.protocol=SASL_SSL) [env: {KAFKA_ENV_PREFIX}<KEY>]",
    )


def load(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> ServiceConfig:
    """Build the configuration from the file, the environment and parsed flags, in rising precedence."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}  # setting -> where its value comes from, for the errors about it
    kafka: dict[str, str] = {}

    def layer(own: dict[str, Any], librdkafka: dict[str, str], where: str) -> None:
        """Take one source's settings over the ones below it. ``bootstrap.servers`` among its librdkafka settings
        is librdkafka's name for a setting of ours, and taken as ours at this source's precedence."""
        if "bootstrap.servers" in librdkafka:
            given = librdkafka.pop("bootstrap.servers")
            if own.setdefault("bootstrap_servers", given) != given:
                raise ConfigError(f"bootstrap servers given twice in {where}: as bootstrap_servers and as the setting")
        for name, value in [*own.items(), *librdkafka.items()]:
            _check_text(name, value, where)
        values.update(own)
        origins.update(dict.fromkeys(own, where))
        kafka.update(librdkafka)

    given_path = getattr(args, "config", None) if args else None
    path = given_path if given_path is not None else environ.get(ENV_PREFIX + "CONFIG")  # --config "": no file
    if path:
        try:
            document = tomllib.loads(Path(path).read_text("utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read configuration file {path}: {error}") from None
        table = document.pop("kafka", {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"kafka in {path} must be a table of librdkafka settings ([kafka])")
        unknown = [key for key in document if key.replace("-", "_") not in _TYPES]
        if unknown:
            raise ConfigError(f"unknown setting {unknown[0]!r} in {path}")
        spelt = [key.replace("-", "_") for key in document]
        if twice := sorted({key for key in spelt if spelt.count(key) > 1}):  # one of them would be taken, unsaid
            raise ConfigError(f"setting {twice[0]} given twice in {path} (with '_' and with '-')")
        layer({key.replace("-", "_"): value for key, value in document.items()}, _flat(table), str(path))
    # ACKER_KAFKA_* never names a setting of _TYPES ("kafka" is not one)
    from_env = {key[len(ENV_PREFIX) :].lower(): value for key, value in environ.items() if key.startswith(ENV_PREFIX)}
    strays = sorted(k for k in from_env if k not in _TYPES and not k.startswith(_OTHER_ENV) and k != "config")
    if strays:  # a misspelt name would be ignored without a word: the default taken instead, or no password given
        log.warning("ignored: %s (no such setting; librdkafka's go in %s<NAME>)",
                    ", ".join(ENV_PREFIX + k.upper() for k in strays), KAFKA_ENV_PREFIX)  # fmt: skip
    layer(
        {k: v for k, v in from_env.items() if k in _TYPES}, env_settings(KAFKA_ENV_PREFIX, environ), "the environment"
    )
    if args is not None:
        flags = {name: getattr(args, name) for name in _TYPES if getattr(args, name, None) is not None}
        given = dict(flag_setting(item, "--kafka") for item in getattr(args, "kafka", None) or [])
        layer(flags, given, "the flags")
    typed = {name: _convert(name, value, _TYPES[name], origins[name]) for name, value in values.items()}
    try:
        return replace(ServiceConfig(), **typed, kafka=kafka)
    except ConfigError as error:  # said with where the values came from, as a value that cannot be read is
        raise ConfigError(_with_origins(str(error), origins)) from None


def _with_origins(said: str, origins: Mapping[str, str]) -> str:
    """``said`` of a setting that begins it (``buckets must be ...``, not a librdkafka setting such as ``group.id``),
    with where it came from, and where each other setting it names came from when that differs: only the settings
    given (``origins``), not those left at their defaults."""

    def named(name: str) -> re.Pattern[str]:
        return re.compile(rf"(?<![\w.]){re.escape(name)}(?![\w.])")

    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", said)  # a value quoted may hold a setting's name: it names none
    if not any(named(name).match(unquoted) for name in _TYPES):
        return said
    sources = {name: origins[name] for name in origins if named(name).search(unquoted)}
    if not sources:
        return said
    if len(set(sources.values())) == 1:
        return f"{said} (from {next(iter(sources.values()))})"
    return f"{said} ({', '.join(f'{name} from {where}' for name, where in sources.items())})"


def _check_text(name: str, value: object, where: str) -> None:
    """`ConfigError` for a name or value that is not text UTF-8 can carry: a byte the locale could not decode (an
    environment variable or an argument in Latin-1), which Python keeps as a lone surrogate. Passed on, librdkafka's
    client could not take it: a stack trace, or the process aborted. The value is not shown: it may be a secret."""
    if not (is_text(name) and (not isinstance(value, str) or is_text(value))):
        shown = name.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise ConfigError(f"setting {shown} (from {where}): not UTF-8 text (a byte the locale could not decode); "
                          "the value is not shown")  # fmt: skip


def is_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: not when it holds a byte the locale could not decode (kept by Python as a
    lone surrogate), which a Kafka client cannot take."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def env_settings(prefix: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Dotted settings given as environment variables ``<prefix><NAME>``: ``ACKER_KAFKA_SASL_MECHANISM`` is
    ``sasl.mechanism`` (lower-cased, ``_`` for ``.``; librdkafka's and Java's Kafka names have no ``_``)."""
    return {
        key[len(prefix) :].lower().replace("_", "."): value for key, value in environ.items() if key.startswith(prefix)
    }


def flag_setting(item: str, flag: str, form: str = "KEY=VALUE", *, empty: bool = True) -> tuple[str, str]:
    """``NAME=VALUE`` given to a repeatable ``flag``; an empty value only where ``empty`` allows it."""
    name, sep, value = item.partition("=")
    name = name.strip()
    if not sep:  # nothing of it is repeated: it may be a secret, a name mistyped into it or alone (`--kafka "$PW"`)
        raise ConfigError(f"{flag} takes {form}, got something without '='")
    if not name or not (value or empty):
        # Only what looks like a setting's name is repeated, never the value.
        shown = re.split(r"[^\w.-]", name, maxsplit=1)[0]
        raise ConfigError(f"{flag} takes {form}, got {shown + '=...' if shown else 'no name'}")
    return name, value


def _whole(value: object) -> bool:
    """Whether ``value`` (a setting, text or a number) is a whole number in plain decimal: read alike by ``int`` and
    by librdkafka (C's strtol, which would read "010" as 8 and stop "60_000" at 60)."""
    return _WHOLE.fullmatch(str(value).strip()) is not None


def _number(value: object) -> bool:
    """Whether ``value`` (a setting, text or a number) is a finite number of 0 or more, written as ``float`` and
    librdkafka (C's strtod) read it alike ("5_0" is 50 to one, 5 to the other)."""
    text = str(value).strip()
    return _DECIMAL_NUMBER.fullmatch(text) is not None and math.isfinite(float(text))


def _flat(table: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A ``[kafka]`` table as librdkafka settings: TOML reads an unquoted ``sasl.password = ...`` as a nested table
    (``sasl`` → ``password``), which is joined back into the dotted name."""
    out: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, name + "."))
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[name] = str(value)
        else:  # a list, a date: Python's text of it is no setting's (the value is not shown: it may be a secret)
            raise ConfigError(f"[kafka] {name}: a string, a number or true/false, not a {type(value).__name__}")
    return out


def child_environment(own: Mapping[str, str], *, settings_given_only: bool = False) -> dict[str, str]:
    """This process's environment for a child given `to_argv`'s flags, with ``own`` (`to_argv`'s environment) over
    it: never ``ACKER_CONFIG``, since the flags say every setting, read perhaps from another file (``--config``),
    and that file would add its own; with ``settings_given_only``, none of the ``ACKER_*`` variables at all."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if k != f"{ENV_PREFIX}CONFIG" and not (settings_given_only and k.startswith(ENV_PREFIX))
    }
    return {**inherited, **own}


def kafka_env_name(key: str) -> str:
    """The environment variable that gives librdkafka setting ``key`` (``ACKER_KAFKA_<KEY>``, dots as "_")."""
    return KAFKA_ENV_PREFIX + key.upper().replace(".", "_")


def own_static_id(shared: str, name: str) -> str:
    """The static member id of a process named ``name`` among several started with the id ``shared``: ``shared-name``,
    a character the Java client refuses in an id made "-" (a step's name has a space), cut to its most."""
    return _STATIC_ID_REFUSED.sub("-", f"{shared}-{name}")[:_STATIC_ID_MAX]


def to_argv(config: ServiceConfig) -> tuple[list[str], dict[str, str]]:
    """Flags and environment that `load` turns back into ``config``, for starting a child process.

    librdkafka settings go to the environment (``ACKER_KAFKA_*``), not the command line, where other users of the
    machine could read secrets in the process list. The child must not read a configuration file besides
    (``ACKER_CONFIG``): these say everything (`child_environment` leaves it out).
    """
    argv: list[str] = []
    for f in fields(ServiceConfig):
        if f.name == "kafka":
            continue
        flag, value = "--" + f.name.replace("_", "-"), getattr(config, f.name)
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv.append(f"{flag}={value}")  # one word: a value that begins with "-" (a topic "-x") is not a flag
    env = {kafka_env_name(key): value for key, value in config.kafka.items()}
    return argv, env
