"""`acker export P | acker replay -` decides every tree of a partition as the service did, on a real broker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined] # documented location

from acker.columnar import MessageBlock
from acker.config import ServiceConfig, to_argv
from acker.core import Ack, Init, Message, Tick
from acker.core.ids import partition_of
from acker.export import span
from acker.partition import NO_TICK, encode_tick
from acker.wire import encode_batch
from acker.workload import WorkloadSpec, generate
from tests.integration.helpers import OutcomeReader, ServiceThread, create_acker_topics, send
from tests.integration.test_service import _NAMES, SPOUT


def _acker(config: ServiceConfig, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    flags, env = to_argv(config)
    command = [sys.executable, "-m", "acker.cli", *argv]
    if argv[0] in ("export", "replay"):  # replay: the service's tracker settings, as the service takes them
        command += flags
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, check=False)  # fmt: skip


def test_an_exported_partition_replays_to_the_services_outcomes(config: ServiceConfig) -> None:
    """Partition 0 holds, before the trees: a record that is no acker record, a record with a message of partition
    1 and one with a spout that cannot name a topic (each refused as a whole, the inits in them failed), and two ticks
    of which the second does not continue the chain. The export leaves out or replaces each as the service did."""
    config = replace(config, partitions=2, timeout_s=2.0)
    create_acker_topics(config)
    assert partition_of(2, 2) == 0 and partition_of(-1, 2) == 1 and partition_of(4, 2) == 0
    producer = Producer(config.client())
    for value in (
        b"not an acker record",
        _encoded([Init(2, "other", "odd/0/1", 5), Ack(-1, 3)]),  # wrong partition: odd/0/1 FAILED
        _encoded([Init(4, "bad spout!", "odd/0/2", 1), Init(6, "other", "odd/0/3", 1)]),  # odd/0/3 FAILED
        encode_tick(NO_TICK),
        encode_tick(NO_TICK),  # a second writer's: off the chain
    ):
        producer.produce(config.acker_topic, value, partition=0)
    assert producer.flush(30) == 0
    workload = generate(WorkloadSpec(trees=1000, fail_rate=0.03, drop_rate=0.03, tick_every=10**9, spout=SPOUT))
    service = ServiceThread(config)
    reader = OutcomeReader(config, [SPOUT, "other"])
    try:
        send(config, [m for m in workload.messages if not isinstance(m, Tick)])
        reader.wait_for([*workload.expected, "odd/0/1", "odd/0/3"], timeout_s=90)
        ignored = service.service.snapshot().ignored_ticks
    finally:
        service.stop()
        reader.close()
    assert {m: reader.seen[m][0] for m in workload.expected} == {m: _NAMES[e] for m, e in workload.expected.items()}
    assert reader.seen["odd/0/1"] == reader.seen["odd/0/3"] == ["FAILED"]

    # The topic grows after the run: a record the service applied is not refused now for being elsewhere by the new
    # count (the service's dead letters say which it refused).
    admin = AdminClient(config.producer())
    admin.create_partitions([NewPartitions(config.acker_topic, 4)])[config.acker_topic].result(30)
    [(first, said_0), (second, said_1)] = [_exported_and_replayed(config, partition) for partition in (0, 1)]
    said, replayed = [said_0, said_1], first | second
    assert replayed == {m: seen[0] for m, seen in reader.seen.items()}
    assert "offset 0: left out, not an acker record (bad-magic" in said[0]
    assert "offset 1: refused by the service (wrong-partition" in said[0]
    assert "offset 2: refused by the service (bad-spout" in said[0]
    assert "offset 4: a tick left out, off the tick chain (it begins a chain; the chain is at 3)" in said[0]
    off_chain = [int(m.group(1)) if (m := re.search(r"(\d+) tick\(s\) off the tick chain", s)) else 0 for s in said]
    assert off_chain[0] >= 1 and sum(off_chain) == ignored  # the second writer's tick, as the service counted

    # From the tick the service ignored: the chain is the one before it, and the trees after it are decided alike.
    later, stderr = _exported_and_replayed(config, 0, "--from-offset", "4")
    assert later == {m: o for m, o in first.items() if not m.startswith("odd/")} and later
    assert "from offset 4 up to " in stderr and "offset 4: a tick left out" in stderr


def test_an_export_of_what_the_partition_does_not_hold_is_refused_before_its_file_is_written(
    config: ServiceConfig, tmp_path: Path
) -> None:
    config = replace(config, partitions=2)
    create_acker_topics(config)
    kept = tmp_path / "kept.jsonl"
    kept.write_text("what was there\n")
    for argv, said in (
        (["5"], "has partitions 0-1, not 5"),
        (["0", "--from-offset", "3"], "[0] holds no record (its end is 0) now: nothing to export from 3"),
        (["0", "--from-offset", "3", "--to-offset", "2"], "now: nothing to export from 3 to 2"),
    ):
        run = _acker(config, "export", *argv, "-o", str(kept))
        assert run.returncode == 2 and said in run.stderr, run.stderr
    assert kept.read_text() == "what was there\n"


def _exported_and_replayed(config: ServiceConfig, partition: int, *flags: str) -> tuple[dict[str, str], str]:
    """The first outcome of each tree `acker replay` gives on `acker export` of ``partition``, and the export's
    stderr."""
    exported = _acker(config, "export", str(partition), *flags)
    assert exported.returncode == 0, exported.stderr
    replay = _acker(config, "replay", "-", stdin=exported.stdout)
    assert replay.returncode == 0, replay.stderr
    columnar = _acker(config, "replay", "-", "--engine", "columnar", stdin=exported.stdout)  # the service's engine
    assert columnar.returncode == 0, columnar.stderr
    assert sorted(columnar.stdout.splitlines()) == sorted(replay.stdout.splitlines())
    outcomes: dict[str, str] = {}
    for line in replay.stdout.splitlines():
        obj = json.loads(line)
        outcomes.setdefault(obj["msg_id"], "ACK" if obj["outcome"] == "ack" else obj["reason"].upper())
    return outcomes, exported.stderr


def _encoded(messages: list[Message]) -> bytes:
    return encode_batch(MessageBlock.from_messages(messages))


def test_a_partition_written_to_during_the_export_is_not_said_to_have_an_open_transaction(
    config: ServiceConfig,
) -> None:
    """Its end as written was read after its end as committed: a tick appended between the two reads made the summary
    say a transaction was open, on every live partition."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    writing = threading.Event()

    def ticks() -> None:
        producer = Producer(config.client(**{"linger.ms": 0}))
        link = NO_TICK
        while not writing.is_set():
            producer.produce(config.acker_topic, encode_tick(link), partition=0)
            producer.poll(0.002)
            link += 1
        producer.flush(30)

    writer = threading.Thread(target=ticks)
    writer.start()
    try:
        spans = [span(config, 0) for _ in range(10)]
    finally:
        writing.set()
        writer.join(60)
    assert spans[-1].end > 0 and all(s.written_end <= s.end for s in spans)


def test_an_export_cut_short_by_an_open_transaction_says_so_whatever_end_was_asked_for(config: ServiceConfig) -> None:
    """Asked to end past an open transaction (``--to-offset``), the export ended where it begins, and said nothing
    of why: the note was given only to an export asked for no end."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    producer = Producer(config.client())
    for link in range(3):
        producer.produce(config.acker_topic, encode_tick(NO_TICK if link == 0 else link - 1), partition=0)
    assert producer.flush(30) == 0
    open_one = Producer(config.client(**{"transactional.id": f"open-{config.acker_topic}"}))
    open_one.init_transactions(30)
    open_one.begin_transaction()
    open_one.produce(config.acker_topic, encode_tick(2), partition=0)
    assert open_one.flush(30) == 0  # written, its transaction left open
    try:
        said = {to: _acker(config, "export", "0", *(["--to-offset", to] if to else [])) for to in ("", "10", "2")}
    finally:
        open_one.abort_transaction(30)
    note = "up to 3 (a transaction is open from 3; the end as written is 4)"
    assert all(run.returncode == 0 for run in said.values()), {to: run.stderr for to, run in said.items()}
    assert note in said[""].stderr and note in said["10"].stderr, said["10"].stderr
    assert "up to 2: " in said["2"].stderr and "transaction" not in said["2"].stderr


def test_an_export_follows_the_tick_chain_from_where_the_service_group_restarted(config: ServiceConfig) -> None:
    """Ticks at offsets 0, 1 and 2: two writers' chains (0; then 1 and 2, linked). Read from the first record, 1 and
    2 are off the chain. A service that restarted at the group's committed offset 1 began its chain there and
    applied 2: an export from offset 2 follows the chain from the committed offset when it lies at or before the
    start, and from the partition's first record when it lies past it."""
    config = replace(config, partitions=1)
    create_acker_topics(config)
    producer = Producer(config.client())
    for link in (NO_TICK, NO_TICK, 1):
        producer.produce(config.acker_topic, encode_tick(link), partition=0)
    producer.produce(config.acker_topic, _encoded([Init(2, SPOUT, "late/0/1", 1)]), partition=0)
    assert producer.flush(30) == 0

    def exported_from_2_after_commit(committed: int) -> tuple[int, list[str], str]:
        group = Consumer(config.client(**{"group.id": config.group, "enable.auto.commit": False}))
        try:
            group.commit(offsets=[TopicPartition(config.acker_topic, 0, committed)], asynchronous=False)
        finally:
            group.close()
        run = _acker(config, "export", "0", "--from-offset", "2")
        assert run.returncode == 0, run.stderr
        return span(config, 0, 2).chain_from, [json.loads(line)["type"] for line in run.stdout.splitlines()], run.stderr

    for committed in (1, 2):  # before the start, and at it (the service restarted at the tick it applied)
        chain_from, types, stderr = exported_from_2_after_commit(committed)
        assert (chain_from, types) == (committed, ["tick", "init"]) and "left out" not in stderr, stderr
    chain_from, types, stderr = exported_from_2_after_commit(3)
    assert (chain_from, types) == (0, ["init"]), stderr
    assert "offset 2: a tick left out, off the tick chain (it follows offset 1; the chain is at 0)" in stderr
