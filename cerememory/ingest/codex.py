"""Codex CLI: `rollout-*.jsonl` under `$CODEX_HOME/sessions/YYYY/MM/DD/`, lines
`{timestamp, type, payload}`. `session_meta` names the session and its cwd; `response_item`s are
messages, function calls and their outputs; `event_msg` repeats user and agent messages (kept
only when the response item is missing). Legacy `.json` files hold `{session, items}`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from . import safejson
from .files import MAX_DOCUMENT_BYTES, read_whole, walk
from .lines import json_lines, jsonl
from .turns import ASSISTANT, SYSTEM, TOOL, TOOL_IO, USER, Chunk, Turn, as_json, block_text, parse_time, used

AGENT = "codex"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>")
_IGNORED = ("turn_context", "compacted", "state")
RECENT = 16


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
    return [base / "sessions"]


def discover(root: Path) -> Iterator[Path]:
    return walk(root, lambda name: name.startswith("rollout-") and name.endswith((".jsonl", ".json")))


def incremental(path: Path) -> bool:
    return path.suffix == ".jsonl"


def _session_from_name(path: Path) -> str:
    found = _UUID.findall(path.stem)
    return found[-1] if found else path.stem


def _fingerprint(speaker: str, text: str) -> str:
    return speaker + ":" + hashlib.sha1(text.strip().encode("utf-8", "replace")).hexdigest()[:12]


def _output_text(output: Any) -> str:
    """function_call_output.output is a string, often JSON `{"output": ..., "metadata": ...}`."""
    if isinstance(output, str):
        parsed = safejson.value(output)
        if isinstance(parsed, dict) and "output" in parsed:
            return as_json(parsed["output"])
        return output
    if isinstance(output, dict) and "content" in output:
        return block_text(output["content"]) or as_json(output)
    return as_json(output)


class _Session:
    def __init__(self, path: Path, context: dict[str, Any]) -> None:
        self.ctx = {"session": None, "workspace": None, "index": 0, "line": 1, "calls": {}, "recent": [],
                    **context}
        self.path = path
        self.turns: list[Turn] = []
        self.skipped = 0

    def add(self, speaker: str, text: str, timestamp: Any, line: int | None, *, tool: str | None = None,
            source: str = "conversation", dedupe: bool = False) -> None:
        if not text.strip():
            return
        recent: list[str] = self.ctx["recent"]
        if source == "conversation":
            mark = _fingerprint(speaker, text)
            if mark in recent:  # the same message as event_msg and as response_item
                recent.remove(mark)
                return
            recent.append(mark)
            del recent[:-RECENT]
        ctx = self.ctx
        ctx["session"] = ctx["session"] or _session_from_name(self.path)
        self.turns.append(Turn(agent=AGENT, session=ctx["session"], index=ctx["index"], speaker=speaker, text=text,
                               source=source, timestamp=parse_time(timestamp), workspace=ctx["workspace"],
                               tool=tool, line=line))
        ctx["index"] += 1

    def item(self, payload: dict, timestamp: Any, line: int | None) -> None:
        kind = payload.get("type")
        calls: dict[str, str] = self.ctx["calls"]
        if kind == "message" or (kind is None and "role" in payload):
            role = payload.get("role")
            text = block_text(payload.get("content"))
            speaker = SYSTEM if role is None else {"user": USER, "assistant": ASSISTANT}.get(role, SYSTEM)
            if speaker == USER and text.lstrip().startswith(_CONTEXT_PREFIXES):
                speaker = SYSTEM
            self.add(speaker, text, timestamp, line)
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            name = str(payload.get("name") or ("shell" if kind == "local_shell_call" else "tool"))
            args = payload.get("arguments", payload.get("input", payload.get("action")))
            if payload.get("call_id"):
                calls[str(payload["call_id"])] = name
            self.add(ASSISTANT, f"{name} {as_json(args) if args is not None else ''}".strip(), timestamp, line,
                     tool=name, source=TOOL_IO)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            name = calls.get(str(payload.get("call_id")), "tool")
            self.add(TOOL, _output_text(payload.get("output")), timestamp, line, tool=name, source=TOOL_IO)
        elif kind in ("reasoning", "web_search_call"):
            return
        elif not isinstance(kind, str):
            self.skipped += 1

    def line(self, record: Any, line: int) -> bool:
        """One line of the log; False when it is not an object."""
        if not isinstance(record, dict):
            return False
        self.event(record, line)
        return True

    def legacy_item(self, item: Any) -> bool:
        if not isinstance(item, dict):
            return False
        self.item(item, item.get("timestamp"), None)
        return True

    def event(self, record: dict, line: int) -> None:
        kind, payload, timestamp = record.get("type"), record.get("payload"), record.get("timestamp")
        if kind == "session_meta" and isinstance(payload, dict):
            meta = payload.get("meta")
            if not isinstance(meta, dict):
                meta = payload
            self.ctx["session"] = self.ctx["session"] or meta.get("id")
            self.ctx["workspace"] = self.ctx["workspace"] or meta.get("cwd")
        elif kind == "response_item" and isinstance(payload, dict):
            self.item(payload, timestamp, line)
        elif kind == "event_msg" and isinstance(payload, dict):
            sub = payload.get("type")
            if sub in ("user_message", "agent_message") and isinstance(payload.get("message"), str):
                self.add(USER if sub == "user_message" else ASSISTANT, payload["message"], timestamp, line)
        elif kind in _IGNORED or (kind is None and record.get("record_type") == "state"):
            return
        elif kind is None and "instructions" in record and "id" in record:  # early 2025: a bare header line
            self.ctx["session"] = self.ctx["session"] or record.get("id")
        elif kind == "message" or (kind in ("function_call", "function_call_output") and "payload" not in record):
            self.item(record, timestamp, line)  # early 2025: response items without the envelope
        elif isinstance(kind, str):
            return
        else:
            self.skipped += 1


def _read_legacy(path: Path) -> Chunk:
    session = _Session(path, {})
    raw = read_whole(path, MAX_DOCUMENT_BYTES)
    data = safejson.value(raw)
    if not isinstance(data, dict):
        return Chunk([], len(raw), {}, 1)
    info = data.get("session")
    if not isinstance(info, dict):
        info = {}
    session.ctx["session"] = info.get("id") or _session_from_name(path)
    session.ctx["workspace"] = info.get("cwd")
    items = data.get("items") or []
    session.skipped += sum(not used(session.legacy_item, item) for item in items)
    return Chunk(session.turns, len(raw), {}, session.skipped)


def read(path: Path, offset: int, context: dict[str, Any]) -> Chunk:
    if not incremental(path):
        return _read_legacy(path)
    session = _Session(path, context)
    lines = jsonl(path, offset, session.ctx["line"])
    for line, record in json_lines(lines):
        session.skipped += not used(session.line, record, line)
    session.ctx["line"] = lines.next_line
    session.ctx["calls"] = dict(list(session.ctx["calls"].items())[-RECENT * 8:])
    return Chunk(session.turns, lines.end, session.ctx, session.skipped, lines.more)
