"""`cm serve`: cm's MCP tools and resources over stdio (default) or streamable HTTP (`--port`).

Every tool runs the same code as the CLI command, over one Ctx (one CMP connection) per call.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from . import CM_VERSION
from .app import Ctx
from .errors import CmError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _ns(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(**kw)


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


def build_server(server_url: str | None, gate: Gate) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("cass-memory", version=CM_VERSION,
                       instructions="Procedural memory for coding agents: call cm_context before a task, "
                                    "cm_feedback / cm_outcome after it.")

    @contextmanager
    def session() -> Iterator[Ctx]:
        """One Ctx (one CMP connection) for one call, inside the gate; cm errors become tool errors."""
        try:
            with gate.slot():
                ctx = Ctx(as_json=True, server_url=server_url)
                try:
                    yield ctx
                finally:
                    ctx.close()
        except CmError as exc:
            raise tool_error(exc) from None

    def run(fn: Any, args: SimpleNamespace) -> Any:
        with session() as ctx:
            return fn(ctx, args).data

    def refuse(message: str) -> Exception:
        return tool_error(CmError("MISSING_REQUIRED", message))

    @server.tool()
    def cm_context(task: str, workspace: str | None = None, limit: int | None = None, history: int | None = None,
                   days: int | None = None) -> dict:
        """Rules, anti-patterns and history relevant to a task (the `cm context` data)."""
        from .cmd_playbook import cmd_context

        return run(cmd_context, _ns(task=[task], workspace=workspace, limit=limit, top=None, history=history,
                                    days=days, min_score=None, no_history=False, format=None, log_context=False,
                                    session=None))

    @server.tool()
    def cm_feedback(bulletId: str, helpful: bool = False, harmful: bool = False,  # noqa: N803
                    reason: str | None = None, session: str | None = None) -> dict:
        """Mark a rule helpful or harmful."""
        from .cmd_feedback import cmd_mark

        if helpful == harmful:
            raise refuse("give exactly one of helpful or harmful")
        data = run(cmd_mark, _ns(bullet_id=bulletId, helpful=helpful, harmful=harmful, reason=reason,
                                 session=session))
        return {"success": True, "type": data["type"], "score": data["effectiveScore"], "state": data["newState"]}

    @server.tool()
    def cm_outcome(sessionId: str, outcome: str, rulesUsed: list[str] | None = None,  # noqa: N803
                   notes: str | None = None, durationSec: int | None = None) -> dict:  # noqa: N803
        """Record a session outcome and apply its implicit feedback (the reference only logged it)."""
        from .cmd_feedback import cmd_outcome

        if not rulesUsed:
            raise refuse("rulesUsed: the ids of the rules the session used")
        return run(cmd_outcome, _ns(status=outcome, rules=",".join(rulesUsed), session=sessionId,
                                    duration=durationSec, errors=None, retries=False, sentiment=None, text=notes))

    @server.tool()
    def memory_search(query: str, scope: str = "both", limit: int = 10, days: int | None = None,
                      workspace: str | None = None) -> dict:
        """Substring search of the playbook and/or history search of the raw journal (under the
        `cm privacy` rule, as `cm context`)."""
        with session() as ctx:
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
        from .cmd_reflect import cmd_reflect

        data = run(cmd_reflect, _ns(days=days, max_sessions=maxSessions, dry_run=dryRun, workspace=None,
                                    session=session))
        return data

    def resource(fn: Any, args: SimpleNamespace, pick: Any = None) -> str:
        data = run(fn, args)
        return json.dumps(pick(data) if pick else data)

    @server.resource("cm://playbook", mime_type="application/json")
    def playbook() -> str:
        from .cmd_playbook import cmd_list

        return resource(cmd_list, _ns(category=None))

    @server.resource("cm://stats", mime_type="application/json")
    def stats() -> str:
        from .cmd_info import cmd_stats

        return resource(cmd_stats, _ns())

    @server.resource("cm://diary", mime_type="application/json")
    def diary() -> str:
        with session() as ctx:
            return json.dumps({"diary": ctx.backend.diaries()[:50]})

    @server.resource("cm://outcomes", mime_type="application/json")
    def outcomes() -> str:
        with session() as ctx:
            return json.dumps({"outcomes": ctx.backend.read_log("outcome")[-50:]})

    return server


def serve(ctx: Ctx, args: Any) -> int:
    embedded = not (ctx._server_url or os.environ.get("CEREMEMORY_SERVER_URL"))
    server = build_server(ctx._server_url, Gate(ctx.config.get("serve") or {}, embedded))
    port = args.port or (int(os.environ["MCP_HTTP_PORT"]) if os.environ.get("MCP_HTTP_PORT") else None)
    if port is None or args.stdio:
        server.run("stdio")
        return 0
    token = os.environ.get("MCP_HTTP_TOKEN")
    if args.host not in LOOPBACK and not token and os.environ.get("MCP_HTTP_UNSAFE_NO_TOKEN") != "1":
        raise CmError("CONFIG_INVALID", f"Refusing to serve on {args.host} without MCP_HTTP_TOKEN")
    import uvicorn

    app = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                     host=args.host)
    uvicorn.run(_TokenGate(app, token) if token else app, host=args.host, port=port, log_level="warning")
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
