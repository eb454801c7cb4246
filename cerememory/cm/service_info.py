"""What the playbook and cm's setup look like, as typed operations: stats, top, stale, why,
project, quickstart, doctor and privacy, called by the CLI (cmd_info.py) and, for `stats`, the
MCP server (mcp.py)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import CM_VERSION, privacy, trauma
from .app import Ctx, Result
from .errors import CmError, invalid
from .home import DEFAULT_CONFIG, data_dir, global_dir, write_atomic
from .playbook import dump_yaml, empty_playbook, export_playbook
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
    stamped = [(ms, e) for e in bullet.get("feedbackEvents") or [] if (ms := parse_ms(e.get("timestamp"))) is not None]
    if stamped:
        at, last = max(stamped, key=lambda pair: pair[0])
        return (now - at) / 86_400_000, last
    created = parse_ms(bullet.get("createdAt")) or now
    return (now - created) / 86_400_000, None


def stats(ctx: Ctx) -> Result:
    """Counts by scope, state and kind, the score distribution, the best rules and likely merges."""
    now = time.time() * 1000
    bullets = ctx.playbook.merged()
    active = [b for b in bullets if is_active(b)]
    by: dict[str, dict[str, int]] = {"byScope": {}, "byState": {}, "byKind": {}}
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


def top(ctx: Ctx, count: int | None = None, *, scope: str = "all", category: str | None = None) -> Result:
    """The `count` (10) best active rules by effective score, of one scope and category."""
    count = count if count is not None else 10
    if count < 1:
        raise invalid("count must be at least 1")
    active = [b for b in ctx.playbook.active() if (scope == "all" or b.get("scope", "global") == scope)
              and (not category or b.get("category") == category)]
    scored = sorted(((effective_score(b, ctx.config), b) for b in active), key=lambda s: -s[0])[:count]
    rows = []
    for rank, (score, b) in enumerate(scored, 1):
        _, last = _days_since(b, time.time() * 1000)
        rows.append({"rank": rank, "id": b["id"], "score": round(score, 2), "content": b["content"],
                     "category": b["category"], "scope": b.get("scope", "global"), "maturity": b.get("maturity"),
                     "feedback": {"helpful": b.get("helpfulCount", 0), "harmful": b.get("harmfulCount", 0)},
                     "lastUsed": last["timestamp"] if last else None})
    return Result({"count": len(rows), "filters": {"scope": scope, "category": category}, "bullets": rows})


def stale(ctx: Ctx, days: int = 90, *, scope: str = "all") -> Result:
    """Active rules without feedback for `days` or more, oldest first, each with advice."""
    if days < 0:
        raise invalid("--days must be ≥ 0")
    now = time.time() * 1000
    active = [b for b in ctx.playbook.active() if scope == "all" or b.get("scope", "global") == scope]
    rows = []
    for b in active:
        idle, last = _days_since(b, now)
        if idle < days:
            continue
        score = effective_score(b, ctx.config, now)
        if score < -2:
            rec = f"Consider forgetting: cm forget {b['id']} --reason \"stale and harmful\""
        elif idle > 180 and b.get("maturity") == "candidate":
            rec = f"Never validated in 180+ days: cm playbook remove {b['id']}"
        elif idle > 120 and score < 1:
            rec = "Review: old with a low score"
        elif score > 5:
            rec = "Good score despite being stale: re-validate with cm mark --helpful when it helps"
        else:
            rec = "Review whether this rule still applies"
        rows.append({"id": b["id"], "daysSinceLastFeedback": int(idle), "content": b["content"],
                     "category": b["category"], "scope": b.get("scope", "global"), "score": round(score, 2),
                     "maturity": b.get("maturity"),
                     "lastFeedback": {"action": last.get("type") if last else None,
                                      "timestamp": last.get("timestamp") if last else None},
                     "recommendation": rec})
    rows.sort(key=lambda r: -r["daysSinceLastFeedback"])
    return Result({"threshold": days, "count": len(rows), "totalActive": len(active),
                   "filters": {"scope": scope}, "bullets": rows})


def why(ctx: Ctx, bullet_id: str, *, verbose: bool = False) -> Result:
    """Where a rule came from (by id, id prefix or id part): reasoning, evidence, source
    sessions, nearby diary entries and its feedback history."""
    bullets = ctx.playbook.merged(apply_blocked=False)
    exact = [b for b in bullets if b["id"] == bullet_id]
    matches = exact or [b for b in bullets if b["id"].startswith(bullet_id)] or \
        [b for b in bullets if bullet_id in b["id"]]
    if not matches:
        ctx.playbook.require(bullet_id)
    if len(matches) > 1:
        raise invalid(f"Ambiguous bullet id {bullet_id!r}", details={"matches": [b["id"] for b in matches]})
    bullet = matches[0]
    now = time.time() * 1000
    score = effective_score(bullet, ctx.config, now)
    created = parse_ms(bullet.get("createdAt")) or now
    reasoning = bullet.get("reasoning")
    evidence = re.findall(r'"([^"]+)"', reasoning or "")
    n_sessions, n_events = (10, 20) if verbose else (5, 8)
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


def project(ctx: Ctx, fmt: str = "agents.md", *, output: str | None = None, force: bool = False,
            per_category: int | None = None, show_counts: bool = True) -> Result:
    """The playbook as a project file (agents.md, claude.md, raw, json or yaml): the content,
    or written to `output` (an existing file only with `force`)."""
    asked = fmt
    fmt = {"agents": "agents.md", "claude": "claude.md"}.get(fmt, fmt)
    if fmt not in ("agents.md", "claude.md", "raw", "json", "yaml"):
        raise invalid(f"Unknown format {asked!r}: use agents.md, claude.md, raw, json or yaml")
    active = ctx.playbook.active()
    scores = {b["id"]: effective_score(b, ctx.config) for b in active}
    rules = sorted((b for b in active if not is_anti_pattern(b)), key=lambda b: -scores[b["id"]])
    antis = [b for b in active if is_anti_pattern(b)]
    categories: dict[str, list[dict[str, Any]]] = {}
    for b in rules:
        categories.setdefault(b["category"], []).append(b)
    per = per_category
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
                mark = "" if ctx.no_emoji else EMOJI.get(b.get("maturity") or "", "") + " "
                counts_text = f" [{b.get('helpfulCount', 0)}+/{b.get('harmfulCount', 0)}-]" if show_counts else ""
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
        content = dump_yaml(export_playbook(ctx.playbook, False))
    else:
        content = json.dumps({"bullets": active}, indent=2)
    if output:
        path = Path(output)
        if path.exists() and not force:
            raise CmError("ALREADY_EXISTS", f"{path} exists; use --force to overwrite")
        write_atomic(path, content)
        return Result({"outputPath": str(path), "format": fmt, "bytesWritten": len(content.encode())})
    return Result({"format": fmt, "content": content}, human=content.rstrip("\n"))


def quickstart() -> Result:
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
    data = empty_playbook()
    data.pop("bullets")
    ctx.backend.save_playbook_meta(data)


def _reset_config(ctx: Ctx, home: Path) -> None:
    write_atomic(home / "config.json", json.dumps(DEFAULT_CONFIG, indent=2) + "\n")


def _create_repo_dir(ctx: Ctx, home: Path) -> None:
    assert ctx.playbook.repo_dir is not None
    ctx.playbook.repo_dir.mkdir(parents=True, exist_ok=True)


_FIXES: dict[str, Callable[[Ctx, Path], Any]] = {
    "missing-global-dir": lambda ctx, home: home.mkdir(parents=True, exist_ok=True),
    "missing-diary-dir": lambda ctx, home: (home / "diary").mkdir(parents=True, exist_ok=True),
    "missing-blocked-log": lambda ctx, home: (home / "blocked.log").touch(),
    "missing-repo-cass-dir": _create_repo_dir,
    "missing-playbook": _create_playbook,
    "reset-config": _reset_config,
}


def doctor(ctx: Ctx, *, fix: bool = False, force: bool = False) -> Result:
    """Health checks of the home, config, storage, playbooks, trauma guard and LLM; `fix`
    applies the safe fixes (every fix with `force`)."""
    checks: list[dict[str, Any]] = []
    fixable: list[dict[str, Any]] = []
    home = global_dir()

    def check(category: str, item: str, status: str, message: str, **details: Any) -> None:
        entry: dict[str, Any] = {"category": category, "item": item, "status": status, "message": message}
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
    if fix:
        for issue in fixable:
            if issue["safety"] != "safe" and not force:
                continue
            try:
                _FIXES[issue["id"]](ctx, home)
                fix_results.append({"id": issue["id"], "success": True, "message": "fixed"})
            except (OSError, CmError) as exc:
                fix_results.append({"id": issue["id"], "success": False, "message": str(exc)})
    statuses = {c["status"] for c in checks}
    overall = "unhealthy" if "fail" in statuses else "degraded" if "warn" in statuses else "healthy"
    data: dict[str, Any] = {"version": CM_VERSION, "generatedAt": now_iso(), "overallStatus": overall,
                            "checks": checks, "fixableIssues": fixable,
                            "recommendedActions": [{"label": f["description"], "command": "cm doctor --fix",
                                                    "reason": f["id"], "urgency": "high" if f["severity"] == "fail"
                                                    else "medium"} for f in fixable]}
    if fix:
        data["fixResults"] = fix_results
    return Result(data)


def _llm_status() -> dict[str, Any]:
    try:
        from ..config import load_config
        from ..llm.settings import LLMSettings  # noqa: F401

        config = load_config(None, {"data_dir": str(data_dir())})
        provider = config.get("llm.provider") if hasattr(config, "get") else None
    except Exception as exc:  # the LLM layer is optional
        return {"configured": False, "message": f"LLM layer unavailable: {exc}"}
    if not provider or provider == "none":
        return {"configured": False, "message": "No LLM configured (llm.provider = none); reflect is deterministic"}
    return {"configured": True, "message": f"LLM provider {provider}"}


# ---------------------------------------------------------------- privacy


def privacy_status(ctx: Ctx, days: int = 365) -> Result:
    """The cross-agent settings and journal sessions per agent over `days` (the reference's
    `cass` block: our history is the raw journal), then the rule they make, the current agent
    and the recent changes."""
    rules = privacy.policy(ctx.backend)
    agent, found_by = privacy.current_agent()
    counts = _session_counts(ctx, days)
    return Result({"crossAgent": rules.state, "cass": {"available": counts is not None, "timelineDays": days,
                                                       "sessionCountsByAgent": counts},
                   "notes": {"enable": "cm privacy enable [agents...]", "disable": "cm privacy disable",
                             "allow": "cm privacy allow <agent>", "deny": "cm privacy deny <agent>"},
                   "currentAgent": {"name": agent, "from": found_by}, "rule": rules.rule(),
                   "ingested": {a: rules.permits(a) for a in _agents()},
                   "changes": privacy.changes(ctx.backend)})


def change_privacy(ctx: Ctx, action: str, agents: list[str], *, never: bool = False) -> Result:
    """One audited change of the cross-agent settings (enable, disable, allow, deny;
    cerememory/cm/privacy.py); `enable` with no names allow-lists the agents the journal has
    sessions of in the last year."""
    if action in ("allow", "deny") and not agents:
        raise CmError("MISSING_REQUIRED", f"privacy {action} requires <agent>",
                      hint=f"Example: cm privacy {action} cursor --json", details={"missing": "agent"})
    discovered = list(_session_counts(ctx, 365) or {}) if action == "enable" and not agents else None
    state = privacy.change(ctx.backend, action, list(agents), discovered, never=never)
    return Result({"crossAgent": state})


def _agents() -> tuple[str, ...]:
    from ..ingest.agents import AGENTS

    return AGENTS


def _session_counts(ctx: Ctx, days: int) -> dict[str, int] | None:
    """Journal sessions per agent (lower case, as the reference counted `cass timeline`) over
    `days`; None when the journal cannot be read."""
    try:
        sessions = ctx.backend.sessions(days)
    except CmError:
        return None
    counts: dict[str, set[str]] = {}
    for session_id, records in sessions.items():
        agents = [(r.get("metadata") or {}).get("agent") for r in records]
        agent = str(next((a for a in agents if a), "unknown")).strip().lower()
        counts.setdefault(agent, set()).add(session_id)
    return {agent: len(ids) for agent, ids in sorted(counts.items())}
