"""One plain ASGI middleware for every HTTP request: the request id, the bearer key check, the
rate limit, the call context the dispatcher and audit log read, the metrics and the access log.
Plain ASGI rather than Starlette's `BaseHTTPMiddleware`, which costs a task group per layer per
request."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..cmp.context import bound
from ..cmp.errors import CMPError, ErrorCode
from ..model import new_id
from ..security.ratelimit import RateLimit
from .routes import ROUTES

REQUEST_ID = "x-request-id"
PUBLIC_PATHS = {"/health", "/readiness", "/docs", "/docs/oauth2-redirect", "/openapi.json"}
UNLIMITED_PATHS = {"/health", "/readiness"}  # probes must never be throttled

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Observe = Callable[[str, str, int, float], None]
Denied = Callable[[str, str], None]  # (transport, error code)

access_log = logging.getLogger("cerememory.access")
_OPS = {(r.method, r.path): r.op for r in ROUTES}


class RequestMiddleware:
    def __init__(self, app: Any, *, keys: Any = None, observe: Observe | None = None,
                 render_error: Callable[[CMPError, str], Any], rate_limit: RateLimit | None = None,
                 denied: Denied | None = None) -> None:
        self.app = app
        self.keys = keys  # KeyRing or ServerKeys: identify_authorization(header) -> key id
        self.observe = observe
        self.render_error = render_error
        self.rate_limit = rate_limit
        self.denied = denied

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        rid = headers.get(REQUEST_ID.encode(), b"").decode("latin-1") or str(new_id())
        scope.setdefault("state", {})["request_id"] = rid
        started = time.perf_counter()
        status = 500
        path = scope["path"]
        peer = (scope.get("client") or (None,))[0]
        address, key_id = peer, None

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                existing = list(message.get("headers", ()))
                if not any(name.lower() == REQUEST_ID.encode() for name, _ in existing):
                    existing.append((REQUEST_ID.encode(), rid.encode("latin-1")))
                message["headers"] = existing
            await send(message)

        async def deny(error: CMPError) -> None:
            response = self.render_error(error, rid)
            if error.code is ErrorCode.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = "Bearer"
            if self.denied is not None:
                self.denied("http", error.code.value)
            await response(scope, receive, send_with_id)

        try:
            if self.keys is not None and path not in PUBLIC_PATHS:
                key_id = self.keys.identify_authorization(
                    headers.get(b"authorization", b"").decode("latin-1") or None)
                if key_id is None:
                    await deny(CMPError(ErrorCode.UNAUTHORIZED, "missing or wrong API key",
                                        hint="send the header `Authorization: Bearer <key>`"))
                    return
            if self.rate_limit is not None and path not in UNLIMITED_PATHS:
                address = self.rate_limit.address(
                    peer, headers.get(b"x-forwarded-for", b"").decode("latin-1") or None)
                try:
                    self.rate_limit.check(key_id, address)
                except CMPError as error:
                    await deny(error)
                    return
            with bound(transport="http", request_id=rid, key_id=key_id, client=address):
                await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", "unmatched")
            if self.observe is not None:
                self.observe(scope["method"], route, status, seconds)
            if access_log.isEnabledFor(logging.INFO):
                access_log.info("%s %s %s", scope["method"], path, status, extra={
                    "transport": "http", "request_id": rid, "op": _OPS.get((scope["method"], route)),
                    "method": scope["method"], "path": path, "status": status,
                    "duration_ms": round(seconds * 1000, 3), "key_id": key_id, "client": address})
