"""`acker export`: one acker partition's messages as the JSON lines `acker replay` reads, as the service applies them.

What the service applies of a partition is not every message in it. The exported lines follow the service's rules:

- a tick is written only if it continues the partition's tick chain (`acker.partition.continues_chain`): a second
  owner's, or a stale one's, during a rebalance are left out, as the service ignores them (`acker_ignored_ticks_total`).
  The chain is followed from the service group's committed offset (a tick the service applied) when that is not
  past the start asked for, else from the partition's first record;
- a record the service refuses as a whole (a spout that cannot name an outcome topic, a zero id: `acker.wire.
  check_block`) is written as what the service applies in its place, a fail of each of its trees, then the tree's init
  (`acker.service.failing_inits`). A record with a message of another partition is refused where the service
  dead-lettered it (its dead-letter topic says so): the service checks it against the partition count it knows when
  it reads it, which may have grown since;
- a record that is not an acker record at all (undecodable, an unknown schema version) is left out.

So `acker export ... | acker replay -`, given the service's tracker settings, decides each tree of the partition as
the service did, from the same first offset. Replay starts with no tree pending: exported from the partition's first
record, it sees every tree whole; from the middle, trees begun before the start are seen in part (acks without an
init expire silently; an init whose acks came before it times out). Not followed: a record the service read after a
partition count changed, which it applied when it first read it and dead-lettered when it read it again after a
restart, is taken as refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import TextIO

import numpy as np
from confluent_kafka import Consumer, TopicPartition

from acker import dlq
from acker.columnar.block import Kind
from acker.config import ServiceConfig
from acker.errors import AckerError
from acker.headers import decimal
from acker.kafka.clients import (
    READ_TO_SETTINGS,
    committed_offsets,
    log_bounds,
    not_its_partitions,
    open_transaction_wait_s,
    partition_count,
    read_to,
)
from acker.partition import NO_TICK, continues_chain
from acker.replay import format_message
from acker.service import DLQ_DETAIL, DLQ_OFFSET, DLQ_PARTITION, DLQ_TOPIC, failing_inits
from acker.topics import spout_names
from acker.wire import ANY_CONFIGURATION, SpoutNames, WireError, check_block, parse_batch


@dataclass
class Exported:
    """What an export wrote and left out, in records of the acker topic (messages for ``messages``)."""

    records: int = 0  # read from the start asked for
    messages: int = 0  # lines written
    ignored_ticks: int = 0  # off the tick chain, left out
    refused: int = 0  # refused as a whole: their inits written failed
    undecodable: int = 0  # left out


def export_records(
    records: Iterable[tuple[int, bytes | None]],
    out: TextIO,
    err: TextIO,
    *,
    misplaced: Mapping[int, str] | None = None,
    write_from: int = 0,
    spouts: SpoutNames = ANY_CONFIGURATION,
) -> Exported:
    """Write the messages of ``records`` (offset, value), read in offset order from one partition of an acker topic,
    to ``out`` as JSON lines, as the service applies them; each record left out or replaced is said on ``err`` with
    its offset and why. Records before offset ``write_from`` are read for their ticks alone: where the tick chain is.

    A record with a message of another partition is refused where the service refused it, ``misplaced`` (offset →
    why: its dead letters), not by the partition count now: the count may have grown since, and the service checks
    a record against the count it knew when it read it. The other checks do not depend on when they are made;
    ``spouts``: the spouts the service answers (`acker.topics.spout_names` of its configuration)."""
    misplaced = misplaced or {}
    done = Exported()
    last_tick: int | None = None
    for offset, value in records:
        writing = offset >= write_from
        done.records += writing
        try:
            block = parse_batch(value or b"")
        except WireError as bad:
            if writing:
                done.undecodable += 1
                print(f"offset {offset}: left out, not an acker record ({bad.reason}: {bad.detail})", file=err)
            continue
        try:
            check_block(block, 0, 0, spouts)  # every check but the partition's
            if offset in misplaced:
                raise WireError("wrong-partition", misplaced[offset])
        except WireError as bad:
            if writing:
                done.refused += 1
                print(f"offset {offset}: refused by the service ({bad.reason}: {bad.detail}); its inits written "
                      "failed", file=err)  # fmt: skip
            failing = failing_inits(block, spouts)
            if failing is None:
                continue
            block = failing
        keep = np.ones(len(block), bool)  # the ticks off the chain left out
        for i in np.flatnonzero(block.kinds == Kind.TICK).tolist():
            link = int(block.values[i])
            if continues_chain(link, offset, last_tick):
                last_tick = offset
                continue
            keep[i] = False
            if writing:
                done.ignored_ticks += 1
                follows = "begins a chain" if link == NO_TICK else f"follows offset {link}"
                print(f"offset {offset}: a tick left out, off the tick chain (it {follows}; the chain is at "
                      f"{last_tick})", file=err)  # fmt: skip
        if writing and keep.any():  # before ``write_from``, only the ticks are looked at
            lines = [format_message(m) for m, kept in zip(block.to_messages(), keep.tolist(), strict=True) if kept]
            done.messages += len(lines)
            out.write("\n".join(lines) + "\n")
    return done


@dataclass(frozen=True)
class Span:
    """What `export_partition` reads of one partition (`span`)."""

    partition: int
    start: int  # the first offset written
    end: int  # the end offset, excluded: the end asked for, or the partition's last stable offset
    written_end: int  # the partition's end as written, read before ``end``: past it while a transaction is open
    chain_from: int  # where the tick chain is read from: a tick the service applied, or the partition's first record
    misplaced: Mapping[int, str]  # offsets the service dead-lettered as wrong-partition → its detail


def span(config: ServiceConfig, partition: int, start: int | None = None, end: int | None = None) -> Span:
    """Where the export of ``partition`` of the acker topic starts and ends, from ``start`` (its first record when
    None) up to ``end`` (its end now when None), as Kafka says; `AckerError` for a partition or offsets it does not
    have. Read as the service reads it (its isolation level: committed records by default), a partition ends where
    its first open transaction begins."""
    partitions = partition_count(config.client(), config.acker_topic)
    if not 0 <= partition < partitions:
        raise AckerError(not_its_partitions(config.acker_topic, partitions, [partition]))
    tp = TopicPartition(config.acker_topic, partition)
    consumer = _consumer(config)
    written = Consumer(config.client(**{"group.id": config.group, "isolation.level": "read_uncommitted"}))
    try:
        # The end as written first: read after the end as committed, it was past it whenever a record came between
        # the two reads (ticks come all the time), and an open transaction was said where there was none.
        written_end = log_bounds(written, tp)[1]
        first, last = log_bounds(consumer, tp)
        [committed] = committed_offsets(consumer, [tp], 30)
    finally:
        written.close()
        consumer.close()
    start = first if start is None else max(start, first)
    if start > last or (end is not None and end < start):
        holds = f"holds offsets {first}-{last - 1}" if last > first else f"holds no record (its end is {last})"
        asked = f"from {start}" + ("" if end is None else f" to {end}")
        raise AckerError(f"{config.acker_topic}[{partition}] {holds} now: nothing to export {asked}")
    end = last if end is None else end
    # The group's committed offset is a tick the service applied (or a record before any): the chain follows from it
    # as it did in the service. From the start instead, the first tick read would begin it, though it may be one the
    # service ignored (a stale owner's), and every later tick would be left out.
    chain_from = committed.offset if first <= committed.offset <= start else first
    return Span(partition, start, min(end, last), written_end, chain_from, _misplaced(config, partition))


def _misplaced(config: ServiceConfig, partition: int) -> dict[int, str]:
    """The offsets of ``partition`` of the acker topic that the service dead-lettered as wrong-partition."""
    out: dict[int, str] = {}
    for letter in dlq.read(config, config.dlq_topic):
        if (
            letter.header(DLQ_TOPIC) == config.acker_topic
            and letter.header(DLQ_PARTITION) == str(partition)
            and letter.reason == "wrong-partition"
            and (offset := decimal(letter.header(DLQ_OFFSET))) is not None
        ):
            out.setdefault(offset, letter.header(DLQ_DETAIL) or "")
    return out


def _consumer(config: ServiceConfig) -> Consumer:
    """A reader of the acker topic as the service reads it, in its group (for its committed offsets) without joining
    it or committing."""
    return Consumer(config.client(**{"group.id": config.group, "enable.auto.commit": False, **READ_TO_SETTINGS}))


def export_partition(config: ServiceConfig, where: Span, out: TextIO, err: TextIO) -> Exported:
    """Export the records of ``where`` (`export_records`)."""
    consumer = _consumer(config)
    try:
        begin = TopicPartition(config.acker_topic, where.partition, where.chain_from)
        with closing(read_to(consumer, begin, where.end, open_transaction_wait_s(config.kafka))) as read:
            records = ((r.offset() or 0, r.value()) for r in read)
            return export_records(
                records, out, err, misplaced=where.misplaced, write_from=where.start, spouts=spout_names(config)
            )
    finally:
        consumer.close()
