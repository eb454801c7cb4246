"""Gemini CLI: `$GEMINI_HOME/tmp/<projectHash>/chats/session-*.json`, one JSON document per session
(`{sessionId, startTime, messages: [{id, timestamp, type, content, toolCalls}]}`) rewritten as it
grows; and `/chat save` checkpoints (`checkpoint-*.json`: a list of `{role, parts}`). The
workspace is not stored: a `.project_root` file, then the text ("Working directory: ..."), else
the project directory."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from . import safejson
from .files import MAX_DOCUMENT_BYTES, read_whole, walk
from .turns import ASSISTANT, SYSTEM, TOOL, TOOL_IO, USER, Chunk, Turn, as_json, block_text, decode, parse_time, used

AGENT = "gemini"
_SPEAKERS = {"user": USER, "gemini": ASSISTANT, "model": ASSISTANT, "assistant": ASSISTANT}
_WORKSPACE = (re.compile(r"AGENTS\.md instructions for (/[^\s`'\"]+)"),
              re.compile(r"[Ww]orking directory:\s*(/[^\s`'\"]+)"),
              re.compile(r"(/data/projects/[^\s/`'\"]+)"))
MAX_ROOT_MARKER_BYTES = 4096


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["GEMINI_HOME"]) if env.get("GEMINI_HOME") else home / ".gemini"
    return [base / "tmp"]


def discover(root: Path) -> Iterator[Path]:
    return walk(root, lambda name: name.endswith(".json") and name.startswith(("session-", "checkpoint-")))


def incremental(path: Path) -> bool:
    return False


def _project_dir(path: Path) -> Path:
    return path.parent.parent if path.parent.name == "chats" else path.parent


def _workspace(path: Path, texts: list[str]) -> str:
    marker = _project_dir(path) / ".project_root"
    try:  # a regular file, not a link: its text becomes every turn's workspace
        root = decode(read_whole(marker, MAX_ROOT_MARKER_BYTES, follow_links=False)).strip()
        if root:
            return root
    except OSError:
        pass
    for text in texts:
        for pattern in _WORKSPACE:
            found = pattern.search(text)
            if found:
                return found.group(1).rstrip(".,;:)")
    return str(_project_dir(path))


def _parts(parts: Any) -> Iterator[tuple[str, Any]]:
    """(kind, value) of Gemini API parts: text, functionCall, functionResponse."""
    for part in parts if isinstance(parts, list) else [parts]:
        if isinstance(part, str):
            yield "text", part
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str) and not part.get("thought"):
                yield "text", part["text"]
            elif isinstance(part.get("functionCall"), dict):
                yield "call", part["functionCall"]
            elif isinstance(part.get("functionResponse"), dict):
                yield "response", part["functionResponse"]


def _response_text(response: dict) -> str:
    body = response.get("response")
    if isinstance(body, dict) and set(body) <= {"output", "error"}:
        return as_json(body.get("output") if "output" in body else body.get("error"))
    return as_json(body if body is not None else response)


class _Builder:
    def __init__(self, session: str) -> None:
        self.session = session
        self.turns: list[Turn] = []
        self.skipped = 0

    def add(self, speaker: str, text: str, timestamp: Any, log_id: str | None, *, tool: str | None = None) -> None:
        if text.strip():
            self.turns.append(Turn(agent=AGENT, session=self.session, index=len(self.turns), speaker=speaker,
                                   text=text, source=TOOL_IO if tool else "conversation",
                                   timestamp=parse_time(timestamp), tool=tool, log_id=log_id))


def _session_file(data: dict, path: Path) -> _Builder:
    built = _Builder(str(data.get("sessionId") or path.stem))
    built.skipped += sum(not used(_message, built, message, data) for message in data.get("messages") or [])
    return built


def _message(built: _Builder, message: Any, data: dict) -> bool:
    """The turns of one message and its tool calls; False when it is not an object."""
    if not isinstance(message, dict):
        return False
    mid = str(message["id"]) if message.get("id") is not None else None
    when = message.get("timestamp") or (None if built.turns else data.get("startTime"))
    speaker = _SPEAKERS.get(str(message.get("type") or message.get("role")), SYSTEM)
    content = message.get("content")
    # parts of one message are stream chunks: joined as they came
    text = "".join(v for k, v in _parts(content) if k == "text") if isinstance(content, list) else \
        block_text(content)
    built.add(speaker, text, when, mid)
    for k, call in enumerate(message.get("toolCalls") or []):
        if not isinstance(call, dict):
            continue
        name = str(call.get("name") or "tool")
        key = f"{mid}/{call.get('id') or k}" if mid else None
        built.add(ASSISTANT, f"{name} {as_json(call.get('args', {}))}", call.get("timestamp") or when,
                  f"{key}/call" if key else None, tool=name)
        results = [_response_text(v) for kind, v in _parts(call.get("result")) if kind == "response"]
        result = "\n".join(results) or as_json(call.get("resultDisplay") or "")
        built.add(TOOL, result, call.get("timestamp") or when, f"{key}/result" if key else None, tool=name)
    return True


def _checkpoint(data: list, path: Path) -> _Builder:
    built = _Builder(f"{_project_dir(path).name}:{path.stem}")
    built.skipped += sum(not used(_checkpoint_entry, built, entry) for entry in data)
    return built


def _checkpoint_entry(built: _Builder, entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    speaker = _SPEAKERS.get(str(entry.get("role")), SYSTEM)
    texts = []
    for kind, value in _parts(entry.get("parts")):
        if kind == "text":
            texts.append(value)
            continue
        built.add(speaker, "\n".join(texts), None, None)
        texts = []
        if kind == "call":
            name = str(value.get("name") or "tool")
            built.add(ASSISTANT, f"{name} {as_json(value.get('args', {}))}", None, None, tool=name)
        else:
            built.add(TOOL, _response_text(value), None, None, tool=str(value.get("name") or "tool"))
    built.add(speaker, "\n".join(texts), None, None)
    return True


def read(path: Path, offset: int, context: dict[str, Any]) -> Chunk:
    """The whole file, every time it changes (Gemini rewrites it); turn ids make reruns safe."""
    raw = read_whole(path, MAX_DOCUMENT_BYTES)
    size, data = len(raw), safejson.value(raw)
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        built = _session_file(data, path)
    elif isinstance(data, list):
        built = _checkpoint(data, path)
    else:
        return Chunk([], size, {}, 1)
    workspace = _workspace(path, [t.text for t in built.turns[:20]])
    for turn in built.turns:
        turn.workspace = workspace
    return Chunk(built.turns, size, {}, built.skipped)
