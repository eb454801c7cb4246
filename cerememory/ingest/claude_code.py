"""Claude Code: one JSONL file per session under `~/.claude/projects/<project>/` (the project is
the cwd with `/` replaced by `-`), one event per line; only `user` and `assistant` events carry
turns. A line's content is a string or a list of blocks: text, `tool_use`, `tool_result`,
thinking (not kept). Also read: the JSON variant (`{title?, messages: [{role | type, content |
text, timestamp | time}]}`, the whole file each time it changes) and the Claude desktop app's
session sidecars on macOS (`~/Library/Application Support/Claude/claude-code-sessions` and
`local-agent-mode-sessions`, the same JSONL)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from . import safejson
from .files import MAX_DOCUMENT_BYTES, read_whole, walk
from .lines import json_lines, jsonl
from .turns import ASSISTANT, SYSTEM, TOOL, TOOL_IO, Chunk, Turn, as_json, block_text, parse_time, used

AGENT = "claude_code"
TURN_TYPES = ("user", "assistant", "message")
MAX_REMEMBERED_TOOLS = 200


DESKTOP_SIDECARS = ("claude-code-sessions", "local-agent-mode-sessions")


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"
    desktop = home / "Library" / "Application Support" / "Claude"
    return [base / "projects", *(desktop / name for name in DESKTOP_SIDECARS)]


def discover(root: Path) -> Iterator[Path]:
    return walk(root, lambda name: name.endswith((".jsonl", ".json")))


def incremental(path: Path) -> bool:
    return path.suffix != ".json"  # the JSON variant is one document, rewritten as it grows


def _tool_result_text(block: dict) -> str:
    content = block.get("content")
    return block_text(content) if not isinstance(content, dict | int | float | bool) else as_json(content)


def read(path: Path, offset: int, context: dict[str, Any]) -> Chunk:
    """The turns after `offset`; `context` carries the session, workspace, next index and the
    names of recent tool calls (so a result knows which tool produced it)."""
    if path.suffix == ".json":
        return _read_json(path)
    ctx = {"session": None, "workspace": None, "index": 0, "line": 1, "tools": {}, **context}
    tools: dict[str, str] = dict(ctx["tools"])
    turns: list[Turn] = []
    skipped = 0
    lines = jsonl(path, offset, ctx["line"])
    for line, event in json_lines(lines):
        skipped += not used(_event, event, line, ctx, tools, turns, path)
    if len(tools) > MAX_REMEMBERED_TOOLS:
        tools = dict(list(tools.items())[-MAX_REMEMBERED_TOOLS:])
    ctx["tools"] = tools
    ctx["line"] = lines.next_line
    return Chunk(turns, lines.end, ctx, skipped, lines.more)


def _event(event: Any, line: int, ctx: dict[str, Any], tools: dict[str, str], turns: list[Turn],
           path: Path) -> bool:
    """The turns of one event, appended to `turns`; False when the event is not understood."""
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return False
    if event["type"] not in TURN_TYPES:
        return True  # summary, system, file-history-snapshot, progress...: no conversation turn
    message = event.get("message")
    if not isinstance(message, dict):
        message = event
    role = message.get("role") or event.get("role") or event["type"]
    if role not in ("user", "assistant", "system"):
        return False
    ctx["session"] = ctx["session"] or event.get("sessionId") or path.stem
    ctx["workspace"] = ctx["workspace"] or event.get("cwd")
    base = dict(agent=AGENT, session=ctx["session"], workspace=ctx["workspace"],
                timestamp=parse_time(event.get("timestamp")), line=line,
                extra={k: v for k, v in (("model", message.get("model")), ("git_branch", event.get("gitBranch")),
                                         ("sidechain", event.get("isSidechain") or None)) if v})
    speaker = SYSTEM if role == "system" or event.get("isMeta") or event.get("isCompactSummary") else role
    uid = event.get("uuid")
    parts: list[tuple[str, str, str | None, str | None]] = []  # speaker, text, source, tool
    content: Any = message.get("content", event.get("content"))  # JSON of any shape
    blocks = content if isinstance(content, list) else [content]
    text: list[str] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            name = str(block.get("name") or "tool")
            if block.get("id"):
                tools[str(block["id"])] = name
            parts.append((ASSISTANT, f"{name} {as_json(block.get('input', {}))}", TOOL_IO, name))
        elif kind == "tool_result":
            name = tools.get(str(block.get("tool_use_id")), "tool")
            parts.append((TOOL, _tool_result_text(block), TOOL_IO, name))
        elif kind in ("thinking", "redacted_thinking", "image", "document"):
            continue
        else:
            piece = block_text(block)
            if piece:
                text.append(piece)
    if text:
        parts.insert(0, (speaker, "\n".join(text), None, None))
    for k, (who, body, source, tool) in enumerate(parts):
        if not body.strip():
            continue
        turns.append(Turn(index=ctx["index"], speaker=who, text=body, source=source or "conversation",
                          tool=tool, log_id=(uid if k == 0 else f"{uid}/{k}") if uid else None, **base))
        ctx["index"] += 1
    return True


def _read_json(path: Path) -> Chunk:
    """The JSON variant, whole: turn ids (session + index) make a reread after a change safe."""
    data = read_whole(path, MAX_DOCUMENT_BYTES)
    document = safejson.value(data)
    messages = document.get("messages") if isinstance(document, dict) else None
    if not isinstance(messages, list):
        return Chunk([], len(data), {}, 1)
    session = str(document.get("sessionId") or document.get("id") or path.stem)
    workspace = document.get("cwd") if isinstance(document.get("cwd"), str) else None
    extra = {"title": document["title"]} if isinstance(document.get("title"), str) else {}
    turns: list[Turn] = []
    skipped = sum(not used(_message, message, session, workspace, extra, turns) for message in messages)
    return Chunk(turns, len(data), {}, skipped)


def _message(message: Any, session: str, workspace: str | None, extra: dict[str, Any], turns: list[Turn]) -> bool:
    role = (message.get("role") or message.get("type")) if isinstance(message, dict) else None
    if role not in ("user", "assistant", "system"):
        return False
    content = message.get("content", message.get("text"))
    text = block_text(content) if not isinstance(content, str) else content
    if text.strip():
        turns.append(Turn(agent=AGENT, session=session, index=len(turns), speaker=SYSTEM if role == "system" else role,
                          text=text, source="conversation", workspace=workspace,
                          timestamp=parse_time(message.get("timestamp") or message.get("time")),
                          log_id=str(message["uuid"]) if message.get("uuid") else None, extra=dict(extra)))
    return True
