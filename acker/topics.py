"""The topics of an acker deployment, as made by `acker topics create` and, where they are missing, by the service.

- the acker topic: ``partitions`` partitions (a tree lives on ``partition_of(anchor)``);
- one outcome topic per spout, with as many partitions (every outcome record of an acker partition goes to one);
- the dead-letter topic, 1 partition;
- the status topic, 1 partition, compacted (the last status of each acker partition, keyed by it);
- the Spark jobs' own (`spark_job_topics`): their dead letters and the replay job's progress, 1 partition each.

The service creates the dead-letter and status topics when it starts and an outcome topic before its first record,
unless they exist: a cluster may not create topics on first use, and a record that cannot be delivered holds every
flush (on a revoke, on stop) for its whole 30 s, after which the commit is skipped. A status topic it can neither
find nor create (no right to) means no status is published until it exists (the service looks for it again every
ten status intervals).

`create_and_report` makes topics for a command and prints a line for each (`acker topics create`, `acker wordcount
topics`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from acker.config import ServiceConfig
from acker.errors import AckerError, ConfigError
from acker.kafka.clients import (
    UNANSWERED,
    KafkaClientError,
    TopicsNotCreatedError,
    TopicSpec,
    answering,
    broker_config,
    create_topics,
    partition_count,
    replication_factors,
    topic_config,
)
from acker.places import TOPIC_NAME_MAX, topic_name_problem
from acker.wire import SpoutNames, name_refusal


def check_spout_name(config: ServiceConfig, name: str) -> None:
    """`ConfigError` unless ``name`` can name the spout's topics without meeting another topic of the acker's
    (`spout_refusal`)."""
    why = spout_refusal(config, name)
    if why is not None:
        raise ConfigError(why)


def spout_refusal(config: ServiceConfig, name: str) -> str | None:
    """Why ``name`` cannot name a spout under ``config``, None when it can: the acker cannot answer its trees
    (`outcome_refusal`), or its replays would be mixed with dead letters, progress records or another spout's
    outcomes."""
    why = outcome_refusal(config, name)
    if why is not None:
        return why
    own = {config.outcome_topic(name), config.replay_topic(name)}
    if config.replay_topic(name) in _own_topics(config):
        return f"spout name {name!r} is reserved: its topics {sorted(own)} would meet the acker's own"
    # Prefixes where one begins the other ("acker." and "acker.replay."): spout "replay.x"'s outcome topic would be
    # spout "x"'s replay topic, each read as the other. The name that holds the rest of the longer prefix is refused.
    shorter, longer = sorted((config.outcome_prefix, config.replay_prefix), key=len)
    if len(shorter) < len(longer) and (shorter + name).startswith(longer):
        return (f"spout name {name!r} is reserved: its topics {sorted(own)} are named like another spout's "
                "(outcome_prefix and replay_prefix overlap)")  # fmt: skip
    return _name_problem(name, config.replay_topic(name))


def outcome_refusal(config: ServiceConfig, name: str) -> str | None:
    """Why the acker cannot publish the outcomes of spout ``name`` under ``config``, None when it can: a name that
    cannot name a topic or is reserved (`acker.wire.name_refusal`), or whose outcome topic would be one of the
    deployment's own (with ``outcome_prefix`` ``acker.``, spout ``status``'s outcomes would be written among the
    status records) or too long a name for Kafka. The service refuses an acker record naming one
    (`acker.wire.check_block`, ``bad-spout``), as a spout refuses the name (`check_spout_name`)."""
    why = name_refusal(name)
    if why is not None:
        return f"spout name {why.removeprefix('spout ')}"
    topic = config.outcome_topic(name)
    if topic in _own_topics(config):
        own = sorted({topic, config.replay_topic(name)})
        return f"spout name {name!r} is reserved: its topics {own} would meet the acker's own"
    return _name_problem(name, topic)


def _name_problem(name: str, topic: str) -> str | None:
    """Why Kafka would refuse ``topic``, spout ``name``'s, or None."""
    if len(topic) > TOPIC_NAME_MAX:
        return f"spout name {name[:80]!r} is too long: its topics' names would pass Kafka's 249 characters"
    problem = topic_name_problem(topic)  # "." or ".." (prefix "" or ".")
    return None if problem is None else f"spout name {name[:80]!r}: its topic {problem}"


def _own_topics(config: ServiceConfig) -> set[str]:
    """The topics of the deployment that are no spout's: the acker's, and the Spark jobs' (`spark_job_topics`)."""
    return {
        config.acker_topic,
        config.dlq_topic,
        config.status_topic,
        *(spec.name for spec in spark_job_topics(config)),
    }


def output_refusal(config: ServiceConfig, topic: str) -> str | None:
    """Why a spout's or bolt's function may not emit or write to ``topic``, None when it may: a topic of the
    acker's (`_own_topics`), or one under the outcome or replay prefix where that ends in a separator (``.``, ``-``
    or ``_``, as the defaults do; one that does not, ``o``, names no topics apart: ``orders`` could be any). A copy
    written into a replay topic was read back by its spout as a new record, without the origin the replay job gives
    each one: an emit function that named its output after ``record.topic()`` wrote each replayed copy back into
    the replay topic, and its spout read its own copies, without end. (A spout refuses its own replay and outcome
    topics by name, whatever the prefixes: `acker.spout`.)"""
    if topic in _own_topics(config):
        return "it is one of the acker's own topics"
    if _separated(config.replay_prefix) and topic.startswith(config.replay_prefix):
        return (f"it is a replay topic ({config.replay_prefix}<spout>), written by the replay job alone: its spout "
                "would read the record as a new one of its own")  # fmt: skip
    if _separated(config.outcome_prefix) and topic.startswith(config.outcome_prefix):
        return f"it is an outcome topic ({config.outcome_prefix}<spout>), written by the acker alone"
    return None


def _separated(prefix: str) -> bool:
    return prefix[-1:] in (".", "-", "_")


def spout_names(config: ServiceConfig) -> SpoutNames:
    """The spouts whose trees the service answers under ``config`` (`outcome_refusal`)."""
    return SpoutNames(functools.partial(outcome_refusal, config))


def outcome_topic(config: ServiceConfig, spout: str) -> TopicSpec:
    return TopicSpec(config.outcome_topic(spout), config.partitions, config.replication_factor)


def service_topics(config: ServiceConfig) -> list[TopicSpec]:
    """The topics the service writes besides the outcome topics: dead letters and status."""
    return [
        TopicSpec(config.dlq_topic, 1, config.replication_factor),
        TopicSpec(
            config.status_topic, 1, config.replication_factor, {"cleanup.policy": "compact", "segment.ms": "60000"}
        ),
    ]


# The replay job's progress: a record per micro-batch, keyed by job; compacted, so that reading it to the end at a
# start stays short.
PROGRESS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(3_600_000)}


def spark_job_topics(config: ServiceConfig) -> list[TopicSpec]:
    """The Spark jobs' own topics, 1 partition each: malformed outcome records (the commit job's, and the replay
    job's with ``--dead-letter-malformed``: ``<outcome_prefix>dlq``),
    the replay job's dead letters and its progress (``<replay_prefix>progress``). Made by `acker topics create`, and
    by ``acker spark`` when missing: a cluster that does not create topics on first use stopped a job at its first
    malformed outcome record, and at every start after."""
    factor = config.replication_factor
    return [
        TopicSpec(config.outcome_topic("dlq"), 1, factor),
        TopicSpec(config.replay_dlq_topic, 1, factor),
        TopicSpec(config.replay_topic("progress"), 1, factor, PROGRESS_TOPIC_CONFIG),
    ]


def all_topics(config: ServiceConfig, spouts: Sequence[str]) -> list[TopicSpec]:
    """Every topic of the deployment, for the spouts named (`ConfigError` for a name a spout would refuse), each
    once."""
    spouts = list(dict.fromkeys(spouts))
    for spout in spouts:
        check_spout_name(config, spout)
    return [
        TopicSpec(config.acker_topic, config.partitions, config.replication_factor),
        *service_topics(config),
        *(outcome_topic(config, spout) for spout in spouts),
        *spark_job_topics(config),
    ]


def create_and_report(config: ServiceConfig, specs: Sequence[TopicSpec], *, report: bool = True) -> None:
    """Create the topics of ``specs`` that do not exist, and print a line for each (unless not ``report``): created,
    not created and why, or existing with its own partition count and what differs from what was asked for
    (partitions, replication factor, settings: left as it is). When one could not be made (the others were): after
    the lines, an `AckerError` that names those not made, each with its cause's short name (said whole in its line);
    not ``report``, the `TopicsNotCreatedError` with the causes."""
    # Asked first whether Kafka answers at all, as the other commands are: unanswered, each creation failed after
    # 30 s with librdkafka's "Failed while waiting for controller", which sends the reader to the controller.
    answering(config.client(), config.acker_topic)
    failure: TopicsNotCreatedError | None = None
    try:
        created = set(create_topics(config.client(), specs))
    except TopicsNotCreatedError as error:  # the others were made (or existed): say which, then fail
        failure, created = error, set(error.created)
    default = functools.cache(lambda: _default_replication(config))  # asked once, if a topic exists
    for spec in specs if report else ():
        if spec.name in created:
            print(f"{spec.name}\t{spec.partitions} partition(s)\tcreated")
        elif failure is not None and spec.name in failure.failed:
            cause = failure.failed[spec.name]
            print(f"{spec.name}\t-\tnot created: {cause.str() if cause is not None else UNANSWERED}")
        else:
            count = partition_count(config.client(), spec.name)  # its own, whatever --partitions says
            differs = [f"not {spec.partitions}"] if count != spec.partitions else []
            differs += _replication_difference(config, spec, default) + _config_differences(config, spec)
            left = f" ({', '.join(differs)}: an existing topic is left as it is)" if differs else ""
            print(f"{spec.name}\t{count} partition(s)\texists{left}")
    if failure is not None and report:
        # each with its cause's short name too: a log of stderr alone (stdout discarded) still says which failure
        named = (
            f"{name} ({cause.name() if cause is not None else UNANSWERED})" for name, cause in failure.failed.items()
        )
        raise AckerError(f"not created: {', '.join(named)}: each one's line on stdout says why")
    if failure is not None:
        raise failure


def _replication_difference(config: ServiceConfig, spec: TopicSpec, default: Callable[[], int | None]) -> list[str]:
    """How an existing topic's replication factor differs from the one ``spec`` asks for (none asked for: the
    broker's ``default.replication.factor``, ``default()``, None when it does not say): topics made with one replica,
    under an older default or a test's settings, lose their records with one disk."""
    asked = spec.replication_factor if spec.replication_factor != -1 else default()
    if asked is None:
        return []
    try:
        factors = replication_factors(config.client(), spec.name)
    except KafkaClientError as error:
        return [f"its replication factor not read: {error}"]
    if factors == [asked]:
        return []
    found = f"{factors[0]} to {factors[-1]}" if len(factors) > 1 else str(factors[0])
    return [f"replication factor {found}, not {asked}{'' if spec.replication_factor != -1 else ' (the default)'}"]


def _default_replication(config: ServiceConfig) -> int | None:
    """The cluster's ``default.replication.factor`` as a broker says it; None when it does not (no right to describe
    it, say): then the factor of a topic made with the default is not compared."""
    try:
        return int(broker_config(config.client())["default.replication.factor"])
    except (KafkaClientError, KeyError, ValueError):
        return None


def _config_differences(config: ServiceConfig, spec: TopicSpec) -> list[str]:
    """How an existing topic's settings differ from those ``spec`` asks for: a status topic that is not compacted
    grows with every status published, and `acker status` reads it all."""
    if not spec.config:
        return []
    try:
        found = topic_config(config.client(), spec.name)
    except KafkaClientError as error:
        return [f"its settings not read: {error}"]
    return [
        f"{name} {found.get(name)!r}, not {want!r}" for name, want in spec.config.items() if found.get(name) != want
    ]
