"""Prometheus metrics: HTTP requests by route template, CMP calls by operation and transport
(from the dispatcher, so gRPC, MCP and the background scheduler count too), errors by code, and
record counts read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.concurrency import run_in_threadpool

from ..cmp import messages as m
from ..cmp.context import bound, current
from ..cmp.dispatch import OPERATIONS, Dispatcher
from ..cmp.handler import CMPHandler


class _StoreCollector:
    """Record counts, read at scrape time through the dispatcher (transport "metrics"), so that
    the write path keeps no bookkeeping for them."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def collect(self) -> Iterator[Metric]:
        with bound(transport="metrics", request_id=None, key_id=None, client=None):
            stats = cast(m.StatsResponse, self.dispatcher.call("introspect.stats", {}))
        records = GaugeMetricFamily("cerememory_records", "Records per store", labels=["store"])
        for store, count in stats.records_by_store.items():
            records.add_metric([store], count)
        yield records
        yield GaugeMetricFamily("cerememory_raw_journal_records", "Raw journal records",
                                value=stats.raw_journal_records)
        yield GaugeMetricFamily("cerememory_recalls", "recall.query calls since the data dir was created",
                                value=stats.total_recall_count)
        yield GaugeMetricFamily("cerememory_raw_journal_pending_dream",
                                "Raw journal records no dream tick has processed yet",
                                value=stats.raw_journal_pending_dream)
        yield CounterMetricFamily("cerememory_undecodable_records",
                                  "Stored records found undecodable since the data directory was opened "
                                  "(reads skip them)", value=stats.undecodable_records)
        yield CounterMetricFamily("cerememory_write_commits", "Transactions that committed encode.store and "
                                  "encode.batch calls since the data directory was opened", value=stats.write_commits)
        yield CounterMetricFamily("cerememory_writes_committed", "encode.store and encode.batch calls those "
                                  "transactions committed (several share one under load: group commit)",
                                  value=stats.writes_committed)


class _Series:
    """The children of a labelled metric, looked up once per set of label values: prometheus'
    `labels()` checks and locks on every call, a few microseconds a request per metric."""

    def __init__(self, metric: Counter | Histogram) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class OpMetrics:
    """Every CMP call, observed by the dispatcher: count by operation, transport and outcome
    code ("OK" or the CMP error code), latency by operation and transport, and errors by code
    (including requests refused before dispatch: UNAUTHORIZED, RATE_LIMITED). Decay and dream
    runs are the `lifecycle.decay_tick` / `lifecycle.dream_tick` series (transport "scheduler"
    for background runs)."""

    def __init__(self) -> None:
        self.calls = Counter("cerememory_cmp_requests", "CMP calls", ["op", "transport", "code"], registry=None)
        self.latency = Histogram("cerememory_cmp_request_duration_seconds", "CMP call latency",
                                 ["op", "transport"], registry=None,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120))
        self.errors = Counter("cerememory_errors", "CMP error envelopes sent, by code", ["code", "transport"],
                              registry=None)
        self._calls, self._latency, self._errors = _Series(self.calls), _Series(self.latency), _Series(self.errors)

    def observe(self, op: str, seconds: float, code: str) -> None:
        transport = current().transport
        op = op if op in OPERATIONS else "unknown"
        self._calls(op, transport, code).inc()
        self._latency(op, transport).observe(seconds)
        if code != "OK":
            self._errors(code, transport).inc()

    def denied(self, transport: str, code: str) -> None:
        self._errors(code, transport).inc()

    def register(self, registry: CollectorRegistry) -> None:
        for collector in (self.calls, self.latency, self.errors):
            registry.register(collector)


def metered(target: Dispatcher | CMPHandler) -> tuple[Dispatcher, OpMetrics]:
    """A dispatcher that feeds OpMetrics, and those metrics: `target` itself when it is one (what
    `cerememory serve` hands every transport, so they share one set), else a new one over it."""
    if isinstance(target, Dispatcher) and isinstance(target.metrics, OpMetrics):
        return target, target.metrics
    metrics = OpMetrics()
    engine = target.engine if isinstance(target, Dispatcher) else target
    return Dispatcher(engine, metrics=metrics), metrics


class HttpMetrics:
    """Requests by route template and latency, plus record counts read at scrape time."""

    def __init__(self, dispatcher: Dispatcher, ops: OpMetrics) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter("cerememory_http_requests", "HTTP requests", ["method", "route", "status"],
                                 registry=self.registry)
        self._latency = Histogram("cerememory_http_request_duration_seconds", "HTTP request latency",
                                  ["method", "route"], registry=self.registry,
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self._request_series, self._latency_series = _Series(self._requests), _Series(self._latency)
        self.registry.register(_StoreCollector(dispatcher))
        self.ops = ops
        self.ops.register(self.registry)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self._request_series(method, route, str(status)).inc()
        self._latency_series(method, route).observe(seconds)

    def mount(self, app: FastAPI) -> None:
        """Serve the registry at GET /metrics."""

        @app.get("/metrics", tags=["health"], include_in_schema=False)
        async def metrics() -> Response:
            body = await run_in_threadpool(generate_latest, self.registry)
            return Response(body, media_type=CONTENT_TYPE_LATEST)
