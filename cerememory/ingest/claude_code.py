"""Claude Code: one JSONL file per session under `~/.claude/projects/<project>/` (the project is
the cwd with `/` replaced by `-`), one event per line; only `user` and `assistant` events carry
turns. A line's content is a string or a list of blocks: text, `tool_use`, `tool_result`,
thinking (not kept). Also read: the JSON variant (`{title?, messages: [{role | type, content |
text, timestamp | time}]}`, the whole file each time it changes) and the Claude desktop app's
session sidecars on macOS (`~/Library/Application Support/Claude/claude-code-sessions` and
`local-agent-mode-sessions`, the same JSONL)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .lines import json_lines, next_line, read_from, session_files
from .turns import ASSISTANT, SYSTEM, TOOL, TOOL_IO, Chunk, Turn, as_json, block_text, decode, parse_time

AGENT = "claude_code"
TURN_TYPES = ("user", "assistant", "message")
MAX_REMEMBERED_TOOLS = 200


DESKTOP_SIDECARS = ("claude-code-sessions", "local-agent-mode-sessions")


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"
    desktop = home / "Library" / "Application Support" / "Claude"
    return [base / "projects", *(desktop / name for name in DESKTOP_SIDECARS)]


def discover(root: Path) -> Iterator[Path]:
    return session_files(root, lambda name: name.endswith((".jsonl", ".json")))


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
    data, end = read_from(path, offset)
    ctx = {"session": None, "workspace": None, "index": 0, "line": 1, "tools": {}, **context}
    tools: dict[str, str] = dict(ctx["tools"])
    turns: list[Turn] = []
    skipped = 0
    for line, event in json_lines(data, ctx["line"]):
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            skipped += 1
            continue
        if event["type"] not in TURN_TYPES:
            continue  # summary, system, file-history-snapshot, progress...: no conversation turn
        message = event.get("message") if isinstance(event.get("message"), dict) else event
        role = message.get("role") or event.get("role") or event["type"]
        if role not in ("user", "assistant", "system"):
            skipped += 1
            continue
        ctx["session"] = ctx["session"] or event.get("sessionId") or path.stem
        ctx["workspace"] = ctx["workspace"] or event.get("cwd")
        base = dict(agent=AGENT, session=ctx["session"], workspace=ctx["workspace"],
                    timestamp=parse_time(event.get("timestamp")), line=line,
                    extra={k: v for k, v in (("model", message.get("model")), ("git_branch", event.get("gitBranch")),
                                             ("sidechain", event.get("isSidechain") or None)) if v})
        speaker = SYSTEM if role == "system" or event.get("isMeta") or event.get("isCompactSummary") else role
        uid = event.get("uuid")
        parts: list[tuple[str, str, str | None, str | None]] = []  # speaker, text, source, tool
        content = message.get("content", event.get("content"))
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
    if len(tools) > MAX_REMEMBERED_TOOLS:
        tools = dict(list(tools.items())[-MAX_REMEMBERED_TOOLS:])
    ctx["tools"] = tools
    ctx["line"] = next_line(data, ctx["line"])
    return Chunk(turns, end, ctx, skipped)


def _read_json(path: Path) -> Chunk:
    """The JSON variant, whole: turn ids (session + index) make a reread after a change safe."""
    size = path.stat().st_size
    try:
        document = json.loads(decode(path.read_bytes()))
    except ValueError:
        return Chunk([], size, {}, 1)
    messages = document.get("messages") if isinstance(document, dict) else None
    if not isinstance(messages, list):
        return Chunk([], size, {}, 1)
    session = str(document.get("sessionId") or document.get("id") or path.stem)
    workspace = document.get("cwd") if isinstance(document.get("cwd"), str) else None
    turns: list[Turn] = []
    skipped = 0
    for message in messages:
        role = (message.get("role") or message.get("type")) if isinstance(message, dict) else None
        if role not in ("user", "assistant", "system"):
            skipped += 1
            continue
        content = message.get("content", message.get("text"))
        text = block_text(content) if not isinstance(content, str) else content
        if not text.strip():
            continue
        turns.append(Turn(agent=AGENT, session=session, index=len(turns), speaker=SYSTEM if role == "system" else role,
                          text=text, source="conversation", workspace=workspace,
                          timestamp=parse_time(message.get("timestamp") or message.get("time")),
                          log_id=str(message["uuid"]) if message.get("uuid") else None,
                          extra={"title": document["title"]} if isinstance(document.get("title"), str) else {}))
    return Chunk(turns, size, {}, skipped)
