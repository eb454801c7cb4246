"""Onboarding progress: which past sessions were read for rules (`cm onboard`, and `cm playbook
add --session`), kept in `<home>/onboarding-state.json` under the file's lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .home import global_dir, write_atomic
from .locks import locked
from .scoring import now_iso


def state_path() -> Path:
    return global_dir() / "onboarding-state.json"


def load_state() -> dict[str, Any]:
    path = state_path()
    if path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    return {"version": 1, "startedAt": None, "lastUpdatedAt": None, "processedSessions": [],
            "stats": {"totalSessionsProcessed": 0, "totalRulesExtracted": 0}}


def record_onboarding(session: str, rules: int, skipped: bool = False) -> None:
    """Record `session` as processed, with the number of rules extracted from it."""
    with locked(state_path()):
        state = load_state()
        now = now_iso()
        state["startedAt"] = state.get("startedAt") or now
        state["lastUpdatedAt"] = now
        entry = {"path": session, "processedAt": now, "rulesExtracted": rules}
        if skipped:
            entry["skipped"] = True
        state["processedSessions"].append(entry)
        state["stats"]["totalSessionsProcessed"] += 1
        state["stats"]["totalRulesExtracted"] += rules
        write_atomic(state_path(), json.dumps(state, indent=2) + "\n")


def reset() -> None:
    state_path().unlink(missing_ok=True)
