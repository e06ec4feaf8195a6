"""Prometheus metrics of a pipeline's own processes: what its spouts, bolts and coordinated steps count, read at
scrape time.

What Storm's UI shows per spout and bolt (emitted, acked, failed, errors), for the stages of one process:
``metrics = serve_stages(port)`` before the stages are built, then ``metrics.add(spout, bolt, ...)`` (and
``metrics.close()`` after they stop, in a process that goes on). Each stage
keeps its counts in its ``counters`` (the same ones its stop line logs); a scrape copies them, so the stages' loops
count as they did. Exported:

- ``acker_stage_events_total{kind, stage, event}``: each count of each stage, ``kind`` ``spout``, ``bolt`` or
  ``step`` (a coordinated step, `acker.kafka.coordinated_stage`: DRPC's servers), ``stage`` the spout's name, the
  bolt's group or the step's (stages of one kind and name in one process are summed: a bolt group run in several
  threads). The events of `SPOUT_EVENTS`, `BOLT_EVENTS` and `STEP_EVENTS` are there from the start, at 0, so that an
  alert on an increase sees the first; the others once they are counted. A count never goes down: a step whose
  batch aborts sets its counts back to where they were, and counts the batch again when it runs it again.
- ``acker_spout_pending_trees{stage}``: trees started and not yet decided (at most ``max_pending``).
- ``acker_spout_paused{stage}``: 1 while the spout waits at ``max_pending`` (Storm's backpressure), else 0 (summed
  too: the spouts of that name waiting).
- ``acker_stage_reads_held{kind, stage}``: partitions of the stage's input whose reads a transaction still open
  has held longer than ``open_transaction_warn_s``, as its log says (`acker.kafka.held_reads`): a transaction whose
  producer died holds them until the broker aborts it, a hanging one for good.
- ``acker_spout_complete_latency_seconds{stage}``: Storm's complete latency, as the spout sees it: from starting a
  tree to reading its ``ACK`` (the acker's ``acker_complete_latency_seconds`` ends where the tree completed, before
  its outcome is written and read).
- ``acker_bolt_execute_seconds{stage, thread}``: a summary (``_count``, ``_sum``) of the time each bolt spent on its
  inputs (and its ticks, `Bolt`'s ``on_tick``: a bolt that writes in bulk at its ticks counts that work, its inputs'
  work, over its inputs), the input in hand included (`Bolt.busy_s`: a function that hangs shows), ``thread`` the
  bolt's place among the bolts of its group in this process (each runs in its own thread), in the order added.
  ``rate(_sum)`` is Storm's capacity of that bolt, the share of the time it is busy (near 1, it holds the pipeline
  back: with partitions or keys spread unevenly, one thread of a group may be, the others idle); ``rate(_sum) /
  rate(_count)`` summed over a group is Storm's execute latency.
- ``acker_bolt_process_seconds{stage, thread}``: a summary of the time from each bolt taking an input to its ack
  (``_count`` the inputs acked; failed ones are not counted): ``rate(_sum) / rate(_count)`` is Storm's process
  latency. A basic bolt acks as its function returns (about its execute latency); an explicit one may hold an input
  long after (a join waiting for the other side), and the gap between the two is that wait.

The acker service's own metrics are `acker.metrics`; docs/prometheus-alerts.yml alerts on both.
"""

from __future__ import annotations

import argparse
import threading
from collections import Counter
from collections.abc import Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from acker.argtypes import at_least
from acker.bolt import Bolt
from acker.kafka.coordinated_stage import CoordinatedStage
from acker.kafka.held_reads import WatchedConsumer
from acker.metrics import LatencyHistogram, MetricsEndpoint, serve
from acker.spout import Spout

Stage = Spout | Bolt | CoordinatedStage

# Exported at 0 from the start (each a count the stage keeps: tests/unit/test_stage_metrics.py checks the names).
SPOUT_EVENTS: tuple[str, ...] = (
    "read",  # source records read (replays included)
    "emitted",  # data messages sent downstream
    "acked",
    "nacked_failed",
    "nacked_timeout",
    "nacked_overload",
    "emit_errors",  # the emit function raised: the record fails, to be replayed
    "on_outcome_errors",  # the on_outcome function raised
    "unreadable_headers",
    "unreadable_outcomes",  # outcome records it could not read
    "pending_given_up",  # trees without an outcome, timed out by the spout
    "init_delivery_failures",
    "data_delivery_failures",  # a data message the broker refused: its tree failed
)
BOLT_EVENTS: tuple[str, ...] = (
    "processed",  # inputs read
    "emitted",  # children sent downstream
    "written",  # records that leave the pipeline (`collector.write`)
    "acked",  # inputs acked (the basic API's on return too)
    "failed",  # inputs failed (those the function raised on too)
    "errors",  # the function raised: the input fails
    "invalid_anchor_headers",
    "unreadable_headers",
    "child_delivery_failures",
    "unwritten_dropped",  # records written out, not delivered when their partitions went (`Bolt`): trees failed
)
STEP_EVENTS: tuple[str, ...] = (
    "processed",  # requests' records read
    "finished",  # requests answered
    "failed",  # requests failed (a task's report of a failure, or past their deadline)
    "dead_letters",
    "late",  # reports for requests already decided
    "assigned",  # tasks taken over
    "started_over",  # batches aborted (the group moved on, or the transaction failed), their tasks restored
    "producers_renewed",  # new transactional producers after an outage left the one before without transactions
)


class StageCollector(Collector):
    """The counts of its stages at each scrape (`acker_stage_events_total` and the spouts' gauges)."""

    def __init__(self, stages: Sequence[Stage] = (), endpoint: MetricsEndpoint | None = None) -> None:
        self._stages = tuple(stages)
        self._lock = threading.Lock()  # scrapes may come together
        # Invariant: the most each counter (each event of a stage, each bolt's execute and process counts and seconds)
        # was exported at; none is exported lower (a step's aborted batch sets its counts back; `Bolt.busy_s` may
        # answer a little lower than before).
        self._exported: dict[tuple[str, ...], float] = {}
        self._endpoint = endpoint  # what serves it (`serve_stages`)

    def add(self, *stages: Stage) -> None:
        """Count ``stages`` too from the next scrape on."""
        self._stages += stages  # a new tuple: a scrape meanwhile reads the one before

    def close(self) -> None:
        """Stop serving (the port is free again) and let go of the stages; for a process that goes on after its
        stages stopped. A command's process need not: its end does both."""
        if self._endpoint is not None:
            self._endpoint.close()
        self._stages = ()

    def collect(self) -> Iterator[Metric]:
        counted: dict[tuple[str, str], Counter[str]] = {}
        pending: Counter[str] = Counter()
        paused: Counter[str] = Counter()
        held: Counter[tuple[str, str]] = Counter()
        latency: dict[str, LatencyHistogram] = {}
        executing: list[tuple[str, str, int, float]] = []  # (bolt group, thread, inputs, seconds on them)
        processing: list[tuple[str, str, int, float]] = []  # (bolt group, thread, inputs acked, seconds until acked)
        bolts: Counter[str] = Counter()  # bolts of each group so far: the next one's thread label
        for stage in self._stages:
            counts = dict(stage.counters)  # a copy first: the stage's thread counts on meanwhile
            if isinstance(stage, Spout):
                kind, name, always = "spout", stage.settings.name, SPOUT_EVENTS
                pending[name] += len(stage.pending)
                paused[name] += stage.paused
                latency[name] = latency.get(name, LatencyHistogram()).plus(stage.complete_latency)
            elif isinstance(stage, Bolt):
                kind, name, always = "bolt", stage.group, BOLT_EVENTS
                thread = str(bolts[name])
                executing.append((name, thread, counts.get("processed", 0), stage.busy_s()))
                processing.append((name, thread, stage.process_count, stage.process_s))
                bolts[name] += 1
            else:
                kind, name, always = "step", stage.group, STEP_EVENTS
            events = counted.setdefault((kind, name), Counter(dict.fromkeys(always, 0)))
            events.update(counts)
            readers = (stage.consumer, stage.replays) if isinstance(stage, Spout) else (stage.consumer,)
            held[(kind, name)] += sum(c.reads_held for c in readers if isinstance(c, WatchedConsumer))
        family = CounterMetricFamily(
            "acker_stage_events", "What a spout, bolt or coordinated step counted, by event",
            labels=["kind", "stage", "event"],
        )  # fmt: skip
        with self._lock:
            for (kind, name), events in sorted(counted.items()):
                for event, count in sorted(events.items()):
                    family.add_metric([kind, name, event], self._never_lower((kind, name, event), count))
        yield family
        gauges = (
            ("acker_spout_pending_trees", "Trees the spout started and has no outcome of yet", pending),
            ("acker_spout_paused", "1 while the spout waits at max_pending, else 0", paused),
        )
        for metric, doc, values in gauges:
            gauge = GaugeMetricFamily(metric, doc, labels=["stage"])
            for name, value in sorted(values.items()):
                gauge.add_metric([name], value)
            yield gauge
        reads_held = GaugeMetricFamily(
            "acker_stage_reads_held",
            "Partitions whose reads a transaction still open has held past open_transaction_warn_s",
            labels=["kind", "stage"],
        )
        for (kind, name), value in sorted(held.items()):
            reads_held.add_metric([kind, name], value)
        yield reads_held
        histogram = HistogramMetricFamily(
            "acker_spout_complete_latency_seconds",
            "From the spout starting a tree to its reading the tree's ACK (acked trees)",
            labels=["stage"],
        )
        for name, seen in sorted(latency.items()):
            buckets, sum_s = seen.prometheus_buckets()
            histogram.add_metric([name], buckets, sum_s)
        yield histogram
        summaries = (  # metric, help, the key its values are kept never lower under, (group, thread, count, seconds)
            (
                "acker_bolt_execute_seconds",
                "Time a bolt spent on its inputs, the one in hand included: from reading one's headers to its "
                "function's return (basic bolts: to its children and ack sent), and on its ticks (on_tick)",
                "execute",
                executing,
            ),
            ("acker_bolt_process_seconds", "Time from a bolt taking an input to its ack (acked inputs)", "process",
             processing),
        )  # fmt: skip
        for metric, doc, key, rows in summaries:
            summary = SummaryMetricFamily(metric, doc, labels=["stage", "thread"])
            with self._lock:
                for name, thread, inputs, seconds in rows:
                    count = int(self._never_lower((key, name, thread), inputs))  # counts of inputs: ints
                    total = self._never_lower((key + "_s", name, thread), seconds)
                    summary.add_metric([name, thread], count, total)
            yield summary

    def _never_lower(self, key: tuple[str, ...], value: float) -> float:
        """``value``, or what ``key`` was exported at before if that is more (called with the lock held)."""
        self._exported[key] = exported = max(value, self._exported.get(key, value))
        return exported


def add_port_argument(parser: argparse.ArgumentParser) -> None:
    """``--stage-metrics-port``, the port of a stage command's `serve_stages` (0, the default: none)."""
    parser.add_argument(
        "--stage-metrics-port",
        type=at_least(0, 65536),
        default=0,
        metavar="PORT",
        help="serve the stage's counts for Prometheus on PORT (acker.stage_metrics) [default: 0, none]",
    )


def serve_stages(port: int, *stages: Stage) -> StageCollector:
    """Serve the metrics of ``stages``, and of those `StageCollector.add` adds, on ``port`` (0: not at all), from a
    daemon thread; `ConfigError` for a port in use.

    Call it before the stages are built: a stage built joins its consumer group, and one left unclosed when the port
    was refused kept its process from exiting (librdkafka's destroy without a close, spinning a core) while it held
    partitions of the group."""
    endpoint = serve(port, flag="--stage-metrics-port", others="another stage")
    collector = StageCollector(stages, endpoint)
    endpoint.registry.register(collector)
    return collector
