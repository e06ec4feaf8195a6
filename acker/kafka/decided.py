"""Reading back what a previous owner of an acker partition decided after the offset a replay starts from."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from confluent_kafka import Consumer, KafkaException, TopicPartition

from acker.kafka.clients import KafkaClientError, log_bounds, read_to
from acker.kafka.lookups import confirmed_absent
from acker.outcome_log import OutcomeLog, Starts
from acker.wire import WireError, decode_outcome_anchors

log = logging.getLogger("acker.decided")


@dataclass(frozen=True)
class Decided:
    anchors: np.ndarray  # int64: the trees decided
    # The acker offsets the outcome records read name (each, the acker record that decided its last outcome): the
    # lowest and the highest (-1: none). A new owner reading back from an offset at or below ``since`` is told of all.
    since: int
    until: int
    log: OutcomeLog  # the records read, as the new owner's own log: its commits must cover them too
    unread: tuple[str, ...] = ()  # the outcome topics that could not be read (not at all, or not to their end)


def _bounds(consumer: Consumer, topic: str, partition: int, gone: set[tuple[str, int | None]]) -> tuple[int, int]:
    """The bounds of a partition; (0, 0) when the topic or the partition no longer exists (a retired spout's topic
    deleted), rather than `log_bounds`'s wait for a leader. Missing as `confirmed_absent` confirms it: one broker's
    metadata may lag behind a topic just made (by the previous owner, moments before a handover), and on one answer
    its trees were decided again; a partition without a leader for a moment (an election) is there, and waited for.
    What is confirmed missing goes into ``gone`` (the topic, with partition None, when it has no partitions at all),
    which answers at once after that: the commits of every acker partition name a retired spout's topic, and a
    handover of many waited a second for each."""
    if (topic, None) in gone or (topic, partition) in gone:
        return 0, 0
    absent = confirmed_absent(consumer, topic, partition)
    if absent is None:
        return log_bounds(consumer, TopicPartition(topic, partition))
    gone.add((topic, partition if absent == "partition" else None))
    log.warning("%s[%d] does not exist (any more): nothing to read back there", topic, partition)
    return 0, 0


class _Found(NamedTuple):
    """An outcome record of this acker partition, read back."""

    topic: str
    partition: int
    offset: int
    acker_offset: int  # of the acker record that decided it
    anchors: np.ndarray


def read_decided(
    consumer: Consumer, acker: TopicPartition, starts: Starts, gone: set[tuple[str, int | None]] | None = None
) -> Decided:
    """The outcomes published for the acker partition ``acker`` from ``starts`` to the current end of each outcome
    topic. ``gone``: outcome topics and partitions found missing (`_bounds`), shared by the read-backs of one turn.

    Records of other acker partitions sharing a topic partition, spouts' own records and records that cannot be
    decoded are passed over. So are records decided at or past the acker partition's end, taken once the outcomes
    are read (a previous owner still deciding during a handover decides only records before it): those are another
    acker topic's, whose outcomes share a topic (same spout name), and kept they would hold the new owner's log at
    them for good. A topic that cannot be read is logged and passed over too, and named in ``unread``: the trees
    found in the others are still decided (only the trees of that topic may be decided again by the replay).
    """
    kept: list[_Found] = []
    unread: list[str] = []
    gone = set() if gone is None else gone
    for topic, (partition, offset) in starts.items():
        try:
            low, end = _bounds(consumer, topic, partition, gone)
            if offset < low:
                log.warning(
                    "%s[%d]: outcomes from %d deleted (retention): reading from %d", topic, partition, offset, low
                )
            for record in read_to(consumer, TopicPartition(topic, partition, max(offset, low)), end):
                try:
                    decided_by, acker_offset, found = decode_outcome_anchors(record.value() or b"")
                except WireError:
                    continue
                if decided_by == acker.partition:
                    kept.append(_Found(topic, partition, record.offset() or 0, acker_offset, found))
        except (KafkaClientError, KafkaException) as error:  # what was read, here and in the others, still counts
            log.warning("%s[%d]: outcomes not (all) read back: %s", topic, partition, error)
            unread.append(topic)
    _, acker_end = log_bounds(consumer, acker)
    kept = [k for k in kept if k.acker_offset < acker_end]
    outcome_log = OutcomeLog()
    for k in kept:
        outcome_log.delivered(k.topic, k.partition, k.offset, k.acker_offset)
    found = np.concatenate([k.anchors for k in kept]) if kept else np.zeros(0, np.int64)
    offsets = [k.acker_offset for k in kept]
    return Decided(found, min(offsets, default=-1), max(offsets, default=-1), outcome_log, tuple(unread))
