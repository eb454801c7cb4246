"""CMP over HTTP (FastAPI): the reference's `/v1` routes, built from the operation table
(cmp/operations.py), each a thin call into the `Dispatcher`.

Bodies are parsed here rather than by FastAPI so that every failure, malformed JSON included,
answers with the CMP error envelope and status instead of FastAPI's own 422 shape.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.convertors import StringConvertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import console
from ..cmp.dispatch import OPERATIONS, Dispatcher, Operation
from ..cmp.errors import CMPError, ErrorCode
from ..cmp.handler import CMPHandler
from ..security.auth import KeyRing
from ..security.keys import ServerKeys
from ..security.ratelimit import FailedAuthLimit, RateLimit
from ..version import __version__
from . import openapi
from .bodies import read_within
from .guard import LOOPBACK, HostPolicy
from .metrics import HttpMetrics, metered
from .middleware import REQUEST_ID, Receive, RequestMiddleware, Scope, Send
from .offload import Calls

DEFAULT_BODY_LIMIT = 64 * 1024 * 1024
ROUTING_CODES = {404: ErrorCode.ROUTE_NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# made once: `json.loads` given an argument makes a decoder per call
_BODY_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_body(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        body = _BODY_DECODER.decode(raw.decode("utf-8"))
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


# Every fixed path segment: a path parameter never takes one, so `PATCH /v1/encode/batch` is a
# method `POST /v1/encode/batch` does not take (405), not an update of a record named "batch".
LITERAL_SEGMENTS = frozenset(part for op in OPERATIONS.values() for part in op.http.path.split("/")
                             if part and not part.startswith("{"))


class _ParamConvertor(StringConvertor):
    """A path parameter: any segment but the routes' fixed ones (see LITERAL_SEGMENTS)."""

    regex = "(?!(?:" + "|".join(sorted(LITERAL_SEGMENTS)) + ")(?:/|$))[^/]+"


register_url_convertor("param", _ParamConvertor())


def _served_path(op: Operation) -> str:
    path = op.http.path
    for name in op.http.path_params:
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


Answer = Callable[[Request], Awaitable[bytes | None]]  # an operation's JSON answer (None: 204)


def _answerer(op: Operation, calls: Calls, body_limit: int) -> Answer:
    """What one operation's route does: the request's JSON body, query and path parameters in,
    the response's JSON out (None: 204), every failure a CMPError; the call runs where `calls`
    puts it."""

    async def answer(request: Request) -> bytes | None:
        declared = request.headers.get("content-length")
        too_large = declared is not None and declared.isdigit() and int(declared) > body_limit
        raw = None if too_large else await read_within(request, body_limit)
        if raw is None:
            raise CMPError(ErrorCode.CONTENT_TOO_LARGE, f"request body exceeds {body_limit} bytes",
                           hint="split the request (batches take up to 1000 records)")
        body = parse_body(raw) if op.http.method != "GET" else {}
        if request.scope["query_string"]:
            for key, value in request.query_params.items():
                body.setdefault(key, _query_value(value))
        body.update(request.path_params)
        result = await calls.run(op, body)
        if op.no_content:
            return None
        # pydantic's own serializer: several times faster than model_dump + json.dumps
        return result.__pydantic_serializer__.to_json(result)

    return answer


def _endpoint(op: Operation, answer: Answer) -> Callable[[Request], Awaitable[Response]]:
    """The FastAPI endpoint of an operation: what its OpenAPI entry documents; it answers as
    `DirectRoutes` does, should a request of the route reach the router."""

    async def endpoint(request: Request) -> Response:
        body = await answer(request)
        return Response(status_code=204) if body is None else Response(body, media_type="application/json")

    endpoint.__name__ = op.method
    return endpoint


JSON_HEADERS = [(b"content-type", b"application/json")]


class DirectRoutes:
    """The CMP routes answered straight from the request middleware, past FastAPI's router and
    its layers of middleware (exception handlers, body limit, telemetry, exit stacks): on a
    2-core server those cost a request more CPU than its JSON does. Only a request whose method
    and path match a CMP route exactly comes here; anything else (a trailing slash, a method the
    route does not take, another route) goes the router's way, which answers it as before."""

    def __init__(self) -> None:
        self._exact: dict[tuple[str, str], tuple[APIRoute, Answer]] = {}
        self._patterned: list[tuple[str, APIRoute, Answer]] = []

    def add(self, route: APIRoute, method: str, answer: Answer) -> None:
        if route.param_convertors:
            self._patterned.append((method, route, answer))
        else:
            self._exact[method, route.path] = (route, answer)

    def _match(self, scope: Scope) -> tuple[APIRoute, Answer] | None:
        method, path = scope["method"], scope["path"]
        hit = self._exact.get((method, path))
        if hit is not None:
            return hit
        for wanted, route, answer in self._patterned:
            if wanted == method and (found := route.path_regex.match(path)) is not None:
                scope["path_params"] = {name: route.param_convertors[name].convert(value)
                                        for name, value in found.groupdict().items()}
                return route, answer
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer the request when it is a CMP route's; whether it was."""
        if scope.get("root_path"):
            return False
        hit = self._match(scope)
        if hit is None:
            return False
        scope["route"] = hit[0]  # what the metrics and the access log name the request by
        try:
            body = await hit[1](Request(scope, receive))
        except CMPError as exc:
            await error_response(exc, scope["state"]["request_id"])(scope, receive, send)
            return True
        if body is None:
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        else:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        return True


class CMPApp(FastAPI):
    """FastAPI behind the request middleware rather than around it: each request meets the
    middleware first (request id, cross-site checks, key, rate limit, metrics), and a CMP route's
    is answered there by `DirectRoutes`, past FastAPI's outer layers (its error page, telemetry
    and body-limit wrappers), which on a 2-core server cost a request about as much CPU as the
    middleware itself. Every other request goes on into FastAPI's whole stack."""

    front: RequestMiddleware | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is not None and scope["type"] == "http":
            await self.front(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    """The 500 of an error no route handled, in the CMP envelope (the request middleware logs it)."""
    error = CMPError(ErrorCode.INTERNAL_ERROR, "internal error", hint="the server log has the details")
    return error_response(error, getattr(request.state, "request_id", None))


def create_app(target: Dispatcher | CMPHandler, *, body_limit: int = DEFAULT_BODY_LIMIT,
               keys: KeyRing | ServerKeys | None = None, extra_routes: Callable[[FastAPI], None] | None = None,
               rate_limit: RateLimit | None = None, host_policy: HostPolicy = LOOPBACK,
               auth_failures: FailedAuthLimit | None = None) -> CMPApp:
    """The HTTP application running CMP through `target` (the serving process's Dispatcher; an
    engine gets a Dispatcher of its own): routes, request ids, error envelopes,
    the cross-site checks of `host_policy` on every route (by default: a loopback server's),
    with `keys` a bearer key on everything but the health probes and the API docs (failures
    budgeted per address by `auth_failures`), and with `rate_limit` a token bucket per key (or
    client address) on everything but the probes."""
    dispatcher, ops = metered(target)
    app = CMPApp(title="Cerememory", version=__version__, docs_url=None, redoc_url=None,
                  description="CMP over HTTP. Every error is `{code, message, details, retry_after, request_id}`. "
                              "The web console is at /ui.")

    app.add_exception_handler(Exception, _internal_error)

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

    refs, components = openapi.request_schemas([op.request for op in OPERATIONS.values()])
    errors = openapi.error_responses()
    direct = DirectRoutes()
    calls = Calls(dispatcher)
    for op in OPERATIONS.values():
        answer = _answerer(op, calls, body_limit)
        app.add_api_route(
            _served_path(op), _endpoint(op, answer), methods=[op.http.method],
            summary=op.summary, tags=[op.group], operation_id=op.method,
            status_code=204 if op.no_content else 200, responses=errors,
            openapi_extra=openapi.request_body(op.http, refs[op.request], components),
            response_model=None if op.no_content else op.response,
        )
        route = app.routes[-1]
        assert isinstance(route, APIRoute)
        direct.add(route, op.http.method, answer)

    @app.get("/health", tags=["health"], responses=errors)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readiness", tags=["health"], responses=errors)
    async def readiness() -> JSONResponse:
        try:
            await run_in_threadpool(dispatcher.dispatch, "introspect.stats", {})
        except Exception as exc:  # not ready, whatever the reason
            return JSONResponse({"status": "not_ready", "reason": str(exc)}, status_code=503)
        # several servers over one database: which of them runs decay, dreams and consolidation
        role = "leader" if getattr(dispatcher.engine, "leads", True) else "standby"
        return JSONResponse({"status": "ready", "background": role})

    metrics = HttpMetrics(dispatcher, ops)
    metrics.mount(app)
    console.mount(app, dispatcher, keys, auth_failures=auth_failures)  # /ui, /docs and /redoc
    if extra_routes is not None:
        extra_routes(app)
    openapi.install(app, components)
    app.front = RequestMiddleware(partial(FastAPI.__call__, app), keys=keys, observe=metrics.observe,
                                  render_error=error_response, rate_limit=rate_limit, denied=metrics.ops.denied,
                                  host_policy=host_policy, auth_failures=auth_failures, direct=direct)
    return app
