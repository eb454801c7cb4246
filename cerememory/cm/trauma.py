"""Trauma guard ("hot stove"): the JSONL registry, the 25 built-in doom patterns, and the
Claude Code / git hooks — stdlib-only scripts that never import the database (reference §4)."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

from .errors import CmError
from .home import append_jsonl, global_dir, read_jsonl, repo_dir, write_atomic
from .locks import locked
from .scoring import now_iso

DOOM_PATTERNS: list[tuple[str, str]] = [
    (r"^rm\s+(-[rf]+\s+)+/(etc|usr|var|boot|home|root|bin|sbin|lib)", "recursive deletion of system dirs"),
    (r"^rm\s+(-[rf]+\s+)+/[^t]", "recursive deletion of root subdirectories"),
    (r"^rm\s+(-[rf]+\s+)+~", "recursive deletion of home"),
    (r"^rm\s+(-[rf]+\s+)+", "recursive force deletion (high risk)"),
    (r"DROP\s+DATABASE", "drop database"),
    (r"DROP\s+SCHEMA", "drop schema"),
    (r"TRUNCATE\s+TABLE", "truncate table"),
    (r"DELETE\s+FROM\s+[\w.\[\]\"'`]+\s*(;|$|--|/\*)", "unbounded delete (no WHERE)"),
    (r"^terraform\s+destroy", "terraform destroy"),
    (r"^kubectl\s+delete\s+(node|namespace|pv|pvc)\b", "k8s core resource deletion"),
    (r"^helm\s+uninstall.*--all", "helm uninstall all"),
    (r"^docker\s+system\s+prune\s+-a", "docker prune all"),
    (r"^git\s+push\s+.*--force($|\s)", "force push"),
    (r"^git\s+push\s+.*-f($|\s)", "force push (short flag)"),
    (r"^git\s+reset\s+--hard", "hard reset"),
    (r"^git\s+clean\s+-[a-z]*f", "git clean force"),
    (r"^git\s+checkout\s+--\s+", "checkout discard changes"),
    (r"^git\s+restore\s+(?!--staged)", "restore discard changes"),
    (r"^aws\s+.*terminate-instances", "AWS terminate instances"),
    (r"^gcloud.*delete.*--quiet", "gcloud quiet delete"),
    (r"^mkfs", "format filesystem"),
    (r"^fdisk", "partition modification"),
    (r"^dd\b.*of=/dev/", "direct disk write"),
    (r"^chmod\s+-R", "recursive chmod"),
    (r"^chown\s+-R", "recursive chown"),
]


def global_path() -> Path:
    return global_dir() / "traumas.jsonl"


def project_path(cwd: Path | None = None) -> Path | None:
    rdir = repo_dir(cwd)
    return rdir / "traumas.jsonl" if rdir else None


def paths(scope: str = "all") -> list[Path]:
    out = []
    if scope in ("all", "global"):
        out.append(global_path())
    project = project_path()
    if scope in ("all", "project") and project is not None:
        out.append(project)
    return out


def load(scope: str = "all", active_only: bool = False) -> list[dict[str, Any]]:
    entries = [e for p in paths(scope) for e in read_jsonl(p) if isinstance(e.get("pattern"), str)]
    return [e for e in entries if e.get("status", "active") == "active"] if active_only else entries


# Python's words for a broken regex -> the JavaScript engine's, which the reference reported
# (`Invalid regular expression: missing )`); a message not listed keeps Python's words.
_REGEX_WORDS = (("missing ), unterminated subpattern", "missing )"),
                ("unbalanced parenthesis", "unmatched parentheses"),
                ("unterminated character set", "missing terminating ] for character class"),
                ("nothing to repeat", "nothing to repeat"),
                ("multiple repeat", "nothing to repeat"),
                ("bad escape (end of pattern)", "\\ at end of pattern"),
                ("bad character range", "range out of order in character class"),
                ("min repeat greater than max repeat", "numbers out of order in {} quantifier"),
                ("unknown extension ?<", "invalid group specifier name"),
                ("unknown extension", "unrecognized character after (?"))


def regex_error(exc: re.error) -> str:
    """What the reference said of an invalid trauma pattern."""
    words = next((js for python, js in _REGEX_WORDS if exc.msg.startswith(python)), exc.msg)
    return f"Invalid regex pattern: Invalid regular expression: {words}"


def compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise CmError("INVALID_INPUT", regex_error(exc)) from None


def new_entry(pattern: str, *, severity: str = "CRITICAL", scope: str = "global", message: str | None = None,
              session_path: str = "manual-entry") -> dict[str, Any]:
    compile_pattern(pattern)
    if severity not in ("CRITICAL", "FATAL"):
        raise CmError("INVALID_INPUT", "severity must be one of: CRITICAL, FATAL.")  # the reference's words
    if scope not in ("global", "project"):
        raise CmError("INVALID_INPUT", f"Invalid scope {scope!r}: use global or project")
    now = now_iso()
    entry: dict[str, Any] = {"id": f"trauma-{secrets.token_hex(4)}", "severity": severity, "pattern": pattern,
                             "scope": scope, "status": "active",
                             "trigger_event": {"session_path": session_path, "timestamp": now}, "created_at": now}
    if message:
        entry["trigger_event"]["human_message"] = message
    if scope == "project":
        rdir = repo_dir()
        if rdir is None:
            raise CmError("INVALID_INPUT", "Project scope needs a git repository (run inside one)")
        entry["projectPath"] = str(rdir.parent)
    return entry


def target_path(scope: str) -> Path:
    if scope == "project":
        project = project_path()
        if project is None:
            raise CmError("INVALID_INPUT", "Project scope needs a git repository (run inside one)")
        return project
    return global_path()


def append(entry: dict[str, Any]) -> Path:
    path = target_path(entry["scope"])
    append_jsonl(path, entry)
    return path


def rewrite(trauma_id: str, scope: str, change: Any) -> tuple[list[str], list[str]]:
    """Apply `change(entry) -> entry | None` to matching lines; keeps non-JSON lines verbatim."""
    checked, updated = [], []
    for path in paths(scope):
        checked.append(str(path))
        if path.exists():
            with locked(path):
                if _rewrite_file(path, trauma_id, change):
                    updated.append(str(path))
    return checked, updated


def _rewrite_file(path: Path, trauma_id: str, change: Any) -> bool:
    lines, hit = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            lines.append(line)
            continue
        if isinstance(entry, dict) and entry.get("id") == trauma_id:
            hit = True
            entry = change(entry)
            if entry is None:
                continue
            line = json.dumps(entry)
        lines.append(line)
    if hit:
        write_atomic(path, "\n".join(lines) + ("\n" if lines else ""))
    return hit


def match(text: str, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    for entry in entries:
        try:
            if re.search(entry["pattern"], text, re.IGNORECASE):
                return entry
        except re.error:
            continue
    return None


def scan_text(text: str) -> list[dict[str, Any]]:
    """Doom-pattern candidates in a text (multiline, case-insensitive), ±100 chars of context."""
    out = []
    for pattern, description in DOOM_PATTERNS:
        for found in re.finditer(pattern, text, re.IGNORECASE | re.MULTILINE):
            start, end = max(0, found.start() - 100), min(len(text), found.end() + 100)
            out.append({"matchedPattern": pattern, "description": description, "evidence": found.group(0),
                        "context": text[start:end]})
            break
    return out


# ---------------------------------------------------------------- hooks

_HOOK_COMMON = r'''
import json, os, re, subprocess, sys

def _home():
    if os.environ.get("CASS_MEMORY_HOME"):
        return os.path.expanduser(os.environ["CASS_MEMORY_HOME"])
    if os.environ.get("XDG_DATA_HOME"):
        return os.path.join(os.path.expanduser(os.environ["XDG_DATA_HOME"]), "cass-memory")
    return os.path.expanduser("~/.cass-memory")

def _repo_root(start):
    here = os.path.abspath(start)
    while True:
        if os.path.exists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent

def _load(path):
    out = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("status", "active") == "active" \
                        and isinstance(entry.get("pattern"), str):
                    out.append(entry)
    except OSError:
        pass
    return out

def _traumas(cwd):
    entries = _load(os.path.join(_home(), "traumas.jsonl"))
    root = _repo_root(cwd)
    if root:
        entries += _load(os.path.join(root, ".cass", "traumas.jsonl"))
    return entries

def _first_match(text, entries):
    for entry in entries:
        try:
            if re.search(entry["pattern"], text, re.IGNORECASE):
                return entry
        except re.error:
            continue
    return None

def _fire():
    return "[HOT STOVE]" if os.environ.get("CASS_MEMORY_NO_EMOJI") else "\U0001F525 HOT STOVE:"

def _tail():
    return "" if os.environ.get("CASS_MEMORY_NO_EMOJI") else " \U0001F525"
'''

CLAUDE_HOOK = "#!/usr/bin/env python3\n\"\"\"cm trauma guard: Claude Code PreToolUse hook (fails open).\"\"\"" + \
    _HOOK_COMMON + r'''

def main():
    try:
        event = json.loads(sys.stdin.read())
    except Exception:
        return 0
    if not isinstance(event, dict) or event.get("tool_name") != "Bash":
        return 0
    command = (event.get("tool_input") or {}).get("command") if isinstance(event.get("tool_input"), dict) else None
    if not isinstance(command, str) or not command.strip():
        return 0
    try:
        entry = _first_match(command, _traumas(os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()))
    except Exception:
        return 0
    if entry is None:
        return 0
    trigger = entry.get("trigger_event") or {}
    banner = _fire() + " VISCERAL SAFETY INTERVENTION" + _tail()
    reason = (banner + "\n\nBLOCKED: This pattern matches a registered TRAUMA.\nPattern: " + entry["pattern"]
              + "\nReason: " + (trigger.get("human_message") or "A past incident was caused by this command.")
              + "\nReference: " + str(trigger.get("session_path") or "unknown")
              + "\n\nIf you MUST run this, heal it first with: cm trauma heal " + str(entry.get("id")))
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                             "permissionDecisionReason": reason}}))
    return 0

if __name__ == "__main__":
    sys.exit(main())
'''

GIT_HOOK = "#!/usr/bin/env python3\n\"\"\"cm trauma guard: git pre-commit hook (scans added staged lines).\"\"\"" + \
    _HOOK_COMMON + r'''

def added_lines(diff):
    out, in_hunk = [], False
    for line in diff.splitlines():
        if line.startswith("diff --git"):
            in_hunk = False
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line.startswith("+") and not line.startswith("+++"):
            out.append(line[1:])
    return out

def main():
    try:
        root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip()
        entries = _traumas(root or os.getcwd())
        if not entries:
            return 0
        diff = subprocess.run(["git", "diff", "--cached", "--unified=0"], capture_output=True, text=True).stdout
    except Exception:
        return 0
    for line in added_lines(diff):
        entry = _first_match(line, entries)
        if entry is not None:
            trigger = entry.get("trigger_event") or {}
            sys.stderr.write(_fire() + " COMMIT BLOCKED" + _tail()
                             + "\nSeverity: " + str(entry.get("severity")) + "\nPattern: " + entry["pattern"]
                             + "\nLine: " + line.strip()
                             + "\nReason: " + (trigger.get("human_message") or "registered trauma")
                             + "\n\nBypass (not recommended): git commit --no-verify"
                             + "\nOr heal it: cm trauma heal " + str(entry.get("id")) + "\n")
            return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
'''


def _write_script(path: Path, text: str) -> None:
    import ast

    ast.parse(text)  # a hook that does not parse would silently never run (reference #28)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def install_claude_hook(cwd: Path) -> dict[str, Any]:
    claude = cwd / ".claude"
    if not claude.is_dir():
        raise CmError("FILE_NOT_FOUND", f"No .claude/ directory in {cwd}",
                      recovery=["Run from the project root where Claude Code keeps .claude/", "mkdir .claude"])
    script = claude / "hooks" / "trauma_guard.py"
    settings_path = claude / "settings.json"
    settings: dict[str, Any] = {}
    if settings_path.exists():
        try:
            settings = json.loads(settings_path.read_text(encoding="utf-8") or "{}")
        except ValueError as exc:
            raise CmError("CONFIG_INVALID", f"{settings_path} is not valid JSON: {exc}") from None
    _write_script(script, CLAUDE_HOOK)
    pre = settings.setdefault("hooks", {}).setdefault("PreToolUse", [])
    installed = any("trauma_guard.py" in str(h.get("command", "")) for entry in pre if isinstance(entry, dict)
                    for h in entry.get("hooks", []) if isinstance(h, dict))
    if not installed:
        pre.append({"matcher": "Bash", "hooks": [{"type": "command",
                                                  "command": "$CLAUDE_PROJECT_DIR/.claude/hooks/trauma_guard.py"}]})
        write_atomic(settings_path, json.dumps(settings, indent=2) + "\n")
    return {"message": "Trauma guard installed for Claude Code (restart Claude Code to load it)"
            if not installed else "Trauma guard already installed (script refreshed)",
            "alreadyInstalled": installed, "scriptPath": str(script), "settingsPath": str(settings_path)}


def install_git_hook(cwd: Path) -> dict[str, Any]:
    from .home import git_root

    root = git_root(cwd)
    if root is None or not (root / ".git").is_dir():
        raise CmError("FILE_NOT_FOUND", "Not inside a git repository", recovery=["git init", "cd into the repo"])
    hooks = root / ".git" / "hooks"
    guard = hooks / "trauma-guard-precommit.py"
    _write_script(guard, GIT_HOOK)
    hook = hooks / "pre-commit"
    existing = hook.read_text(encoding="utf-8") if hook.exists() else ""
    installed = "trauma-guard-precommit" in existing or "HOT STOVE" in existing
    if not installed:
        call = f'\n# HOT STOVE: cm trauma guard\npython3 "{guard}" || exit 1\n'
        hook.write_text((existing or "#!/bin/sh\n") + call, encoding="utf-8")
        hook.chmod(0o755)
    return {"message": "Git pre-commit trauma guard installed" if not installed
            else "Git pre-commit trauma guard already installed",
            "alreadyInstalled": installed, "hookPath": str(hook), "guardScriptPath": str(guard)}


def status(cwd: Path) -> dict[str, Any]:
    from .home import git_root

    script = cwd / ".claude" / "hooks" / "trauma_guard.py"
    root = git_root(cwd)
    hook = root / ".git" / "hooks" / "pre-commit" if root else None
    entries = load()
    return {"claude": {"installed": script.exists(), "scriptPath": str(script)},
            "git": {"installed": bool(hook and hook.exists() and "trauma-guard-precommit" in hook.read_text()),
                    "hookPath": str(hook) if hook else None},
            "traumas": {"active": sum(1 for e in entries if e.get("status", "active") == "active"),
                        "healed": sum(1 for e in entries if e.get("status") == "healed")}}
