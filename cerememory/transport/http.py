"""CMP over HTTP (FastAPI): the reference's `/v1` routes, each a thin call into `dispatch`.

Bodies are parsed here rather than by FastAPI so that every failure, malformed JSON included,
answers with the CMP error envelope and status instead of FastAPI's own 422 shape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..cmp.dispatch import OPERATIONS, call, dispatch
from ..cmp.errors import CMPError, ErrorCode
from ..security.auth import KeyRing
from ..security.keys import ServerKeys
from ..security.ratelimit import RateLimit
from ..version import __version__
from .metrics import HttpMetrics
from .middleware import REQUEST_ID, RequestMiddleware
from .routes import ROUTES, Route

log = logging.getLogger("cerememory.http")
DEFAULT_BODY_LIMIT = 64 * 1024 * 1024


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"request body is not valid UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"request body is not valid JSON: {exc}",
                       hint="send a JSON object with Content-Type: application/json") from None
    if not isinstance(body, dict):
        raise CMPError(ErrorCode.VALIDATION_ERROR, "request body must be a JSON object")
    return body


def _query_value(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return value


def error_response(exc: CMPError, request_id: str | None) -> JSONResponse:
    exc.request_id = exc.request_id or request_id
    headers = {REQUEST_ID: request_id} if request_id else {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return JSONResponse(exc.envelope(), status_code=exc.http_status, headers=headers)


def _endpoint(route: Route, handler: Any, body_limit: int) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > body_limit:
            raise CMPError(ErrorCode.CONTENT_TOO_LARGE, f"request body exceeds {body_limit} bytes",
                           hint="split the request (batches take up to 1000 records)")
        raw = await request.body()
        if len(raw) > body_limit:
            raise CMPError(ErrorCode.CONTENT_TOO_LARGE, f"request body exceeds {body_limit} bytes")
        body = parse_body(raw) if route.method != "GET" else {}
        for key, value in request.query_params.items():
            body.setdefault(key, _query_value(value))
        body.update(request.path_params)
        result = await run_in_threadpool(call, handler, route.op, body)
        if route.no_content:
            return Response(status_code=204)
        # pydantic's own serializer: several times faster than model_dump + json.dumps
        return Response(result.model_dump_json(), media_type="application/json")

    endpoint.__name__ = route.op.replace(".", "_")
    return endpoint


def _openapi_extra(route: Route) -> dict[str, Any]:
    op = OPERATIONS[route.op]
    if route.method == "GET":
        return {}
    return {"requestBody": {"required": route.op not in ("introspect.stats",),
                            "content": {"application/json": {"schema": op.request.model_json_schema()}}}}


def create_app(handler: Any, *, body_limit: int = DEFAULT_BODY_LIMIT, keys: KeyRing | ServerKeys | None = None,
               extra_routes: Callable[[FastAPI], None] | None = None,
               rate_limit: RateLimit | None = None) -> FastAPI:
    """The HTTP application over `handler` (the Engine): routes, request ids, error envelopes,
    with `keys` a bearer key on everything but the health probes and the API docs, and with
    `rate_limit` a token bucket per key (or client address) on everything but the probes."""
    app = FastAPI(title="Cerememory", version=__version__,
                  description="CMP over HTTP. Every error is `{code, message, details, retry_after, request_id}`.")

    @app.exception_handler(CMPError)
    async def cmp_error(request: Request, exc: CMPError) -> JSONResponse:
        return error_response(exc, getattr(request.state, "request_id", None))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = CMPError(ErrorCode.VALIDATION_ERROR, f"{request.method} {request.url.path}: {exc.detail}",
                         hint="see /docs for the routes")
        response = error_response(error, getattr(request.state, "request_id", None))
        response.status_code = exc.status_code
        return response

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        error = CMPError(ErrorCode.INTERNAL_ERROR, "internal error", hint="the server log has the details")
        return error_response(error, getattr(request.state, "request_id", None))

    for route in ROUTES:
        op = OPERATIONS[route.op]
        app.add_api_route(
            route.path, _endpoint(route, handler, body_limit), methods=[route.method],
            summary=op.summary, tags=[route.op.split(".")[0]], operation_id=route.op.replace(".", "_"),
            status_code=204 if route.no_content else 200, openapi_extra=_openapi_extra(route),
            response_model=None if route.no_content else op.response,
        )

    @app.get("/health", tags=["health"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readiness", tags=["health"])
    async def readiness() -> JSONResponse:
        try:
            await run_in_threadpool(dispatch, handler, "introspect.stats", {})
        except Exception as exc:  # not ready, whatever the reason
            return JSONResponse({"status": "not_ready", "reason": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.post("/v1/admin/reindex", tags=["admin"], summary="Rebuild the full-text indexes.")
    async def reindex() -> dict[str, int]:
        return {"records": await run_in_threadpool(handler.reindex_records),
                "journal": await run_in_threadpool(handler.reindex_journal)}

    metrics = HttpMetrics(handler)
    metrics.mount(app)
    if extra_routes is not None:
        extra_routes(app)
    app.add_middleware(RequestMiddleware, keys=keys, observe=metrics.observe, render_error=error_response,
                       rate_limit=rate_limit, denied=metrics.ops.denied)
    return app
