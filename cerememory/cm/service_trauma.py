"""The trauma registry and its guards, as typed operations: list, add, heal, remove, import,
scan, and the Claude Code / git hooks (trauma.py holds the registry and the hook scripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import trauma
from .app import Ctx, Result
from .errors import CmError, missing


def list_traumas() -> Result:
    entries = trauma.load()
    active = [e for e in entries if e.get("status", "active") == "active"]
    return Result({"traumas": active, "healedCount": len(entries) - len(active)})


def add(pattern: str, *, severity: str = "CRITICAL", scope: str | None = None, message: str | None = None) -> Result:
    """One trauma; a bad pattern, severity or scope is INVALID_INPUT with the reference's exit 1."""
    try:
        entry = trauma.new_entry(pattern, severity=severity, scope=scope or "global", message=message)
    except CmError as exc:
        raise CmError(exc.code, exc.message, hint=exc.hint, details=exc.details, exit_code=1) from None
    trauma.append(entry)
    return Result({"entry": entry})


def heal(trauma_id: str, scope: str | None = None) -> Result:
    checked, updated = trauma.rewrite(trauma_id, scope or "all", lambda e: {**e, "status": "healed"})
    if not updated:
        raise CmError("TRAUMA_NOT_FOUND", f"Trauma {trauma_id} not found (nothing healed)", hint="Try: cm trauma list",
                      details={"traumaId": trauma_id, "checkedPaths": checked})
    return Result({"updated": len(updated), "checkedPaths": checked, "updatedPaths": updated})


def remove(trauma_id: str, scope: str | None = None) -> Result:
    checked, updated = trauma.rewrite(trauma_id, scope or "all", lambda e: None)
    if not updated:
        raise CmError("TRAUMA_NOT_FOUND", f"Trauma {trauma_id} not found (nothing removed)", hint="Try: cm trauma list",
                      details={"traumaId": trauma_id, "checkedPaths": checked})
    return Result({"removed": len(updated), "checkedPaths": checked, "updatedPaths": updated})


def import_file(file: str, *, severity: str = "CRITICAL", scope: str | None = None,
                message: str | None = None) -> Result:
    """Patterns from a file, one a line: plain text, a JSON string, or a JSON object with
    `pattern` (and a message); a line that is not a valid pattern is a warning."""
    path = Path(file)
    if not path.exists():
        raise CmError("FILE_NOT_FOUND", f"File not found: {path}")
    imported, warnings = 0, []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        pattern, said = line, message
        try:
            value = json.loads(line)
            if isinstance(value, str):
                pattern = value
            elif isinstance(value, dict) and isinstance(value.get("pattern"), str):
                pattern = value["pattern"]
                said = value.get("message") or (value.get("trigger_event") or {}).get("human_message") or said
        except ValueError:
            pass
        try:
            entry = trauma.new_entry(pattern, severity=severity, scope=scope or "global", message=said,
                                     session_path="import")
        except CmError as exc:
            warnings.append(f"line {n}: {exc.message}")
            continue
        trauma.append(entry)
        imported += 1
    return Result({"imported": imported, "warningsCount": len(warnings)}, warnings=warnings)


def scan(ctx: Ctx, file: str | None = None, *, days: int | None = None) -> Result:
    """Doom-pattern candidates in a file, or in the journal sessions of the last `days` (90)."""
    text = Path(file).read_text(encoding="utf-8", errors="replace") if file else ""
    candidates: list[dict[str, Any]] = trauma.scan_text(text) if text else []
    if not file:
        for session_id, records in ctx.backend.sessions(days or 90).items():
            for record in records:
                body = "\n".join(b.get("text", "") for b in (record.get("content") or {}).get("blocks", []))
                candidates += [{"sessionPath": session_id, **c} for c in trauma.scan_text(body)]
    return Result({"candidates": candidates, "patternsChecked": len(trauma.DOOM_PATTERNS)})


def guard(ctx: Ctx, *, install: bool = False, git: bool = False, status: bool = False) -> Result:
    """The guards' status, or install the Claude Code hook (`install`) and/or the git
    pre-commit hook (`git`)."""
    if status:
        return Result(trauma.status(ctx.cwd))
    if not install and not git:
        raise missing("Specify --install (Claude Code hook), --git (pre-commit hook) or --status")
    results = {}
    if install:
        results["claude"] = trauma.install_claude_hook(ctx.cwd)
    if git:
        results["git"] = trauma.install_git_hook(ctx.cwd)
    if len(results) == 1:
        return Result(next(iter(results.values())))
    return Result(results)
