"""CMP over HTTP (FastAPI): the reference's `/v1` routes, each a thin call into `dispatch`.

Bodies are parsed here rather than by FastAPI so that every failure, malformed JSON included,
answers with the CMP error envelope and status instead of FastAPI's own 422 shape.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.convertors import StringConvertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..cmp.dispatch import OPERATIONS, call, dispatch
from ..cmp.errors import CMPError, ErrorCode
from ..security.auth import KeyRing
from ..security.keys import ServerKeys
from ..security.ratelimit import FailedAuthLimit, RateLimit
from ..version import __version__
from . import openapi
from .guard import LOOPBACK, HostPolicy
from .metrics import HttpMetrics
from .middleware import REQUEST_ID, RequestMiddleware
from .routes import LITERAL_SEGMENTS, ROUTES, Route

DEFAULT_BODY_LIMIT = 64 * 1024 * 1024
ROUTING_CODES = {404: ErrorCode.ROUTE_NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}


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
    except RecursionError:
        raise CMPError(ErrorCode.VALIDATION_ERROR, "request body is nested too deeply to parse",
                       hint="JSON values may nest at most a few dozen levels") from None
    if not isinstance(body, dict):
        raise CMPError(ErrorCode.VALIDATION_ERROR, "request body must be a JSON object")
    return body


class _ParamConvertor(StringConvertor):
    """A path parameter: any segment but the routes' fixed ones (see LITERAL_SEGMENTS)."""

    regex = "(?!(?:" + "|".join(sorted(LITERAL_SEGMENTS)) + ")(?:/|$))[^/]+"


register_url_convertor("param", _ParamConvertor())


def _served_path(route: Route) -> str:
    path = route.path
    for name in route.path_params:
        path = path.replace("{" + name + "}", "{" + name + ":param}")
    return path


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


def create_app(handler: Any, *, body_limit: int = DEFAULT_BODY_LIMIT, keys: KeyRing | ServerKeys | None = None,
               extra_routes: Callable[[FastAPI], None] | None = None,
               rate_limit: RateLimit | None = None, host_policy: HostPolicy = LOOPBACK,
               auth_failures: FailedAuthLimit | None = None) -> FastAPI:
    """The HTTP application over `handler` (the Engine): routes, request ids, error envelopes,
    the cross-site checks of `host_policy` on every route (by default: a loopback server's),
    with `keys` a bearer key on everything but the health probes and the API docs (failures
    budgeted per address by `auth_failures`), and with `rate_limit` a token bucket per key (or
    client address) on everything but the probes."""
    app = FastAPI(title="Cerememory", version=__version__,
                  description="CMP over HTTP. Every error is `{code, message, details, retry_after, request_id}`.")

    @app.exception_handler(CMPError)
    async def cmp_error(request: Request, exc: CMPError) -> JSONResponse:
        return error_response(exc, getattr(request.state, "request_id", None))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = ROUTING_CODES.get(exc.status_code, ErrorCode.VALIDATION_ERROR)
        error = CMPError(code, f"{request.method} {request.url.path}: {exc.detail}", hint="see /docs for the routes")
        response = error_response(error, getattr(request.state, "request_id", None))
        response.status_code = exc.status_code
        response.headers.update(exc.headers or {})  # `Allow` on a 405
        return response

    refs, components = openapi.request_schemas([OPERATIONS[route.op].request for route in ROUTES])
    errors = openapi.error_responses()
    for route in ROUTES:
        op = OPERATIONS[route.op]
        app.add_api_route(
            _served_path(route), _endpoint(route, handler, body_limit), methods=[route.method],
            summary=op.summary, tags=[route.op.split(".")[0]], operation_id=route.op.replace(".", "_"),
            status_code=204 if route.no_content else 200, responses=errors,
            openapi_extra=openapi.request_body(route, refs[op.request], components),
            response_model=None if route.no_content else op.response,
        )

    @app.get("/health", tags=["health"], responses=errors)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readiness", tags=["health"], responses=errors)
    async def readiness() -> JSONResponse:
        try:
            await run_in_threadpool(dispatch, handler, "introspect.stats", {})
        except Exception as exc:  # not ready, whatever the reason
            return JSONResponse({"status": "not_ready", "reason": str(exc)}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.post("/v1/admin/reindex", tags=["admin"], summary="Rebuild the full-text indexes.", responses=errors)
    async def reindex() -> dict[str, int]:
        return {"records": await run_in_threadpool(handler.reindex_records),
                "journal": await run_in_threadpool(handler.reindex_journal)}

    metrics = HttpMetrics(handler)
    metrics.mount(app)
    if extra_routes is not None:
        extra_routes(app)
    openapi.install(app, components)
    app.add_middleware(RequestMiddleware, keys=keys, observe=metrics.observe, render_error=error_response,
                       rate_limit=rate_limit, denied=metrics.ops.denied, host_policy=host_policy,
                       auth_failures=auth_failures)
    return app
