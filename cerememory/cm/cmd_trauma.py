"""`cm trauma …` and `cm guard …`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import trauma
from .app import Ctx, Result
from .errors import CmError, invalid, missing


def cmd_trauma(ctx: Ctx, args: Any) -> Result:
    action = args.action
    if action in ("list", "ls"):
        entries = trauma.load()
        active = [e for e in entries if e.get("status", "active") == "active"]
        return Result({"traumas": active, "healedCount": len(entries) - len(active)})
    if action == "add":
        if not args.value:
            raise missing("trauma add needs a regex pattern")
        entry = trauma.new_entry(args.value, severity=args.severity, scope=args.scope or "global",
                                 message=args.message)
        trauma.append(entry)
        return Result({"entry": entry})
    if action == "heal":
        if not args.value:
            raise missing("trauma heal needs an id")
        checked, updated = trauma.rewrite(args.value, args.scope or "all", lambda e: {**e, "status": "healed"})
        if not updated:
            raise CmError("TRAUMA_NOT_FOUND", f"Trauma not found: {args.value}")
        return Result({"updated": len(updated), "checkedPaths": checked, "updatedPaths": updated})
    if action in ("remove", "rm"):
        if not args.value:
            raise missing("trauma remove needs an id")
        if not args.force:
            raise missing("trauma remove deletes the entry; confirm with --force")
        checked, updated = trauma.rewrite(args.value, args.scope or "all", lambda e: None)
        if not updated:
            raise CmError("TRAUMA_NOT_FOUND", f"Trauma not found: {args.value}")
        return Result({"removed": len(updated), "checkedPaths": checked, "updatedPaths": updated})
    if action == "import":
        if not args.value:
            raise missing("trauma import needs a file")
        path = Path(args.value)
        if not path.exists():
            raise CmError("FILE_NOT_FOUND", f"File not found: {path}")
        imported, warnings = 0, []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            pattern, message = line, args.message
            try:
                value = json.loads(line)
                if isinstance(value, str):
                    pattern = value
                elif isinstance(value, dict) and isinstance(value.get("pattern"), str):
                    pattern = value["pattern"]
                    message = value.get("message") or (value.get("trigger_event") or {}).get("human_message") or message
            except ValueError:
                pass
            try:
                entry = trauma.new_entry(pattern, severity=args.severity, scope=args.scope or "global",
                                         message=message, session_path="import")
            except CmError as exc:
                warnings.append(f"line {n}: {exc.message}")
                continue
            trauma.append(entry)
            imported += 1
        return Result({"imported": imported, "warningsCount": len(warnings)}, warnings=warnings)
    if action == "scan":
        text = Path(args.value).read_text(encoding="utf-8", errors="replace") if args.value else ""
        candidates = trauma.scan_text(text) if text else []
        if not args.value:
            for session_id, records in ctx.backend.sessions(args.days or 90).items():
                for record in records:
                    body = "\n".join(b.get("text", "") for b in (record.get("content") or {}).get("blocks", []))
                    candidates += [{"sessionPath": session_id, **c} for c in trauma.scan_text(body)]
        return Result({"candidates": candidates, "patternsChecked": len(trauma.DOOM_PATTERNS)})
    raise invalid(f"Unknown trauma action {action!r}")


def cmd_guard(ctx: Ctx, args: Any) -> Result:
    if args.status:
        return Result(trauma.status(ctx.cwd))
    if not args.install and not args.git:
        raise missing("Specify --install (Claude Code hook), --git (pre-commit hook) or --status")
    results = {}
    if args.install:
        results["claude"] = trauma.install_claude_hook(ctx.cwd)
    if args.git:
        results["git"] = trauma.install_git_hook(ctx.cwd)
    if len(results) == 1:
        return Result(next(iter(results.values())))
    return Result(results)
