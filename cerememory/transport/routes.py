"""The HTTP route of every CMP operation: one table for the server and the client."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    op: str
    method: str
    path: str
    no_content: bool = False  # answered with 204

    @property
    def path_params(self) -> list[str]:
        return [part[1:-1] for part in self.path.split("/") if part.startswith("{")]


ROUTES: tuple[Route, ...] = (
    Route("encode.store", "POST", "/v1/encode"),
    Route("encode.batch", "POST", "/v1/encode/batch"),
    Route("encode.store_raw", "POST", "/v1/encode/raw"),
    Route("encode.batch_raw", "POST", "/v1/encode/raw/batch"),
    Route("encode.update", "PATCH", "/v1/encode/{record_id}", no_content=True),
    Route("encode.update_raw", "PATCH", "/v1/encode/raw/{record_id}", no_content=True),
    Route("recall.query", "POST", "/v1/recall/query"),
    Route("recall.raw_query", "POST", "/v1/recall/raw"),
    Route("recall.list", "POST", "/v1/recall/list"),
    Route("recall.associate", "POST", "/v1/recall/associate/{record_id}"),
    Route("recall.timeline", "POST", "/v1/recall/timeline"),
    Route("recall.graph", "POST", "/v1/recall/graph"),
    Route("lifecycle.consolidate", "POST", "/v1/lifecycle/consolidate"),
    Route("lifecycle.export", "POST", "/v1/lifecycle/export"),
    Route("lifecycle.import", "POST", "/v1/lifecycle/import"),
    Route("lifecycle.dream_tick", "POST", "/v1/lifecycle/dream-tick"),
    Route("lifecycle.decay_tick", "POST", "/v1/lifecycle/decay-tick"),
    Route("lifecycle.set_mode", "PUT", "/v1/lifecycle/mode", no_content=True),
    Route("lifecycle.forget", "DELETE", "/v1/lifecycle/forget"),
    Route("introspect.stats", "GET", "/v1/introspect/stats"),
    Route("introspect.record", "GET", "/v1/introspect/record/{record_id}"),
    Route("introspect.decay_forecast", "POST", "/v1/introspect/decay-forecast"),
    Route("introspect.evolution", "GET", "/v1/introspect/evolution"),
)

ROUTE_OF = {r.op: r for r in ROUTES}

# Every fixed path segment: a path parameter never takes one, so `PATCH /v1/encode/batch` is a
# method `POST /v1/encode/batch` does not take (405), not an update of a record named "batch".
LITERAL_SEGMENTS = frozenset(part for r in ROUTES for part in r.path.split("/") if part and not part.startswith("{"))
