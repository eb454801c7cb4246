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
from .home import DEFAULT_CONFIG, data_dir, global_dir, repo_dir, write_atomic
from .onboarding import record_onboarding
from .playbook import dump_yaml, empty_playbook, export_playbook, parse_playbook_text
from .quality import check_rule
from .scoring import decayed_counts, effective_score, parse_ms
from .service_context import similar_rules
from .starters import apply_starter, catalogue

MAX_RULE_CHARS = 10_000  # a rule is a sentence or a paragraph, not a document
GLOBAL_PATH = "cerememory:procedural"

# ---------------------------------------------------------------- init / starters / bootstrap


def _replace_keeping_backup(path: Path, text: str, stamp: int, created: list[str], overwritten: list[str],
                            backups: list[dict[str, str]]) -> None:
    """Write `path`; an existing file is copied to `<name>.backup.<stamp>` first (init --force)."""
    if path.exists():
        backup = path.with_name(f"{path.name}.backup.{stamp}")
        backup.write_bytes(path.read_bytes())
        backups.append({"file": str(path), "backup": str(backup)})
        overwritten.append(str(path))
    else:
        created.append(str(path))
    write_atomic(path, text)


def init(ctx: Ctx, *, repo: bool = False, force: bool = False, yes: bool = False,
         starter: str | None = None) -> Result:
    """Create the global home and playbook record (or, with `repo`, the repository's `.cass/`),
    optionally seeded with a starter."""
    if repo:
        return _init_repo(ctx, force, starter)
    home = global_dir()
    config_path = home / "config.json"
    initialised = config_path.exists()
    if initialised and not force and not starter:
        raise CmError("ALREADY_EXISTS", f"Already initialized: {config_path}",
                      recovery=["Use --force --yes to reinitialise (backups are kept)",
                                "Use --starter <name> to add a starter playbook"])
    if force and initialised and (ctx.as_json or not sys.stdin.isatty()) and not yes:
        raise missing("--force needs --yes when non-interactive", recovery=["cm init --force --yes"])
    created: list[str] = []
    existed: list[str] = []
    overwritten: list[str] = []
    backups: list[dict[str, str]] = []
    for folder in ("diary", "reflections", "embeddings", "cost"):
        path = home / folder
        (existed if path.exists() else created).append(str(path))
        path.mkdir(parents=True, exist_ok=True)
    files = {"config.json": json.dumps(DEFAULT_CONFIG, indent=2) + "\n", "blocked.log": "", "usage.jsonl": ""}
    stamp = int(time.time() * 1000)
    for name, text in files.items():
        path = home / name
        if path.exists() and not (force and name == "config.json"):
            existed.append(str(path))
            continue
        _replace_keeping_backup(path, text, stamp, created, overwritten, backups)
    playbook_ref = "cerememory:procedural/playbook"
    _, meta = ctx.backend.playbook_meta()
    if force and initialised:
        old = ctx.playbook.global_bullets()
        backup = home / f"playbook.yaml.backup.{stamp}"
        write_atomic(backup, dump_yaml({**empty_playbook(), **(meta or {}), "bullets": list(old)}))
        backups.append({"file": playbook_ref, "backup": str(backup)})
        for bullet in list(old):
            ctx.playbook.delete(bullet["id"])
        overwritten.append(playbook_ref)
        meta = None
    if meta is None:
        data = empty_playbook()
        data.pop("bullets")
        ctx.backend.save_playbook_meta(data)
        created.append(playbook_ref)
    else:
        existed.append(playbook_ref)
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
    if validation and strict and validation["warnings"]:
        raise CmError("VALIDATION_FAILED", "Rule failed the quality check (--strict)", details=validation)
    bullet = new_bullet(content, category, sourceSessions=["manual-cli"])
    ctx.playbook.add([bullet])
    if session:
        record_onboarding(session, 1)
    data: dict[str, Any] = {"bullet": public(bullet), "target": "global", "targetPath": GLOBAL_PATH}
    if validation:
        data["validation"] = validation
    return Result(data)


def add_rules(ctx: Ctx, text: str, *, category: str = "general", session: str | None = None,
              check: bool = False, strict: bool = False) -> Result:
    """Many rules from `text`, a JSON array of `{content, category?}`: each one added, skipped
    (quality warnings under `strict`) or failed, and reported."""
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise invalid(f"--file must hold a JSON array of {{content, category?}}: {exc}") from None
    if not isinstance(items, list):
        raise invalid("--file must hold a JSON array of {content, category?}")
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
        if validation and strict and validation["warnings"]:
            skipped.append({"content": content, "reason": "quality warnings (--strict)", "validation": validation})
            continue
        bullet = new_bullet(content.strip(), item.get("category") or category or "general",
                            sourceSessions=["manual-cli"])
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
                               "failed": len(failed)}, "target": "global", "targetPath": GLOBAL_PATH})


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
    layer = ctx.playbook.layer_of(bullet["id"])
    path = str(ctx.playbook.repo_path) if layer == "repo" else GLOBAL_PATH
    apply = f"cm playbook remove {bullet['id']}" + (" --hard --yes" if hard else "")
    if dry_run:
        return Result({"plan": {"dryRun": True, "action": "delete" if hard else "deprecate",
                                "bulletId": bullet["id"], "path": path, "preview": bullet["content"][:100],
                                "category": bullet["category"], "helpfulCount": bullet.get("helpfulCount", 0),
                                "harmfulCount": bullet.get("harmfulCount", 0), "wouldChange": True,
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
