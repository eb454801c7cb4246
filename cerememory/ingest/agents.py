"""The readers by agent name, where each keeps its sessions, and which agent wrote a file given
on the command line."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from . import aider, claude_code, codex, cursor, gemini, pi
from .files import open_regular, walk
from .names import AGENTS as AGENTS
from .names import canonical as canonical

READERS: dict[str, ModuleType] = {m.AGENT: m for m in (claude_code, codex, gemini, cursor, aider, pi)}
assert tuple(READERS) == AGENTS, "names.AGENTS lists the readers in this order"


def default_roots(agent: str, env: Mapping[str, str] | None = None, home: Path | None = None) -> list[Path]:
    env = os.environ if env is None else env
    return READERS[agent].roots(env, home or Path.home())


class Found(NamedTuple):
    """A session file, the agent that wrote it, and the root it was found under (a link in it
    is followed only if it stays inside that root)."""

    agent: str
    path: Path
    root: Path


def _sniff_jsonl(path: Path) -> str | None:
    try:
        with open_regular(path) as f:
            first = f.read(4096)
    except OSError:
        return None
    if b'"payload"' in first and b'"type"' in first:
        return "codex"
    if b'"type":"session"' in first.replace(b" ", b"") and b'"sessionId"' not in first:
        return "pi"
    if b'"sessionId"' in first or b'"type":"summary"' in first.replace(b" ", b""):
        return "claude_code"
    return None


def detect(path: Path) -> str | None:
    """The agent whose session file this is, from its name and place, else its first line."""
    name, text = path.name, str(path).replace(os.sep, "/").lower()
    if name == aider.FILE_NAME:
        return "aider"
    if name.endswith(".vscdb"):
        return "cursor"
    if name.startswith("rollout-") and name.endswith((".jsonl", ".json")):
        return "codex"
    if name.endswith(".json") and name.startswith(("session-", "checkpoint-")):
        return "gemini"
    claude = "/.claude/" in text or "/application support/claude/" in text
    if name.endswith(".jsonl"):
        if "/.pi/agent/" in text:
            return "pi"
        if claude:
            return "claude_code"
        return _sniff_jsonl(path)
    if name.endswith(".json") and claude:
        return "claude_code"
    return None


def files(agent: str | None, roots: Iterable[Path]) -> Iterator[Found]:
    """Every session file under `roots`; without an agent, every file some reader recognises."""
    for root in roots:
        if not root.exists():
            continue
        if agent is not None:
            for path in READERS[agent].discover(root):
                yield Found(agent, path, root)
            continue
        for path in walk(root, lambda name: True):
            found = detect(path)
            if found is not None:
                yield Found(found, path, root)
