"""The `acker` command line: one sub-command per job, each a thin shell around library code."""

from __future__ import annotations

import argparse
import gc
import io
import logging
import os
import re
import select
import signal
import stat
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any, Protocol, TextIO

from confluent_kafka import KafkaException

from acker import logs
from acker.argtypes import at_least, group_name, share, topic_with_partitions
from acker.config import BUCKETS_MAX, ServiceConfig, add_arguments, is_text, load
from acker.core.outcomes import Acked
from acker.core.tracker import Tracker, TrackerConfig
from acker.errors import AckerError, ConfigError
from acker.help_text import prose
from acker.kafka.clients import NO_ANSWER, REFUSED_LOGIN, kafka_error


def _cmd_replay(args: argparse.Namespace) -> int:
    from acker.columnar import BlockTracker
    from acker.replay import replay

    # The service's tracker settings: from --config, the environment and the flags, as it takes them.
    config = load(args).tracker_config()
    tracker = Tracker(config) if args.engine == "reference" else BlockTracker(config)
    if args.file == "-":
        # Lines end at "\n" alone, read from a file or from stdin: a file's universal newlines split at a "\r" too,
        # so the same bytes made other lines from a file ("\r\n" is still one end: JSON takes the "\r" as a space).
        if isinstance(sys.stdin, io.TextIOWrapper):
            sys.stdin.reconfigure(errors="surrogateescape", newline="\n")
        bad = replay(tracker, sys.stdin, sys.stdout, sys.stderr)
    else:
        # bad bytes: a bad line, not a stop
        with open(args.file, encoding="utf-8", errors="surrogateescape", newline="\n") as lines:
            bad = replay(tracker, lines, sys.stdout, sys.stderr)
    if args.stats:
        print(" ".join(f"{k}={v}" for k, v in tracker.counters.as_dict().items()), file=sys.stderr)
    if bad:
        print(f"{bad} malformed line(s) skipped", file=sys.stderr)
        return 1
    return 0


@contextmanager
def _whole_file(path: str, named: str | None = None) -> Iterator[io.TextIOWrapper]:
    """A text file written at ``path`` only whole: written beside it, and put in its place once the block ends
    without an error; else removed, and a file that was at ``path`` left as it was (an export that failed midway
    left a prefix there that read as a whole partition, in place of what the file held). ``named``: the name the
    user gave it (a link to ``path``), which errors say."""
    directory, name = os.path.split(os.path.abspath(path))
    try:
        fd, partial = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".partial")
    except OSError as error:  # said of the file asked for, not of the one beside it (no such directory, say)
        raise OSError(error.errno, error.strerror, named or path) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yield out
        os.chmod(partial, _mode_for(path))
        os.replace(partial, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(partial)
        raise


def _mode_for(path: str) -> int:
    """The permissions a file written at ``path`` gets: those of the file there, as `open` keeps them (an export
    over a file made private stays private), else what `open` gives a new file (mkstemp's are the owner's alone)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


# The names of a descriptor of this process: /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, /proc/PID/fd/N.
_DESCRIPTOR = re.compile(r"/dev/(stdout|stderr)|/dev/fd/(\d+)|/proc/(?:self|(\d+))/fd/(\d+)")


def _descriptor(path: str) -> int | None:
    """The descriptor of this process ``path`` names, itself or through its symlinks (a link to ``/dev/stdout``);
    None for a path that names none (a file's own name, whatever descriptor has it open)."""
    at = os.path.abspath(path)
    for _ in range(40):  # as the kernel follows links
        if (named := _DESCRIPTOR.fullmatch(at)) is not None:
            standard, fd, pid, in_proc = named.groups()
            if pid is not None and int(pid) != os.getpid():
                return None
            return {"stdout": 1, "stderr": 2}.get(standard or "") or int(fd or in_proc)
        if not os.path.islink(at):
            return None
        at = os.path.normpath(os.path.join(os.path.dirname(at), os.readlink(at)))
    return None


def _output(path: str) -> AbstractContextManager[TextIO]:
    """Where an export writes: standard output (``-``); a descriptor of this process by its name (``/dev/stdout``,
    ``/dev/fd/3``, a link to one), written through that descriptor, where the shell stands (never replaced nor cut
    short: a shell's ``>> log`` or a group's output kept); a regular file, or a path with nothing there yet, only
    whole (`_whole_file`), at the end of its symlinks (the links left as they are: a file put in the place of one
    would replace the link, not its target); anything else as it is, through it (a named pipe, a device, a shell's
    ``>(gzip > f)``), which a file put in its place would replace."""
    if path == "-":
        return nullcontext(sys.stdout)
    if (descriptor := _descriptor(path)) is not None:
        try:
            return open(os.dup(descriptor), "w", encoding="utf-8")  # its file position shared with the shell's
        except OSError as error:  # not open here
            raise OSError(error.errno, error.strerror, path) from None
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)  # through its symlinks
    except FileNotFoundError:  # nothing there yet, or a link to nothing yet
        regular = True
    if not regular:
        return open(path, "w", encoding="utf-8")
    return _whole_file(os.path.realpath(path), path)


def _cmd_export(args: argparse.Namespace) -> int:
    from acker.export import export_partition, span

    config = _answered_config(args)
    where = span(config, args.partition, args.from_offset, args.to_offset)  # checked before a file is overwritten
    # SIGTERM (a `timeout`, systemd, Kubernetes) as Ctrl-C: the file written beside the output is removed, not left.
    with sigterm_as_interrupt(), _output(args.output) as out:
        done = export_partition(config, where, out, sys.stderr)
    said = [f"{config.acker_topic}[{args.partition}] from offset {where.start} up to {where.end}"
            + (f" (a transaction is open from {where.end}; the end as written is {where.written_end})"
               if where.written_end > where.end and (args.to_offset is None or args.to_offset > where.end) else "")
            + f": {done.records} record(s) read, {done.messages} message(s) written"]  # fmt: skip
    if done.refused:
        said.append(f"{done.refused} record(s) refused by the service, written as the fails of their inits")
    if done.ignored_ticks:
        said.append(f"{done.ignored_ticks} tick(s) off the tick chain left out")
    if done.undecodable:
        said.append(f"{done.undecodable} record(s) that are not acker records left out")
    print("; ".join(said), file=sys.stderr)
    return 0


# Messages `acker simulate` generates at most (trees × (fanout + 2)): every one is held, about 200 bytes each
# (1,000,000 trees of 5 words: 1.3 GB, 45 s on 2 vCPUs); 100,000,000 trees asked printed nothing for minutes, then
# ran out of memory.
SIMULATE_MAX_MESSAGES = 20_000_000


def _cmd_simulate(args: argparse.Namespace) -> int:
    from acker.columnar import BlockTracker
    from acker.replay import message_blocks
    from acker.workload import WorkloadSpec, generate

    if (messages := args.trees * (args.fanout + 2)) > SIMULATE_MAX_MESSAGES:  # held in memory, all of them
        raise ConfigError(f"--trees {args.trees} of --fanout {args.fanout} make {messages:,} messages: "
                          f"{SIMULATE_MAX_MESSAGES:,} at most (each takes about 200 bytes)")  # fmt: skip
    # The expected outcomes hold while no tree outlives its timeout but for a lost ack: ticks far enough apart that a
    # window of overlapping trees (``window`` trees of ``fanout + 2`` messages) fits within a tick interval, with
    # room for the fewest buckets. At the default 5,000 a fanout of 150 timed whole trees out, reported as wrong.
    defaults = WorkloadSpec()
    spec = WorkloadSpec(
        trees=args.trees,
        fanout=args.fanout,
        fail_rate=args.fail_rate,
        drop_rate=args.drop_rate,
        seed=args.seed,
        buckets=args.buckets,
        tick_every=max(defaults.tick_every, 4 * defaults.window * (args.fanout + 2)),
    )
    workload = generate(spec)
    config = TrackerConfig(buckets=args.buckets)
    tracker = Tracker(config) if args.engine == "reference" else BlockTracker(config)
    if isinstance(tracker, Tracker):
        started = time.perf_counter()
        outcomes = tracker.handle_all(workload.messages)
        elapsed = time.perf_counter() - started
    else:  # in blocks, as the service gives it records: encoded (as the wire's decoding gives them) before the clock
        blocks = list(message_blocks(workload.messages))
        started = time.perf_counter()
        decided = [tracker.process(block) for block in blocks]
        elapsed = time.perf_counter() - started
        outcomes = [outcome for block in decided for outcome in block.to_outcomes()]

    got: dict[str, str] = {}
    duplicates = 0
    misnamed = 0  # outcomes of no record, or naming another tree or spout than the record's: a spout would drop them
    for outcome in outcomes:
        if workload.anchors.get(outcome.msg_id) != outcome.anchor or outcome.spout != spec.spout:
            misnamed += 1
            continue
        duplicates += outcome.msg_id in got
        got[outcome.msg_id] = "ack" if isinstance(outcome, Acked) else outcome.reason.value
    lost = [m for m in workload.expected if m not in got]
    wrong = [m for m, want in workload.expected.items() if m in got and got[m] != want]
    early = [m for m in wrong if got[m] == "ack"]  # acked although a tuple failed or was lost

    from rich.table import Table

    from acker.console import table_console

    table = Table(title=f"Simulation: {spec.trees} trees, {len(workload.messages)} messages")
    table.add_column("measure")
    table.add_column("value", justify="right")
    by_kind = Counter(got.values())
    for name, value in (
        ("source records", spec.trees),
        ("acked", by_kind["ack"]),
        ("nacked failed", by_kind["failed"]),
        ("nacked timeout", by_kind["timeout"]),
        ("expected acked", sum(v == "ack" for v in workload.expected.values())),
        ("records without an outcome (lost)", len(lost)),
        ("wrong outcomes", len(wrong)),
        ("acked too early", len(early)),
        ("duplicate outcomes", duplicates),
        ("outcomes of no record, or of another tree", misnamed),
        ("throughput (messages/s)", f"{len(workload.messages) / elapsed:,.0f}"),
    ):
        table.add_row(name, str(value))
    for key, value in tracker.counters.as_dict().items():
        table.add_row(f"counter {key}", str(value))
    table_console().print(table)
    ok = not lost and not wrong and not duplicates and not misnamed
    print("RESULT:", "every record has exactly its right outcome" if ok else "FAILED: see the table above")
    return 0 if ok else 1


def _service_config(args: argparse.Namespace) -> ServiceConfig:
    from acker.config import load

    return load(args)


def _answered_config(args: argparse.Namespace) -> ServiceConfig:
    """`_service_config`, once Kafka has answered about the acker topic: a login refused is said as such within
    seconds, not, 10 s later, as a Kafka that did not answer (`answering`)."""
    from acker.kafka.clients import answering

    config = _service_config(args)
    answering(config.client(), config.acker_topic)
    return config


def _cmd_run(args: argparse.Namespace) -> int:
    import logging

    from acker.metrics import ServiceCollector, serve
    from acker.service import AckerService

    config = _service_config(args)
    logging.getLogger("acker").info("configuration: %s", config.redacted())
    endpoint = serve(config.metrics_port)
    service = AckerService(config)
    endpoint.registry.register(ServiceCollector(service.snapshot))
    return run_until_signalled(service)


class Runnable(Protocol):
    def run(self, stop: threading.Event) -> None: ...


GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Fewer garbage collections for a process that handles messages one by one.

    Each message allocates short-lived objects; Python's default (a young collection every 700 allocations, and every
    so often a full one that walks every object of the process, imported modules included) cost the pipeline's
    bolts about a third of their CPU. What exists after start-up is frozen (never walked again), and young objects
    are collected every ``GC_YOUNG_THRESHOLD`` allocations: cycles are still collected, less often.
    """
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


class TerminatedError(Exception):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (`sigterm_as_interrupt`)."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `TerminatedError`, so that a command that starts processes (the demo, the
    word count's runner) stops them as on Ctrl-C; the handler before is back when the block is left, before the
    caller's cleanup, which a second signal then ends at once."""

    def on_term(_signum: int, _frame: object) -> None:
        raise TerminatedError

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted_status(stopped: BaseException) -> int:
    """The exit status of a command stopped by Ctrl-C or SIGTERM: 128 + the signal, as a shell says it."""
    return 128 + (signal.SIGTERM if isinstance(stopped, TerminatedError) else signal.SIGINT)


def run_until_signalled(runnable: Runnable) -> int:
    """Run a service, spout or bolt until SIGINT or SIGTERM asks it to stop (it then stops cleanly: flushes what it
    produced and commits, which can take a while when the broker is gone). A second signal ends it at once; nothing
    is lost by that either, only replayed: what it had not flushed or committed times out and is replayed.

    It runs in a thread of its own, the main thread waiting for it: Python runs a signal's handler in the main thread
    only, once the call it is in returns, and a stop stuck in a call into librdkafka (a consumer's close that never
    returns, librdkafka#4041) left the second signal unanswered. What it raises is raised here."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    tune_gc()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            runnable.run(stop)
        except BaseException as error:
            raised.append(error)

    worker = threading.Thread(target=run, name=type(runnable).__name__.lower())
    worker.start()
    while worker.is_alive():
        worker.join(0.2)  # returns to Python now and then: the handlers run
    if raised:
        raise raised[0]
    return 0


def _cmd_topics_create(args: argparse.Namespace) -> int:
    from acker.kafka.clients import TopicSpec
    from acker.topics import all_topics, create_and_report

    config = _service_config(args)
    specs = all_topics(config, args.spout)
    own = {spec.name for spec in specs}
    pipeline: dict[str, int] = {}  # the --topic ones, each once (Kafka refuses a request naming a topic twice)
    for name, count in args.topic:
        if name in own:
            raise ConfigError(f"--topic {name}: one of the acker's own topics, made here with its own settings")
        partitions = count or config.partitions
        if pipeline.setdefault(name, partitions) != partitions:
            raise ConfigError(f"--topic {name} given with {pipeline[name]} and {partitions} partitions")
    specs += [TopicSpec(name, count, config.replication_factor) for name, count in pipeline.items()]
    create_and_report(config, specs)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from rich.table import Table

    from acker.console import table_console
    from acker.status import group_lag, read_status

    config = _answered_config(args)
    lags = group_lag(config)
    if lags is None:
        raise AckerError(f"acker topic {config.acker_topic} not found (or no leader yet): acker topics create makes it")
    statuses = read_status(config)
    if args.json:
        import json

        rows = []
        now = time.time()
        for partition in sorted(set(lags) | set(statuses)):
            committed, end = lags.get(partition, (None, None))
            status = statuses.get(partition)
            age, standing = _standing(status or {}, now, config)  # as the table reads it: a script need not
            rows.append({"partition": partition, "committed": committed, "end": end, "standing": standing,
                         "age_s": None if age is None else round(age, 1), "status": status})  # fmt: skip
        print(json.dumps(rows, indent=2))
        return 0
    windows = [w for status in statuses.values() if isinstance(w := status.get("rate_window_s"), int | float)]
    over = f", rates over the last {max(windows):.0f} s" if windows else ""
    table = Table(title=f"acker topic {config.acker_topic}, group {config.group}{over}")
    columns = ("partition", "instance", "pending", "acked", "nacked", "acked/s", "nacked/s", "read lag", "committed",
               "end", "re-read by a new owner")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    now = time.time()
    for partition in sorted(set(lags) | set(statuses)):
        table.add_row(str(partition), *_status_cells(statuses.get(partition, {}), lags.get(partition), now, config))
    table_console().print(table)
    return 0


_NACKS = ("nacked_failed", "nacked_timeout", "nacked_overload")


def _status_cells(
    status: dict[str, Any], offsets: tuple[int | None, int | None] | None, now: float, config: ServiceConfig
) -> list[str]:
    """A partition's row of `acker status` but its number: from its newest ``status`` (empty when none) and the
    group's committed offset and the end (``offsets``). A partition its last owner released, or whose owner has not
    published for three of its intervals (gone: its partitions move after the session timeout), shows no pending
    trees, rates nor read lag: those were the owner's when it last spoke, and an acker group down showed 0 pending and
    0 lag while records piled up. What a new owner reads again (committed to end) says how many."""
    from acker.console import printable

    committed, end = offsets or (None, None)
    rates, counters = status.get("rates", {}), status.get("counters", {})
    age, standing = _standing(status, now, config)
    instance = printable(f"{status.get('instance', '-')}")
    if standing == "released":
        owner = f"- (released by {instance}{'' if age is None else f' {age:.0f}s ago'})"
    else:
        owner = instance + ("" if age is None else f" ({age:.0f}s ago{', stale' if standing == 'stale' else ''})")
        if status.get("reading_back"):  # its records wait for it (`AckerService._recover`)
            owner += ", reading back"
    current = standing == "current"
    measured = current and status.get("rate_window_s") != 0  # a partition's first status has no rates yet
    nacked = round(sum(rates.get(k, 0) for k in _NACKS), 1)  # rates are rounded to 0.1: so is their sum
    return [
        owner,
        str(status.get("pending", "-") if current else "-"),
        str(counters.get("acked", "-")),  # since its instance took the partition
        str(sum(counters.get(k, 0) for k in _NACKS) if counters else "-"),
        str(rates.get("acked", "-") if measured else "-"),
        str(nacked if measured else "-"),
        str(lag if current and (lag := status.get("lag")) is not None else "-"),  # None: nothing read yet
        str(committed if committed is not None else "-"),
        str(end if end is not None else "-"),
        _re_read(committed, end),
    ]


def _standing(status: dict[str, Any], now: float, config: ServiceConfig) -> tuple[float | None, str]:
    """How old a partition's newest ``status`` is (None: it has no time) and what it says of the partition now:
    ``current`` (its owner publishes), ``released`` (its last owner gave it up), ``stale`` (no status for three of its
    owner's intervals plus 5 s: the owner is gone) or ``none`` (no status at all)."""
    if not status:
        return None, "none"
    stamp = status.get("time")
    age = now - stamp if isinstance(stamp, int | float) else None
    interval = status.get("status_interval_s")  # the instance's interval, not this command's
    every = interval if isinstance(interval, int | float) else config.status_interval_s
    if status.get("released"):  # its last, as it gave the partition up
        return age, "released"
    return age, "stale" if age is not None and age > 3 * every + 5 else "current"


def _re_read(committed: int | None, end: int | None) -> str:
    """What a new owner of a partition reads again: from the committed offset to the end, or, with none committed
    (nothing decided yet, or a new group) or one beyond the end (the topic deleted and made again: the consumer's
    reset, earliest, takes it to the first record), every record the partition still holds."""
    if end is None:
        return "-"
    if committed is None:
        return "all" if end else "0"
    if committed > end:  # a negative count said before
        return "all (committed beyond the end)"
    return str(end - committed)


def _cmd_watermarks(args: argparse.Namespace) -> int:
    from rich.table import Table

    from acker.console import table_console
    from acker.watermarks import read_watermarks, watermark_group_names, watermark_groups

    config = _answered_config(args)
    marks = read_watermarks(config, args.spout_groups)
    found = {m.group for m in marks}
    meant = {watermark_groups(group)[0]: watermark_groups(group) for group in args.spout_groups}  # each named once
    missing = [group for group, groups in meant.items() if found.isdisjoint(groups)]
    none_in = f"no watermarks committed in {', '.join(missing)}"
    if missing:  # a spout's name given for its consumer group, say: the groups that have watermarks
        known = [group for group in watermark_group_names(config) if group not in found and group not in missing]
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        none_in += (
            f" (a spout's name given? its consumer group is asked for; watermark groups: {shown})" if known else ""
        )
    if missing and (marks or args.json):  # left out of the rows: silence read as "nothing behind" (a typo, say)
        print(none_in, file=sys.stderr)
    if args.json:
        import json

        rows = [{**vars(m), "behind": m.behind, "beyond_end": m.beyond_end} for m in marks]
        print(json.dumps(rows, indent=2))
        return 0
    if not marks:
        print(none_in)
        return 0
    table = Table(title="fully-processed watermarks")
    for column in ("group", "topic", "partition", "watermark", "end", "behind"):
        table.add_column(column, justify="left" if column in ("group", "topic") else "right")
    for m in marks:
        end = "-" if m.end is None else str(m.end)
        behind = "-" if m.behind is None else f"{m.behind}{' (from its first record)' if m.watermark is None else ''}"
        if m.beyond_end:  # a spout reads the partition again from its first record (reset latest: from its end)
            behind += (" (the watermark is beyond the end: a spout reads it again from its first record, or, a source "
                       "with reset latest, from its end)")  # fmt: skip
        if m.open_from is not None:  # the spouts read nothing past it: why a watermark may stand still
            behind += f" (a transaction open from offset {m.open_from})"
        watermark = "none yet" if m.watermark is None else str(m.watermark)
        table.add_row(m.group, m.topic, str(m.partition), watermark, end, behind)
    table_console().print(table)
    return 0


def _add_monitoring(sub: Any) -> None:
    """`acker status` and `acker watermarks`."""
    status = sub.add_parser(
        "status",
        help="per partition: owner, pending trees, rates, lag",
        description="Read the status the instances publish and the group's committed offsets.",
    )
    add_arguments(status, ("bootstrap_servers", "acker_topic", "group", "status_topic", "status_interval_s"))
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(run=_cmd_status)

    watermarks = sub.add_parser(
        "watermarks",
        help="per source partition: each spout's fully-processed watermark, and how far behind the end it is",
        description="Read the committed offsets of the spouts' watermark groups (GROUP.acked, written by the Spark "
        "commit job): the first source record of each partition not known to be fully processed, the partition's "
        "end offset, and the records between them.",
    )
    add_arguments(watermarks, ("bootstrap_servers",))
    watermarks.add_argument(
        "spout_groups",
        nargs="+",
        type=group_name,
        metavar="GROUP",
        help="a spout's consumer group or its watermark group, GROUP.acked (a name ending in .acked is looked up "
        "both as a watermark group and as the group of a spout whose own group ends so, whose watermarks are in "
        "GROUP.acked.acked)",
    )
    watermarks.add_argument("--json", action="store_true", help="print JSON instead of a table")
    watermarks.set_defaults(run=_cmd_watermarks)


def _add_export(sub: Any) -> None:
    """`acker export`."""
    export = sub.add_parser(
        "export",
        help="write one acker partition's messages as the JSON lines acker replay reads, as the service applies them",
        description="Read one partition of the acker topic (from its first record, or --from-offset, to its end now, "
        "or --to-offset) and write its messages as JSON lines for acker replay: the ticks the service applies only "
        "(those that continue the partition's tick chain, followed from the service group's committed offset when "
        "that is not past the start, else from the partition's first record), and "
        "each record the service refused as a whole written as what it applies instead (a fail of each of its trees, "
        "then the tree's init; a record with a message of another partition where the service dead-lettered it). "
        "acker export ... | "
        "acker replay - with the service's tracker settings (buckets, high_water, relocate_on_update) decides each "
        "tree as the service did, exported from the partition's first record. What is left out or replaced is said "
        "on stderr, with its offset.",
    )
    export.add_argument("partition", type=at_least(0), help="the acker topic's partition")
    export.add_argument("--from-offset", type=at_least(0), metavar="OFFSET", help="first offset [default: the first]")
    export.add_argument(
        "--to-offset", type=at_least(0), metavar="OFFSET", help="end offset, excluded [default: the end]"
    )
    export.add_argument(
        "-o", "--output", metavar="FILE", default="-", help="file to write [default: - for standard output]"
    )
    # The names and prefixes of the deployment's own topics too: a spout name the service refuses (one whose topics
    # would meet them, `acker.topics.outcome_refusal`) is written as the service decided it.
    add_arguments(export, ("bootstrap_servers", "acker_topic", "group", "dlq_topic", "status_topic", "outcome_prefix",
                           "replay_prefix", "replay_dlq_topic"))  # fmt: skip
    export.set_defaults(run=_cmd_export)


# What `acker topics create` reads: where, which topics, how many partitions.
TRACKER_SETTINGS = ("buckets", "high_water", "relocate_on_update")  # what `acker replay` takes of the service's
TOPIC_SETTINGS = ("bootstrap_servers", "acker_topic", "outcome_prefix", "replay_prefix", "dlq_topic",
                  "replay_dlq_topic", "status_topic", "partitions", "replication_factor")  # fmt: skip


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kafka-acker")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="acker", description=prose(__doc__))
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = sub.add_parser(
        "replay",
        help="run protocol messages (JSON lines) through the tracker and print the outcomes",
        description="Read protocol messages as JSON lines from FILE (or - for stdin) and write the outcomes as "
        "JSON lines in decision order. Malformed lines are reported on stderr and skipped; the exit status is "
        "1 if any line was malformed.",
    )
    replay.add_argument("file", help="JSON-lines file, or - for standard input")
    replay.add_argument("--stats", action="store_true", help="print the tracker's counters on stderr at the end")
    replay.add_argument(
        "--engine",
        choices=("reference", "columnar"),
        default="reference",
        help="reference: one message at a time, exact decision order; columnar: the compiled block tracker "
        "(same decisions; the outcomes of one tick in table order)",
    )
    add_arguments(replay, TRACKER_SETTINGS)
    replay.set_defaults(run=_cmd_replay)

    _add_export(sub)

    simulate = sub.add_parser(
        "simulate",
        help="run the tracker alone on a generated word-count workload with failures and check every outcome",
        description="Generate Storm's word count as tuple trees (a sentence, then a tuple per word), with tuples "
        "that fail and acks that are lost at the given rates, shuffle each tree's messages among the others', run "
        "them through the tracker (no Kafka) and check that every record gets exactly the outcome it must: ack, "
        "failed, or timeout. Prints a table of outcomes and counters, and the throughput.",
    )
    simulate.add_argument(
        "--trees",
        type=at_least(1),
        default=100_000,
        help="source records (tuple trees); trees × (fanout + 2), the messages, 20,000,000 at most [default: 100000]",
    )
    simulate.add_argument("--fanout", type=at_least(1), default=5, help="words per sentence [default: 5]")
    simulate.add_argument(
        "--fail-rate", type=share, default=0.01, help="probability that a tuple fails [default: 0.01]"
    )
    simulate.add_argument(
        "--drop-rate", type=share, default=0.01, help="probability that an ack is lost [default: 0.01]"
    )
    simulate.add_argument("--seed", type=int, default=1, help="seed of the workload [default: 1]")
    simulate.add_argument(
        "--engine",
        choices=("reference", "columnar"),
        default="reference",
        help="reference: one message at a time; columnar: the compiled block tracker acker run uses "
        "[default: reference]",
    )
    simulate.add_argument(
        "--buckets",
        type=at_least(2, below=BUCKETS_MAX + 1),  # as the service's setting
        default=3,
        help=f"timeout buckets: a tree pending on the buckets-th tick after it started expires (2 to {BUCKETS_MAX}) "
        "[default: 3]",
    )
    simulate.set_defaults(run=_cmd_simulate)

    run = sub.add_parser(
        "run",
        help="run the acker service: consume the acker topic, publish outcomes per spout",
        description="Consume the acker topic in the acker group (each instance owns whole partitions, hence whole "
        "trees), publish ack/nack outcomes to one topic per spout, append ticks, commit recovery offsets. "
        "Settings come from --config FILE, ACKER_* environment variables and flags, in rising precedence.",
    )
    add_arguments(run)
    run.add_argument("--log-level", default="INFO", help="logging level [default: INFO]")
    run.set_defaults(run=_cmd_run)

    topics = sub.add_parser("topics", help="manage the acker's topics")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")
    create = topics_sub.add_parser(
        "create",
        help="create the acker, dead-letter and status topics, the Spark jobs' own (and outcome topics of the spouts "
        "named)",
        description="Create the topics the acker uses, with the configured partition counts, and a pipeline's own "
        "topics (--topic); existing topics are left as they are.",
    )
    add_arguments(create, TOPIC_SETTINGS)
    create.add_argument("--spout", action="append", default=[], help="also create this spout's outcome topic")
    create.add_argument(
        "--topic",
        action="append",
        default=[],
        type=topic_with_partitions,
        metavar="NAME[:PARTITIONS]",
        help="also create this topic of the pipeline (a source, a stage's input), with PARTITIONS partitions "
        "(default: --partitions): a stage runs as many processes as its input has partitions (repeatable)",
    )
    create.set_defaults(run=_cmd_topics_create)

    _add_monitoring(sub)

    from acker.dlq_cli import add_parser as add_dlq
    from acker.examples.demo import add_parser as add_demo
    from acker.examples.reach import add_drpc_parser
    from acker.examples.reach import add_parser as add_reach
    from acker.examples.wordcount_cli import add_parser as add_wordcount
    from acker.outcomes_cli import add_parser as add_outcomes
    from spark_jobs.cli import add_parser as add_spark

    add_outcomes(sub)
    add_demo(sub)
    add_dlq(sub)
    add_drpc_parser(sub)
    add_reach(sub)
    add_wordcount(sub)
    add_spark(sub)  # imports no pyspark: a plain install lists it, and says how to install Spark when it is run
    return parser


def _settings(args: argparse.Namespace) -> ServiceConfig | None:
    """The settings the command was given, for its last line; None for a command without the shared settings (the
    demo: the environment is not its), or settings that did not load (not the error to show)."""
    if not hasattr(args, "config"):
        return None
    quiet = logging.getLogger("acker.config")  # its warnings (settings ignored) were said by the command's own load
    was, quiet.disabled = quiet.disabled, True
    try:
        return load(args)
    except Exception:
        return None
    finally:
        quiet.disabled = was


def _servers(args: argparse.Namespace, config: ServiceConfig | None) -> str:
    """The bootstrap servers the command was given, however it was (a flag, the environment, a file: ``config``, its
    `_settings`); a command without the shared settings (the demo) only by its own flag."""
    return (
        config.bootstrap_servers
        if config
        else getattr(args, "bootstrap_servers", None) or "the configured bootstrap servers"
    )


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # not a file descriptor (a test's capture), or no poll here
        return True


# How a command's last line says that no broker answered (a supervisor, the demo's say, tells it from other ends by
# it: every error of the command's own exits with status 2).
DID_NOT_ANSWER = "Kafka did not answer"


# Arguments naming files this process opens itself, which take any bytes a file name may hold (Python keeps them as
# surrogates and gives them back to the system as they were): `acker replay`'s input, `acker export -o`, the demo's
# report, the word count's sentences. Not Spark's checkpoint nor its log, which go to the JVM as text.
_FILE_NAMES = frozenset({"file", "output", "report"})


def _not_text(args: argparse.Namespace) -> str | None:
    """The name of an argument of the command whose value is not UTF-8 text (a byte the locale could not decode,
    kept by Python as a lone surrogate), or None. Passed on (a group, a topic), a Kafka client ended the command with
    a traceback. The settings are checked by `acker.config.load`, which says where they came from; the names of
    files this process opens (`_FILE_NAMES`) are not text to check."""
    for name, value in vars(args).items():
        if name in _FILE_NAMES:
            continue
        for text in value if isinstance(value, list | tuple) else [value]:
            if isinstance(text, str) and not is_text(text):
                return name
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    unreadable = _not_text(args)
    if unreadable is not None:  # the value is not shown: it may be a secret
        print(f"acker: argument {unreadable.replace('_', '-')}: not UTF-8 text (a byte the locale could not decode)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        logs.configure(getattr(args, "log_level", None) or "WARNING")  # the commands without --log-level: warnings
        code: int = args.run(args)
    except AckerError as error:
        print(f"acker: {error}", file=sys.stderr)
        return 2
    except KafkaException as error:  # e.g. a librdkafka setting it does not know or cannot take
        cause = kafka_error(error)  # its text, not the error object's repr with code and value
        text = cause.str() if cause is not None else str(error)
        config = _settings(args)
        text = config.hide_secrets(text) if config else text  # librdkafka quotes a setting it cannot parse
        if cause is not None and cause.code() in NO_ANSWER:  # as `acker run` says it
            print(f"acker: {DID_NOT_ANSWER} ({text}): is it running, and reachable at {_servers(args, config)}?",
                  file=sys.stderr)  # fmt: skip
        elif cause is not None and cause.code() in REFUSED_LOGIN:
            print(f"acker: Kafka at {_servers(args, config)} refused the login ({text}): check the security settings "
                  "(--kafka security.protocol=..., sasl.*, ssl.*)", file=sys.stderr)  # fmt: skip
        else:
            print(f"acker: Kafka client: {text}", file=sys.stderr)
        return 2
    except TimeoutError as error:  # a Kafka admin request's future (it carries no message), or records not delivered
        what = f" ({error})" if str(error) else ""
        where = _servers(args, _settings(args))
        print(f"acker: {DID_NOT_ANSWER} in time{what}: is it running, and reachable at {where}?", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, TerminatedError) as stopped:  # said in a line, then died of the signal as Python
        # does of SIGINT: a shell's loop stops there too
        signum = signal.SIGTERM if isinstance(stopped, TerminatedError) else signal.SIGINT
        print(f"acker: {'terminated' if signum == signal.SIGTERM else 'interrupted'}", file=sys.stderr)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return interrupted_status(stopped)
    except BrokenPipeError as error:
        if not _reader_gone():  # another pipe (a socket to Spark's JVM, say): an error to show
            print(f"acker: {error.strerror or error}", file=sys.stderr)
            return 2
        # What read the output went away (`| head`): as Python's documentation does, no message, and the flush at
        # exit pointed elsewhere so that it is not one more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as error:  # a file that cannot be read, ...
        print(f"acker: {error.strerror or error}: {error.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
