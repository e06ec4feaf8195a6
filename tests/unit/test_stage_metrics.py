"""The stages' Prometheus metrics (`acker.stage_metrics`), from stand-in stages, and the alerting rules shipped in
docs/prometheus-alerts.yml against what the project exports."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import acker.bolt
import acker.kafka.coordinated_stage
import acker.spout
from acker.bolt import Bolt
from acker.core.tracker import Counters
from acker.errors import ConfigError
from acker.kafka.coordinated_stage import CoordinatedStage
from acker.kafka.held_reads import Ends, WatchedConsumer, _Watch
from acker.kafka.local_broker import free_ports
from acker.metrics import LatencyHistogram, ServiceCollector, Snapshot
from acker.spout import Spout
from acker.stage_metrics import BOLT_EVENTS, SPOUT_EVENTS, STEP_EVENTS, Stage, StageCollector, serve_stages
from acker.wire import OUTCOME_SYMBOLS, WIRE_REASONS

ROOT = Path(__file__).resolve().parents[2]
LABEL_VALUES = {
    "outcome": {"ack", "failed", "timeout", "overload"},
    "kind": {"spout", "bolt", "step"},
    "event": {*SPOUT_EVENTS, *BOLT_EVENTS, *STEP_EVENTS},
}


def _reader(held: int = 0) -> WatchedConsumer:
    """A stage's consumer, unconnected, that has said its reads of ``held`` partitions held (held_reads)."""
    reader = WatchedConsumer.__new__(WatchedConsumer)
    reader._watch = _Watch("g", 1)
    ends = {("t", p): Ends(5, 5, 9) for p in range(held)}
    reader._watch.held.observe(0, ends)
    reader._watch.held.observe(1, ends)
    return reader


def _spout(name: str, counters: dict[str, int], pending: int, paused: bool, held: tuple[int, int] = (0, 0)) -> Spout:
    spout: Any = Spout.__new__(Spout)  # only what the collector reads
    spout.consumer, spout.replays = _reader(held[0]), _reader(held[1])
    spout.settings, spout.counters = SimpleNamespace(name=name), Counter(counters)
    spout.pending, spout._paused = {f"t/0/{i}": i + 1 for i in range(pending)}, paused
    spout.complete_latency = LatencyHistogram().observed(np.array([3.0] * pending))
    return spout  # type: ignore[no-any-return]


def _bolt(group: str, counters: dict[str, int], execute_s: float = 0.0, process: tuple[int, float] = (0, 0.0)) -> Bolt:
    bolt: Any = Bolt.__new__(Bolt)
    bolt.group, bolt.counters, bolt.execute_s, bolt._executing_since = group, Counter(counters), execute_s, None
    bolt.process_count, bolt.process_s = process
    bolt.consumer = _reader()
    return bolt  # type: ignore[no-any-return]


def _step(group: str, counters: dict[str, int], held: int = 0) -> CoordinatedStage:
    step: Any = CoordinatedStage.__new__(CoordinatedStage)
    step.group, step.counters, step.consumer = group, counters, _reader(held)
    return step  # type: ignore[no-any-return]


def _scraped(*collectors: Any) -> dict[str, list[Any]]:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_each_stage_counts_once_a_bolt_group_in_many_threads_summed_and_its_trouble_from_zero() -> None:
    stages: list[Stage] = [
        _spout("orders", {"read": 5, "acked": 4, "held": 1}, pending=1, paused=True, held=(1, 2)),
        _bolt("split", {"processed": 3, "errors": 1}, execute_s=0.25, process=(2, 0.75)),
        _bolt("split", {"processed": 4}, execute_s=0.5, process=(4, 0.5)),
        _bolt("count", {}),
        _step("reach.step1", {}, held=1),
    ]
    samples = _scraped(StageCollector(stages))
    events = {tuple(s.labels[k] for k in ("kind", "stage", "event")): s.value for s in samples["acker_stage_events"]}
    assert events[("spout", "orders", "read")] == 5 and events[("spout", "orders", "held")] == 1
    assert events[("bolt", "split", "processed")] == 7 and events[("bolt", "split", "errors")] == 1
    assert {e for k, _, e in events if k == "spout"} == {*SPOUT_EVENTS, "held"}
    assert {e for k, s, e in events if k == "bolt" and s == "count"} == set(BOLT_EVENTS)
    assert all(events[("bolt", "count", e)] == 0 for e in BOLT_EVENTS)
    assert [(s.labels, s.value) for s in samples["acker_spout_pending_trees"]] == [({"stage": "orders"}, 1)]
    assert [(s.labels, s.value) for s in samples["acker_spout_paused"]] == [({"stage": "orders"}, 1)]
    held = {(s.labels["kind"], s.labels["stage"]): s.value for s in samples["acker_stage_reads_held"]}
    assert held == {("spout", "orders"): 3, ("bolt", "split"): 0, ("bolt", "count"): 0, ("step", "reach.step1"): 1}
    latency = {(s.name.rsplit("_", 1)[1], s.labels.get("le")): s.value
               for s in samples["acker_spout_complete_latency_seconds"]}  # fmt: skip
    assert (latency[("bucket", "0.002")], latency[("bucket", "0.005")]) == (0, 1)  # one tree acked after 3 ms
    assert (latency[("count", None)], latency[("sum", None)]) == (1, 0.003)
    executed = {(s.name.rsplit("_", 1)[1], s.labels["stage"], s.labels["thread"]): s.value
                for s in samples["acker_bolt_execute_seconds"]}  # fmt: skip
    assert executed == {
        ("count", "split", "0"): 3, ("sum", "split", "0"): 0.25, ("count", "split", "1"): 4, ("sum", "split", "1"): 0.5,
        ("count", "count", "0"): 0, ("sum", "count", "0"): 0,
    }  # fmt: skip
    processed = {(s.name.rsplit("_", 1)[1], s.labels["stage"], s.labels["thread"]): s.value
                 for s in samples["acker_bolt_process_seconds"]}  # fmt: skip
    assert processed == {
        ("count", "split", "0"): 2, ("sum", "split", "0"): 0.75, ("count", "split", "1"): 4, ("sum", "split", "1"): 0.5,
        ("count", "count", "0"): 0, ("sum", "count", "0"): 0,
    }  # fmt: skip


def test_closed_stage_metrics_free_their_port_and_their_stages() -> None:
    """A process that stops its stages and builds others serves theirs on the same port, once the first are closed;
    served until then, the old server and its stages (their Kafka clients too) lived as long as the process."""
    [port] = free_ports(1)
    metrics = serve_stages(port, _spout("orders", {"read": 5}, pending=0, paused=False))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert 'acker_stage_events_total{event="read",kind="spout",stage="orders"} 5.0' in response.read().decode()
    with pytest.raises(ConfigError, match="--stage-metrics-port"):
        serve_stages(port)
    metrics.close()
    metrics.close()  # a second does nothing
    assert _scraped(metrics)["acker_stage_events"] == []  # the stages let go
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
    serve_stages(port).close()  # the port is free


def test_a_bolts_execute_time_counts_the_input_in_hand_and_never_goes_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """A function that hangs shows as busy while it hangs (Storm's capacity near 1), not only once it returns; an
    input that ends between the two reads of `Bolt.busy_s` is left out of that answer, which is then lower than the
    one before: exported as it was."""
    now = [100.0]
    monkeypatch.setattr("acker.bolt.time.perf_counter", lambda: now[0])
    bolt: Any = _bolt("split", {"processed": 1}, execute_s=2.0)
    collector = StageCollector([bolt])

    def busy() -> float:
        [sample] = [s for s in _scraped(collector)["acker_bolt_execute_seconds"] if s.name.endswith("_sum")]
        return float(sample.value)

    assert busy() == 2.0
    bolt._executing_since = 95.0  # in hand for 5 s
    assert busy() == 7.0
    bolt._executing_since = None  # ended, its 5 s not yet added: read between the two
    assert busy() == 7.0
    bolt.execute_s = 7.5  # added: 5.5 s by the time it ended
    assert busy() == 7.5


def test_a_steps_counts_are_exported_and_never_go_down() -> None:
    """A coordinated step whose batch aborts sets its counts back, and counts the batch again when it runs it again:
    exported as they were, the drop read as a counter reset, and every count counted again (`increase`)."""
    counters = dict.fromkeys(STEP_EVENTS, 0) | {"processed": 10}
    collector = StageCollector([_step("reach.step1", counters)])

    def processed() -> float:
        [sample] = [s for s in _scraped(collector)["acker_stage_events"] if s.labels["event"] == "processed"]
        assert sample.labels["kind"] == "step" and sample.labels["stage"] == "reach.step1"
        return float(sample.value)

    assert processed() == 10
    counters["processed"] = 15  # a batch, scraped while it runs
    assert processed() == 15
    counters["processed"] = 10  # aborted: set back
    assert processed() == 15
    counters["processed"] = 17  # run again, further
    assert processed() == 17


def test_the_events_exported_from_the_start_are_counts_the_stages_keep() -> None:
    """A name no stage counts would sit at 0 for ever, and an alert on it never fire."""
    for module, names in (
        (acker.spout, SPOUT_EVENTS),
        (acker.bolt, BOLT_EVENTS),
        (acker.kafka.coordinated_stage, STEP_EVENTS),
    ):
        source = Path(module.__file__ or "").read_text()
        for name in names:
            if name.startswith("nacked_"):  # counted as f"nacked_{outcome.lower()}"
                assert (
                    'f"nacked_{outcome.lower()}"' in source and name.removeprefix("nacked_").upper() in OUTCOME_SYMBOLS
                )
            else:
                assert f'"{name}"' in source, (module.__name__, name)


_TARGET_LABELS = frozenset({"instance", "job"})  # what Prometheus adds to every series it scrapes


def _exported() -> dict[str, set[str]]:
    """The names of every sample the service and the stages export, each with its label names."""
    service = ServiceCollector(
        lambda: Snapshot(Counters(), {0: 1}, {0: 1}, dict.fromkeys(WIRE_REASONS, 0), 0, LatencyHistogram(), 0)
    )
    stages = StageCollector([_spout("s", {}, pending=0, paused=False), _bolt("b", {}), _step("t", {})])
    exported: dict[str, set[str]] = {}
    for samples in _scraped(service, stages).values():
        for sample in samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    return exported


def _check_names(where: str, expr: str, exported: dict[str, set[str]]) -> None:
    named = set(re.findall(r"\backer_[a-z_]+", expr))
    assert named and named <= exported.keys(), (where, named - exported.keys())
    # A label a series does not have (misspelt, or another metric's) matches nothing, or groups everything as one.
    for metric, matchers in re.findall(r"\b(acker_[a-z_]+)\{([^}]*)\}", expr):
        used = set(re.findall(r"(\w+)\s*[!=]~?", matchers)) - _TARGET_LABELS
        assert used <= exported[metric], (where, metric, used - exported[metric])
    grouped = {label for labels in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr)
               for label in re.findall(r"\w+", labels)}  # fmt: skip
    assert grouped <= _TARGET_LABELS.union(*(exported[metric] for metric in named)), (where, grouped)
    # A value no series has (a typo) leaves the expression matching nothing, for ever.
    for label, values in re.findall(r'(\w+)=~?"([^"]*)"', expr):
        assert set(values.split("|")) <= LABEL_VALUES[label], (where, label, values)


def test_every_alerting_rule_names_metrics_the_project_exports() -> None:
    rules = yaml.safe_load((ROOT / "docs" / "prometheus-alerts.yml").read_text())
    exported = _exported()
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert len(alerts) >= 10
    for rule in alerts:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] and rule["annotations"]["summary"] and rule["annotations"]["description"]
        _check_names(rule["alert"], rule["expr"], exported)


def test_every_dashboard_panel_queries_metrics_the_project_exports() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exported = _exported()
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert len(panels) >= 10 and dashboard["templating"]["list"][0]["type"] == "datasource"
    for panel in panels:
        assert panel["title"] and panel["description"] and panel["targets"], panel
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            _check_names(panel["title"], target["expr"], exported)
    ids = [(target["refId"], panel["title"]) for panel in panels for target in panel["targets"]]
    assert len(set(ids)) == len(ids)


def test_the_latency_sum_keeps_the_fractions_of_a_millisecond_of_every_record() -> None:
    """The spout observes each outcome record's latencies in fractional milliseconds: the sum was cut to whole ones
    at every record, so 1,000 records of one ack at 25.7 ms summed to 25 s, and at 0.9 ms to 0 s."""
    slow = fast = LatencyHistogram()
    for _ in range(1000):
        slow, fast = slow.observed(np.array([25.7])), fast.observed(np.array([0.9]))
    assert slow.prometheus_buckets()[1] == pytest.approx(25.7)
    assert fast.prometheus_buckets()[1] == pytest.approx(0.9)
    assert slow.plus(fast).prometheus_buckets()[1] == pytest.approx(26.6)
