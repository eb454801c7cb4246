"""Aider: `.aider.chat.history.md` in each project (and `~/.aider.chat.history.md`), appended to.
Aider writes `# aider chat started at <local time>` per session, the user's input as `#### `
lines, its own messages and command output as `> ` quotes, and the model's replies as plain
text. A file that does not begin with that header follows the older convention until one comes:
`> ` lines are the user's, the text after them the assistant's, text before any of them the
system's. No per-message times: the session start (or the file's mtime) stands in."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .files import walk
from .lines import Lines
from .turns import ASSISTANT, SYSTEM, TOOL, TOOL_IO, USER, Chunk, Turn, decode, plausible

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
    return walk(root, lambda name: name == FILE_NAME,
                lambda name, depth: depth <= MAX_DEPTH and not name.startswith(".") and name not in _SKIP_DIRS)


def incremental(path: Path) -> bool:
    return True


def _started(line: str) -> datetime | None:
    found = _STARTED.match(line)
    if not found:
        return None
    try:
        moment = datetime.fromisoformat(found.group(1)).astimezone().astimezone(UTC)  # aider writes local time
    except (ValueError, OverflowError):
        return None
    return plausible(moment)


class _Parser:
    def __init__(self, path: Path, ctx: dict[str, Any], mtime: datetime) -> None:
        self.path, self.ctx, self.mtime = path, ctx, mtime
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
        if ctx["mode"] is None and raw.strip():  # the first text says which convention the file follows
            ctx["mode"] = "hash" if _STARTED.match(raw) else "quote"
            if ctx["mode"] == "quote" and ctx["started"] is None:
                ctx["started"] = self.mtime.isoformat()
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
    """The whole lines after `offset` (the last one, without its newline yet, is left for the
    next run); a line too long to read is skipped."""
    ctx = {"session": None, "started": None, "index": 0, "mode": None, "seen_user": False, **context}
    parser = _Parser(path, ctx, datetime.fromtimestamp(path.stat().st_mtime, UTC))
    lines = Lines(path, offset, 1)
    skipped = 0
    for _number, raw in lines:
        if raw is None:
            skipped += 1
        else:
            parser.line(decode(raw))
    parser.flush()
    return Chunk(parser.turns, lines.end, ctx, skipped, lines.more)
