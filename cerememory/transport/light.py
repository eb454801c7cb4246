"""A CMP client over HTTP on the standard library alone, speaking plain dicts.

For short-lived processes (`cm`, `cerememory recall`, hooks, scripts) where importing httpx and
the pydantic models costs more than the call itself; it speaks HTTP/1.1 on a socket of its own
(`wire.py`), and loads `ssl` only for an https:// URL. Nothing is validated locally: the server
validates every request and answers a bad one with the same CMP error envelope `Client` raises.

```python
client = LightClient("http://127.0.0.1:8420")
client.dispatch("recall.list", {"store": "procedural"})["records"]
```
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

from ..cmp.errors import CMPError, ErrorCode
from ..cmp.operations import Operation, operation
from .wire import Connection, Disconnected


def request_parts(op: Operation, request: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(path, query params, JSON body) of one call: path parameters move out of the body, a GET
    sends the rest as query parameters."""
    body = dict(request)
    route = op.http
    path = route.path
    for name in route.path_params:
        if name not in body:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{op.name}: {name}: field required")
        path = path.replace("{" + name + "}", str(body.pop(name)))
    if route.method == "GET":
        params = {k: json.dumps(v) if isinstance(v, bool) else str(v) for k, v in body.items()}
        return path, params, None
    return path, {}, body


def unreachable(url: str, exc: Exception) -> CMPError:
    """SERVER_UNREACHABLE: the server did not answer (the request may or may not have arrived)."""
    return CMPError(ErrorCode.SERVER_UNREACHABLE, f"cannot reach the Cerememory server at {url}: {exc}",
                    hint="start it with `cerememory serve`, or check --server-url", details={"url": url})


def error_from(status: int, body: bytes) -> CMPError:
    """The server's CMP error, or an INTERNAL_ERROR naming the status when there is no envelope."""
    try:
        envelope = json.loads(body)
    except ValueError:
        envelope = None
    if isinstance(envelope, dict) and "code" in envelope:
        return CMPError.from_envelope(envelope)
    return CMPError(ErrorCode.INTERNAL_ERROR, f"HTTP {status} without a CMP error envelope",
                    details={"status": status, "body": body[:500].decode("utf-8", "replace")})


class LightClient:
    """`dispatch(op, request) -> dict` over one keep-alive connection; errors raise `CMPError`.
    An error carrying `retry_after` is retried up to `retries` times."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float | None = 30.0, retries: int = 1,
                 headers: Mapping[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"not a server URL: {url!r}",
                           hint="give it as http://host:port")
        self._connection = Connection(parts.hostname, parts.port, tls=parts.scheme == "https", timeout=timeout)
        self._prefix = parts.path
        self._served = 0  # responses read on the current connection
        self.retries = retries
        self.headers = {"content-type": "application/json", "accept": "application/json", **(headers or {})}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"

    def dispatch(self, op: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        spec = operation(op)
        path, params, body = request_parts(spec, request or {})
        payload = json.dumps(body).encode() if body is not None else None
        status, data = self.call(spec.http.method, path, params, payload)
        return json.loads(data) if status != 204 and data else {}

    def call(self, method: str, path: str, params: dict[str, Any], payload: bytes | None) -> tuple[int, bytes]:
        """(status, body) of a successful exchange; an error answer raises the server's CMP
        error, retried while it carries `retry_after` and retries are left."""
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        for attempt in range(self.retries + 1):
            status, data = self._send(method, target, payload)
            if 200 <= status < 300:
                return status, data
            error = error_from(status, data)
            if error.retry_after is None or attempt >= self.retries:
                raise error
            time.sleep(float(error.retry_after or 1))
        raise AssertionError("unreachable")

    def get(self, path: str, timeout: float | None = None) -> Any:
        """The JSON answer of `GET path` whatever its status (the probes answer 503 with JSON)."""
        status, data = self._send("GET", self._prefix + path, None, timeout)
        try:
            return json.loads(data)
        except ValueError:
            raise error_from(status, data) from None

    def _send(self, method: str, target: str, payload: bytes | None,
              timeout: float | None = None) -> tuple[int, bytes]:
        # A kept-alive connection the server closed while idle fails at once: that (and only
        # that: a request on a new connection may have been applied) is retried, once.
        retry = self._served > 0
        while True:
            try:
                with self._timeout(timeout):
                    status, data = self._connection.exchange(method, target, self.headers, payload)
            except (Disconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._served = 0
                if not retry:
                    raise unreachable(self.url, exc) from exc
                retry = False
                continue
            except OSError as exc:
                self._served = 0
                raise unreachable(self.url, exc) from exc
            self._served = self._served + 1 if self._connection.sock is not None else 0
            return status, data

    @contextmanager
    def _timeout(self, seconds: float | None) -> Iterator[None]:
        """`seconds` for one exchange instead of the client's own timeout."""
        if seconds is None:
            yield
            return
        usual = self._connection.timeout
        self._connection.set_timeout(seconds)
        try:
            yield
        finally:
            self._connection.set_timeout(usual)

    def health(self, timeout: float | None = None) -> dict[str, Any]:
        """The server's liveness answer (`{"status": "ok"}`, without touching its engine);
        raises SERVER_UNREACHABLE when nothing answers within `timeout` (default: the client's)."""
        answer = self.get("/health", timeout)
        return answer if isinstance(answer, dict) else {"status": str(answer)}

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> LightClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
