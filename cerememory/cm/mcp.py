"""`cm serve`: cm's MCP tools and resources over stdio (default) or streamable HTTP (`--port`).

Every tool calls the same typed service function as the CLI command, over one Ctx (one CMP
connection) per call.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import CM_VERSION
from .app import Ctx
from .errors import CmError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Gate:
    """Bounded concurrency for tool calls (config `serve`, as the reference bounds its cass calls):
    at most `maxConcurrentCassCalls` run at once (≤ 0: no bound), at most `maxQueuedCassCalls` wait
    (0: no bound), each for at most `cassQueueTimeoutMs` (0: for ever). Opened in-process, the data
    dir admits one engine at a time, so embedded calls run one by one."""

    def __init__(self, settings: dict[str, Any], embedded: bool) -> None:
        running = int(settings.get("maxConcurrentCassCalls", 2))
        self.limit = 1 if embedded else running
        self.max_queued = int(settings.get("maxQueuedCassCalls", 32))
        timeout_ms = float(settings.get("cassQueueTimeoutMs", 20_000))
        self.timeout = timeout_ms / 1000 if timeout_ms > 0 else None
        self._slots = threading.BoundedSemaphore(self.limit) if self.limit > 0 else None
        self._queued = 0
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[None]:
        if self._slots is None:
            yield
            return
        with self._lock:
            if self.max_queued and self._queued >= self.max_queued:
                raise CmError("LOCK_ACQUISITION_FAILED", f"cm serve is busy: {self._queued} calls already wait",
                              recovery=["Retry in a moment", "Raise serve.maxQueuedCassCalls in config.json"])
            self._queued += 1
        try:
            acquired = self._slots.acquire(timeout=self.timeout)
        finally:
            with self._lock:
                self._queued -= 1
        if not acquired:
            raise CmError("LOCK_ACQUISITION_FAILED", f"cm serve is busy: no slot within {self.timeout:g} s",
                          recovery=["Retry in a moment", "Raise serve.cassQueueTimeoutMs in config.json"])
        try:
            yield
        finally:
            self._slots.release()


def tool_error(exc: CmError) -> Exception:
    """What the agent sees: the cm code, the message and the recovery steps."""
    from mcp.server.mcpserver.exceptions import ToolError

    lines = [f"{exc.code}: {exc.message}", *(f"recovery: {step}" for step in exc.recovery)]
    return ToolError("\n".join(lines))


def build_server(new_ctx: Callable[[], Ctx], gate: Gate) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("cass-memory", version=CM_VERSION,
                       instructions="Procedural memory for coding agents: call cm_context before a task, "
                                    "cm_feedback / cm_outcome after it.")

    @contextmanager
    def one_call() -> Iterator[Ctx]:
        """One Ctx (one CMP connection) for one call, inside the gate; cm errors become tool errors."""
        try:
            with gate.slot():
                ctx = new_ctx()
                try:
                    yield ctx
                finally:
                    ctx.close()
        except CmError as exc:
            raise tool_error(exc) from None

    def refuse(message: str) -> Exception:
        return tool_error(CmError("MISSING_REQUIRED", message))

    @server.tool()
    def cm_context(task: str, workspace: str | None = None, limit: int | None = None, history: int | None = None,
                   days: int | None = None) -> dict:
        """Rules, anti-patterns and history relevant to a task (the `cm context` data)."""
        from .service_context import context

        with one_call() as ctx:
            return context(ctx, task, workspace=workspace, limit=limit, history=history, days=days).data

    @server.tool()
    def cm_feedback(bulletId: str, helpful: bool = False, harmful: bool = False,  # noqa: N803
                    reason: str | None = None, session: str | None = None) -> dict:
        """Mark a rule helpful or harmful."""
        from .service_feedback import mark

        if helpful == harmful:
            raise refuse("give exactly one of helpful or harmful")
        with one_call() as ctx:
            data = mark(ctx, bulletId, "helpful" if helpful else "harmful", reason=reason, session=session).data
        return {"success": True, "type": data["type"], "score": data["effectiveScore"], "state": data["newState"]}

    @server.tool()
    def cm_outcome(sessionId: str, outcome: str, rulesUsed: list[str] | None = None,  # noqa: N803
                   notes: str | None = None, durationSec: int | None = None) -> dict:  # noqa: N803
        """Record a session outcome and apply its implicit feedback (the reference only logged it)."""
        from .service_feedback import record_outcome

        if not rulesUsed:
            raise refuse("rulesUsed: the ids of the rules the session used")
        with one_call() as ctx:
            return record_outcome(ctx, outcome, rulesUsed, session=sessionId, duration=durationSec, text=notes).data

    @server.tool()
    def memory_search(query: str, scope: str = "both", limit: int = 10, days: int | None = None,
                      workspace: str | None = None) -> dict:
        """Substring search of the playbook and/or history search of the raw journal (under the
        `cm privacy` rule, as `cm context`)."""
        with one_call() as ctx:
            out: dict[str, Any] = {}
            if scope in ("playbook", "both"):
                needle = query.lower()
                out["playbook"] = [{"id": b["id"], "content": b["content"], "category": b["category"],
                                    "scope": b.get("scope", "global"), "maturity": b.get("maturity")}
                                   for b in ctx.playbook.active()
                                   if needle in f"{b['content']} {b['category']} {b.get('scope')}".lower()][:limit]
            if scope in ("cass", "both"):
                from . import privacy

                out["cass"] = ctx.backend.history(query, days or 30, limit, workspace=workspace,
                                                  permits=privacy.policy(ctx.backend).permits)
            return out

    @server.tool()
    def memory_reflect(days: int = 7, maxSessions: int = 20, dryRun: bool = False,  # noqa: N803
                       session: str | None = None) -> dict:
        """Reflect on recent sessions (deterministic path)."""
        from .service_reflect import reflect

        with one_call() as ctx:
            return reflect(ctx, days=days, max_sessions=maxSessions, dry_run=dryRun, session=session).data

    @server.resource("cm://playbook", mime_type="application/json")
    def playbook() -> str:
        from .service_playbook import list_rules

        with one_call() as ctx:
            return json.dumps(list_rules(ctx).data)

    @server.resource("cm://stats", mime_type="application/json")
    def stats() -> str:
        from .service_info import stats

        with one_call() as ctx:
            return json.dumps(stats(ctx).data)

    @server.resource("cm://diary", mime_type="application/json")
    def diary() -> str:
        with one_call() as ctx:
            return json.dumps({"diary": ctx.backend.diaries()[:50]})

    @server.resource("cm://outcomes", mime_type="application/json")
    def outcomes() -> str:
        with one_call() as ctx:
            return json.dumps({"outcomes": ctx.backend.read_log("outcome")[-50:]})

    return server


def serve(ctx: Ctx, *, port: int | None, host: str, stdio: bool) -> int:
    """Serve until stopped: stdio unless a port is given (`--port` or MCP_HTTP_PORT) and not `stdio`."""
    embedded = not (ctx.server_url or os.environ.get("CEREMEMORY_SERVER_URL"))

    def new_ctx() -> Ctx:
        return Ctx(as_json=True, server_url=ctx.server_url, verbose=ctx.verbose, no_emoji=ctx.no_emoji,
                   insecure=ctx.insecure)

    server = build_server(new_ctx, Gate(ctx.config.get("serve") or {}, embedded))
    port = port or (int(os.environ["MCP_HTTP_PORT"]) if os.environ.get("MCP_HTTP_PORT") else None)
    if port is None or stdio:
        server.run("stdio")
        return 0
    token = os.environ.get("MCP_HTTP_TOKEN")
    if host not in LOOPBACK and not token and os.environ.get("MCP_HTTP_UNSAFE_NO_TOKEN") != "1":
        raise CmError("CONFIG_INVALID", f"Refusing to serve on {host} without MCP_HTTP_TOKEN")
    import uvicorn

    app = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                     host=host)
    uvicorn.run(_TokenGate(app, token) if token else app, host=host, port=port, log_level="warning")
    return 0


class _TokenGate:
    """Bearer or X-MCP-Token check, constant-time, in front of the MCP app."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"x-mcp-token") or headers.get(b"authorization", b"").removeprefix(b"Bearer ")
            if not hmac.compare_digest(given, self.token):
                body = json.dumps({"jsonrpc": "2.0", "error": {"code": -32001, "message": "Unauthorized"},
                                   "id": None}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
