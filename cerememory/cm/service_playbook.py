"""The playbook itself, as typed operations: init, starters, bootstrap and the rules (list, get,
add, remove, export, import), called by the CLI (cmd_playbook.py) and, for `list_rules`, the MCP
server (mcp.py); what the playbook says about a task is service_context.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from .app import Ctx, Result
from .bullets import deprecate, new_bullet, public
from .errors import CmError, invalid, missing
from .home import (
    DEFAULT_CONFIG,
    data_dir,
    global_dir,
    global_playbook_path,
    global_playbook_ref,
    repo_dir,
    write_atomic,
)
from .onboarding import record_onboarding
from .playbook import dump_yaml, empty_playbook, export_playbook, parse_playbook_text
from .quality import check_rule, has_issues
from .scoring import decayed_counts, effective_score, parse_ms
from .service_context import similar_rules
from .starters import apply_starter, catalogue

MAX_RULE_CHARS = 131_072  # the longest single argument Linux passes a program: any rule the reference took fits

# ---------------------------------------------------------------- init / starters / bootstrap


def _replace_keeping_backup(path: Path, text: str, stamp: int, created: list[str], overwritten: list[str],
                            backups: list[dict[str, str]]) -> None:
    """Write `path`; an existing file is copied to `<name>.backup.<stamp>` first (init --force).
    The lists name files as the reference does: by their name in the home."""
    if path.exists():
        backup = path.with_name(f"{path.name}.backup.{stamp}")
        backup.write_bytes(path.read_bytes())
        backups.append({"file": str(path), "backup": str(backup)})
        overwritten.append(path.name)
    else:
        created.append(path.name)
    write_atomic(path, text)


def init(ctx: Ctx, *, repo: bool = False, force: bool = False, yes: bool = False,
         starter: str | None = None) -> Result:
    """Create the global home and playbook record (or, with `repo`, the repository's `.cass/`),
    optionally seeded with a starter. `created`/`existed`/`overwritten` name the reference's
    files: config.json, playbook.yaml (here the playbook record in Cerememory), blocked.log,
    usage.jsonl."""
    if repo:
        return _init_repo(ctx, force, starter)
    home = global_dir()
    config_path = home / "config.json"
    initialised = config_path.exists()
    if initialised and not force and not starter:
        raise CmError("ALREADY_EXISTS", "Already initialized. Use --force to reinitialize.",
                      hint="Use --force to reinitialize",
                      recovery=["Use --force --yes to reinitialise (backups are kept)",
                                "Use --starter <name> to add a starter playbook"])
    if force and initialised and (ctx.as_json or not sys.stdin.isatty()) and not yes:
        raise missing("Refusing to overwrite existing files without --yes", hint="Use --yes to confirm",
                      details={"missing": "confirmation"}, recovery=["cm init --force --yes"])
    created: list[str] = []
    existed: list[str] = []
    overwritten: list[str] = []
    backups: list[dict[str, str]] = []
    for folder in ("diary", "reflections", "embeddings", "cost"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    stamp = int(time.time() * 1000)
    config_text = json.dumps(DEFAULT_CONFIG, indent=2) + "\n"
    if config_path.exists() and not force:
        existed.append("config.json")
    else:
        _replace_keeping_backup(config_path, config_text, stamp, created, overwritten, backups)
    _, meta = ctx.backend.playbook_meta()
    if force and initialised:
        old = ctx.playbook.global_bullets()
        backup = home / f"playbook.yaml.backup.{stamp}"
        write_atomic(backup, dump_yaml({**empty_playbook(), **(meta or {}), "bullets": list(old)}))
        backups.append({"file": str(global_playbook_path(ctx.config)), "backup": str(backup)})
        for bullet in list(old):
            ctx.playbook.delete(bullet["id"])
        overwritten.append("playbook.yaml")
        meta = None
    if meta is None:
        data = empty_playbook()
        data.pop("bullets")
        ctx.backend.save_playbook_meta(data)
        if "playbook.yaml" not in overwritten:
            created.append("playbook.yaml")
    else:
        existed.append("playbook.yaml")
    for name in ("blocked.log", "usage.jsonl"):
        path = home / name
        if path.exists():
            existed.append(name)
        else:
            write_atomic(path, "")
            created.append(name)
    seeded = apply_starter(ctx.playbook, starter) if starter else None
    storage = str(data_dir()) if ctx.backend.mode == "embedded" else ctx.backend.server_url
    return Result({"configPath": str(config_path), "created": created, "existed": existed,
                   "overwritten": overwritten, "backups": backups, "cassAvailable": False,
                   "storage": {"mode": ctx.backend.mode, "dataDir": storage},
                   "starter": seeded})


def _init_repo(ctx: Ctx, force: bool, starter: str | None) -> Result:
    rdir = repo_dir(ctx.cwd)
    if rdir is None:
        raise invalid("Not inside a git repository: --repo needs one", recovery=["git init"])
    created: list[str] = []
    existed: list[str] = []
    overwritten: list[str] = []
    backups: list[dict[str, str]] = []
    for name, text in (("playbook.yaml", dump_yaml(empty_playbook("repo-playbook"))), ("blocked.log", "")):
        path = rdir / name
        if path.exists() and not force:
            existed.append(str(path))
            continue
        _replace_keeping_backup(path, text, int(time.time() * 1000), created, overwritten, backups)
    seeded = apply_starter(ctx.playbook, starter, "repo") if starter else None
    return Result({"cassDir": str(rdir), "created": created, "existed": existed, "overwritten": overwritten,
                   "backups": backups, "starter": seeded})


def starters() -> Result:
    return Result({"starters": catalogue()})


def bootstrap(ctx: Ctx, starter: str = "general", *, repo: bool = False) -> Result:
    """Seed the playbook: a starter into the global or the repo layer."""
    return Result({"starter": apply_starter(ctx.playbook, starter, "repo" if repo else "global")})


# ---------------------------------------------------------------- rules


def _quality(ctx: Ctx, content: str, category: str) -> dict[str, Any]:
    """`--check`: the quality rules, plus the nearest existing rule when it is 0.8 or closer."""
    ranked, mode, note = similar_rules(ctx, content)
    return check_rule(content, category, nearest=ranked[0] if ranked else None, mode=mode, note=note)


def list_rules(ctx: Ctx, category: str | None = None) -> Result:
    """The active rules of the merged playbook, of one category when given."""
    bullets = [public(b) for b in ctx.playbook.active() if not category or b.get("category") == category]
    return Result({"bullets": bullets})


def get_rule(ctx: Ctx, bullet_id: str) -> Result:
    bullet = ctx.playbook.require(bullet_id)
    helpful, harmful = decayed_counts(bullet, ctx.config)
    created = parse_ms(bullet.get("createdAt"))
    age = round((time.time() * 1000 - created) / 86_400_000, 2) if created else None
    return Result({"bullet": {**public(bullet), "effectiveScore": round(effective_score(bullet, ctx.config), 4),
                              "decayedHelpful": round(helpful, 4), "decayedHarmful": round(harmful, 4),
                              "ageDays": age}})


def _too_long(content: str) -> str:
    return f"a rule is at most {MAX_RULE_CHARS:,} characters; this one has {len(content):,}"


def add_rule(ctx: Ctx, content: str, *, category: str = "general", session: str | None = None,
             check: bool = False, strict: bool = False) -> Result:
    """One manual rule into the global playbook; `check` adds the quality report, `strict`
    refuses a rule with quality warnings; `session` counts it as onboarding progress."""
    content = content.strip()
    if not content:
        raise missing("Rule content required (or --file)", recovery=['cm playbook add "<rule>" --category testing'])
    if len(content) > MAX_RULE_CHARS:
        raise invalid(_too_long(content), recovery=["Split it into rules of one practice each"])
    validation = _quality(ctx, content, category) if check else None
    if validation and strict and has_issues(validation):
        raise CmError("VALIDATION_FAILED", "Validation failed in strict mode", details={"validation": validation},
                      recovery=["Fix the issues reported below and re-run.", "Or omit --strict to add anyway."])
    bullet = new_bullet(content, category, sourceSessions=["manual-cli"], sourceAgents=["unknown"])
    ctx.playbook.add([bullet])
    if session:
        record_onboarding(session, 1)
    data: dict[str, Any] = {"bullet": public(bullet), "target": "global", "targetPath": global_playbook_ref(ctx.config)}
    if validation:
        data["validation"] = validation
    return Result(data)


def add_rules(ctx: Ctx, text: str | None, *, category: str = "general", session: str | None = None,
              check: bool = False, strict: bool = False, file: str | None = None,
              unread: str | None = None) -> Result:
    """Many rules from `text`, a JSON array of `{content, category?}`: each one added, skipped
    (quality warnings under `strict`) or failed, and reported. Input that cannot be read
    (`unread`: why) or parsed is one failed entry, as in the reference — not an error exit."""
    target = {"target": "global", "targetPath": global_playbook_ref(ctx.config)}
    try:
        if text is None:
            raise _Unusable(f"[file: {file}]", f"Failed to read input: {unread}")
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise _Unusable("[input]", f"Invalid JSON: {exc}") from None
        if not isinstance(items, list):
            raise _Unusable("[input]", "Invalid JSON: Input must be a JSON array")
    except _Unusable as exc:
        return Result({"success": False, "added": [], "skipped": [], "failed": [{"content": exc.content,
                                                                                 "error": exc.error}],
                       "summary": {"total": 1, "succeeded": 0, "skipped": 0, "failed": 1}, **target})
    added: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    fresh: list[dict[str, Any]] = []
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, str) or not content.strip():
            failed.append({"content": content, "error": "content must be a non-empty string"})
            continue
        if len(content) > MAX_RULE_CHARS:
            failed.append({"content": content[:200] + "...", "error": _too_long(content)})
            continue
        validation = _quality(ctx, content, item.get("category") or "general") if check else None
        if validation and strict and has_issues(validation):
            skipped.append({"content": content[:50], "reason": "Validation failed in strict mode",
                            "validation": validation})
            continue
        bullet = new_bullet(content.strip(), item.get("category") or category or "general",
                            sourceSessions=["manual-cli"], sourceAgents=["unknown"])
        fresh.append(bullet)
        entry = {"id": bullet["id"], "content": bullet["content"], "category": bullet["category"]}
        if validation:
            entry["validation"] = validation
        added.append(entry)
    if fresh:
        ctx.playbook.add(fresh)
    if session:
        record_onboarding(session, len(fresh))
    return Result({"success": not failed, "added": added, "skipped": skipped, "failed": failed,
                   "summary": {"total": len(items), "succeeded": len(added), "skipped": len(skipped),
                               "failed": len(failed)}, **target})


class _Unusable(Exception):
    """Batch input that yields no rules: the reference's one failed entry."""

    def __init__(self, content: str, error: str) -> None:
        super().__init__(error)
        self.content, self.error = content, error


def read_file(path: str) -> str:
    """A file's text; FILE_NOT_FOUND (exit 4) when there is none."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CmError("FILE_NOT_FOUND", f"File not found: {path}") from None


def remove_rule(ctx: Ctx, bullet_id: str, *, hard: bool = False, confirmed: bool = False, dry_run: bool = False,
                reason: str = "Removed via CLI") -> Result:
    """Deprecate a rule (kept, with `reason`), or delete it for good (`hard`, `confirmed`);
    `dry_run` says what would happen."""
    bullet = ctx.playbook.require(bullet_id)
    path = ctx.playbook.path_of(bullet["id"], expanded=False)
    apply = f"cm playbook remove {bullet['id']}" + (" --hard --yes" if hard else "")
    if dry_run:
        change = "Bullet would be permanently removed from playbook" if hard else \
            "Bullet would be marked as deprecated (can be restored with cm undo)"
        return Result({"plan": {"dryRun": True, "action": "delete" if hard else "deprecate",
                                "bulletId": bullet["id"], "path": path, "preview": bullet["content"][:100],
                                "category": bullet["category"], "helpfulCount": bullet.get("helpfulCount", 0),
                                "harmfulCount": bullet.get("harmfulCount", 0), "wouldChange": change,
                                "applyCommand": apply}})
    if hard:
        if not confirmed:
            raise missing("--hard deletes permanently; confirm with --yes")
        ctx.playbook.delete(bullet["id"])
        return Result({"id": bullet["id"], "action": "deleted", "path": path, "preview": bullet["content"][:100]})
    deprecate(bullet, reason)
    ctx.playbook.save(bullet)
    return Result({"id": bullet["id"], "action": "deprecated", "path": path, "preview": bullet["content"][:100]})


def export(ctx: Ctx, *, include_all: bool = False, as_yaml: bool = False, output: str | None = None) -> Result:
    """The playbook document: the data under --json (unless `as_yaml`), else YAML, to `output`
    when given."""
    book = export_playbook(ctx.playbook, include_all)
    if ctx.as_json and not as_yaml:
        return Result(book)
    if output:
        write_atomic(Path(output), dump_yaml(book))
        return Result({"outputPath": output, "bulletCount": len(book["bullets"])})
    return Result(book, human=dump_yaml(book).rstrip("\n"))


def import_playbook(ctx: Ctx, file: str, *, replace: bool = False, repo: bool = False) -> Result:
    """Rules (and deprecated patterns) from a playbook file into the global or repo layer; a
    rule whose id exists is skipped, or replaced with `replace`."""
    book = parse_playbook_text(read_file(file), file)
    target = "repo" if repo else "global"
    if target == "repo" and ctx.playbook.repo_path is None:
        raise invalid("--repo needs a git repository")
    existing = {b["id"]: b for b in (ctx.playbook.repo() or {}).get("bullets", [])} if target == "repo" \
        else {b["id"]: b for b in ctx.playbook.global_bullets()}
    added, skipped, updated = 0, 0, 0
    fresh: list[dict[str, Any]] = []
    warnings = []
    for bullet in book["bullets"]:
        if bullet["id"] in existing:
            if not replace:
                skipped += 1
                continue
            old = existing[bullet["id"]]
            changed = old.get("content") != bullet["content"]
            old.clear()
            old.update(bullet)
            ctx.playbook.save(old, content_changed=changed)
            updated += 1
        else:
            fresh.append(bullet)
            added += 1
        if not bullet.get("category"):
            warnings.append(f"{bullet['id']}: missing category")
    if fresh:
        ctx.playbook.add(fresh, target)
    patterns = book.get("deprecatedPatterns") or []
    if patterns and target == "global":
        _, meta = ctx.backend.playbook_meta()
        meta = meta or {k: v for k, v in empty_playbook().items() if k != "bullets"}
        known = {p.get("pattern") for p in meta.get("deprecatedPatterns") or []}
        meta["deprecatedPatterns"] = list(meta.get("deprecatedPatterns") or []) + \
            [p for p in patterns if p.get("pattern") not in known]
        ctx.backend.save_playbook_meta(meta)
    data: dict[str, Any] = {"file": file, "target": target, "added": added, "skipped": skipped, "updated": updated}
    if warnings:
        data["validationWarnings"] = warnings
    return Result(data)
