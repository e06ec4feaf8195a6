"""`acker wordcount ...`: the word-count pipeline's stages as processes, and a runner that wires them together.

acker wordcount topics                      create the pipeline's and the acker's topics
acker wordcount produce --sentences N       write generated sentences (or --file FILE, a line each)
acker wordcount spout|split|count           run one stage until SIGTERM/Ctrl-C (start as many as you like)
acker wordcount run --sentences N ...       all of the above as child processes, until every sentence has an
                                            outcome; failure injection; restarts a crashed bolt once
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from acker.argtypes import at_least, positive, share
from acker.bolt import Bolt
from acker.cli import TOPIC_SETTINGS, TerminatedError, interrupted_status, run_until_signalled, sigterm_as_interrupt
from acker.config import (
    BOLT_SETTINGS,
    SPOUT_SETTINGS,
    ServiceConfig,
    add_arguments,
    load,
    to_argv,
)
from acker.errors import ConfigError
from acker.examples.stages import Stages, acker_command
from acker.examples.wordcount import (
    COUNTS_TOPIC_CONFIG,
    Topics,
    count_bolt,
    count_function,
    published_counts,
    sentences,
    split_function,
    traced_sentences,
)
from acker.help_text import prose
from acker.kafka.clients import (
    KafkaClientError,
    TopicSpec,
    answering,
    delete_groups,
    end_offsets,
    log_bounds,
    partition_count,
    topic_partitions,
)
from acker.kafka.clients import produce as send
from acker.kafka.lookups import lookups
from acker.places import topic_name_problem
from acker.spout import Spout, SpoutSettings
from acker.stage_metrics import add_port_argument, serve_stages
from acker.topics import all_topics, check_spout_name, create_and_report
from acker.wire import WireError, decode_outcomes, spout_name_valid

log = logging.getLogger("acker.wordcount")

CRASH_EXIT = 17


def _topics(args: argparse.Namespace) -> Topics:
    """The pipeline's topics, `ConfigError` when ``--prefix`` cannot begin a topic's name (Kafka answered a sentence
    written to it with a TOPIC_EXCEPTION), or makes the spout's name (`Topics.spout`) longer than a spout's may be:
    every stage refuses it, where the spout alone did, once the others had started and the topics were made."""
    topics = Topics(args.prefix)
    if (problem := topic_name_problem(topics.sentences)) is not None:
        raise ConfigError(f"--prefix {args.prefix!r}: {problem}")
    if not spout_name_valid(topics.spout):
        raise ConfigError(f"--prefix {args.prefix[:80]!r}: too long, the spout is named {topics.spout[:80]!r}... "
                          f"({len(topics.spout)} characters) and a spout's name may have 200")  # fmt: skip
    return topics


def _pipeline_topics(args: argparse.Namespace) -> tuple[ServiceConfig, list[TopicSpec]]:
    """The configuration, and the topics of the word count with the acker's."""
    config, topics = load(args), _topics(args)
    try:  # its outcome and replay topics, named by the settings (`--outcome-prefix`, ...): made here, and refused
        check_spout_name(config, topics.spout)  # by the spout only once the other stages had started
    except ConfigError as error:
        raise ConfigError(f"--prefix {args.prefix[:80]!r}: {error}") from None
    return config, [
        *all_topics(config, [topics.spout]),
        *(
            TopicSpec(t, args.pipeline_partitions, config.replication_factor)
            for t in (topics.sentences, topics.split, topics.words)
        ),
        # Compacted: the last count of each word is what a count process reads when a partition comes to it.
        TopicSpec(topics.counts, args.pipeline_partitions, config.replication_factor, COUNTS_TOPIC_CONFIG),
    ]


def cmd_topics(args: argparse.Namespace) -> int:
    config, specs = _pipeline_topics(args)
    create_and_report(config, specs)  # a line for each, as `acker topics create` prints
    return 0


def produce(config: ServiceConfig, topic: str, lines: list[bytes], **kwargs: Any) -> list[str]:
    """Write ``lines`` to ``topic`` (``kwargs``: the producer's, e.g. ``partition``); return their message ids
    (coordinates). `KafkaException` if one is refused, `TimeoutError` if not all are delivered in 60 s."""
    # Keyless sentences go to a partition each at random, not a batch to one partition (sticky partitioning): a run
    # written at once went nearly all to one partition, and one split did the work of all. A user's setting stands.
    spread = {} if "sticky.partitioning.linger.ms" in config.kafka else {"sticky.partitioning.linger.ms": 0}
    producer = Producer(config.producer(**{"enable.idempotence": True, **spread}))
    ids: list[str] = []
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, record: Any) -> None:
        if error is not None:
            failed.append(error)
        else:
            ids.append(f"{record.topic()}/{record.partition()}/{record.offset()}")

    for line in lines:
        send(producer, topic, line, on_delivery=delivered, **kwargs)
    left = producer.flush(60)
    if failed:  # raised from here, not from the callback: `acker.cli.main` says it as any Kafka error, status 2
        raise KafkaException(failed[0])
    if left:  # not all delivered, nor failed: Kafka does not answer (`acker.cli.main` says so)
        raise TimeoutError(f"{len(lines) - len(ids)} of {len(lines)} records not delivered to {topic} in 60 s")
    return ids


def _lines(args: argparse.Namespace) -> list[bytes]:
    """The sentences to write: the lines of ``--file`` that are not blank, as they are (bytes: a sentence is bytes,
    UTF-8 or not), or generated ones. `ConfigError` when the file cannot be read."""
    if args.file:
        try:
            data = Path(args.file).read_bytes()
        except OSError as error:
            raise ConfigError(f"--file {args.file}: {error.strerror or error}") from None
        return [line for line in data.splitlines() if line.strip()]
    return list(sentences(args.sentences, args.seed))


def cmd_produce(args: argparse.Namespace) -> int:
    config, lines, topic = load(args), _lines(args), _topics(args).sentences
    answering(config.client(), topic)  # a login refused said as such, not as a minute's silence
    try:  # not after the producer's 30 s of retries, as a Kafka error that names no topic
        partition_count(config.client(), topic)
    except KafkaClientError as error:
        if error.code != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
        prefix = f" --prefix {args.prefix}" if args.prefix != Topics().prefix else ""
        raise ConfigError(f"topic {topic} not found (or no leader yet): `acker wordcount topics{prefix}` makes the "
                          "word count's topics") from None  # fmt: skip
    ids = produce(config, topic, lines)
    print(f"{len(ids)} sentences written to {topic}")
    return 0


def _starting(args: argparse.Namespace, what: str) -> ServiceConfig:
    """The stage's configuration, and a first line saying what it serves."""
    config = load(args)
    log.info("%s; Kafka at %s, acker topic %s", what, config.bootstrap_servers, config.acker_topic)
    return config


def cmd_spout(args: argparse.Namespace) -> int:
    topics = _topics(args)
    group = args.spout_group or topics.spout_group
    mode = "untracked" if args.untracked else f"tracked, max pending {args.max_pending}"
    config = _starting(args, f"spout {topics.spout}: {topics.sentences} -> {topics.split} as group {group} ({mode})")
    settings = SpoutSettings(
        topics.spout,
        topics.sentences,
        topics.split,
        group=group,
        max_pending=args.max_pending,
        tracked=not args.untracked,
    )
    metrics = serve_stages(args.stage_metrics_port)  # first: a port in use stops it before it joins its group
    traced = traced_sentences(topics.split) if args.trace else None
    spout = Spout(config, settings, traced)
    metrics.add(spout)
    return run_until_signalled(spout)


def _crash_marker(args: argparse.Namespace) -> str | None:
    """``--crash-marker``, whose directory must exist: a marker that cannot be made is no crash (said once)."""
    marker: str | None = args.crash_marker
    if marker is not None and not os.path.isdir(os.path.dirname(marker) or "."):
        raise ConfigError(f"--crash-marker {marker!r}: no directory {os.path.dirname(marker)!r}")
    return marker


def cmd_split(args: argparse.Namespace) -> int:
    topics = _topics(args)
    group = f"{args.prefix}-split"
    config = _starting(args, f"split bolt: {topics.split} -> {topics.words} as group {group}")
    function = split_function(
        topics, args.fail_rate, args.seed, args.crash_after, trace=args.trace, crash_marker=_crash_marker(args)
    )
    metrics = serve_stages(args.stage_metrics_port)
    bolt = Bolt(config, topics.split, group, function, output_topics=[topics.words])
    metrics.add(bolt)
    return run_until_signalled(bolt)


def cmd_count(args: argparse.Namespace) -> int:
    topics = _topics(args)
    group = f"{args.prefix}-count"
    config = _starting(args, f"count bolt: {topics.words} -> {topics.counts} as group {group}")
    metrics = serve_stages(args.stage_metrics_port)  # before any client: a port in use stops it at once
    counts: Counter[bytes] = Counter()
    function = count_function(
        topics, counts, args.drop_rate, args.seed, args.crash_after, trace=args.trace, crash_marker=_crash_marker(args),
        published=published_counts(config, topics.counts),
    )  # fmt: skip
    bolt = count_bolt(config, function, group)
    metrics.add(bolt)
    return run_until_signalled(bolt)


def stage_command(config: ServiceConfig, prefix: str, stage: str, *extra: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of one stage process (``acker`` for an acker instance)."""
    flags, env = to_argv(replace(config, metrics_port=0))
    if stage == "acker":
        return acker_command("run", *flags, "--log-level", "WARNING", *extra), env
    return acker_command("wordcount", stage, *flags, f"--prefix={prefix}", "--log-level", "WARNING", *extra), env


class PipelineStages(Stages):
    """The word count's stages (`Stages`), into which a crash may be injected: a bolt that crashed on purpose is
    restarted once, without the crash."""

    # Given to every process of a stage that may crash (`crash_flags`): the first to get there crashes. Made by the
    # first `crash_flags`, removed by `stop`: stages never stopped (a run that failed before it started them) left
    # one in /tmp each.
    _crash_dir: str | None = None
    _crashed: frozenset[str] = frozenset()  # stages whose crash came, kept past `stop`

    def crash_flags(self, stage: str, after: int) -> list[str]:
        """Flags of the processes of ``stage`` of which one crashes after ``after`` messages: the first to get
        there, however the group spread the partitions (a fixed one may get none, or a share smaller than that)."""
        if self._crash_dir is None:
            self._crash_dir = tempfile.mkdtemp(prefix="acker-crash-")
        return [f"--crash-after={after}", f"--crash-marker={os.path.join(self._crash_dir, stage)}"]

    def crashed(self, stage: str) -> bool:
        """Whether a process given `crash_flags` of ``stage`` got there and crashed (before `stop` too)."""
        crash_dir = self._crash_dir
        return stage in self._crashed or (crash_dir is not None and os.path.exists(os.path.join(crash_dir, stage)))

    def _argv_again(self, argv: list[str]) -> list[str]:
        """Flags of `crash_flags` are kept while their stage's crash has not come (a process killed before may still
        be the one to crash), and dropped after."""
        markers = [a.split("=", 1)[1] for a in argv if a.startswith("--crash-marker=")]
        if not markers or any(os.path.exists(marker) for marker in markers):
            return [a for a in argv if not a.startswith(("--crash-after", "--crash-marker"))]
        return argv

    def watch(
        self, expected_down: frozenset[str] = frozenset(), excused: Callable[[str, int], bool] | None = None
    ) -> None:
        """Restart a bolt that crashed as injected; any other exit (outside ``expected_down``, and not one that
        ``excused``, asked with the stage's name and exit status, takes on) is an error."""
        for name, code in self.exited():
            if name in expected_down:
                continue
            if code != CRASH_EXIT:
                if excused is not None and excused(name, code):
                    continue
                raise SystemExit(f"stage {name} exited with {code}")
            self._log(f"stage {name} crashed (as injected): restarting it")
            self.restart(name)

    def stop(self, wait_s: float = 30) -> None:
        super().stop(wait_s)
        if self._crash_dir is not None:
            self._crashed |= frozenset(os.listdir(self._crash_dir) if os.path.isdir(self._crash_dir) else ())
            shutil.rmtree(self._crash_dir, ignore_errors=True)
            self._crash_dir = None


@contextlib.contextmanager
def follow_outcomes(
    config: ServiceConfig, spout: str, *, from_now: bool = False
) -> Iterator[Callable[[float], dict[str, list[str]]]]:
    """A poller of the spout's outcome topic, for the ``with`` block (its consumer is closed at the end): each call
    reads for up to ``seconds`` and returns all seen so far.

    It assigns itself every partition once the topic exists (the spout creates it), from the beginning, or with
    ``from_now`` from the ends it has when this is called (as a spout does: `acker.spout.Spout`), so that only
    outcomes written after are seen: a source topic deleted and made again numbers its records from 0 again, and
    the outcomes of an earlier run's records would pass for those of this run's at the same coordinates. It commits
    nothing: a group it joined would be left behind on the cluster by every run."""
    consumer = Consumer(config.client(**{"group.id": "acker-follow", "enable.auto.commit": False}))
    try:
        yield _poller(consumer, config.outcome_topic(spout), from_now=from_now)
    finally:
        consumer.close()


def _poller(consumer: Consumer, topic: str, *, from_now: bool) -> Callable[[float], dict[str, list[str]]]:
    """`follow_outcomes`'s poller of ``topic`` through ``consumer``."""
    seen: dict[str, list[str]] = {}
    starts: dict[int, int] = {}  # partition -> where to read from; none: the beginning (made after this call)
    if from_now:
        partitions = [TopicPartition(topic, p) for p in topic_partitions(consumer, topic)]
        starts = dict(zip((tp.partition for tp in partitions), end_offsets(consumer, partitions), strict=True))

    def poll(seconds: float) -> dict[str, list[str]]:
        deadline = time.monotonic() + seconds
        if not consumer.assignment():
            partitions = topic_partitions(consumer, topic)
            if not partitions:  # not created yet
                time.sleep(max(0.0, min(0.2, deadline - time.monotonic())))
                return seen
            consumer.assign([TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING)) for p in partitions])
        while time.monotonic() < deadline:
            for record in consumer.consume(500, timeout=0.1):
                if record.error() is not None:
                    continue
                try:
                    decoded = decode_outcomes(record.value() or b"")
                except WireError:
                    continue
                for outcome, msg_id in zip(decoded.outcomes, decoded.msg_ids, strict=True):
                    seen.setdefault(msg_id, []).append(outcome)
        return seen

    return poll


def _after_what_is_there(config: ServiceConfig, topics: list[str], watermark_group: str) -> dict[str, int]:
    """Set the watermarks of a spout group of its own to the end of the topics it reads (its source topic and its
    replay topic, where they exist); return how many records that passes in each. A run reads the sentences it
    writes: no commit job moves a watermark here, so a spout of the prefix's group would read again every sentence
    written by the runs before it (and count their words again), and a new group every copy kept in the replay
    topic, which pipelines of the default settings share. Its own group, never the prefix's: a pipeline of that
    prefix may be running (`docker/compose.yaml`), whose watermark moved to the end would skip the sentences it has
    not finished."""
    reader = Consumer(config.client(**{"group.id": watermark_group, "enable.auto.commit": False}))
    try:
        bounds = {
            (topic, p): log_bounds(reader, TopicPartition(topic, p))
            for topic in topics
            for p in topic_partitions(reader, topic)
        }
    finally:
        reader.close()
    ends = {at: end for at, (_, end) in bounds.items()}
    kafka = lookups(config.client())
    with kafka.lock:
        before = kafka.committed(watermark_group, list(ends))
        kafka.advance(watermark_group, ends)
    passed = dict.fromkeys(topics, 0)
    for (topic, p), (first, end) in bounds.items():  # from the first that exists: retention deletes the oldest
        passed[topic] += max(0, end - max(before.get((topic, p), -1), first))
    return passed


STALL_S = 5.0  # `wordcount run` looks into a count of decided sentences that has not moved for this long


def _answers(client: dict[str, Any], topic: str) -> bool:
    """Whether the cluster answers a metadata request about ``topic`` within a few seconds (`answering`)."""
    try:
        answering(client, topic, timeout_s=3.0)
    except KafkaException:
        return False
    return True


class Waiting:
    """What `wordcount run` says while it waits for its sentences' outcomes: a line when their count moves, not one a
    second while timeouts run out. Once it has stood still for `STALL_S`, whether the broker answers is asked (again
    every `STALL_S` while it stands still): a broker gone holds every stage, and no tree times out meanwhile (the
    acker's ticks are read from its log), so "trees wait for their timeout" would blame dropped messages for it.
    Said once each: the broker gone, the broker back, the trees waiting for their timeout."""

    def __init__(
        self,
        config: ServiceConfig,
        total: int,
        answers: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config, self.total, self.answers, self.clock = config, total, answers, clock
        self.shown, self.moved_at, self.asked_at = -1, clock(), float("-inf")
        self.down = self.waiting_said = False

    def lines(self, done: int) -> list[str]:
        """The lines to say now that ``done`` sentences are decided."""
        now, said = self.clock(), []
        if done != self.shown:
            said.append(f"{done}/{self.total} sentences decided")
            self.shown, self.moved_at, self.waiting_said = done, now, False
            if self.down:  # outcomes came: it answers, though not asked since (only a stall asks)
                said.append(f"the broker at {self.config.bootstrap_servers} answers again")
                self.down = False
        if done == self.total or now - self.moved_at <= STALL_S:
            return said
        if now - self.asked_at >= STALL_S:
            self.asked_at, down, was_down = now, not self.answers(), self.down
            self.down = down
            servers = self.config.bootstrap_servers
            if down and not was_down:
                said.append(f"the broker at {servers} does not answer: every stage waits for it, and no tree times "
                            "out for the outage")  # fmt: skip
            elif was_down and not down:  # the stages get their time to go on before anything is blamed
                said.append(f"the broker at {servers} answers again")
                self.moved_at, self.waiting_said = now, False
                return said
        if not self.down and not self.waiting_said:
            config = self.config
            timeout = f"{config.timeout_s:.0f} to {config.tree_lifetime_s:.0f} s after they opened"
            if done:
                said.append(f"{self.total - done} trees wait for their timeout (a message dropped or lost in a crash): "
                            f"{timeout}")  # fmt: skip
            else:  # as likely stages still starting (a group joined, a partition assigned) as every tree waiting
                said.append(f"no sentence decided yet: the stages may still be starting, or the trees wait for their "
                            f"timeout (a message dropped or lost in a crash), {timeout}")  # fmt: skip
            self.waiting_said = True
        return said


def cmd_run(args: argparse.Namespace) -> int:
    config = load(args).failing_over_fast()  # a crashed split's partitions move before its trees time out
    lines = _lines(args)  # first: a file that cannot be read is said before anything is made or started
    made, specs = _pipeline_topics(args)
    create_and_report(made, specs, report=False)  # quietly: the run's output is its sentences' fates
    topics = _topics(args)
    group = f"{topics.spout_group}.run-{uuid.uuid4().hex[:8]}"
    settings = SpoutSettings(topics.spout, topics.sentences, topics.split, group=group)
    watermarks = settings.watermark_group
    stages = PipelineStages()
    try:  # from the first group this run makes, which the end deletes
        with sigterm_as_interrupt():  # as Ctrl-C: every stage stopped, said so, and the exit status
            return _run_stages(args, config, stages, group, watermarks, lines=lines)
    except (KeyboardInterrupt, TerminatedError) as stopped:
        print("interrupted: every stage this run started is stopped", file=sys.stderr)
        return interrupted_status(stopped)
    finally:
        stages.stop()
        for left, why in delete_groups(config.client(), [group, settings.replay_group, watermarks]).items():  # its own
            print(f"consumer group {left} is left behind ({why}){_why_not_empty(config, why)}", file=sys.stderr)


def _why_not_empty(config: ServiceConfig, why: str) -> str:
    """What to add to a group's refused deletion ``why``: a group of static members (`ServiceConfig.static_member_id`)
    is not empty after its processes stopped, as those do not leave it; they are gone once their sessions end."""
    if config.static_member_id and "NON_EMPTY_GROUP" in why:
        return " (static members leave a group only once their session ends)"
    return ""


def _run_stages(
    args: argparse.Namespace,
    config: ServiceConfig,
    stages: PipelineStages,
    group: str,
    watermarks: str,
    *,
    lines: list[bytes],
) -> int:
    """`cmd_run` once its groups are named: the stages started, ``lines`` written, their outcomes followed."""
    topics = _topics(args)
    passed = _after_what_is_there(config, [topics.sentences, config.replay_topic(topics.spout)], watermarks)
    for topic, skipped in passed.items():
        if skipped:
            print(f"{skipped} records written to {topic} before this run are not read", file=sys.stderr)
    stages.start("acker", stage_command(config, args.prefix, "acker"))
    untracked = ["--untracked"] if args.untracked else []
    stages.start("spout", stage_command(config, args.prefix, "spout", f"--spout-group={group}", *untracked))
    crash = stages.crash_flags("split", args.crash_split_after) if args.crash_split_after else []
    for i in range(args.split_processes):
        stages.start(f"split-{i}", stage_command(config, args.prefix, "split", "--fail-rate", str(args.fail_rate),
                                                 "--seed", str(i), *crash))  # fmt: skip
    for i in range(args.count_processes):
        stages.start(f"count-{i}", stage_command(config, args.prefix, "count", "--drop-rate", str(args.drop_rate),
                                                 "--seed", str(i)))  # fmt: skip
    with follow_outcomes(config, topics.spout, from_now=True) as poll:  # before the sentences: only their outcomes
        ids = produce(config, topics.sentences, lines)
        deadline, seen = time.monotonic() + args.max_wait_s, {}
        waiting = Waiting(config, len(ids), partial(_answers, config.client(), topics.sentences))
        while time.monotonic() < deadline:
            seen = poll(1.0)
            stages.watch()
            done = sum(1 for m in ids if m in seen)
            for line in waiting.lines(done):
                print(line, file=sys.stderr)
            if done == len(ids):
                break
    first = Counter(seen[m][0] for m in ids if m in seen)
    print(
        f"sentences {len(ids)}: acked {first['ACK']}, failed {first['FAILED']}, timed out {first['TIMEOUT']}, "
        f"overload {first['OVERLOAD']}, undecided {len(ids) - sum(first.values())}; restarts {stages.restarts}"
    )
    if waiting.down and sum(first.values()) < len(ids):
        print(f"the broker at {config.bootstrap_servers} did not answer at the end: the undecided trees wait for it",
              file=sys.stderr)  # fmt: skip
    if args.crash_split_after and not stages.crashed("split"):
        print(f"no split process read {args.crash_split_after} messages: none crashed", file=sys.stderr)
    return 0 if sum(first.values()) == len(ids) else 1


def add_parser(sub: Any) -> None:
    wordcount = sub.add_parser(
        "wordcount",
        help="Storm's streaming word count as a Kafka pipeline",
        description=prose(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stages = wordcount.add_subparsers(dest="stage", required=True, metavar="STAGE")

    def stage(
        name: str,
        help_text: str,
        run: Callable[[argparse.Namespace], int],
        *,
        seed: str = "",
        shown: Iterable[str] | None = None,
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = stages.add_parser(name, help=help_text)
        add_arguments(parser, shown)  # shown None: all (the stages that run the acker)
        parser.add_argument("--prefix", default="wc", help="topic prefix of the pipeline [default: wc]")
        if seed:
            parser.add_argument("--seed", type=int, default=0, help=f"seed of {seed} [default: 0]")
        parser.set_defaults(run=run)
        return parser

    topics = stage("topics", "create the pipeline's and the acker's topics", cmd_topics, shown=TOPIC_SETTINGS)
    topics.add_argument(
        "--pipeline-partitions", type=at_least(1), default=4, help="partitions of each pipeline topic [default: 4]"
    )
    produce_parser = stage(
        "produce", "write sentences to the source topic", cmd_produce, seed="generated sentences",
        shown=("bootstrap_servers",),
    )  # fmt: skip
    for parser in (produce_parser,):
        parser.add_argument("--sentences", type=at_least(0), default=1000, help="sentences to generate [default: 1000]")
        parser.add_argument("--file", help="sentences from this file, one a line, instead of generated ones")
    for name, help_text, run_stage in (("spout", "run the spout", cmd_spout), ("split", "run a split bolt", cmd_split),
                                       ("count", "run a count bolt", cmd_count)):  # fmt: skip
        shown = SPOUT_SETTINGS if name == "spout" else BOLT_SETTINGS
        parser = stage(name, help_text, run_stage, seed="" if name == "spout" else "injected failures", shown=shown)
        parser.add_argument("--log-level", default="INFO", help="logging level [default: INFO]")
        parser.add_argument(
            "--trace", action="store_true", help="tag every message with its source record (header wc.sentence)"
        )
        add_port_argument(parser)
    spout = stages.choices["spout"]
    spout.add_argument(
        "--max-pending", type=at_least(1), default=10_000, help="unfinished trees at most [default: 10000]"
    )
    spout.add_argument("--untracked", action="store_true", help="at-most-once: no trees, no acker traffic")
    spout.add_argument(
        "--spout-group",
        metavar="GROUP",
        default=None,
        help="its consumer group (watermarks in GROUP.acked) [default: PREFIX-spout]",
    )
    split = stages.choices["split"]
    split.add_argument("--fail-rate", type=share, default=0.0, help="share of sentences to fail [default: 0]")
    split.add_argument(
        "--crash-after", type=at_least(0), default=None, help="exit abruptly after N messages (0: at the first)"
    )
    split.add_argument("--crash-marker", default=None, help="with --crash-after: only if this creates file PATH")
    count = stages.choices["count"]
    count.add_argument("--drop-rate", type=share, default=0.0, help="share of words to drop silently [default: 0]")
    count.add_argument(
        "--crash-after", type=at_least(0), default=None, help="exit abruptly after N messages (0: at the first)"
    )
    count.add_argument("--crash-marker", default=None, help="with --crash-after: only if this creates file PATH")
    run = stage("run", "run the whole pipeline on generated or given sentences", cmd_run, seed="generated sentences")
    run.add_argument("--sentences", type=at_least(0), default=1000, help="sentences to generate [default: 1000]")
    run.add_argument("--file", help="sentences from this file, one a line, instead of generated ones")
    run.add_argument(
        "--fail-rate", type=share, default=0.0, help="share of sentences the split bolt fails [default: 0]"
    )
    run.add_argument(
        "--drop-rate", type=share, default=0.0, help="share of words the count bolt drops silently [default: 0]"
    )
    run.add_argument(
        "--crash-split-after",
        type=at_least(0),
        default=None,
        help="crash one split process after N messages (0: never) [default: never]",
    )
    run.add_argument("--split-processes", type=at_least(1), default=2, help="split bolt processes [default: 2]")
    run.add_argument("--count-processes", type=at_least(1), default=2, help="count bolt processes [default: 2]")
    run.add_argument("--untracked", action="store_true", help="at-most-once: no trees, no acker traffic")
    run.add_argument(
        "--pipeline-partitions", type=at_least(1), default=4, help="partitions of each pipeline topic [default: 4]"
    )
    run.add_argument(
        "--max-wait-s", type=positive, default=120.0, help="give up waiting for outcomes after this [default: 120]"
    )
