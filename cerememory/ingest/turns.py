"""What every reader yields: one `Turn` per message or tool call/result, plus the small parsing
helpers all readers share (timestamps in any of the agents' spellings, content blocks, bytes
that are not UTF-8, strings no UTF-8 store accepts, entries of an unexpected shape, tool outputs
too long to keep whole)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

USER, ASSISTANT, TOOL, SYSTEM = "user", "assistant", "tool", "system"
CONVERSATION, TOOL_IO = "conversation", "tool_io"
HARD_CAP = 200_000  # any turn: far below the journal's 1 MiB block limit, whatever the encoding
# what reading an entry of a shape its reader did not expect raises (a list where a name belongs...)
SHAPE_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError)
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
_EARLIEST, _LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(3000, 1, 1, tzinfo=UTC)


@dataclass
class Turn:
    """One journal-ready turn of an agent session. `log_id` is the log's own id for it, when the
    log has one; it makes the turn id stable even if the file is rewritten."""

    agent: str
    session: str
    index: int
    speaker: str
    text: str
    source: str = CONVERSATION
    timestamp: datetime | None = None
    workspace: str | None = None
    tool: str | None = None
    log_id: str | None = None
    line: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def session_id(self) -> str:
        return f"{self.agent}:{self.session}"

    @property
    def turn_id(self) -> str:
        return f"{self.session_id}:{self.log_id if self.log_id is not None else self.index}"


@dataclass
class Chunk:
    """What one read of a file produced: its turns, where the next read starts, the reader's
    context to carry over (session id, workspace, next index...) and lines it could not use."""

    turns: list[Turn]
    offset: int
    context: dict[str, Any]
    skipped: int = 0
    more: bool = False  # a bounded read stopped before the end: read again from `offset`


def parse_time(value: Any) -> datetime | None:
    """Seconds or milliseconds since the epoch (as numbers or digit strings; < 1e11 means
    seconds) or ISO 8601 / RFC 3339; None when it is none of these, or a moment no session can
    have (before 1970, from year 3000 on: the journal could not even store some of them)."""
    moment = _moment(value)
    return plausible(moment) if moment is not None else None


def plausible(moment: datetime) -> datetime | None:
    """`moment` if a session can have it (from 1970, before the year 3000), else None."""
    return moment if _EARLIEST <= moment < _LATEST else None


def _moment(value: Any) -> datetime | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            try:
                moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                return None
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        seconds = value if abs(value) < 1e11 else value / 1000
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return None


def decode(data: bytes) -> str:
    """Bytes that are not UTF-8 become U+FFFD instead of failing the file."""
    return data.decode("utf-8", errors="replace").replace("\x00", "")


def scrub(value: Any) -> Any:
    """`value` with each lone surrogate in its strings (keys included) replaced by U+FFFD: JSON
    escapes such as `"\\ud800"` and file names that are not UTF-8 produce them, and no UTF-8
    store accepts them. Lists and dicts are followed; bounding their depth is the caller's job."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    return value


def used(take: Callable[..., bool], *args: Any) -> bool:
    """`take(*args)`, or False when it raised on an entry of a shape it did not expect: one odd
    line or message is skipped and counted instead of costing the rest of its file."""
    try:
        return take(*args)
    except SHAPE_ERRORS:
        return False


def truncate(text: str, cap: int) -> tuple[str, bool]:
    """Keep the head and the tail (errors are often at the end), with a marker saying how much
    was cut."""
    if cap <= 0 or len(text) <= cap:
        return text, False
    head = cap * 2 // 3
    tail = cap - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[… {cut} characters truncated …]\n{text[-tail:] if tail else ''}", True


def as_json(value: Any) -> str:
    """A tool's input or output as compact text."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)


def block_text(content: Any, text_types: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    """The plain text of a string, a list of blocks, or a block; other block types are left to
    the reader (tool calls, images, thinking)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(t for t in (block_text(c, text_types) for c in content) if t)
    if isinstance(content, dict):
        kind = content.get("type")
        if kind in text_types or (kind is None and isinstance(content.get("text"), str)):
            return str(content.get("text") or "")
        if kind is None and "content" in content:
            return block_text(content["content"], text_types)
    return ""
