"""`acker status`: per partition, what the instances last published and how far the group lags.

Each instance publishes a JSON status per owned partition to the compacted status topic every few seconds, keyed
by group, acker topic and partition (`status_key`); this reads the topic to its end, keeps the newest per partition
of the group asked about, and adds the lag of the group's committed (recovery) offsets, as standard Kafka tooling
would show it.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from acker.config import ServiceConfig
from acker.kafka.clients import kafka_error, topic_partitions

log = logging.getLogger("acker.status")


# A look that changes nothing: a topic looked up must not be created (with the broker's defaults) by a pass-through
# ``allow.auto.create.topics=true``, nor the group's offsets committed.
_FLOAT_MAX = int(sys.float_info.max)  # the largest integer a status's number may be: a float holds it
_LOOKING = {"enable.auto.commit": False, "allow.auto.create.topics": False}


def status_key(group: str, acker_topic: str, partition: int) -> bytes:
    """The key of a partition's status records. With the group in it, two groups publishing for one acker topic
    (each deciding its trees: a misconfiguration `acker status` points out) do not replace each other's statuses
    when the topic is compacted. Keys of earlier versions (``topic/partition``) stay behind, at lower offsets."""
    return f"{group}/{acker_topic}/{partition}".encode()


def read_status(config: ServiceConfig, timeout_s: float = 10.0) -> dict[int, dict[str, Any]]:
    """The newest status of every partition of the acker topic (empty when none was published): the status topic
    read to its end (as it was when the read began), for as long as the read goes on (a topic not compacted holds
    millions of records), and given up, said, after ``timeout_s`` without progress (the statuses shown may then be
    older than the newest)."""
    consumer = Consumer(config.client(**{"group.id": f"acker-status-{uuid.uuid4()}", **_LOOKING}))
    latest: dict[int, dict[str, Any]] = {}
    other_groups: set[str] = set()
    try:
        try:
            found = topic_partitions(consumer, config.status_topic, timeout_s)
        except KafkaException as error:  # e.g. not allowed to read it: the lag can still be shown
            log.warning("cannot read the status topic: %s", _text(error))
            return latest
        if not found:  # a status topic misspelt, or no service ever started: an empty table would not say which
            log.warning("status topic %s not found: no acker instance publishes there (is it the services' "
                        "--status-topic?)", config.status_topic)  # fmt: skip
            return latest
        ends = {p: end for p, end in end_offsets(consumer, config.status_topic, found, timeout_s).items()
                if end is not None}  # fmt: skip
        # From the first record there is, not offset 0: retention or a deletion may have moved it past 0, and a
        # position out of range would be reset to the end (every status unread, every row shown as "-").
        parts = [TopicPartition(config.status_topic, p, OFFSET_BEGINNING) for p in ends]
        consumer.assign(parts)
        remaining = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        moved_to: dict[int, int] = {}  # partition -> its position when it last moved
        read_at: dict[int, tuple[int | None, Any]] = {}  # acker partition -> (status partition, time) of its status
        while remaining and time.monotonic() < deadline:
            for record in consumer.consume(500, timeout=0.2):
                if record.error() is not None:
                    continue
                status = _status(record.value())
                if status is None or status.get("topic") != config.acker_topic:
                    continue
                group = status.get("group")
                if group is None or group == config.group:  # None: written before statuses named their group
                    at = (record.partition(), status.get("time"))
                    if _newer(at, read_at.get(status["partition"])):
                        latest[status["partition"]], read_at[status["partition"]] = status, at
                else:
                    other_groups.add(str(group))
            # Progress is a position still short of its end that moves: records of other partitions do not count
            # (another instance's statuses come every few seconds), and a position reaches an end that no record
            # does (one ending with a transaction marker). A partition emptied by retention has no position: its
            # first offset, as its last fetch said, is its end.
            for tp in consumer.position([TopicPartition(config.status_topic, p) for p in remaining]):
                if tp.offset < 0:
                    tp.offset = consumer.get_watermark_offsets(tp, cached=True)[0]
                if tp.offset >= ends[tp.partition]:
                    remaining.discard(tp.partition)
                elif tp.offset > moved_to.get(tp.partition, -1):
                    moved_to[tp.partition], deadline = tp.offset, time.monotonic() + timeout_s
        if remaining:
            log.warning("status topic %s not read to its end (partitions %s: nothing more came within %g s): the "
                        "statuses shown may be older than the newest", config.status_topic,
                        ", ".join(map(str, sorted(remaining))), timeout_s)  # fmt: skip
    finally:
        consumer.close()
    if other_groups and not latest:  # shown as this group's, they would sit beside its committed offsets
        log.warning("the status of %s is published by group %s, not %s: is --group right?", config.acker_topic,
                    ", ".join(sorted(other_groups)), config.group)  # fmt: skip
    return latest


def end_offsets(consumer: Consumer, topic: str, partitions: list[int], timeout_s: float) -> dict[int, int | None]:
    """The end offset of each of ``partitions``, all asked within ``timeout_s``: None, said, for one Kafka cannot
    tell now (no leader: not asked), or did not tell in its share of the time; the other partitions are still shown.
    One timeout for all: asked one by one with a timeout each, a broker down that led 24 partitions kept the command
    silent for 24 timeouts. Each partition waits at most its share of the time left (a tenth of the whole, at
    least): one whose leader does not answer does not leave the partitions after it no time."""
    deadline = time.monotonic() + timeout_s
    try:
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        leaders = {p: meta.leader for p, meta in found.partitions.items()} if found is not None else {}
    except KafkaException:  # each asked, then, in the time left
        leaders = dict.fromkeys(partitions, 0)
    ends: dict[int, int | None] = {}
    for i, partition in enumerate(partitions):
        ends[partition] = None
        left = deadline - time.monotonic()
        if leaders.get(partition, -1) < 0 or left <= 0:
            log.warning("%s[%d]: no end offset (%s)", topic, partition,
                        "no leader now" if left > 0 else f"no answer within {timeout_s:g} s")  # fmt: skip
            continue
        share = min(left, max(left / (len(partitions) - i), timeout_s / 10))
        try:
            ends[partition] = int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=share)[1])
        except KafkaException as error:
            log.warning("%s[%d]: no end offset (%s)", topic, partition, _text(error))
    return ends


def _newer(status: tuple[int | None, Any], than: tuple[int | None, Any] | None) -> bool:
    """Whether a status read at ``status`` (its status-topic partition, its time) is newer than the one read at
    ``than`` (None: none read yet). Of one status partition, the one read later, as written (no clocks compared);
    across two, the one of the later time when both say one: a status of an older version, keyed otherwise (no
    group), may lie in another status partition and be read after the current one, which compaction never removes."""
    if than is None or status[0] == than[0]:
        return True
    at, before = status[1], than[1]
    return not (_number(at) and _number(before)) or at >= before


def _status(value: bytes | None) -> dict[str, Any] | None:
    """A status record's JSON object; None for anything else (a record this version does not understand). Fields
    of another shape than this version writes are left out."""
    try:
        status = json.loads(value or b"", parse_constant=lambda _constant: None)  # NaN, Infinity: no number
    except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
        return None
    if not isinstance(status, dict):
        return None
    # Numbers a float holds: JSON has integers of any size, and one larger than a float (another writer's "time" of
    # 400 digits) overflowed the arithmetic with the times and stopped `acker status` for every partition.
    status = {k: v for k, v in status.items() if type(v) not in (int, float) or _number(v)}
    if type(status.get("partition")) is not int:
        return None
    for field in ("pending", "lag"):  # shown in the table as numbers (None: none yet): text there could hold a
        if status.get(field) is not None and not _number(status[field]):  # terminal's escape sequences
            del status[field]
    for field in ("rates", "counters"):  # summed and shown per kind: numbers only
        values = status.get(field, {})
        status[field] = {k: v for k, v in values.items() if _number(v)} if isinstance(values, dict) else {}
    return status


def _number(value: object) -> bool:
    """A finite float (JSON's ``NaN`` and ``Infinity``, which Python reads, are not: a status of time ``NaN`` was
    current for ever, and ``acker status --json`` wrote them, which no JSON reader takes), or an integer a float
    holds."""
    return (type(value) is float and math.isfinite(value)) or (type(value) is int and abs(value) <= _FLOAT_MAX)


def group_lag(config: ServiceConfig, timeout_s: float = 10.0) -> dict[int, tuple[int | None, int | None]] | None:
    """Per acker partition: (committed recovery offset, end offset), each None when there is none or Kafka cannot
    tell now; None when there is no acker topic."""
    consumer = Consumer(config.client(**{"group.id": config.group, **_LOOKING}))
    try:
        parts = [
            TopicPartition(config.acker_topic, p) for p in topic_partitions(consumer, config.acker_topic, timeout_s)
        ]
        if not parts:
            return None
        committed = consumer.committed(parts, timeout=timeout_s)
        ends = end_offsets(consumer, config.acker_topic, [tp.partition for tp in committed], timeout_s)
        return {tp.partition: (tp.offset if tp.offset >= 0 and tp.error is None else None, ends[tp.partition])
                for tp in committed}  # fmt: skip
    finally:
        consumer.close()


def _text(error: KafkaException) -> str:
    """What librdkafka says, not the error object's fields (``KafkaError{code=_TRANSPORT,val=-195,str=...}``)."""
    cause = kafka_error(error)
    return cause.str() if cause is not None else str(error)
