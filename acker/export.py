"""`acker export`: one acker partition's messages as the JSON lines `acker replay` reads, as the service applies them.

What the service applies of a partition is not every message in it. The exported lines follow the service's rules:

- a tick is written only if it continues the partition's tick chain (`acker.partition.continues_chain`): a second
  owner's, or a stale one's, during a rebalance are left out, as the service ignores them (`acker_ignored_ticks_total`);
- a record the service refuses as a whole (a spout that cannot name an outcome topic, a message of another
  partition, a zero id: `acker.wire.check_block`) is written as what the service applies in its place, each of its
  inits followed by a fail (`acker.service.failing_inits`);
- a record that is not an acker record at all (undecodable, an unknown schema version) is left out.

So `acker export ... | acker replay -` decides each tree of the partition as the service did, from the same first
offset. Replay starts with no tree pending: exported from the partition's first record, it sees every tree whole; from
the middle, trees begun before the start are seen in part (acks without an init expire silently; an init whose acks
came before it times out), and a tick before the start is not known, so the first tick read begins the chain.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from confluent_kafka import Consumer, TopicPartition

from acker.columnar.block import Kind
from acker.config import ServiceConfig
from acker.errors import AckerError
from acker.kafka.clients import READ_TO_SETTINGS, log_bounds, open_transaction_wait_s, partition_count, read_to
from acker.partition import continues_chain
from acker.replay import format_message
from acker.service import failing_inits
from acker.wire import WireError, check_block, parse_batch


@dataclass
class Exported:
    """What an export wrote and left out, in records of the acker topic (messages for ``messages``)."""

    records: int = 0  # read
    messages: int = 0  # lines written
    ignored_ticks: int = 0  # off the tick chain, left out
    refused: int = 0  # refused as a whole: their inits written failed
    undecodable: int = 0  # left out


def export_records(
    records: Iterable[tuple[int, bytes | None]], partition: int, partitions: int, out: TextIO, err: TextIO
) -> Exported:
    """Write the messages of ``records`` (offset, value), read in offset order from ``partition`` of an acker topic
    of ``partitions`` partitions, to ``out`` as JSON lines, as the service applies them; each record left out or
    replaced is said on ``err`` with its offset and why."""
    done = Exported()
    last_tick: int | None = None
    for offset, value in records:
        done.records += 1
        try:
            block = parse_batch(value or b"")
        except WireError as bad:
            done.undecodable += 1
            print(f"offset {offset}: left out, not an acker record ({bad.reason}: {bad.detail})", file=err)
            continue
        try:
            check_block(block, partition, partitions)
        except WireError as bad:
            done.refused += 1
            print(f"offset {offset}: refused by the service ({bad.reason}: {bad.detail}); its inits written failed",
                  file=err)  # fmt: skip
            failing = failing_inits(block)
            if failing is None:
                continue
            block = failing
        lines = []
        for message, kind, link in zip(block.to_messages(), block.kinds.tolist(), block.values.tolist(), strict=True):
            if kind == Kind.TICK:
                if not continues_chain(link, offset, last_tick):
                    done.ignored_ticks += 1
                    continue
                last_tick = offset
            lines.append(format_message(message))
        done.messages += len(lines)
        if lines:
            out.write("\n".join(lines) + "\n")
    return done


def export_partition(
    config: ServiceConfig, partition: int, out: TextIO, err: TextIO, *, start: int | None = None, end: int | None = None
) -> tuple[int, int, Exported]:
    """Export ``partition`` of the acker topic (`export_records`) from ``start`` (its first record when None) up to
    ``end`` (its end now when None), read as the service reads it (its isolation level: committed records by
    default). The offsets exported from and to, and the counts."""
    partitions = partition_count(config.client(), config.acker_topic)
    if not 0 <= partition < partitions:
        raise AckerError(f"{config.acker_topic} has partitions 0-{partitions - 1}, not {partition}")
    settings = {"group.id": f"acker-export-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, **READ_TO_SETTINGS}
    consumer = Consumer(config.client(**settings))
    try:
        tp = TopicPartition(config.acker_topic, partition)
        first, last = log_bounds(consumer, tp)
        start = first if start is None else max(start, first)
        end = last if end is None else min(end, last)
        read = read_to(consumer, TopicPartition(tp.topic, partition, start), end, open_transaction_wait_s(config.kafka))
        done = export_records(((r.offset() or 0, r.value()) for r in read), partition, partitions, out, err)
        return start, max(start, end), done
    finally:
        consumer.close()
