"""Prometheus metrics of the acker service, read from the service's state at scrape time.

Nothing is counted twice on the hot path: the trackers already count every decision, so a collector reads their
counters (plus those of partitions this instance no longer owns) when Prometheus scrapes. Complete latency is a
histogram filled per record with numpy, not per outcome.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from acker.core.tracker import Counters
from acker.errors import ConfigError

LATENCY_BUCKETS_MS = np.array([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000])


@dataclass
class LatencyHistogram:
    """Cumulative-at-export histogram of complete latencies in milliseconds."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(LATENCY_BUCKETS_MS) + 1, np.int64))
    # Not rounded per call: the spout observes each outcome record's fractions of a millisecond, and a sum cut to
    # whole ones at every record made the mean (_sum / _count) low by up to 1 ms (0 for latencies under 1 ms).
    total_ms: float = 0.0

    def observe(self, latencies_ms: np.ndarray) -> None:
        if len(latencies_ms):
            self.counts += np.bincount(
                np.searchsorted(LATENCY_BUCKETS_MS, latencies_ms, side="left"), minlength=len(self.counts)
            )
            self.total_ms += float(latencies_ms.sum())

    def observed(self, latencies_ms: np.ndarray) -> LatencyHistogram:
        """A new histogram: this one and ``latencies_ms``. A reader in another thread takes one or the other whole,
        where `observe` changes the counts it may be reading."""
        new = LatencyHistogram(self.counts.copy(), self.total_ms)
        new.observe(latencies_ms)
        return new

    def plus(self, other: LatencyHistogram) -> LatencyHistogram:
        return LatencyHistogram(self.counts + other.counts, self.total_ms + other.total_ms)

    def prometheus_buckets(self) -> tuple[list[tuple[str, int]], float]:
        """(the cumulative buckets, upper bounds in seconds as Prometheus names them, then ``+Inf``; the sum in
        seconds)."""
        cumulative = np.cumsum(self.counts)
        buckets = [
            (str(b / 1000), int(n)) for b, n in zip(LATENCY_BUCKETS_MS.tolist(), cumulative[:-1].tolist(), strict=True)
        ]
        buckets.append(("+Inf", int(cumulative[-1])))
        return buckets, self.total_ms / 1000

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding quantile ``q`` (ms); inf beyond the last bucket, nan when empty."""
        total = int(self.counts.sum())
        if total == 0:
            return float("nan")
        index = int(np.searchsorted(np.cumsum(self.counts), q * total, side="left"))
        return float(LATENCY_BUCKETS_MS[index]) if index < len(LATENCY_BUCKETS_MS) else float("inf")


@dataclass
class Snapshot:
    """What the service reports at a scrape."""

    counters: Counters
    pending: dict[int, int]
    lag: dict[int, int]
    dead_letters: dict[str, int]  # every reason the service can give, 0 until its first
    ignored_ticks: int
    latency: LatencyHistogram
    reads_held: int  # partitions of the acker topic whose reads a transaction still open holds (`WatchedConsumer`)


class ServiceCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            s = self._snapshot()
        c = s.counters
        outcomes = CounterMetricFamily("acker_outcomes", "Outcomes decided, by outcome", labels=["outcome"])
        for name, value in (
            ("ack", c.acked),
            ("failed", c.nacked_failed),
            ("timeout", c.nacked_timeout),
            ("overload", c.nacked_overload),
        ):
            outcomes.add_metric([name], value)
        yield outcomes
        for name, doc, value in (
            ("acker_expired_without_init", "Trees that expired before their init arrived", c.expired_without_init),
            ("acker_root_id_collisions", "Inits for a tree whose init was already seen", c.collisions),
            ("acker_late_messages", "Messages for trees already finished", c.late),
            (
                "acker_unknown_resets",
                "Reset-timeouts for trees not pending: not begun, or done before the trees kept as done (those are "
                "late messages)",
                c.unknown_resets,
            ),
            ("acker_messages", "Acker messages applied, ticks included", c.messages),
            ("acker_ticks", "Ticks applied", c.ticks),
            ("acker_ignored_ticks", "Tick records ignored because they did not continue the chain", s.ignored_ticks),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        pending = GaugeMetricFamily(
            "acker_pending_trees",
            "Pending trees per owned partition, with entries whose messages came before their init",
            labels=["partition"],
        )
        for partition, value in sorted(s.pending.items()):
            pending.add_metric([str(partition)], value)
        yield pending
        lag = GaugeMetricFamily(
            "acker_consumer_lag",
            "Records not yet read per owned partition, as of the last status interval",
            labels=["partition"],
        )
        for partition, value in sorted(s.lag.items()):
            lag.add_metric([str(partition)], value)
        yield lag
        yield GaugeMetricFamily(
            "acker_reads_held",
            "Partitions of the acker topic whose reads a transaction still open has held longer than "
            "open_transaction_warn_s, as the log says",
            value=s.reads_held,
        )
        dead = CounterMetricFamily("acker_dead_letters", "Records sent to the dead-letter topic", labels=["reason"])
        for reason, value in sorted(s.dead_letters.items()):
            dead.add_metric([reason], value)
        yield dead
        buckets, sum_s = s.latency.prometheus_buckets()
        yield HistogramMetricFamily(
            "acker_complete_latency_seconds",
            "From the init's record to the record that completed the tree (acked trees)",
            buckets=buckets,
            sum_value=sum_s,
        )


@dataclass
class MetricsEndpoint:
    """A registry, and the HTTP server that answers scrapes of it (none for port 0) until `close`."""

    registry: CollectorRegistry
    _server: WSGIServer | None = None

    def close(self) -> None:
        """Stop answering and free the port: a process that serves its stages' metrics and stops them, and builds
        others later, can serve theirs on that port (left serving, the old server held the old stages, their Kafka
        clients included, until the process ended). A second call does nothing."""
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()


def serve(port: int, *, flag: str = "--metrics-port", others: str = "another acker instance") -> MetricsEndpoint:
    """Listen on ``port`` (0: not at all) for scrapes of the registry of the endpoint returned, from a daemon thread.
    Bound before the service starts, so that a port in use stops it before it joins its group; register the
    service's `ServiceCollector` once it exists (a scrape before then finds nothing). ``flag`` and ``others``: the
    option that gives the port and what else takes one, for the error of a port in use."""
    registry = CollectorRegistry()
    if not port:
        return MetricsEndpoint(registry)
    try:
        server, _ = start_http_server(port, addr="0.0.0.0", registry=registry)
    except OSError as error:
        raise ConfigError(
            f"metrics port {port}: {error.strerror or error} ({others} on this host? give each its own {flag}, "
            "or 0 for none)"
        ) from None
    return MetricsEndpoint(registry, server)
