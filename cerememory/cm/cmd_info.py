"""Read-mostly commands: stats, top, stale, why, project, quickstart, doctor, privacy, onboard."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from . import CM_VERSION
from .app import Ctx, Result
from .errors import CmError, invalid
from .home import global_dir, write_atomic
from .quality import CATEGORY_KEYWORDS, detect_categories, gap_analysis, gap_queries
from .scoring import (
    effective_score,
    is_active,
    is_anti_pattern,
    jaccard_sets,
    now_iso,
    parse_ms,
    score_bucket,
    tokenize,
)


def _days_since(bullet: dict[str, Any], now: float) -> tuple[float, dict[str, Any] | None]:
    events = [e for e in bullet.get("feedbackEvents") or [] if parse_ms(e.get("timestamp")) is not None]
    if events:
        last = max(events, key=lambda e: parse_ms(e["timestamp"]))
        return (now - parse_ms(last["timestamp"])) / 86_400_000, last
    created = parse_ms(bullet.get("createdAt")) or now
    return (now - created) / 86_400_000, None


def cmd_stats(ctx: Ctx, args: Any) -> Result:
    now = time.time() * 1000
    bullets = ctx.playbook.merged()
    active = [b for b in bullets if is_active(b)]
    by = {"byScope": {}, "byState": {}, "byKind": {}}
    for bullet in bullets:
        for key, field in (("byScope", "scope"), ("byState", "state"), ("byKind", "kind")):
            value = bullet.get(field) or "unknown"
            by[key][value] = by[key].get(value, 0) + 1
    scores = {b["id"]: effective_score(b, ctx.config, now) for b in active}
    dist = {"excellent": 0, "good": 0, "neutral": 0, "atRisk": 0}
    for score in scores.values():
        dist[score_bucket(score)] += 1
    ranked = sorted(active, key=lambda b: -scores[b["id"]])
    half = float((ctx.config.get("scoring") or {}).get("decayHalfLifeDays", 90))
    merge = []
    recent = sorted(active, key=lambda b: b.get("createdAt") or "", reverse=True)[:2000]
    token_sets = [(b, set(tokenize(b["content"]))) for b in recent]
    for i, (a, ta) in enumerate(token_sets):
        for b, tb in token_sets[i + 1:]:
            similarity = jaccard_sets(ta, tb)
            if similarity >= 0.8:
                merge.append({"a": a["id"], "b": b["id"], "similarity": round(similarity, 4)})
        if len(merge) >= 10:
            break
    return Result({"total": len(bullets), **by, "scoreDistribution": dist,
                   "topPerformers": [{"id": b["id"], "content": b["content"], "score": round(scores[b["id"]], 4),
                                      "helpfulCount": b.get("helpfulCount", 0)} for b in ranked[:5]],
                   "mostHelpful": [{"id": b["id"], "content": b["content"], "helpfulCount": b.get("helpfulCount", 0)}
                                   for b in sorted(active, key=lambda b: -int(b.get("helpfulCount") or 0))[:5]],
                   "atRiskCount": dist["atRisk"],
                   "staleCount": sum(1 for b in active if _days_since(b, now)[0] > half),
                   "mergeCandidates": merge[:10], "semanticMergeCandidates": []})


def cmd_top(ctx: Ctx, args: Any) -> Result:
    count = args.count if args.count is not None else 10
    if count < 1:
        raise invalid("count must be at least 1")
    active = [b for b in ctx.playbook.active() if (args.scope == "all" or b.get("scope", "global") == args.scope)
              and (not args.category or b.get("category") == args.category)]
    scored = sorted(((effective_score(b, ctx.config), b) for b in active), key=lambda s: -s[0])[:count]
    rows = []
    for rank, (score, b) in enumerate(scored, 1):
        _, last = _days_since(b, time.time() * 1000)
        rows.append({"rank": rank, "id": b["id"], "score": round(score, 2), "content": b["content"],
                     "category": b["category"], "scope": b.get("scope", "global"), "maturity": b.get("maturity"),
                     "feedback": {"helpful": b.get("helpfulCount", 0), "harmful": b.get("harmfulCount", 0)},
                     "lastUsed": last["timestamp"] if last else None})
    return Result({"count": len(rows), "filters": {"scope": args.scope, "category": args.category}, "bullets": rows})


def cmd_stale(ctx: Ctx, args: Any) -> Result:
    if args.days < 0:
        raise invalid("--days must be ≥ 0")
    now = time.time() * 1000
    active = [b for b in ctx.playbook.active() if args.scope == "all" or b.get("scope", "global") == args.scope]
    rows = []
    for b in active:
        days, last = _days_since(b, now)
        if days < args.days:
            continue
        score = effective_score(b, ctx.config, now)
        if score < -2:
            rec = f"Consider forgetting: cm forget {b['id']} --reason \"stale and harmful\""
        elif days > 180 and b.get("maturity") == "candidate":
            rec = f"Never validated in 180+ days: cm playbook remove {b['id']}"
        elif days > 120 and score < 1:
            rec = "Review: old with a low score"
        elif score > 5:
            rec = "Good score despite being stale: re-validate with cm mark --helpful when it helps"
        else:
            rec = "Review whether this rule still applies"
        rows.append({"id": b["id"], "daysSinceLastFeedback": int(days), "content": b["content"],
                     "category": b["category"], "scope": b.get("scope", "global"), "score": round(score, 2),
                     "maturity": b.get("maturity"),
                     "lastFeedback": {"action": last.get("type") if last else None,
                                      "timestamp": last.get("timestamp") if last else None},
                     "recommendation": rec})
    rows.sort(key=lambda r: -r["daysSinceLastFeedback"])
    return Result({"threshold": args.days, "count": len(rows), "totalActive": len(active),
                   "filters": {"scope": args.scope}, "bullets": rows})


def cmd_why(ctx: Ctx, args: Any) -> Result:
    bullets = ctx.playbook.merged(apply_blocked=False)
    exact = [b for b in bullets if b["id"] == args.bullet_id]
    matches = exact or [b for b in bullets if b["id"].startswith(args.bullet_id)] or \
        [b for b in bullets if args.bullet_id in b["id"]]
    if not matches:
        ctx.playbook.require(args.bullet_id)
    if len(matches) > 1:
        raise invalid(f"Ambiguous bullet id {args.bullet_id!r}", details={"matches": [b["id"] for b in matches]})
    bullet = matches[0]
    now = time.time() * 1000
    score = effective_score(bullet, ctx.config, now)
    created = parse_ms(bullet.get("createdAt")) or now
    reasoning = bullet.get("reasoning")
    import re

    evidence = re.findall(r'"([^"]+)"', reasoning or "")
    n_sessions, n_events = (10, 20) if args.verbose else (5, 8)
    diaries = []
    try:
        for entry in ctx.backend.diaries():
            ts = parse_ms(entry.get("timestamp"))
            if ts is not None and abs(ts - created) <= 7 * 86_400_000:
                diaries.append({"date": entry.get("timestamp"),
                                "content": "; ".join(entry.get("keyLearnings") or entry.get("accomplishments") or [])})
    except CmError:
        pass
    helpful, harmful = bullet.get("helpfulCount", 0), bullet.get("harmfulCount", 0)
    effectiveness = "Very high" if score >= 10 and helpful >= 10 else "High" if score >= 5 and helpful >= 5 else \
        "Moderate" if score >= 1 else "Low" if score >= 0 else "Negative"
    return Result({"bullet": {"id": bullet["id"], "content": bullet["content"], "category": bullet["category"],
                              "maturity": bullet.get("maturity"), "score": round(score, 4),
                              "createdAt": bullet.get("createdAt"), "daysAgo": int((now - created) / 86_400_000)},
                   "reasoning": reasoning,
                   "sourceSessions": [{"path": s, "date": None, "snippet": None}
                                      for s in (bullet.get("sourceSessions") or [])[:n_sessions]],
                   "evidence": evidence, "diaryEntries": diaries[:5],
                   "feedbackHistory": (bullet.get("feedbackEvents") or [])[-n_events:],
                   "currentStatus": {"helpfulCount": helpful, "harmfulCount": harmful, "effectiveness": effectiveness}})


EMOJI = {"proven": "✅", "established": "🔵", "candidate": "🟡"}


def cmd_project(ctx: Ctx, args: Any) -> Result:
    fmt = {"agents": "agents.md", "claude": "claude.md"}.get(args.format, args.format)
    if fmt not in ("agents.md", "claude.md", "raw", "json", "yaml"):
        raise invalid(f"Unknown format {args.format!r}: use agents.md, claude.md, raw, json or yaml")
    import os

    no_emoji = bool(os.environ.get("CASS_MEMORY_NO_EMOJI"))
    active = ctx.playbook.active()
    scores = {b["id"]: effective_score(b, ctx.config) for b in active}
    rules = sorted((b for b in active if not is_anti_pattern(b)), key=lambda b: -scores[b["id"]])
    antis = [b for b in active if is_anti_pattern(b)]
    categories: dict[str, list[dict[str, Any]]] = {}
    for b in rules:
        categories.setdefault(b["category"], []).append(b)
    per = args.per_category or args.top
    if fmt == "agents.md":
        dist = {"excellent": 0, "good": 0, "neutral": 0, "atRisk": 0}
        for s in scores.values():
            dist[score_bucket(s)] += 1
        counts = {m: sum(1 for b in active if b.get("maturity") == m) for m in ("proven", "established", "candidate")}
        lines = ["# AGENTS.md", "", "> Auto-generated by cm (cass-memory) from the playbook.",
                 f"> Last updated {now_iso()[:10]}", "", "## Summary", "",
                 f"- Total rules: {len(active)} (proven {counts['proven']}, established {counts['established']}, "
                 f"candidate {counts['candidate']})",
                 f"- Score distribution: excellent {dist['excellent']}, good {dist['good']}, "
                 f"neutral {dist['neutral']}, at risk {dist['atRisk']}", "", "## Rules"]
        for category, items in sorted(categories.items()):
            lines += ["", f"### {category}", ""]
            for b in items[:per] if per else items:
                mark = "" if no_emoji else EMOJI.get(b.get("maturity"), "") + " "
                counts_text = f" [{b.get('helpfulCount', 0)}+/{b.get('harmfulCount', 0)}-]" if args.show_counts else ""
                lines.append(f"- {mark}{b['content']}{counts_text} _(score: {scores[b['id']]:.1f})_")
        if antis:
            lines += ["", "## Anti-Patterns (AVOID)", ""] + [f"- {b['content']}" for b in antis]
        content = "\n".join(lines) + "\n"
    elif fmt == "claude.md":
        lines = ["<project_rules>", "<!-- Auto-generated by cm (cass-memory); edit the playbook, not this block -->"]
        for category, items in sorted(categories.items()):
            lines += ["", f"## {category}", ""] + [f"- {b['content']}" for b in (items[:per] if per else items)]
        if antis:
            lines += ["", "## IMPORTANT: Avoid These Patterns", ""] + [f"- DO NOT: {b['content']}" for b in antis]
        content = "\n".join(lines + ["</project_rules>"]) + "\n"
    elif fmt == "yaml":
        from .cmd_playbook import export_playbook
        from .playbook import dump_yaml

        content = dump_yaml(export_playbook(ctx, False))
    else:
        content = json.dumps({"bullets": active}, indent=2)
    if args.output:
        path = Path(args.output)
        if path.exists() and not args.force:
            raise CmError("ALREADY_EXISTS", f"{path} exists; use --force to overwrite")
        write_atomic(path, content)
        return Result({"outputPath": str(path), "format": fmt, "bytesWritten": len(content.encode())})
    return Result({"format": fmt, "content": content}, human=content.rstrip("\n"))


def cmd_quickstart(ctx: Ctx, args: Any) -> Result:
    return Result({
        "summary": "cm gives coding agents procedural memory: playbook rules learned from past sessions, "
                   "stored in Cerememory.",
        "oneCommand": 'cm context "<your task>" --json',
        "expectations": ["Run cm context before any non-trivial task", "Follow relevantBullets, avoid antiPatterns",
                         "Leave inline feedback: // [cass: helpful b-…] - why"],
        "whatItReturns": ["relevantBullets", "antiPatterns", "historySnippets", "suggestedCassQueries",
                          "deprecatedWarnings", "semanticMode"],
        "doNotDo": ["Do not edit the playbook by hand while cm runs", "Do not mark rules you did not use"],
        "operatorNote": "cm reflect distils sessions from Cerememory's raw journal into rules; run it daily.",
        "soloUser": "Everything works locally without an LLM; reflection then uses the deterministic path.",
        "inlineFeedbackFormat": "// [cass: helpful b-xxxx] - reason   or   # [cass: harmful b-xxxx] - reason",
        "protocol": {"start": 'cm context "<task>" --json', "during": "cite rule ids you follow",
                     "end": "cm outcome success|failure <ids> --json"},
        "examples": ['cm context "fix the auth timeout bug" --json', "cm mark b-abc123 --helpful",
                     'cm playbook add "Always run tests before committing" --category testing',
                     "cm outcome success b-abc123 --duration 300 --text \"thanks, that worked\""]})


# ---------------------------------------------------------------- doctor


def _create_playbook(ctx: Ctx, home: Path) -> None:
    from .playbook import empty_playbook

    data = empty_playbook()
    data.pop("bullets")
    ctx.backend.save_playbook_meta(data)


def _reset_config(ctx: Ctx, home: Path) -> None:
    from .home import DEFAULT_CONFIG

    write_atomic(home / "config.json", json.dumps(DEFAULT_CONFIG, indent=2) + "\n")


def _create_repo_dir(ctx: Ctx, home: Path) -> None:
    assert ctx.playbook.repo_dir is not None
    ctx.playbook.repo_dir.mkdir(parents=True, exist_ok=True)


_FIXES: dict[str, Any] = {
    "missing-global-dir": lambda ctx, home: home.mkdir(parents=True, exist_ok=True),
    "missing-diary-dir": lambda ctx, home: (home / "diary").mkdir(parents=True, exist_ok=True),
    "missing-blocked-log": lambda ctx, home: (home / "blocked.log").touch(),
    "missing-repo-cass-dir": _create_repo_dir,
    "missing-playbook": _create_playbook,
    "reset-config": _reset_config,
}


def cmd_doctor(ctx: Ctx, args: Any) -> Result:
    checks, fixable = [], []
    home = global_dir()

    def check(category: str, item: str, status: str, message: str, **details: Any) -> None:
        entry = {"category": category, "item": item, "status": status, "message": message}
        if details:
            entry["details"] = details
        checks.append(entry)

    if home.is_dir():
        check("Global Storage", "home", "pass", f"{home} exists")
    else:
        check("Global Storage", "home", "fail", f"{home} missing")
        fixable.append({"id": "missing-global-dir", "description": "Create the cm home", "category": "Global Storage",
                        "severity": "fail", "safety": "safe", "howToFix": "cm doctor --fix"})
    if not (home / "diary").is_dir():
        fixable.append({"id": "missing-diary-dir", "description": "Create diary/", "category": "Global Storage",
                        "severity": "warn", "safety": "safe"})
    if not (home / "blocked.log").exists():
        fixable.append({"id": "missing-blocked-log", "description": "Create the empty blocked.log",
                        "category": "Global Storage", "severity": "warn", "safety": "safe"})
    try:
        assert ctx.config is not None
        check("Configuration", "config.json", "pass" if (home / "config.json").exists() else "warn",
              "valid" if (home / "config.json").exists() else "no config.json (defaults in use)")
    except CmError as exc:
        check("Configuration", "config.json", "fail", exc.message)
        fixable.append({"id": "reset-config", "description": "Reset config.json to defaults",
                        "category": "Configuration", "severity": "fail", "safety": "cautious"})
    try:
        count = len(ctx.playbook.global_bullets())
        check("Cerememory", "storage", "pass", f"{ctx.backend.mode} storage reachable; {count} global rules",
              mode=ctx.backend.mode, notice=ctx.backend.notice)
        _, meta = ctx.backend.playbook_meta()
        if meta is None:
            check("Playbook", "global", "warn", "global playbook not initialised (cm init)")
            fixable.append({"id": "missing-playbook", "description": "Create the global playbook record",
                            "category": "Playbook", "severity": "warn", "safety": "safe"})
        else:
            check("Playbook", "global", "pass", f"schema_version {meta.get('schema_version', 2)}")
        stats = ctx.backend.call("introspect.stats", {})
        check("Cerememory", "semantic search", "pass" if stats.get("semantic_search") else "warn",
              "on" if stats.get("semantic_search") else f"off: {stats.get('semantic_off_reason')}")
        check("History", "raw journal", "pass" if stats.get("raw_journal_records") else "warn",
              f"{stats.get('raw_journal_records', 0)} journal records")
    except CmError as exc:
        check("Cerememory", "storage", "fail", exc.message)
    try:
        ctx.playbook.repo()
        if ctx.playbook.repo_dir is not None:
            present = ctx.playbook.repo_dir.is_dir()
            check("Repo .cass/ Structure", str(ctx.playbook.repo_dir), "pass" if present else "warn",
                  "present" if present else "no .cass/ (cm init --repo)")
            if not present:
                fixable.append({"id": "missing-repo-cass-dir", "description": "Create .cass/ in the repository",
                                "category": "Repo .cass/ Structure", "severity": "warn", "safety": "safe"})
    except CmError as exc:
        check("Repo .cass/ Structure", "playbook.yaml", "fail", exc.message)
    from . import trauma

    check("Trauma System", "Database", "pass", f"{len(trauma.load(active_only=True))} active traumas")
    script = ctx.cwd / ".claude" / "hooks" / "trauma_guard.py"
    if script.exists():
        import ast

        try:
            ast.parse(script.read_text())
            check("Trauma System", "Safety Guard", "pass", "hook parses as Python")
        except SyntaxError as exc:
            check("Trauma System", "Safety Guard", "fail", f"hook does not parse: {exc}")
    llm = _llm_status()
    check("LLM Configuration", "provider", "pass" if llm["configured"] else "warn", llm["message"])
    fix_results = []
    if args.fix:
        for fix in fixable:
            if fix["safety"] != "safe" and not args.force:
                continue
            try:
                _FIXES[fix["id"]](ctx, home)
                fix_results.append({"id": fix["id"], "success": True, "message": "fixed"})
            except (OSError, CmError) as exc:
                fix_results.append({"id": fix["id"], "success": False, "message": str(exc)})
    statuses = {c["status"] for c in checks}
    overall = "unhealthy" if "fail" in statuses else "degraded" if "warn" in statuses else "healthy"
    data: dict[str, Any] = {"version": CM_VERSION, "generatedAt": now_iso(), "overallStatus": overall,
                            "checks": checks, "fixableIssues": fixable,
                            "recommendedActions": [{"label": f["description"], "command": "cm doctor --fix",
                                                    "reason": f["id"], "urgency": "high" if f["severity"] == "fail"
                                                    else "medium"} for f in fixable]}
    if args.fix:
        data["fixResults"] = fix_results
    return Result(data)


def _llm_status() -> dict[str, Any]:
    try:
        from ..config import load_config
        from ..llm.settings import LLMSettings  # noqa: F401
        from .home import data_dir

        config = load_config(None, {"data_dir": str(data_dir())})
        provider = config.get("llm.provider") if hasattr(config, "get") else None
    except Exception as exc:  # the LLM layer is optional
        return {"configured": False, "message": f"LLM layer unavailable: {exc}"}
    if not provider or provider == "none":
        return {"configured": False, "message": "No LLM configured (llm.provider = none); reflect is deterministic"}
    return {"configured": True, "message": f"LLM provider {provider}"}


# ---------------------------------------------------------------- privacy


def cmd_privacy(ctx: Ctx, args: Any) -> Result:
    """Status, or one audited change of the cross-agent settings (cerememory/cm/privacy.py)."""
    from . import privacy

    action = args.action
    if action == "status":
        rules = privacy.policy(ctx.backend)
        agent, found_by = privacy.current_agent()
        counts = _session_counts(ctx, args.days)
        return Result({"crossAgent": rules.state, "cass": {"available": True, "timelineDays": args.days,
                                                           "sessionCountsByAgent": counts},
                       "currentAgent": {"name": agent, "from": found_by}, "rule": rules.rule(),
                       "ingested": {a: rules.permits(a) for a in _agents()},
                       "changes": privacy.changes(ctx.backend),
                       "notes": {"enable": "cm privacy enable [agents...]", "disable": "cm privacy disable",
                                 "allow": "cm privacy allow <agent>", "deny": "cm privacy deny <agent>"}})
    if action in ("allow", "deny") and not args.agents:
        raise CmError("MISSING_REQUIRED", f"privacy {action} needs an agent name")
    state = privacy.change(ctx.backend, action, list(args.agents))
    return Result({"crossAgent": state})


def _agents() -> tuple[str, ...]:
    from ..ingest.agents import AGENTS

    return AGENTS


def _session_counts(ctx: Ctx, days: int) -> dict[str, int]:
    """Journal sessions per agent over `days` (what the reference asked `cass timeline` for)."""
    counts: dict[str, set[str]] = {}
    for session_id, records in ctx.backend.sessions(days).items():
        agents = [(r.get("metadata") or {}).get("agent") for r in records]
        agent = next((a for a in agents if a), "unknown")
        counts.setdefault(agent, set()).add(session_id)
    return {agent: len(ids) for agent, ids in sorted(counts.items())}


# ---------------------------------------------------------------- onboarding


def _onboard_path() -> Path:
    return global_dir() / "onboarding-state.json"


def _onboard_state() -> dict[str, Any]:
    path = _onboard_path()
    if path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    return {"version": 1, "startedAt": None, "lastUpdatedAt": None, "processedSessions": [],
            "stats": {"totalSessionsProcessed": 0, "totalRulesExtracted": 0}}


def record_onboarding(session: str, rules: int, skipped: bool = False) -> None:
    from .locks import locked

    with locked(_onboard_path()):
        _record_onboarding(session, rules, skipped)


def _record_onboarding(session: str, rules: int, skipped: bool) -> None:
    state = _onboard_state()
    now = now_iso()
    state["startedAt"] = state.get("startedAt") or now
    state["lastUpdatedAt"] = now
    entry = {"path": session, "processedAt": now, "rulesExtracted": rules}
    if skipped:
        entry["skipped"] = True
    state["processedSessions"].append(entry)
    state["stats"]["totalSessionsProcessed"] += 1
    state["stats"]["totalRulesExtracted"] += rules
    write_atomic(_onboard_path(), json.dumps(state, indent=2) + "\n")


def _onboard_status(ctx: Ctx) -> dict[str, Any]:
    state = _onboard_state()
    rules = len(ctx.playbook.active())
    try:
        stats = ctx.backend.call("introspect.stats", {})
        messages = int(stats.get("raw_journal_records", 0))
    except CmError:
        messages = 0
    conversations = len(ctx.backend.sessions(365)) if messages else 0
    return {"status": {"cassAvailable": False, "historySource": "cerememory raw journal",
                       "totalConversations": conversations, "totalMessages": messages, "playbookRules": rules,
                       "needsOnboarding": rules < 20,
                       "onboardingRatio": round(100 * rules / conversations, 2) if conversations else 0,
                       "recommendation": "Run cm onboard sample and extract rules from past sessions"
                       if rules < 20 else "Playbook is well seeded"},
            "progress": {"sessionsProcessed": state["stats"]["totalSessionsProcessed"],
                         "rulesExtracted": state["stats"]["totalRulesExtracted"], "startedAt": state["startedAt"],
                         "lastActivity": state["lastUpdatedAt"], "hasStarted": bool(state["startedAt"])}}


EXTRACTION_PROMPT = ("Read the session below. Extract 0-5 reusable rules as JSON objects {content, category} "
                     "(specific, actionable, with when/unless context). Then add them with: "
                     "cm playbook add --file rules.json --session <path>")
EXAMPLE_RULES = [
    {"content": "Run the migration check before generating a new database migration, so revisions never fork",
     "category": "workflow"},
    {"content": "When a test is flaky, rerun it alone with the seed printed before changing the code under test",
     "category": "testing"},
    {"content": "Never log request headers in the API gateway: they carry bearer tokens", "category": "security"},
    {"content": "Rebase feature branches on main before opening a PR unless the branch is shared",
     "category": "git"},
    {"content": "Profile with the production data size before caching a query result", "category": "performance"},
    {"content": "Read the error's full stack trace before changing code when a build fails in CI",
     "category": "debugging"},
]
GUIDED = {"step": "guided", "workflow": [
    {"step": 1, "action": "Check where onboarding stands", "command": "cm onboard status --json"},
    {"step": 2, "action": "Pick sessions worth learning from (gaps first)",
     "command": "cm onboard sample --fill-gaps --json"},
    {"step": 3, "action": "Read one session with its context",
     "command": "cm onboard read <session> --template --json"},
    {"step": 4, "action": "Write 0-5 specific rules as a JSON array of {content, category} to rules.json",
     "command": None},
    {"step": 5, "action": "Add them and record the session as processed",
     "command": "cm playbook add --file rules.json --session <session> --json"},
    {"step": 6, "action": "Or mark a session with nothing to learn",
     "command": "cm onboard mark-done <session> --json"},
    {"step": 7, "action": "Repeat from step 2 until status says the playbook is well seeded", "command": None}],
    "tips": ["Rules say when they apply (before, when, unless)", "One rule, one practice",
             "Prefer rules a future agent could act on without the session"]}


def cmd_onboard(ctx: Ctx, args: Any) -> Result:
    action = args.action
    command = f"onboard:{action}"
    if action in ("status", "gaps"):
        data = _onboard_status(ctx)
        data["gapAnalysis"] = gap_analysis(ctx.playbook.active())
        return Result(data)
    if action == "sample":
        status = _onboard_status(ctx)
        gaps = gap_analysis(ctx.playbook.active())
        processed = {p["path"] for p in _onboard_state()["processedSessions"]}
        sessions = ctx.backend.sessions(args.days or 90)
        rows = []
        for session_id, records in sessions.items():
            if session_id in processed and not args.include_processed:
                continue
            text = " ".join(_text(r) for r in records)
            cats = detect_categories(text)
            score = sum(3 if c in gaps["gaps"]["critical"] else 2 if c in gaps["gaps"]["underrepresented"] else 1
                        for c in cats)
            rows.append({"path": session_id, "agent": (records[0].get("metadata") or {}).get("agent", "unknown"),
                         "workspace": (records[0].get("metadata") or {}).get("workspace"),
                         "snippet": " ".join(text.split())[:300], "score": len(records), "gapScore": score,
                         "matchedCategories": cats})
        if args.fill_gaps:
            rows.sort(key=lambda r: -r["gapScore"])
        limit = args.limit or 10
        data = {**status, "step": "sample", "sessions": rows[:limit], "totalFound": len(sessions),
                "filtered": len(sessions) - len(rows), "sessionsRemaining": max(0, len(rows) - limit)}
        if args.fill_gaps:
            data["gapAnalysis"] = gaps
            data["gapQueries"] = gap_queries(gaps)
        return Result(data)
    if action == "read":
        if not args.path:
            raise CmError("MISSING_REQUIRED", "onboard read needs a session id or file path")
        content, meta = _session_text(ctx, args.path)
        if args.template:
            return Result(_read_template(ctx, args.path, content, meta))
        return Result({**_onboard_status(ctx), "step": "read", "sessionPath": args.path,
                       "sessionContent": content, "extractionPrompt": EXTRACTION_PROMPT})
    if action == "prompt":
        return Result({**_onboard_status(ctx), "step": "prompt", "extractionPrompt": EXTRACTION_PROMPT,
                       "categories": list(CATEGORY_KEYWORDS), "examples": EXAMPLE_RULES})
    if action == "guided":
        return Result(GUIDED)
    if action == "mark-done":
        if not args.path:
            raise CmError("MISSING_REQUIRED", "onboard mark-done needs a session id or path")
        record_onboarding(args.path, 0, skipped=True)
        return Result({"message": f"Marked {args.path} as done", "sessionPath": args.path, "rulesExtracted": 0,
                       "skipped": True})
    if action == "reset":
        if not args.yes and ctx.as_json is False:
            raise CmError("MISSING_REQUIRED", "onboard reset needs --yes")
        _onboard_path().unlink(missing_ok=True)
        return Result({"message": "Onboarding progress reset"})
    raise invalid(f"Unknown onboard action {action!r} ({command})")


def _text(record: dict[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in (record.get("content") or {}).get("blocks", []) if b.get("text"))


def _session_text(ctx: Ctx, ref: str) -> tuple[str, dict[str, Any]]:
    """(transcript, metadata of its first turn): a file as it is, or a raw-journal session."""
    path = Path(ref)
    if path.is_file():
        return path.read_text(encoding="utf-8", errors="replace")[:200_000], {}
    records = ctx.backend.session(ref)
    if not records:
        raise CmError("SESSION_NOT_FOUND", f"No session {ref!r} in the raw journal and no such file")
    text = "\n".join(f"[{r.get('speaker', 'user')}] {_text(r)}" for r in records)
    return text, dict(records[0].get("metadata") or {})


def _read_template(ctx: Ctx, ref: str, content: str, meta: dict[str, Any]) -> dict[str, Any]:
    """`onboard read --template`: the session with what an agent needs to extract rules from it."""
    from .bullets import agent_from_path

    workspace = meta.get("workspace")
    gaps = gap_analysis(ctx.playbook.active())
    hints = detect_categories(content)
    related, notice = _related_rules(ctx, content)
    focus = [c for c in hints if c in gaps["gaps"]["critical"] + gaps["gaps"]["underrepresented"]] or hints
    context: dict[str, Any] = {"relatedRules": related, "playbookGaps": gaps["gaps"],
                               "suggestedFocus": (f"Look for {', '.join(focus)} rules: " if focus else "")
                               + gaps["suggestions"]}
    if notice:
        context["relatedRulesNotice"] = notice
    agent = meta.get("agent") or agent_from_path(meta.get("source_path") or ref)
    return {"metadata": {"path": ref, "agent": agent, "workspace": workspace,
                         "workspaceName": Path(workspace).name if workspace else None,
                         "messageCount": sum(1 for line in content.splitlines() if line.strip()),
                         "topicHints": hints},
            "context": context,
            "extractionFormat": {"schema": {"content": "string: the rule, specific and actionable",
                                            "category": "string: one of categories"},
                                 "categories": list(CATEGORY_KEYWORDS), "examples": EXAMPLE_RULES},
            "sessionContent": content}


def _related_rules(ctx: Ctx, content: str) -> tuple[list[dict[str, Any]], str | None]:
    """Rules similar in meaning to the session (cosine >= 0.3), when storage searches by meaning."""
    rules = {b["id"]: b for b in ctx.playbook.global_bullets()}
    if not rules:
        return [], None
    scores, on, reason = ctx.playbook.semantic_scores(content[:4000])
    if not on:
        return [], f"related rules need semantic search, which is off here ({reason or 'no embedder'})"
    ranked = sorted(((s, rules[i]) for i, s in scores.items() if i in rules and s >= 0.3), key=lambda x: -x[0])
    return [{"id": b["id"], "content": b["content"], "similarity": round(s, 4)} for s, b in ranked[:10]], None
