"""One plain ASGI middleware for every HTTP request: the request id, the bearer key check and
the metrics. Plain ASGI rather than Starlette's `BaseHTTPMiddleware`, which costs a task group
per layer per request."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..cmp.errors import CMPError, ErrorCode
from ..model import new_id
from ..security.auth import KeyRing

REQUEST_ID = "x-request-id"
PUBLIC_PATHS = {"/health", "/readiness", "/docs", "/docs/oauth2-redirect", "/openapi.json"}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Observe = Callable[[str, str, int, float], None]


class RequestMiddleware:
    def __init__(self, app: Any, *, keys: KeyRing | None = None, observe: Observe | None = None,
                 render_error: Callable[[CMPError, str], Any]) -> None:
        self.app = app
        self.keys = keys
        self.observe = observe
        self.render_error = render_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        rid = headers.get(REQUEST_ID.encode(), b"").decode("latin-1") or str(new_id())
        scope.setdefault("state", {})["request_id"] = rid
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                existing = list(message.get("headers", ()))
                if not any(name.lower() == REQUEST_ID.encode() for name, _ in existing):
                    existing.append((REQUEST_ID.encode(), rid.encode("latin-1")))
                message["headers"] = existing
            await send(message)

        try:
            if self.keys is not None and scope["path"] not in PUBLIC_PATHS and \
                    not self.keys.check_authorization(headers.get(b"authorization", b"").decode("latin-1") or None):
                error = CMPError(ErrorCode.UNAUTHORIZED, "missing or wrong API key",
                                 hint="send the header `Authorization: Bearer <key>`")
                response = self.render_error(error, rid)
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        finally:
            if self.observe is not None:
                route = getattr(scope.get("route"), "path", "unmatched")
                self.observe(scope["method"], route, status, time.perf_counter() - started)
