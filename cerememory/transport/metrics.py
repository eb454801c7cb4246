"""Prometheus metrics for the HTTP server: requests by route template, latency, and record counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from starlette.concurrency import run_in_threadpool


class _StoreCollector:
    """Record counts, read from the engine at scrape time (no bookkeeping on the write path)."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def collect(self) -> Iterator[GaugeMetricFamily]:
        stats = self.handler.introspect_stats()
        records = GaugeMetricFamily("cerememory_records", "Records per store", labels=["store"])
        for store, count in stats.records_by_store.items():
            records.add_metric([store], count)
        yield records
        yield GaugeMetricFamily("cerememory_raw_journal_records", "Raw journal records",
                                value=stats.raw_journal_records)
        yield GaugeMetricFamily("cerememory_recalls", "recall.query calls since the data dir was created",
                                value=stats.total_recall_count)


class HttpMetrics:
    """Requests by route template and latency, plus record counts read at scrape time."""

    def __init__(self, handler: Any) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter("cerememory_http_requests", "HTTP requests", ["method", "route", "status"],
                                 registry=self.registry)
        self._latency = Histogram("cerememory_http_request_duration_seconds", "HTTP request latency",
                                  ["method", "route"], registry=self.registry,
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.registry.register(_StoreCollector(handler))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self._requests.labels(method, route, str(status)).inc()
        self._latency.labels(method, route).observe(seconds)

    def mount(self, app: FastAPI) -> None:
        """Serve the registry at GET /metrics."""

        @app.get("/metrics", tags=["health"], include_in_schema=False)
        async def metrics() -> Response:
            body = await run_in_threadpool(generate_latest, self.registry)
            return Response(body, media_type=CONTENT_TYPE_LATEST)
