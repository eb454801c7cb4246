"""Cursor: the SQLite database `state.vscdb` in `User/globalStorage/` and in each
`User/workspaceStorage/<id>/`. Table `cursorDiskKV` holds `composerData:<id>` (a conversation:
its bubble order in `fullConversationHeadersOnly`, or inline `conversation` in older versions)
and `bubbleId:<composerId>:<bubbleId>` (one message); the legacy `ItemTable` keeps chat tabs
under an `...aichat...chatdata` key. Opened read-only, so a running Cursor is never disturbed."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote, unquote, urlparse

from . import safejson
from .files import MAX_DOCUMENT_BYTES, read_whole, regular, walk
from .turns import ASSISTANT, SHAPE_ERRORS, TOOL, TOOL_IO, USER, Chunk, Turn, as_json, decode, parse_time, used

AGENT = "cursor"
DB_NAME = "state.vscdb"
SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite opens these beside the database, without asking
MAX_WORKSPACE_JSON_BYTES = 64 << 10


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    if env.get("CURSOR_USER_DIR"):
        return [Path(env["CURSOR_USER_DIR"])]
    if sys.platform == "darwin":
        return [home / "Library/Application Support/Cursor/User"]
    if os.name == "nt" and env.get("APPDATA"):
        return [Path(env["APPDATA"]) / "Cursor/User"]
    return [Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "Cursor/User"]


def discover(root: Path) -> Iterator[Path]:
    return walk(root, lambda name: name == DB_NAME, lambda name, depth: name not in ("History", "logs", "CachedData"))


def incremental(path: Path) -> bool:
    return False


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only; if the database cannot be opened that way (no -shm beside a WAL database on a
    read-only medium), as immutable. SQLite opens the database and its side files blocking and
    follows links, so each must be a regular file first (a FIFO there would hang the run)."""
    regular(path)
    for suffix in SIDE_FILES:
        side = Path(f"{path}{suffix}")
        if os.path.lexists(side):
            regular(side, follow_links=False)
    uri = f"file:{quote(str(path.resolve()))}"
    try:
        con = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=2)
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1")
    except sqlite3.Error:
        con = sqlite3.connect(f"{uri}?immutable=1", uri=True)
    con.text_factory = decode  # text that is not UTF-8 keeps its readable parts instead of failing the query
    return con


def _json(value: Any) -> Any:
    return safejson.value(value) if isinstance(value, bytes | str) else None


def _speaker(bubble: dict) -> str:
    kind = bubble.get("type", bubble.get("role"))
    if kind in (1, "1", "user", "human"):
        return USER
    return ASSISTANT


def _folder_workspace(path: Path) -> str | None:
    """A workspaceStorage database names its folder in the sibling workspace.json."""
    try:  # a regular file, not a link: it names the workspace of every turn
        data = safejson.loads(read_whole(path.parent / "workspace.json", MAX_WORKSPACE_JSON_BYTES, follow_links=False))
    except (OSError, ValueError):
        return None
    folder = data.get("folder") or data.get("workspace") if isinstance(data, dict) else None
    if not isinstance(folder, str):
        return None
    return unquote(urlparse(folder).path) if folder.startswith("file:") else folder


def _composer_workspace(data: dict) -> str | None:
    if isinstance(data.get("workspaceProjectDir"), str):
        return data["workspaceProjectDir"]
    uris = data.get("workspaceUris")
    if isinstance(uris, list) and uris and isinstance(uris[0], str):
        return unquote(urlparse(uris[0]).path) if uris[0].startswith("file:") else uris[0]
    return None


class _Common(TypedDict):
    """The fields every turn of one bubble shares."""

    agent: str
    session: str
    workspace: str | None
    timestamp: datetime | None
    extra: dict[str, Any]


class _Builder:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.skipped = 0

    def bubble(self, session: str, bubble: Any, bubble_id: str | None, workspace: str | None,
               fallback_time: Any, index: int) -> int:
        """The next turn index after this bubble's turns; a bubble that is not understood is
        counted as skipped."""
        if isinstance(bubble, dict):
            try:
                return self._bubble(session, bubble, bubble_id, workspace, fallback_time, index)
            except SHAPE_ERRORS:
                pass
        self.skipped += 1
        return index

    def _bubble(self, session: str, bubble: dict, bubble_id: str | None, workspace: str | None,
                fallback_time: Any, index: int) -> int:
        bid = str(bubble.get("bubbleId") or bubble_id or "") or None
        when = parse_time(bubble.get("timestamp") or bubble.get("createdAt")) or parse_time(fallback_time)
        model = bubble.get("modelType") or bubble.get("model") or (bubble.get("modelInfo") or {}).get("modelName")
        common = _Common(agent=AGENT, session=session, workspace=workspace, timestamp=when,
                         extra={"model": model} if model else {})
        text = next((bubble[k] for k in ("text", "rawText", "content", "message")
                     if isinstance(bubble.get(k), str) and bubble[k].strip()), "")
        if text:
            self.turns.append(Turn(index=index, speaker=_speaker(bubble), text=text, log_id=bid, **common))
            index += 1
        tool = bubble.get("toolFormerData")
        if isinstance(tool, dict) and tool.get("name"):
            name = str(tool["name"])
            args = tool.get("rawArgs", tool.get("params"))
            self.turns.append(Turn(index=index, speaker=ASSISTANT, text=f"{name} {as_json(args or {})}",
                                   source=TOOL_IO, tool=name, log_id=f"{bid}/call" if bid else None, **common))
            index += 1
            if tool.get("result") not in (None, ""):
                self.turns.append(Turn(index=index, speaker=TOOL, text=as_json(tool["result"]), source=TOOL_IO,
                                       tool=name, log_id=f"{bid}/result" if bid else None, **common))
                index += 1
        return index


def _values(con: sqlite3.Connection, where: str, params: list[Any]) -> list[tuple[str, Any]]:
    """(key, value) of the matching rows; a value over MAX_DOCUMENT_BYTES comes back as "" (not
    JSON, so counted as skipped) instead of being loaded."""
    return con.execute(f"SELECT key, CASE WHEN length(value) <= ? THEN value ELSE '' END FROM {where}",
                       [MAX_DOCUMENT_BYTES, *params]).fetchall()


def _composers(con: sqlite3.Connection, built: _Builder, workspace: str | None) -> None:
    rows = _values(con, "cursorDiskKV WHERE key LIKE 'composerData:%'", [])
    built.skipped += sum(not used(_composer, con, built, workspace, key, value) for key, value in rows)


def _composer(con: sqlite3.Connection, built: _Builder, workspace: str | None, key: str, value: Any) -> bool:
    """The turns of one conversation; False when its JSON is not usable."""
    data = _json(value)
    if not isinstance(data, dict):
        return False
    session = str(data.get("composerId") or key.split(":", 1)[1])
    where = _composer_workspace(data) or workspace
    created = data.get("createdAt")
    index = 0
    headers = data.get("fullConversationHeadersOnly")
    if isinstance(headers, list) and headers:
        bodies = dict(_values(con, "cursorDiskKV WHERE key >= ? AND key < ?",
                              [f"bubbleId:{session}:", f"bubbleId:{session};"]))
        inline = data.get("conversationMap")
        if not isinstance(inline, dict):
            inline = {}
        for header in headers:
            bid = str(header.get("bubbleId")) if isinstance(header, dict) else None
            body = bodies.get(f"bubbleId:{session}:{bid}")
            bubble = _json(body) if body is not None else inline.get(bid)
            if bubble is None and body is None:
                continue  # announced but not written yet
            if isinstance(bubble, dict) and "type" not in bubble and isinstance(header, dict):
                bubble = {**bubble, "type": header.get("type")}
            index = built.bubble(session, bubble, bid, where, created, index)
    elif isinstance(data.get("conversation"), list):
        for bubble in data["conversation"]:
            index = built.bubble(session, bubble, None, where, created, index)
    elif isinstance(data.get("text"), str) and data["text"].strip():
        built.bubble(session, {"type": 1, "text": data["text"]}, "text", where, created, index)
    return True


def _item_table(con: sqlite3.Connection, built: _Builder, workspace: str | None) -> None:
    rows = _values(con, "ItemTable WHERE key LIKE '%aichat%chatdata%'", [])
    built.skipped += sum(not used(_chat_tabs, built, workspace, value) for _key, value in rows)


def _chat_tabs(built: _Builder, workspace: str | None, value: Any) -> bool:
    """The legacy chat tabs of one ItemTable value; False when its JSON is not usable."""
    data = _json(value)
    tabs = data.get("tabs") if isinstance(data, dict) else None
    if not isinstance(tabs, list):
        return False
    for n, tab in enumerate(tabs):
        if not isinstance(tab, dict):
            built.skipped += 1
            continue
        session = str(tab.get("tabId") or f"tab-{n}")
        index = 0
        for bubble in tab.get("bubbles") or []:
            if isinstance(bubble, dict) and "type" in bubble:
                bubble = {**bubble, "type": "user" if bubble["type"] == "user" else "ai"}
            bid = bubble.get("id") if isinstance(bubble, dict) else None
            index = built.bubble(session, bubble, bid, workspace, tab.get("lastSendTime"), index)
    return True


def read(path: Path, offset: int, context: dict[str, Any]) -> Chunk:
    """Every conversation in the database (it changes in place); turn ids make reruns safe."""
    built = _Builder()
    workspace = _folder_workspace(path)
    con = _connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "cursorDiskKV" in tables:
            _composers(con, built, workspace)
        if "ItemTable" in tables:
            _item_table(con, built, workspace)
    except sqlite3.DatabaseError:
        built.skipped += 1
    finally:
        con.close()
    return Chunk(built.turns, path.stat().st_size, {}, built.skipped)
