"""Cursor: the SQLite database `state.vscdb` in `User/globalStorage/` and in each
`User/workspaceStorage/<id>/`. Table `cursorDiskKV` holds `composerData:<id>` (a conversation:
its bubble order in `fullConversationHeadersOnly`, or inline `conversation` in older versions)
and `bubbleId:<composerId>:<bubbleId>` (one message); the legacy `ItemTable` keeps chat tabs
under an `...aichat...chatdata` key. Opened read-only, so a running Cursor is never disturbed."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

from .turns import ASSISTANT, TOOL, TOOL_IO, USER, Chunk, Turn, as_json, decode, parse_time

AGENT = "cursor"
DB_NAME = "state.vscdb"


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    if env.get("CURSOR_USER_DIR"):
        return [Path(env["CURSOR_USER_DIR"])]
    if sys.platform == "darwin":
        return [home / "Library/Application Support/Cursor/User"]
    if os.name == "nt" and env.get("APPDATA"):
        return [Path(env["APPDATA"]) / "Cursor/User"]
    return [Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "Cursor/User"]


def discover(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("History", "logs", "CachedData")]
        if DB_NAME in files:
            yield Path(folder, DB_NAME)


def incremental(path: Path) -> bool:
    return False


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only; if the database cannot be opened that way (no -shm beside a WAL database on a
    read-only medium), as immutable."""
    uri = f"file:{quote(str(path.resolve()))}"
    try:
        con = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=2)
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1")
        return con
    except sqlite3.Error:
        return sqlite3.connect(f"{uri}?immutable=1", uri=True)


def _json(value: Any) -> Any:
    if isinstance(value, bytes):
        value = decode(value)
    try:
        return json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _speaker(bubble: dict) -> str:
    kind = bubble.get("type", bubble.get("role"))
    if kind in (1, "1", "user", "human"):
        return USER
    return ASSISTANT


def _folder_workspace(path: Path) -> str | None:
    """A workspaceStorage database names its folder in the sibling workspace.json."""
    try:
        data = json.loads((path.parent / "workspace.json").read_text(encoding="utf-8"))
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


class _Builder:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.skipped = 0

    def bubble(self, session: str, bubble: Any, bubble_id: str | None, workspace: str | None,
               fallback_time: Any, index: int) -> int:
        if not isinstance(bubble, dict):
            self.skipped += 1
            return index
        bid = str(bubble.get("bubbleId") or bubble_id or "") or None
        when = parse_time(bubble.get("timestamp") or bubble.get("createdAt")) or parse_time(fallback_time)
        model = bubble.get("modelType") or bubble.get("model") or (bubble.get("modelInfo") or {}).get("modelName")
        common = dict(agent=AGENT, session=session, workspace=workspace, timestamp=when,
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


def _composers(con: sqlite3.Connection, built: _Builder, workspace: str | None) -> None:
    rows = con.execute("SELECT key, value FROM cursorDiskKV WHERE key LIKE 'composerData:%'").fetchall()
    for key, value in rows:
        data = _json(value)
        if not isinstance(data, dict):
            built.skipped += 1
            continue
        session = str(data.get("composerId") or key.split(":", 1)[1])
        where = _composer_workspace(data) or workspace
        created = data.get("createdAt")
        index = 0
        headers = data.get("fullConversationHeadersOnly")
        if isinstance(headers, list) and headers:
            bodies = dict(con.execute("SELECT key, value FROM cursorDiskKV WHERE key >= ? AND key < ?",
                                      [f"bubbleId:{session}:", f"bubbleId:{session};"]).fetchall())
            inline = data.get("conversationMap") if isinstance(data.get("conversationMap"), dict) else {}
            for header in headers:
                bid = str(header.get("bubbleId")) if isinstance(header, dict) else None
                bubble = _json(bodies.get(f"bubbleId:{session}:{bid}")) or inline.get(bid)
                if bubble is None:
                    continue  # announced but not written yet
                if isinstance(bubble, dict) and "type" not in bubble and isinstance(header, dict):
                    bubble = {**bubble, "type": header.get("type")}
                index = built.bubble(session, bubble, bid, where, created, index)
        elif isinstance(data.get("conversation"), list):
            for bubble in data["conversation"]:
                index = built.bubble(session, bubble, None, where, created, index)
        elif isinstance(data.get("text"), str) and data["text"].strip():
            built.bubble(session, {"type": 1, "text": data["text"]}, "text", where, created, index)


def _item_table(con: sqlite3.Connection, built: _Builder, workspace: str | None) -> None:
    rows = con.execute("SELECT key, value FROM ItemTable WHERE key LIKE '%aichat%chatdata%'").fetchall()
    for _key, value in rows:
        data = _json(value)
        tabs = data.get("tabs") if isinstance(data, dict) else None
        if not isinstance(tabs, list):
            built.skipped += 1
            continue
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
