"""The MCP tools as streamable HTTP at /mcp of `cerememory serve`.

The `mcp` SDK is the largest import of a server; it loads, and its session manager starts, with
the first request to /mcp (or with the app's lifespan, when it runs), so a server nobody asks
over MCP starts without it.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from ..cmp.dispatch import Dispatcher
from ..cmp.handler import CMPHandler

MCP_PATH = "/mcp"
MCP_BODY_LIMIT = 64 * 1024 * 1024  # as the HTTP routes
STREAM_SECONDS = 60.0  # how long a GET event stream stays open (the mcp.stream_max_seconds default)
TOOLS_MODULE = "cerememory.transport.mcp_server"


class _Endpoint:
    """The ASGI app at /mcp: builds the SDK's session manager and starts it, in the app's
    lifespan when that runs, else on the first request (the server runs uvicorn with
    lifespan="off")."""

    def __init__(self, build: Callable[[], Any], stream_seconds: float) -> None:
        self._build = build
        self.stream_seconds = stream_seconds
        self.manager: Any = None
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        self._ready = asyncio.Event()
        self.manager = self._build()
        async with self.manager.run():
            self._ready.set()
            yield

    async def _run_in_background(self) -> None:
        assert self._ready is not None
        try:
            # the import takes a second: off the event loop, so other requests go on meanwhile
            await asyncio.to_thread(importlib.import_module, TOOLS_MODULE)
            self.manager = self._build()
            async with self.manager.run():
                self._ready.set()
                await asyncio.Event().wait()  # until the event loop cancels this task at shutdown
        finally:
            self._ready.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run_in_background(), name="mcp-sessions")
        await self._ready.wait()
        if scope.get("method") == "GET":
            await _ending_after(self.stream_seconds, self.manager.handle_request, scope, receive, send)
        else:
            await self.manager.handle_request(scope, receive, send)


async def _ending_after(seconds: float, app: Any, scope: Any, receive: Any, send: Any) -> None:
    """Run `app`, and end a response it still streams after `seconds` with its final, empty chunk.

    A GET on the stateless endpoint opens an event stream on which nothing is ever sent (there is
    no session to send for); unbounded, every such stream would hold a connection and a task.
    """
    state = {"started": False, "ended": False}

    async def tracked(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            state["started"] = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            state["ended"] = True
        await send(message)

    with anyio.move_on_after(seconds):
        await app(scope, receive, tracked)
    if state["started"] and not state["ended"]:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def mount_streamable_http(app: Any, target: Dispatcher | CMPHandler, *, path: str = MCP_PATH,
                          stream_seconds: float = STREAM_SECONDS, export_root: Path | None = None) -> None:
    """Serve the tools through `target` (the serving process's Dispatcher; an engine gets a
    Dispatcher of its own) as streamable HTTP at `path` of the FastAPI `app`.

    Stateless JSON mode: every tool call is one POST answered with JSON, so no session state
    outlives a request; a GET event stream is ended after `stream_seconds`. Host, Origin and
    Content-Type are checked by the app's middleware as on every route (transport/guard.py), so
    the SDK's own loopback-only check is off: it would refuse a keyed server's own address. The
    `export` tool writes only under `export_root` (default: the engine's `archive.export_dir`, else
    data_dir/exports).
    """
    dispatcher = Dispatcher.of(target)
    engine = dispatcher.engine
    root = export_root or engine.options.archive.export_root(engine.data_dir)

    def session_manager() -> Any:
        from mcp.server.transport_security import TransportSecuritySettings

        from .mcp_server import build_mcp_server

        server = build_mcp_server(dispatcher, export_root=root)
        server.streamable_http_app(streamable_http_path=path, stateless_http=True, json_response=True,
                                   max_request_body_size=MCP_BODY_LIMIT,
                                   transport_security=TransportSecuritySettings(
                                       enable_dns_rebinding_protection=False))
        return server.session_manager

    endpoint = _Endpoint(session_manager, stream_seconds)
    app.router.add_route(path, endpoint, include_in_schema=False)

    previous = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        async with endpoint.lifespan(), previous(application) as state:
            yield state

    app.router.lifespan_context = lifespan
