"""One plain ASGI middleware for every HTTP request: the request id, the cross-site checks
(transport/guard.py), the bearer key check, the rate limit, the call context the dispatcher and
audit log read, the 500 of an unhandled error, the metrics and the access log. Plain ASGI rather
than Starlette's `BaseHTTPMiddleware`, which costs a task group per layer per request."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..cmp.context import bound, client_request_id
from ..cmp.errors import CMPError, ErrorCode
from ..cmp.operations import OPERATIONS
from ..model import new_id
from ..security.ratelimit import FailedAuthLimit, RateLimit, unauthorized
from .guard import HostPolicy

REQUEST_ID = "x-request-id"
PUBLIC_PATHS = {"/health", "/readiness", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/"}
CONSOLE = "/ui"  # the web console signs its visitors in itself (cerememory/console/) and takes forms


def console_path(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")
UNLIMITED_PATHS = {"/health", "/readiness"}  # probes must never be throttled

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Observe = Callable[[str, str, int, float], None]
Denied = Callable[[str, str], None]  # (transport, error code)
Direct = Callable[[Scope, Receive, Send], Awaitable[bool]]  # answers a request itself, or says it did not

access_log = logging.getLogger("cerememory.access")
log = logging.getLogger("cerememory.http")
_OPS = {(op.http.method, op.http.path): op.name for op in OPERATIONS.values()}


class RequestMiddleware:
    def __init__(self, app: Any, *, keys: Any = None, observe: Observe | None = None,
                 render_error: Callable[[CMPError, str], Any], rate_limit: RateLimit | None = None,
                 denied: Denied | None = None, host_policy: HostPolicy | None = None,
                 auth_failures: FailedAuthLimit | None = None, direct: Direct | None = None) -> None:
        self.app = app
        self.direct = direct  # the CMP routes, served without the app's router (http.DirectRoutes)
        self.keys = keys  # KeyRing or ServerKeys: identify_authorization(header) -> key id
        self.observe = observe
        self.render_error = render_error
        self.rate_limit = rate_limit
        self.denied = denied
        self.host_policy = host_policy
        self.auth_failures = auth_failures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        rid = client_request_id(headers.get(REQUEST_ID.encode(), b"").decode("latin-1")) or str(new_id())
        scope.setdefault("state", {})["request_id"] = rid
        started = time.perf_counter()
        status = 500
        responded = finished = False
        path = scope["path"]
        peer = (scope.get("client") or (None,))[0]
        address, key_id = peer, None

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal status, responded, finished
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            if message["type"] == "http.response.start":
                status = message["status"]
                responded = True
                existing = list(message.get("headers", ()))
                if not any(name.lower() == REQUEST_ID.encode() for name, _ in existing):
                    existing.append((REQUEST_ID.encode(), rid.encode("latin-1")))
                message["headers"] = existing
            await send(message)

        async def answer(error: CMPError) -> None:
            response = self.render_error(error, rid)
            if error.code is ErrorCode.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send_with_id)

        async def deny(error: CMPError) -> None:
            if self.denied is not None:
                self.denied("http", error.code.value)
            await answer(error)

        try:
            refusal = None if self.host_policy is None else \
                self.host_policy.check(scope["method"], headers, forms=console_path(path))
            if refusal is not None:
                await deny(refusal)
                return
            if self.keys is not None and path not in PUBLIC_PATHS and not console_path(path):
                key_id = self.keys.identify_authorization(
                    headers.get(b"authorization", b"").decode("latin-1") or None)
                if key_id is None:
                    await deny(self._auth_failure(peer, headers))
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
                if self.direct is None or not await self.direct(scope, receive, send_with_id):
                    await self.app(scope, receive, send_with_id)
        except Exception:
            # Answered (or, when the app's own error page answered in full, only logged) here
            # rather than re-raised to the server, which would drop the kept-alive connection
            # without `Connection: close`, failing the client's next request on it.
            if responded and not finished:
                raise  # a response already under way cannot be mended; the server closes it
            log.exception("unhandled error on %s %s", scope["method"], path)
            if not responded:
                await answer(CMPError(ErrorCode.INTERNAL_ERROR, "internal error",
                                      hint="the server log has the details"))
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

    def _auth_failure(self, peer: str | None, headers: dict[bytes, bytes]) -> CMPError:
        if self.auth_failures is None:
            return unauthorized()
        forwarded = headers.get(b"x-forwarded-for", b"").decode("latin-1") or None
        return self.auth_failures.refuse(self.auth_failures.address(peer, forwarded))
