"""Pi coding agent: `~/.pi/agent/sessions/<safe-path>/<timestamp>_<uuid>.jsonl` (or
`$PI_CODING_AGENT_DIR/sessions`). Lines are typed: `session` (id, cwd, provider, modelId),
`message` (`message.role` user / assistant / toolResult; content a string or blocks: text,
toolCall, thinking, image), and settings changes (`model_change`, `thinking_level_change`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .files import walk
from .lines import json_lines, jsonl
from .turns import ASSISTANT, SYSTEM, TOOL, TOOL_IO, USER, Chunk, Turn, as_json, block_text, parse_time, used

AGENT = "pi"
_SPEAKERS = {"user": USER, "assistant": ASSISTANT, "toolResult": TOOL, "system": SYSTEM}


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["PI_CODING_AGENT_DIR"]) if env.get("PI_CODING_AGENT_DIR") else home / ".pi" / "agent"
    return [base / "sessions"]


def discover(root: Path) -> Iterator[Path]:
    return walk(root, lambda name: name.endswith(".jsonl"))


def incremental(path: Path) -> bool:
    return True


def _session_from_name(path: Path) -> str:
    return path.stem.rsplit("_", 1)[-1]


def read(path: Path, offset: int, context: dict[str, Any]) -> Chunk:
    ctx = {"session": None, "workspace": None, "model": None, "index": 0, "line": 1, **context}
    turns: list[Turn] = []
    lines = jsonl(path, offset, ctx["line"])
    skipped = sum(not used(_entry, entry, line, ctx, turns, path) for line, entry in json_lines(lines))
    ctx["line"] = lines.next_line
    return Chunk(turns, lines.end, ctx, skipped, lines.more)


def _entry(entry: Any, line: int, ctx: dict[str, Any], turns: list[Turn], path: Path) -> bool:
    """The turns of one line, appended to `turns`; False when the line is not understood."""
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        return False
    kind = entry["type"]
    if kind == "session":
        ctx["session"] = ctx["session"] or entry.get("id")
        ctx["workspace"] = ctx["workspace"] or entry.get("cwd")
        ctx["model"] = entry.get("modelId") or ctx["model"]
        return True
    if kind == "model_change":
        ctx["model"] = entry.get("modelId") or entry.get("model") or ctx["model"]
        return True
    if kind != "message":
        return True
    message = entry.get("message")
    if not isinstance(message, dict) or message.get("role") not in _SPEAKERS:
        return False
    ctx["session"] = ctx["session"] or _session_from_name(path)
    role = message["role"]
    when = parse_time(entry.get("timestamp")) or parse_time(message.get("timestamp"))
    model = message.get("model") or ctx["model"]
    base = dict(agent=AGENT, session=ctx["session"], workspace=ctx["workspace"], timestamp=when, line=line,
                extra={"model": model} if model and role == "assistant" else {})
    uid = entry.get("id")
    parts: list[tuple[str, str, str | None]] = []
    if role == "toolResult":
        name = str(message.get("toolName") or "tool")
        parts.append((TOOL, block_text(message.get("content")), name))
    else:
        content = message.get("content")
        texts: list[str] = []
        for block in content if isinstance(content, list) else [content]:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                name = str(block.get("name") or "tool")
                parts.append((ASSISTANT, f"{name} {as_json(block.get('arguments', {}))}", name))
            elif not (isinstance(block, dict) and block.get("type") in ("thinking", "image")):
                piece = block_text(block)
                if piece:
                    texts.append(piece)
        if texts:
            parts.insert(0, (_SPEAKERS[role], "\n".join(texts), None))
    for k, (speaker, text, tool) in enumerate(parts):
        if not text.strip():
            continue
        turns.append(Turn(index=ctx["index"], speaker=speaker, text=text,
                          source=TOOL_IO if tool else "conversation", tool=tool,
                          log_id=(str(uid) if k == 0 else f"{uid}/{k}") if uid else None, **base))
        ctx["index"] += 1
    return True
