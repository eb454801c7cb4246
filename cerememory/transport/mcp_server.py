"""CMP over MCP: the tools of the operation table over any CMP backend, served over stdio or
streamable HTTP (mounted on `cerememory serve` by `mcp_http`).

Every operation whose table entry (cmp/operations.py) names an MCP tool is one tool: its name and
description come from the table, its arguments from the adapter of the same name in
`mcp_tools`, and it is read-only when the operation is not audited. A *backend* is anything with
`dispatch(op, request) -> dict` that raises `CMPError`: the HTTP `Client` (what `cerememory mcp`
uses: a stdio proxy to a running `cerememory serve`), the embedded `Memory`, or a `Dispatcher`
(what `cerememory serve` mounts at /mcp; an engine is given one). Every tool builds its CMP
request, dispatches it and returns readable JSON; every `CMPError` becomes an MCP tool error
(`is_error: true`) whose text starts with the CMP code, then the message and the hint.

The `export` tool writes on the machine that runs this server: the stdio proxy is the user's own
process and writes where its caller says; mounted on `cerememory serve` it writes only inside
the data directory's export directory. Within the package, the `mcp` SDK is imported by this
module, `mcp_stdio`, `mcp_http` (on the first request to /mcp) and the `cm` tool's own MCP
server (cm/mcp.py).
"""

from __future__ import annotations

import base64
import functools
import inspect
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from ..cmp import build
from ..cmp.context import bound
from ..cmp.dispatch import OPERATIONS, Dispatcher, Operation
from ..cmp.errors import CMPError, ErrorCode
from ..cmp.handler import CMPHandler
from ..storage.archive_paths import export_target, write_new
from ..version import __version__
from . import mcp_tools
from .guard import refuse_plaintext_key
from .mcp_stdio import AnsweringMCPServer
from .mcp_tools import Result, ToolCall

log = logging.getLogger("cerememory.mcp")


# ---------------------------------------------------------------- backends


@runtime_checkable
class Backend(Protocol):
    def dispatch(self, op: str, request: dict[str, Any]) -> dict[str, Any]: ...


def as_backend(obj: Backend | CMPHandler) -> Backend:
    """`obj` if it has `dispatch(op, request)` (a client, `Memory`, a `Dispatcher`), else an
    engine, given a Dispatcher of its own."""
    return obj if isinstance(obj, Backend) else Dispatcher(obj)


# ---------------------------------------------------------------- results and errors


def describe(exc: CMPError) -> str:
    """The text of a tool error: the CMP code and message first, then what to do about it."""
    lines = [f"{exc.code.value}: {exc.message}"]
    if exc.hint:
        lines.append(f"hint: {exc.hint}")
    field = exc.details.get("field")
    if field:
        lines.append(f"field: {field}")
    if exc.retry_after is not None:
        lines.append(f"retry after: {exc.retry_after} s")
    if exc.request_id:
        lines.append(f"request id: {exc.request_id}")
    return "\n".join(lines)


def _bad(message: str, hint: str | None = None) -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, message, hint=hint)


def _write_archive(path: Path, result: Result) -> Result:
    """The archive of an export response written to the new file `path`; the response without it."""
    data = result.get("archive_data")
    if not data:
        raise CMPError(ErrorCode.EXPORT_FAILED, "the server returned no archive data")
    with write_new(path) as out:
        out.write(base64.b64decode(data))
    return {"output_path": str(path), **{k: v for k, v in result.items() if k != "archive_data"}}


def _annotations(op: Operation) -> ToolAnnotations:
    if not op.audited:  # it changes nothing
        return ToolAnnotations(read_only_hint=True, open_world_hint=False)
    destructive = op.mcp is not None and op.mcp.destructive
    return ToolAnnotations(read_only_hint=False, destructive_hint=destructive, open_world_hint=False)


def _tool(op: Operation, name: str, backend: Backend, export_root: Path | None) -> Callable[..., Result]:
    """The tool of `op`: its adapter's arguments in, the CMP call through `backend`, readable JSON
    out; a CMPError (or a bug) becomes an MCP tool error instead of a crash of the session."""
    adapter: Callable[..., ToolCall] = getattr(mcp_tools, name)

    @functools.wraps(adapter)
    def run(**arguments: Any) -> Result:
        try:
            call = adapter(**arguments)
            target = export_target(call.archive_to, export_root) if call.archive_to is not None else None
            with bound(transport="mcp"):  # for the audit log and the metrics
                result = backend.dispatch(op.name, build.drop_none(call.request))
            if target is not None:
                result = _write_archive(target, result)
            return call.present(result) if call.present is not None else result
        except CMPError as exc:
            raise ToolError(describe(exc)) from exc
        except Exception as exc:
            log.exception("tool %s failed", name)
            raise ToolError(f"INTERNAL_ERROR: {type(exc).__name__} in the MCP bridge\n"
                            "hint: the MCP server's log (stderr) has the details") from exc

    # the SDK reads the tool's schema from the signature: the adapter's arguments, a JSON object out
    run.__signature__ = inspect.signature(adapter, eval_str=True).replace(  # type: ignore[attr-defined]
        return_annotation=Result)
    return run


# ---------------------------------------------------------------- the server

INSTRUCTIONS = """\
Cerememory is a long-term memory shared by your sessions (and other agents).
- `store` what is worth remembering: facts (store=semantic), events (episodic), rules and
  preferences (procedural); add `meta` (intent, rationale, decision) so it can be found by why.
- `recall` before answering questions about past work; without a query it lists recent memories.
- `store_raw` / `recall_raw` keep and search verbatim conversation turns and tool output.
- `inspect` one record, `associate` to follow its links, `timeline` for a period, `stats` for counts.
- `forget` deletes permanently and needs confirm=true.
Errors start with a code (e.g. RECORD_NOT_FOUND) and carry a hint on what to do."""


@contextmanager
def _root_logging_untouched() -> Iterator[None]:
    """MCPServer() calls logging.basicConfig; an embedding server keeps its own logging set-up."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


def build_mcp_server(backend: Backend | CMPHandler, *, export_root: Path | None = None) -> MCPServer:
    """An MCP server with a tool for every operation that declares one, over `backend` (see the
    module docstring).

    `export_root` confines the `export` tool to one directory: give it whenever the server writes
    on a disk that is not its caller's own. Without it the tool writes where the caller says.
    """
    cmp = as_backend(backend)
    with _root_logging_untouched():
        server = AnsweringMCPServer("cerememory", version=__version__, instructions=INSTRUCTIONS,
                                    website_url="https://github.com/co-r-e/cerememory")
    for op in OPERATIONS.values():
        if op.mcp is not None:
            server.add_tool(_tool(op, op.mcp.name, cmp, export_root), name=op.mcp.name,
                            description=op.mcp.description, annotations=_annotations(op))
    return server


# ---------------------------------------------------------------- stdio


def _log_to_stderr() -> None:
    """stdout carries the protocol only: every log line goes to stderr."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="cerememory mcp: %(levelname)s %(name)s: %(message)s")


def check_server_url(url: str, api_key: str | None) -> None:
    """An http(s) URL, and never an API key in plaintext to another machine."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(f"--server-url: {url!r} is not an http:// or https:// URL", hint="e.g. http://127.0.0.1:8420")
    refuse_plaintext_key(url, api_key)


def run_stdio(url: str, *, api_key: str | None = None, timeout: float | None = 30.0) -> None:
    """Serve the tools over stdio, proxying every call to the Cerememory server at `url`.

    Returns when the client closes stdin. Raises `CMPError` (VALIDATION_ERROR) for a bad URL or an
    API key that would travel in plaintext to a non-loopback host.
    """
    _log_to_stderr()
    check_server_url(url, api_key)
    from .client import Client  # httpx: only the stdio proxy needs it, never a server

    with Client(url, api_key=api_key, timeout=timeout) as client:
        build_mcp_server(client).run("stdio")
