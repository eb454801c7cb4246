"""The agents whose sessions can be ingested, by name: plain data, so that checking a setting
needs no reader."""

from __future__ import annotations

AGENTS: tuple[str, ...] = ("claude_code", "codex", "gemini", "cursor", "aider", "pi")
ALIASES = {"claude": "claude_code", "claude-code": "claude_code", "gemini-cli": "gemini", "gemini_cli": "gemini",
           "pi_agent": "pi", "pi-agent": "pi", "codex-cli": "codex"}


def canonical(name: str) -> str | None:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    return key if key in AGENTS else None
