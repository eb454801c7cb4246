"""Commands over the playbook itself: init, starters, context, similar, history, playbook *."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from .app import Ctx, Result
from .bullets import new_bullet, normalise, public
from .context import build_context, semantic_setting
from .errors import CmError, invalid, missing
from .home import DEFAULT_CONFIG, global_dir, repo_dir, write_atomic
from .playbook import dump_yaml, empty_playbook, parse_playbook_text
from .quality import check_rule
from .scoring import (
    decayed_counts,
    effective_score,
    hash_content,
    is_active,
    jaccard_sets,
    now_iso,
    parse_ms,
    tokenize,
)
from .starters import catalogue, starter_bullets

# ---------------------------------------------------------------- init / starters


def _apply_starter(ctx: Ctx, name: str, target: str = "global") -> dict[str, Any]:
    bullets = starter_bullets(name)
    if bullets is None:
        raise invalid(f"Unknown starter: {name}", details={"available": [s["name"] for s in catalogue()]},
                      recovery=["List starters with: cm starters"])
    existing = ctx.playbook.merged(apply_blocked=False)
    ids = {b["id"] for b in existing}
    hashes = {hash_content(b["content"]) for b in existing}
    fresh = [b for b in bullets if b["id"] not in ids and hash_content(b["content"]) not in hashes]
    if fresh:
        ctx.playbook.add(fresh, target)
    return {"added": len(fresh), "skipped": len(bullets) - len(fresh), "name": name}


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


def cmd_init(ctx: Ctx, args: Any) -> Result:
    if args.repo:
        rdir = repo_dir(ctx.cwd)
        if rdir is None:
            raise invalid("Not inside a git repository: --repo needs one", recovery=["git init"])
        created, existed, overwritten, backups = [], [], [], []
        for name, text in (("playbook.yaml", dump_yaml(empty_playbook("repo-playbook"))), ("blocked.log", "")):
            path = rdir / name
            if path.exists() and not args.force:
                existed.append(str(path))
                continue
            _replace_keeping_backup(path, text, int(time.time() * 1000), created, overwritten, backups)
        starter = _apply_starter(ctx, args.starter, "repo") if args.starter else None
        return Result({"cassDir": str(rdir), "created": created, "existed": existed, "overwritten": overwritten,
                       "backups": backups, "starter": starter})
    home = global_dir()
    config_path = home / "config.json"
    initialised = config_path.exists()
    if initialised and not args.force and not args.starter:
        raise CmError("ALREADY_EXISTS", f"Already initialized: {config_path}",
                      recovery=["Use --force --yes to reinitialise (backups are kept)",
                                "Use --starter <name> to add a starter playbook"])
    if args.force and initialised and (ctx.as_json or not sys.stdin.isatty()) and not args.yes:
        raise missing("--force needs --yes when non-interactive", recovery=["cm init --force --yes"])
    created, existed, overwritten, backups = [], [], [], []
    for folder in ("diary", "reflections", "embeddings", "cost"):
        path = home / folder
        (existed if path.exists() else created).append(str(path))
        path.mkdir(parents=True, exist_ok=True)
    files = {"config.json": json.dumps(DEFAULT_CONFIG, indent=2) + "\n", "blocked.log": "", "usage.jsonl": ""}
    stamp = int(time.time() * 1000)
    for name, text in files.items():
        path = home / name
        if path.exists() and not (args.force and name == "config.json"):
            existed.append(str(path))
            continue
        _replace_keeping_backup(path, text, stamp, created, overwritten, backups)
    playbook_ref = "cerememory:procedural/playbook"
    _, meta = ctx.backend.playbook_meta()
    if args.force and initialised:
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
    starter = _apply_starter(ctx, args.starter) if args.starter else None
    return Result({"configPath": str(config_path), "created": created, "existed": existed,
                   "overwritten": overwritten, "backups": backups, "cassAvailable": False,
                   "storage": {"mode": ctx.backend.mode, "dataDir": _data_dir_text(ctx)},
                   "starter": starter})


def _data_dir_text(ctx: Ctx) -> str | None:
    from .home import data_dir

    return str(data_dir()) if ctx.backend.mode == "embedded" else ctx.backend.server_url


def cmd_starters(ctx: Ctx, args: Any) -> Result:
    return Result({"starters": catalogue()})


# ---------------------------------------------------------------- context / similar / history


def cmd_context(ctx: Ctx, args: Any) -> Result:
    task = " ".join(args.task).strip()
    if not task:
        raise missing("Task description required", recovery=['cm context "<task>" --json'])
    limit = args.limit if args.limit is not None else args.top
    data = build_context(ctx.playbook, ctx.config, task, limit=limit, min_score=args.min_score,
                         history=args.history, days=args.days, workspace=args.workspace,
                         no_history=args.no_history)
    warnings = []
    from . import trauma

    hit = trauma.match(task, trauma.load(active_only=True))
    if hit:
        data["traumaWarning"] = {"pattern": hit["pattern"],
                                 "reason": (hit.get("trigger_event") or {}).get("human_message") or "registered trauma",
                                 "reference": (hit.get("trigger_event") or {}).get("session_path")}
        ctx.diag(f"HOT STOVE: the task matches trauma {hit['id']} ({hit['pattern']})")
    if args.log_context or _env_true("CASS_CONTEXT_LOG"):
        ctx.backend.log("context", {"task": task, "ruleIds": [b["id"] for b in data["relevantBullets"]],
                                    "antiPatternIds": [b["id"] for b in data["antiPatterns"]],
                                    "workspace": args.workspace, "session": args.session,
                                    "timestamp": now_iso(), "source": "context"})
    human = _context_markdown(data) if (args.format == "markdown" or not ctx.as_json) else None
    return Result(data, warnings=warnings, human=human)


def _env_true(name: str) -> bool:
    import os

    return os.environ.get(name, "").lower() in ("1", "true")


def _context_markdown(data: dict[str, Any]) -> str:
    lines = [f"# Context for: {data['task']}", "", f"## Playbook rules ({len(data['relevantBullets'])})"]
    for b in data["relevantBullets"]:
        lines.append(f"- **{b['id']}** ({b['category']}/{b.get('kind')}, relevance {b['relevanceScore']:.1f}, "
                     f"confidence {b['effectiveScore']:.1f}): {b['content']}")
    if data["antiPatterns"]:
        lines += ["", "## Pitfalls"] + [f"- **{b['id']}**: {b['content']}" for b in data["antiPatterns"]]
    if data["historySnippets"]:
        lines += ["", "## History"] + [f"- {h['source_path']}: {h['snippet']}" for h in data["historySnippets"][:3]]
    if data["deprecatedWarnings"]:
        lines += ["", "## Warnings"] + [f"- {w}" for w in data["deprecatedWarnings"]]
    if data["suggestedCassQueries"]:
        lines += ["", "## Suggested searches"] + [f"- `{q}`" for q in data["suggestedCassQueries"]]
    return "\n".join(lines)


def cmd_history(ctx: Ctx, args: Any) -> Result:
    query = " ".join(args.query).strip()
    if not query:
        raise missing("Query required")
    from . import privacy

    rules = privacy.policy(ctx.backend)
    hits = ctx.backend.history(query, args.days or 30, args.limit or 10, workspace=args.workspace,
                               permits=rules.permits)
    data: dict[str, Any] = {"query": query, "days": args.days or 30, "historySnippets": hits}
    if ctx.backend.history_hidden:
        data["historyNotice"] = f"{ctx.backend.history_hidden} hits from other agents hidden ({rules.rule()})"
    return Result(data)


def _scope_ok(bullet: dict[str, Any], scope: str) -> bool:
    if scope == "all":
        return True
    return (bullet.get("scope") or "global") == scope


def similar_rules(ctx: Ctx, text: str) -> tuple[list[tuple[float, dict[str, Any]]], str, str | None]:
    """(similarity, rule) for every active rule, best first; `mode` semantic (cosine through
    recall) when storage searches by meaning and config allows it, else keyword (Jaccard on
    tokens), with a note saying why."""
    allowed = semantic_setting(ctx.config) is not False
    if allowed:
        ctx.backend.want_similarity(text)  # cosines with the listing, when it has not run yet
    rules = ctx.playbook.active()
    if allowed and rules:
        scores, on, reason = ctx.playbook.semantic_scores(text)
        if on:
            ranked = [(max(0.0, scores.get(b["id"], 0.0)), b) for b in rules]
            return sorted(ranked, key=lambda x: -x[0]), "semantic", None
        note = f"semantic search unavailable: {reason or 'no embedder'}; keyword similarity used"
    else:
        note = "semanticSearchEnabled is false in config" if rules else None
    tokens = set(tokenize(text))
    ranked = [(jaccard_sets(tokens, set(tokenize(b["content"]))), b) for b in rules]
    return sorted(ranked, key=lambda x: -x[0]), "keyword", note


def cmd_similar(ctx: Ctx, args: Any) -> Result:
    query = " ".join(args.query).strip()
    if not query:
        raise missing("Query required")
    if not 0 <= args.threshold <= 1:
        raise invalid("--threshold must be between 0 and 1")
    ranked, mode, note = similar_rules(ctx, query)
    results = [{"id": b["id"], "similarity": round(score, 4), "content": b["content"], "category": b["category"],
                "scope": b.get("scope", "global"), "effectiveScore": round(effective_score(b, ctx.config), 4),
                "preview": b["content"][:120]}
               for score, b in ranked if score >= args.threshold and _scope_ok(b, args.scope)]
    data: dict[str, Any] = {"query": query, "mode": mode, "results": results[:args.limit]}
    if note:
        data["semanticNotice"] = note
    return Result(data)


def _quality(ctx: Ctx, content: str, category: str) -> dict[str, Any]:
    """`--check`: the quality rules, plus the nearest existing rule when it is 0.8 or closer."""
    ranked, mode, note = similar_rules(ctx, content)
    return check_rule(content, category, nearest=ranked[0] if ranked else None, mode=mode, note=note)


# ---------------------------------------------------------------- playbook *


def cmd_list(ctx: Ctx, args: Any) -> Result:
    bullets = [public(b) for b in ctx.playbook.active()
               if not args.category or b.get("category") == args.category]
    return Result({"bullets": bullets})


def cmd_get(ctx: Ctx, args: Any) -> Result:
    bullet = ctx.playbook.require(args.id)
    helpful, harmful = decayed_counts(bullet, ctx.config)
    created = parse_ms(bullet.get("createdAt"))
    age = round((time.time() * 1000 - created) / 86_400_000, 2) if created else None
    return Result({"bullet": {**public(bullet), "effectiveScore": round(effective_score(bullet, ctx.config), 4),
                              "decayedHelpful": round(helpful, 4), "decayedHarmful": round(harmful, 4),
                              "ageDays": age}})


def _onboard_progress(ctx: Ctx, session: str | None, added: int) -> None:
    if not session:
        return
    from .cmd_info import record_onboarding

    record_onboarding(session, added)


MAX_RULE_CHARS = 10_000  # a rule is a sentence or a paragraph, not a document


def _too_long(content: str) -> str:
    return f"a rule is at most {MAX_RULE_CHARS:,} characters; this one has {len(content):,}"


def cmd_add(ctx: Ctx, args: Any) -> Result:
    target_path = "cerememory:procedural"
    if args.file:
        text = sys.stdin.read() if args.file == "-" else _read(args.file)
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise invalid(f"--file must hold a JSON array of {{content, category?}}: {exc}") from None
        if not isinstance(items, list):
            raise invalid("--file must hold a JSON array of {content, category?}")
        added, skipped, failed, fresh = [], [], [], []
        for item in items:
            content = item.get("content") if isinstance(item, dict) else None
            if not isinstance(content, str) or not content.strip():
                failed.append({"content": content, "error": "content must be a non-empty string"})
                continue
            if len(content) > MAX_RULE_CHARS:
                failed.append({"content": content[:200] + "...", "error": _too_long(content)})
                continue
            validation = _quality(ctx, content, item.get("category") or "general") if args.check else None
            if validation and args.strict and validation["warnings"]:
                skipped.append({"content": content, "reason": "quality warnings (--strict)", "validation": validation})
                continue
            bullet = new_bullet(content.strip(), item.get("category") or args.category or "general",
                                sourceSessions=["manual-cli"])
            fresh.append(bullet)
            entry = {"id": bullet["id"], "content": bullet["content"], "category": bullet["category"]}
            if validation:
                entry["validation"] = validation
            added.append(entry)
        if fresh:
            ctx.playbook.add(fresh)
        _onboard_progress(ctx, args.session, len(fresh))
        return Result({"success": not failed, "added": added, "skipped": skipped, "failed": failed,
                       "summary": {"total": len(items), "succeeded": len(added), "skipped": len(skipped),
                                   "failed": len(failed)}, "target": "global", "targetPath": target_path})
    content = " ".join(args.content or []).strip()
    if not content:
        raise missing("Rule content required (or --file)", recovery=['cm playbook add "<rule>" --category testing'])
    if len(content) > MAX_RULE_CHARS:
        raise invalid(_too_long(content), recovery=["Split it into rules of one practice each"])
    validation = _quality(ctx, content, args.category) if args.check else None
    if validation and args.strict and validation["warnings"]:
        raise CmError("VALIDATION_FAILED", "Rule failed the quality check (--strict)", details=validation)
    bullet = new_bullet(content, args.category, sourceSessions=["manual-cli"])
    ctx.playbook.add([bullet])
    _onboard_progress(ctx, args.session, 1)
    data: dict[str, Any] = {"bullet": public(bullet), "target": "global", "targetPath": target_path}
    if validation:
        data["validation"] = validation
    return Result(data)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CmError("FILE_NOT_FOUND", f"File not found: {path}") from None


def cmd_remove(ctx: Ctx, args: Any) -> Result:
    bullet = ctx.playbook.require(args.id)
    layer = ctx.playbook.layer_of(bullet["id"])
    path = str(ctx.playbook.repo_path) if layer == "repo" else "cerememory:procedural"
    apply = f"cm playbook remove {bullet['id']}" + (" --hard --yes" if args.hard else "")
    if args.dry_run:
        return Result({"plan": {"dryRun": True, "action": "delete" if args.hard else "deprecate",
                                "bulletId": bullet["id"], "path": path, "preview": bullet["content"][:100],
                                "category": bullet["category"], "helpfulCount": bullet.get("helpfulCount", 0),
                                "harmfulCount": bullet.get("harmfulCount", 0), "wouldChange": True,
                                "applyCommand": apply}})
    if args.hard:
        if not args.yes:
            raise missing("--hard deletes permanently; confirm with --yes")
        ctx.playbook.delete(bullet["id"])
        return Result({"id": bullet["id"], "action": "deleted", "path": path, "preview": bullet["content"][:100]})
    from .bullets import deprecate

    deprecate(bullet, args.reason)
    ctx.playbook.save(bullet)
    return Result({"id": bullet["id"], "action": "deprecated", "path": path, "preview": bullet["content"][:100]})


def export_playbook(ctx: Ctx, include_all: bool) -> dict[str, Any]:
    _, meta = ctx.backend.playbook_meta()
    book = empty_playbook()
    book.update({k: v for k, v in (meta or {}).items() if k != "bullets"})
    bullets = ctx.playbook.merged(apply_blocked=False)
    if not include_all:
        bullets = [b for b in bullets if is_active(b)]
    book["deprecatedPatterns"] = ctx.playbook.deprecated_patterns()
    book["metadata"] = {**(book.get("metadata") or {}), "exportedAt": now_iso(),
                        "exportedBulletCount": len(bullets)}
    book["bullets"] = [{k: v for k, v in public(b).items() if k not in ("sourceSessions", "sourceAgents")}
                       for b in bullets]
    return book


def cmd_export(ctx: Ctx, args: Any) -> Result:
    book = export_playbook(ctx, args.all)
    if ctx.as_json and not args.yaml:
        return Result(book)
    if args.output:
        write_atomic(Path(args.output), dump_yaml(book))
        return Result({"outputPath": args.output, "bulletCount": len(book["bullets"])})
    return Result(book, human=dump_yaml(book).rstrip("\n"))


def cmd_import(ctx: Ctx, args: Any) -> Result:
    book = parse_playbook_text(_read(args.file), args.file)
    target = "repo" if args.repo else "global"
    if target == "repo" and ctx.playbook.repo_path is None:
        raise invalid("--repo needs a git repository")
    existing = {b["id"]: b for b in (ctx.playbook.repo() or {}).get("bullets", [])} if target == "repo" \
        else {b["id"]: b for b in ctx.playbook.global_bullets()}
    added, skipped, updated, fresh = 0, 0, 0, []
    warnings = []
    for bullet in book["bullets"]:
        if bullet["id"] in existing:
            if not args.replace:
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
    data: dict[str, Any] = {"file": args.file, "target": target, "added": added, "skipped": skipped,
                            "updated": updated}
    if warnings:
        data["validationWarnings"] = warnings
    return Result(data)


def normalise_import(raw: dict[str, Any]) -> dict[str, Any]:
    return normalise(raw)
