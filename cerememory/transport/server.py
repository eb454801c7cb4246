"""`cerememory serve`: one process, one engine, every transport.

Shutdown order on SIGINT/SIGTERM: uvicorn stops accepting and lets in-flight HTTP requests
finish, the gRPC server drains with a grace period, then the engine flushes and releases the
data directory.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from ..cmp.errors import CMPError, ErrorCode

log = logging.getLogger("cerememory.server")
GRPC_GRACE_SECONDS = 8.0


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8420
    grpc_port: int | None = None
    log_level: str = "info"


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


def serve(engine: Any, options: ServeOptions) -> None:
    """Serve HTTP (and gRPC when asked) from `engine` until a signal arrives; closes the engine."""
    from .http import create_app
    from .mcp_server import mount_streamable_http

    if not is_loopback(options.host):
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"refusing to serve on {options.host}: only loopback "
                       "addresses are served without API keys",
                       hint="bind 127.0.0.1 (the default) and put an authenticating TLS proxy in front")
    _check_port_free(options.host, options.port)
    grpc_server = None
    try:
        if options.grpc_port is not None:
            from .grpc_server import build_grpc_server

            grpc_server, bound = build_grpc_server(engine, host=options.host, port=options.grpc_port)
            grpc_server.start()
            log.info("gRPC listening on %s:%s", options.host, bound)
        app = create_app(engine, extra_routes=lambda app: mount_streamable_http(app, engine))
        config = uvicorn.Config(app, host=options.host, port=options.port, log_level=options.log_level,
                                timeout_graceful_shutdown=30, lifespan="off")
        _Server(config).run()
    finally:
        if grpc_server is not None:
            grpc_server.stop(GRPC_GRACE_SECONDS).wait()
        engine.close()
