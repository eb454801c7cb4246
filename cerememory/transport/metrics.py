"""Prometheus metrics for the HTTP server: requests by route template, latency, and record counts."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request, Response
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


def instrument(app: FastAPI, handler: Any) -> None:
    """Count and time every request, and serve the registry at GET /metrics."""
    registry = CollectorRegistry()
    requests = Counter("cerememory_http_requests", "HTTP requests", ["method", "route", "status"],
                       registry=registry)
    latency = Histogram("cerememory_http_request_duration_seconds", "HTTP request latency", ["method", "route"],
                        registry=registry, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
    registry.register(_StoreCollector(handler))

    @app.middleware("http")
    async def measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        requests.labels(request.method, route, str(response.status_code)).inc()
        latency.labels(request.method, route).observe(time.perf_counter() - started)
        return response

    @app.get("/metrics", tags=["health"], include_in_schema=False)
    async def metrics() -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
