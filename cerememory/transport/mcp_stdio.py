"""The MCP stdio loop, answering every request, even one the SDK cannot read.

The SDK parses each line of stdin with pydantic, whose JSON parser gives up past 200 levels of
nesting. A line it cannot parse reaches the server as a bare exception, which the SDK drops, so
the client would wait for ever on a call whose arguments nest 200 deep. Here such a line is
answered with a JSON-RPC error for its id, found by a scan that does not recurse however deep
the line nests.
"""

from __future__ import annotations

import json
import logging
import re
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger("cerememory.mcp")

PARSER_DEPTH = 200  # pydantic-core's JSON recursion limit, which the SDK's parser inherits
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],:]')
_COLON = re.compile(r"\s*:\s*")

RequestId = str | int


def request_id(text: str) -> RequestId | None:
    """The top-level `id` of a JSON-RPC message, or None; never recurses, so any depth is fine."""
    depth, previous = 0, ""
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
        elif depth == 1 and previous in ("{", ",") and token == '"id"':
            return _scalar_after(text, match.end())
        previous = token
    return None


def _scalar_after(text: str, at: int) -> RequestId | None:
    colon = _COLON.match(text, at)
    if colon is None or text[colon.end():colon.end() + 1] in ("{", "[", ""):
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text, colon.end())
    except ValueError:
        return None
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else None


def unreadable_answer(exc: Exception) -> types.JSONRPCError | None:
    """The error that answers a line the SDK could not parse, when the line has an id to answer."""
    if not isinstance(exc, ValidationError):
        return None
    errors = exc.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid" and isinstance(first.get("input"), str):
        found = request_id(first["input"])
    else:  # valid JSON, but not a valid message: the id, if any, is in the parsed object
        found = next((e["input"]["id"] for e in errors if isinstance(e.get("input"), dict)
                      and isinstance(e["input"].get("id"), str | int)), None)
    if found is None or isinstance(found, bool):
        return None
    if "recursion limit" in first["msg"]:
        error = types.ErrorData(code=types.INVALID_PARAMS, message=(
            f"VALIDATION_ERROR: the request nests deeper than {PARSER_DEPTH} levels, more than the MCP "
            "parser reads\nhint: send deeply nested values flatter, or as a JSON string"))
    else:
        error = types.ErrorData(code=types.INVALID_REQUEST, message=(
            f"VALIDATION_ERROR: the request is not a valid JSON-RPC message: {first['msg']}"))
    return types.JSONRPCError(jsonrpc="2.0", id=found, error=error)


class _AnsweringReader:
    """The read side of the stdio transport, minus the lines it answers itself."""

    def __init__(self, inner: Any, writer: Any) -> None:
        self._inner, self._writer = inner, writer

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item: SessionMessage | Exception = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            answer = unreadable_answer(item)
            if answer is None:
                log.warning("ignored a line that is not a JSON-RPC request: %s", str(item).splitlines()[0])
                continue
            try:
                await self._writer.send(SessionMessage(answer))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return item

    def __aiter__(self) -> _AnsweringReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _AnsweringReader:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class AnsweringMCPServer(MCPServer):
    """An MCPServer whose stdio loop answers unreadable requests (see the module docstring)."""

    async def run_stdio_async(self) -> None:
        async with stdio_server() as (read_stream, write_stream):
            await self._lowlevel_server.run(_AnsweringReader(read_stream, write_stream), write_stream,
                                            self._lowlevel_server.create_initialization_options())
