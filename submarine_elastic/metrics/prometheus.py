"""Prometheus exposition of a :class:`MetricsStore`, read at scrape time.

Label cardinality is bounded by the store: one ``job`` label value per job it holds (at most its
``max_jobs``), and no per-step, per-worker or per-incarnation labels.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from submarine_elastic.metrics.api import JobSummary, MetricsStore, ServerStartError, UnknownJobError

_PREFIX = "submarine_metrics"


class StoreCollector(Collector):
    """Yields per-job gauges and counters from ``store`` on every scrape (nothing is kept here)."""

    def __init__(self, store: MetricsStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        summaries: list[JobSummary] = []
        for job_id in sorted(self._store.jobs()):
            try:
                summaries.append(self._store.summary(job_id))
            except UnknownJobError:
                continue  # evicted between jobs() and summary()
        gauges = {
            "workers": ("Worker instances that reported within the activity window", "active_workers"),
            "world_size": ("World size of the most recent point", "world_size"),
            "step": ("Training step of the most recent point", "last_step"),
        }
        for suffix, (doc, attr) in gauges.items():
            family = GaugeMetricFamily(f"{_PREFIX}_job_{suffix}", doc, labels=["job"])
            for s in summaries:
                family.add_metric([s.job_id], float(getattr(s, attr)))
            yield family
        throughput = GaugeMetricFamily(
            f"{_PREFIX}_job_throughput_examples_per_second",
            "Aggregate examples per second at the current world size (per-worker EMA times world size)",
            labels=["job"],
        )
        step_time = GaugeMetricFamily(
            f"{_PREFIX}_job_step_time_seconds",
            "Seconds per step at the current world size (EMA)",
            labels=["job"],
        )
        loss = GaugeMetricFamily(f"{_PREFIX}_job_loss", "Loss of the most recent point", labels=["job"])
        loss_ema = GaugeMetricFamily(
            f"{_PREFIX}_job_loss_ema", "Exponential moving average of the loss", labels=["job"]
        )
        for s in summaries:
            current = next((t for t in s.throughput if t.world_size == s.world_size), None)
            if current is not None:
                throughput.add_metric([s.job_id], current.aggregate_examples_per_second)
                step_time.add_metric([s.job_id], current.step_time_seconds)
            if s.last_loss is not None:
                loss.add_metric([s.job_id], s.last_loss)
            if s.loss_ema is not None:
                loss_ema.add_metric([s.job_id], s.loss_ema)
        yield from (throughput, step_time, loss, loss_ema)
        counters = {
            "received": ("Points accepted", "points_received"),
            "rejected": ("Points in batches rejected as invalid", "points_rejected"),
            "duplicate": ("Points ignored as resends", "points_duplicate"),
            "missing": ("Points never received (gaps in seq)", "points_missing"),
        }
        for suffix, (doc, attr) in counters.items():
            counter = CounterMetricFamily(f"{_PREFIX}_job_points_{suffix}", doc, labels=["job"])
            for s in summaries:
                counter.add_metric([s.job_id], float(getattr(s, attr)))
            yield counter
        yield CounterMetricFamily(
            f"{_PREFIX}_points_rejected_unattributed",
            "Points rejected in batches whose job id was invalid or unknown",
            value=float(self._store.rejected_unattributed()),
        )
        yield GaugeMetricFamily(f"{_PREFIX}_jobs", "Jobs held by the store", value=float(len(summaries)))


class PrometheusEndpoint:
    """An HTTP ``/metrics`` endpoint for one store, served from a daemon thread."""

    def __init__(self, store: MetricsStore, port: int = 0, host: str = "127.0.0.1") -> None:
        """Binds and starts serving at once.

        Raises:
            ServerStartError: the address cannot be bound.
        """
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StoreCollector(store))
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            raise ServerStartError(f"cannot serve Prometheus metrics on {host}:{port}: {e}") from e
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.host = host
        self.port: int = server.server_port

    def close(self) -> None:
        """Stops serving; blocks until the serving thread ends (at most one scrape's duration)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
