"""`cerememory serve`: one process, one engine, every transport.

Shutdown order on SIGINT/SIGTERM: uvicorn stops accepting and lets in-flight HTTP requests
finish, the gRPC server drains with a grace period, then the engine flushes and releases the
data directory.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from ..cmp.dispatch import Dispatcher
from ..cmp.errors import CMPError, ErrorCode
from ..cmp.handler import CMPHandler
from ..dynamics.scheduler import Scheduler
from ..security.auth import KeyRing
from ..security.keys import ServerKeys
from ..security.ratelimit import FailedAuthLimit, RateLimit
from . import logs
from .guard import HostPolicy, is_loopback_address, is_wildcard
from .http import create_app
from .mcp_http import mount_streamable_http
from .metrics import OpMetrics

log = logging.getLogger("cerememory.server")
GRPC_GRACE_SECONDS = 8.0


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8420
    grpc_port: int | None = None
    log_level: str = "info"
    decay_interval: float = 3600.0
    keys: KeyRing | ServerKeys | None = None  # None: no key anywhere, the server runs open
    tls_cert: str | None = None
    tls_key: str | None = None
    rate_limit: RateLimit | None = None
    log_format: str = "text"
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    auth_failures: FailedAuthLimit | None = None
    mcp_stream_seconds: float = 60.0  # how long a GET /mcp event stream stays open
    _addresses: list[str] | None = field(default=None, init=False, repr=False)

    @property
    def addresses(self) -> list[str]:
        """What the listeners will actually bind (an empty host is every interface)."""
        if self._addresses is None:
            self._addresses = bind_addresses(self.host, self.port)
        return self._addresses

    @property
    def loopback(self) -> bool:
        return all(is_loopback_address(a) for a in self.addresses)

    @property
    def url(self) -> str:
        """Where a client on this machine reaches the server (every interface: over loopback)."""
        host = "127.0.0.1" if is_wildcard(self.host) else self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def host_policy(self) -> HostPolicy:
        return HostPolicy.for_bind(self.host, self.port, self.addresses, allowed_hosts=self.allowed_hosts,
                                   allowed_origins=self.allowed_origins)

    def check(self) -> None:
        """Secure by default: no anonymous access off loopback, no plaintext gRPC off loopback."""
        shown = self.host or "every interface"
        if not self.loopback and self.keys is None:
            raise CMPError(ErrorCode.VALIDATION_ERROR,
                           f"refusing to serve on {shown} ({', '.join(self.addresses)}) without API keys",
                           hint="create one with `cerememory keys create`, or set CEREMEMORY_API_KEYS "
                                "(or auth.api_keys), or bind 127.0.0.1",
                           details={"host": self.host, "addresses": self.addresses})
        if bool(self.tls_cert) != bool(self.tls_key):
            raise CMPError(ErrorCode.VALIDATION_ERROR, "give both --tls-cert and --tls-key")
        if self.tls_cert and self.grpc_port is None:  # e.g. compose passing an empty CEREMEMORY_GRPC__PORT
            raise CMPError(ErrorCode.VALIDATION_ERROR, "TLS files were given for gRPC, but gRPC is off (no port)",
                           hint="set --grpc-port (CEREMEMORY_GRPC__PORT, grpc.port) to serve gRPC, "
                                "or leave out --tls-cert and --tls-key")
        if self.grpc_port is not None and not self.loopback and not self.tls_cert:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"refusing plaintext gRPC on {shown}",
                           hint="give --tls-cert and --tls-key, or bind 127.0.0.1")

    def tls(self) -> tuple[bytes, bytes] | None:
        if not self.tls_cert or not self.tls_key:
            return None
        try:
            return Path(self.tls_cert).read_bytes(), Path(self.tls_key).read_bytes()
        except OSError as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"cannot read TLS file: {exc}") from None


def bind_addresses(host: str, port: int) -> list[str]:
    """The addresses a listener on `host` binds, resolved as the listener resolves them: an empty
    host (or 0.0.0.0, ::) is every interface, and a name is every address it resolves to."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"cannot resolve the host {host!r}: {exc.strerror}",
                       hint="bind an address such as 127.0.0.1") from None
    return sorted({str(info[4][0]) for info in infos})


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"cannot listen on {host}:{port}: {exc.strerror}",
                           hint="choose another --port, or stop the process using it") from None


class _Server(uvicorn.Server):
    """Shuts down gracefully on SIGINT/SIGTERM and then returns, instead of re-raising the
    signal (uvicorn's default), so that the engine still flushes and releases the data dir."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def serve(engine: CMPHandler, options: ServeOptions) -> None:
    """Serve HTTP, MCP at /mcp (and gRPC when asked) from `engine` until a signal arrives; closes
    the engine. Every transport and the background scheduler run CMP through one Dispatcher,
    so they share its metrics."""
    options.check()
    _check_port_free(options.host, options.port)
    uvicorn_logging = logs.configure(options.log_format, options.log_level)
    dispatcher = Dispatcher(engine, metrics=OpMetrics())
    grpc_server = None
    scheduler = Scheduler(dispatcher, decay_interval=options.decay_interval)
    try:
        scheduler.start()
        if options.grpc_port is not None:
            from .grpc_server import build_grpc_server  # grpcio loads only when gRPC is on

            grpc_server, port = build_grpc_server(dispatcher, host=options.host, port=options.grpc_port,
                                                  tls=options.tls(), keys=options.keys,
                                                  rate_limit=options.rate_limit,
                                                  auth_failures=options.auth_failures)
            grpc_server.start()
            log.info("gRPC listening on %s:%s", options.host, port)
        app = create_app(dispatcher, keys=options.keys, rate_limit=options.rate_limit,
                         host_policy=options.host_policy(), auth_failures=options.auth_failures,
                         extra_routes=lambda app: mount_streamable_http(
                             app, dispatcher, stream_seconds=options.mcp_stream_seconds))
        config = uvicorn.Config(app, host=options.host, port=options.port, log_level=options.log_level,
                                timeout_graceful_shutdown=30, lifespan="off", **uvicorn_logging,
                                # uvicorn would believe X-Forwarded-For from 127.0.0.1 and rewrite the
                                # client address; only ratelimit.trusted_proxies decides that here
                                proxy_headers=False)
        _Server(config).run()
    finally:
        scheduler.stop()
        if grpc_server is not None:
            grpc_server.stop(GRPC_GRACE_SECONDS).wait()
        engine.close()
