"""Aider: `.aider.chat.history.md` in each project (and `~/.aider.chat.history.md`), appended to.
Aider writes `# aider chat started at <local time>` per session, the user's input as `#### `
lines, its own messages and command output as `> ` quotes, and the model's replies as plain
text. Files without that header follow the older convention: `> ` lines are the user's, the text
after them the assistant's, text before any of them the system's. No per-message times: the
session start (or the file's mtime) stands in."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .turns import ASSISTANT, SYSTEM, TOOL, TOOL_IO, USER, Chunk, Turn, decode

AGENT = "aider"
FILE_NAME = ".aider.chat.history.md"
MAX_DEPTH = 5
_STARTED = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
_SKIP_DIRS = {"node_modules", ".git", ".venv", "venv", "__pycache__", ".cache", "Library", ".local", "snap"}


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    if env.get("CASS_AIDER_DATA_ROOT"):
        return [Path(env["CASS_AIDER_DATA_ROOT"])]
    return [home]


def discover(root: Path) -> Iterator[Path]:
    """History files at most five directories below `root` (hidden and dependency directories
    are not searched)."""
    if root.is_file():
        yield root
        return
    base = len(root.parts)
    for folder, dirs, files in os.walk(root):
        depth = len(Path(folder).parts) - base
        dirs[:] = [] if depth >= MAX_DEPTH else [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
        if FILE_NAME in files:
            yield Path(folder, FILE_NAME)


def incremental(path: Path) -> bool:
    return True


def _started(line: str) -> datetime | None:
    found = _STARTED.match(line)
    if not found:
        return None
    return datetime.fromisoformat(found.group(1)).astimezone().astimezone(UTC)  # aider writes local time


class _Parser:
    def __init__(self, path: Path, ctx: dict[str, Any]) -> None:
        self.path, self.ctx = path, ctx
        self.turns: list[Turn] = []
        self.kind: str | None = None
        self.lines: list[str] = []

    def flush(self) -> None:
        text = "\n".join(self.lines).strip()
        kind, self.kind, self.lines = self.kind, None, []
        if not text or kind is None:
            return
        ctx = self.ctx
        if ctx["session"] is None:
            ctx["session"] = hashlib.sha1(str(self.path).encode()).hexdigest()[:10]
        speaker, source, tool = {"user": (USER, "conversation", None), "assistant": (ASSISTANT, "conversation", None),
                                 "system": (SYSTEM, "conversation", None), "aider": (TOOL, TOOL_IO, "aider")}[kind]
        stamp = ctx["started"]
        self.turns.append(Turn(agent=AGENT, session=ctx["session"], index=ctx["index"], speaker=speaker, text=text,
                               source=source, tool=tool, workspace=str(self.path.parent),
                               timestamp=datetime.fromisoformat(stamp) if stamp else None))
        ctx["index"] += 1

    def line(self, raw: str) -> None:
        ctx = self.ctx
        started = _started(raw)
        if started is not None:
            self.flush()
            ctx.update(session=f"{hashlib.sha1(str(self.path).encode()).hexdigest()[:10]}-"
                               f"{started.strftime('%Y%m%dT%H%M%S')}",
                       started=started.isoformat(), index=0, mode="hash", seen_user=False)
            return
        stripped = raw.strip()
        if ctx["mode"] == "hash" and raw.startswith("####"):
            kind, text = "user", raw[4:].strip()
        elif stripped.startswith(">"):
            kind, text = ("aider" if ctx["mode"] == "hash" else "user"), stripped[1:].removeprefix(" ")
        elif not stripped:
            if self.kind == "assistant":
                self.lines.append("")  # a paragraph break inside a reply
            return
        else:
            kind = "system" if ctx["mode"] == "quote" and not ctx["seen_user"] else "assistant"
            text = raw.rstrip()
        if kind == "user":
            ctx["seen_user"] = True
        if kind != self.kind:
            self.flush()
            self.kind = kind
        self.lines.append(text)


def read(path: Path, offset: int, context: dict[str, Any]) -> Chunk:
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    data = data[:end]
    ctx = {"session": None, "started": None, "index": 0, "mode": None, "seen_user": False, **context}
    text = decode(data)
    if ctx["mode"] is None and text.strip():
        ctx["mode"] = "hash" if _STARTED.search(text.split("\n", 1)[0]) or "\n# aider chat started at" in text \
            else "quote"
    if ctx["started"] is None and ctx["mode"] == "quote":
        ctx["started"] = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
    parser = _Parser(path, ctx)
    for raw in text.split("\n"):
        parser.line(raw)
    parser.flush()
    return Chunk(parser.turns, offset + end, ctx, 0)
