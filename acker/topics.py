"""The topics of an acker deployment, as made by `acker topics create` and, where they are missing, by the service.

- the acker topic: ``partitions`` partitions (a tree lives on ``partition_of(anchor)``);
- one outcome topic per spout, with as many partitions (every outcome record of an acker partition goes to one);
- the dead-letter topic, 1 partition;
- the status topic, 1 partition, compacted (the last status of each acker partition, keyed by it).

The service creates the dead-letter and status topics when it starts and an outcome topic before its first record,
unless they exist: a cluster may not create topics on first use, and a record that cannot be delivered holds every
flush (on a revoke, on stop) for its whole 30 s, after which the commit is skipped. A status topic it can neither
find nor create (no right to) means no status is published until it exists (the service looks for it again every
ten status intervals).
"""

from __future__ import annotations

from collections.abc import Iterable

from acker.config import ServiceConfig
from acker.kafka.clients import TopicSpec


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


def all_topics(config: ServiceConfig, spouts: Iterable[str]) -> list[TopicSpec]:
    """Every topic of the deployment, for the spouts named."""
    return [
        TopicSpec(config.acker_topic, config.partitions, config.replication_factor),
        *service_topics(config),
        *(outcome_topic(config, spout) for spout in spouts),
    ]
