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

from . import CM_VERSION
from .app import Ctx, Result
from .context import last_helpful
from .errors import CmError, invalid
from .home import DEFAULT_CONFIG, data_dir, global_dir, global_playbook_path, write_atomic
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
    now = time.time() * 1000
    for rank, (score, b) in enumerate(scored, 1):
        rows.append({"rank": rank, "id": b["id"], "score": round(score, 2), "content": b["content"],
                     "category": b["category"], "scope": b.get("scope", "global"), "maturity": b.get("maturity"),
                     "feedback": {"helpful": b.get("helpfulCount", 0), "harmful": b.get("harmfulCount", 0)},
                     "lastUsed": last_helpful(b, now)})
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
                said = (entry.get("keyLearnings") or entry.get("accomplishments") or ["Session recorded"])[0]
                diaries.append({"date": str(entry.get("timestamp"))[:10], "content": said})
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
                   "feedbackHistory": _newest_feedback(bullet, n_events),
                   "currentStatus": {"helpfulCount": helpful, "harmfulCount": harmful, "effectiveness": effectiveness}})


def _newest_feedback(bullet: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The last `count` feedback events, newest first, in the reference's keys."""
    events = sorted(bullet.get("feedbackEvents") or [], key=lambda e: parse_ms(e.get("timestamp")) or 0, reverse=True)
    keys = ("type", "timestamp", "sessionPath", "reason", "context")
    return [{k: e[k] for k in keys if e.get(k) is not None} for e in events[:count]]


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
    categories: dict[str, list[dict[str, Any]]] = {}  # in the order of their best rule, as the reference
    for b in rules:
        categories.setdefault(b["category"], []).append(b)
    per = per_category

    def counted(b: dict[str, Any]) -> str:
        return f" [{b.get('helpfulCount', 0)}+/{b.get('harmfulCount', 0)}-]" if show_counts else ""

    if fmt == "agents.md":  # the reference's layout, line for line
        dist = {"excellent": 0, "good": 0, "neutral": 0, "atRisk": 0}
        for s in scores.values():
            dist[score_bucket(s)] += 1
        counts = {m: sum(1 for b in active if b.get("maturity") == m) for m in ("proven", "established", "candidate")}
        lines = ["# AGENTS.md", "", "> Auto-generated playbook for AI coding assistants.",
                 f"> Last updated: {now_iso()[:10]}", "", "## Summary", "", f"- **Total rules**: {len(active)}",
                 f"- **Proven**: {counts['proven']} | **Established**: {counts['established']} | "
                 f"**Candidate**: {counts['candidate']}",
                 f"- **Score distribution**: {dist['excellent']} excellent, {dist['good']} good, "
                 f"{dist['neutral']} neutral, {dist['atRisk']} at-risk", "", "## Rules", ""]
        for category, items in categories.items():
            lines += [f"### {category}", ""]
            for b in items[:per] if per else items:
                mark = "" if ctx.no_emoji else EMOJI.get(b.get("maturity") or "", "⚪") + " "
                lines.append(f"- {mark}{b['content']}{counted(b)} _(score: {scores[b['id']]:.1f})_")
            lines.append("")
        if antis:
            avoid = "[!] " if ctx.no_emoji else "⚠️ "
            ranked = sorted(antis, key=lambda b: -scores[b["id"]])
            lines += ["## Anti-Patterns (AVOID)", "", *(f"- {avoid}{b['content']}{counted(b)}"
                                                         for b in (ranked[:per] if per else ranked)), ""]
        content = "\n".join(lines) + "\n"
    elif fmt == "claude.md":
        lines = ["<project_rules>", "<!-- Auto-generated rules from cass-memory playbook -->", ""]
        for category, items in categories.items():
            lines += [f"## {category}", "", *(f"- {b['content']}" for b in (items[:per] if per else items)), ""]
        if antis:
            lines += ["## IMPORTANT: Avoid These Patterns", "",
                      *(f"- DO NOT: {b['content']}" for b in (antis[:per] if per else antis)), ""]
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
    return Result({"format": fmt, "content": content}, human=content)


def quickstart() -> Result:
    """The agent's one-page guide, in the reference's shape (every key and type as there)."""
    return Result({
        "summary": "Procedural memory system for AI coding agents, stored in Cerememory",
        "oneCommand": 'cm context "<task>" --json',
        "expectations": {
            "degradedMode": "If the raw journal holds no sessions yet, historySnippets may be empty; "
                            "run cm doctor for next steps.",
            "privacy": "Cross-agent enrichment is opt-in and off by default; check cm privacy status.",
            "remoteHistory": "History comes from Cerememory's raw journal (cm ingest, or a shared server via "
                             "--server-url); historySnippets[].origin.kind says where a hit came from."},
        "whatItReturns": ["relevantBullets: Rules that may help", "antiPatterns: Pitfalls to avoid",
                          "historySnippets: Past solutions from the raw journal (see origin.kind)",
                          "suggestedCassQueries: Deeper searches"],
        "doNotDo": ["Run cm reflect manually (operators typically schedule it)", "Run cm mark (use inline comments)",
                    "Manually add rules", "Worry about learning pipeline"],
        "operatorNote": {"automation": "Schedule cm reflect --days 7 --json (cron/hook).",
                         "health": "Use cm doctor when agents report missing history or degraded mode."},
        "soloUser": {"description": "If you're both agent and operator without scheduled reflection",
                     "manualReflection": ["cm reflect --days 1 --json  # After significant work",
                                          "cm reflect --days 7 --json  # Weekly maintenance"],
                     "onboarding": ["cm onboard status --json   # Check progress",
                                    "cm onboard sample --json   # Find sessions to analyze",
                                    "cm onboard read <path> --json  # Read session for extraction"]},
        "inlineFeedbackFormat": {"helpful": "// [cass: helpful <id>] - reason",
                                 "harmful": "// [cass: harmful <id>] - reason"},
        "protocol": {"start": 'cm context "<task>" --json', "work": "Reference rule IDs when following them",
                     "feedback": "Leave inline comments when rules help/hurt",
                     "end": "Just finish. Learning happens automatically once reflection is scheduled."},
        "examples": ['cm context "implement JWT authentication" --json',
                     'cm context "fix memory leak in connection pool" --json',
                     'cm context "optimize database queries" --json']})


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


def _masked(key: str) -> str:
    return "***" if len(key) < 10 else f"{key[:3]}...{key[-4:]}"


def info(ctx: Ctx) -> Result:
    """`cm --info`: version, the files cm uses, the environment it reads and what it depends on,
    in the reference's shape (its `dependencies` name cass, Node and Bun; ours the raw journal,
    Python and Cerememory)."""
    import os
    import platform

    from ..version import __version__

    home = global_dir()
    try:
        rules: int | None = sum(1 for b in ctx.playbook.global_bullets() if not b.get("deprecated"))
        journal: dict[str, Any] = {"available": True, "version": "Cerememory raw journal",
                                   "records": ctx.backend.journal_records()}
    except CmError as exc:
        rules, journal = None, {"available": False, "error": exc.message}
    repo = ctx.playbook.repo_path
    try:
        repo_rules = len((ctx.playbook.repo() or {}).get("bullets") or []) if repo and repo.exists() else None
    except CmError:
        repo_rules = None
    environment: dict[str, Any] = {}
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        value = os.environ.get(name)
        environment[name] = {"set": True, "masked": _masked(value)} if value else {"set": False}
    cass_home = os.environ.get("CASS_HOME")
    environment["CASS_HOME"] = {"set": True, "value": cass_home} if cass_home else {"set": False}
    for name in ("CASS_MEMORY_VERBOSE", "CASS_MEMORY_NO_EMOJI"):
        environment[name] = {"set": bool(os.environ.get(name))}
    playbook = {"path": str(global_playbook_path(ctx.config)), "exists": rules is not None}
    if rules is not None:
        playbook["ruleCount"] = rules
    workspace: dict[str, Any] = {"path": str(repo) if repo else None, "exists": repo_rules is not None}
    if repo_rules is not None:
        workspace["ruleCount"] = repo_rules
    data = {"version": CM_VERSION,
            "configuration": {"globalConfig": {"path": str(home / "config.json"),
                                               "exists": (home / "config.json").exists()},
                              "globalPlaybook": playbook, "workspacePlaybook": workspace},
            "environment": environment,
            "dependencies": {"cass": journal, "python": {"version": platform.python_version()},
                             "cerememory": {"version": __version__, "storage": ctx.backend.mode}}}
    return Result(data, human=_info_text(data))


def _info_text(data: dict[str, Any]) -> str:
    conf, env, deps = data["configuration"], data["environment"], data["dependencies"]

    def count(entry: dict[str, Any]) -> str:
        return f"{entry['path']} ({entry['ruleCount']} rules)" if entry["exists"] else f"{entry['path']} (not found)"

    key = {name: f"set ({env[name]['masked']})" if env[name]["set"] else "not set"
           for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    journal = deps["cass"]
    history = f"raw journal ({journal['records']} records)" if journal["available"] else \
        f"not available ({journal['error']})"
    return "\n".join([
        f"cm v{data['version']}", "", "Configuration:",
        f"  Global config:    {conf['globalConfig']['path']} "
        f"({'exists' if conf['globalConfig']['exists'] else 'not found'})",
        f"  Global playbook:  {count(conf['globalPlaybook'])}",
        f"  Workspace playbook: {count(conf['workspacePlaybook']) if conf['workspacePlaybook']['path'] else 'none'}",
        "", "Environment:", f"  OPENAI_API_KEY:      {key['OPENAI_API_KEY']}",
        f"  ANTHROPIC_API_KEY:   {key['ANTHROPIC_API_KEY']}",
        f"  CASS_HOME:           {env['CASS_HOME'].get('value') or 'not set (using default)'}",
        "", "Dependencies:", f"  History:    {history}", f"  Python:     {deps['python']['version']}",
        f"  Cerememory: {deps['cerememory']['version']} ({deps['cerememory']['storage']})",
        "", "For health check: cm doctor"])


GLOBAL_STORAGE = "Global Storage (~/.cass-memory)"
BENIGN_SAMPLES = ["The tokenizer splits text into tokens", "Bearer of bad news", "This is a password-protected file",
                  "The API key concept is important"]


def doctor(ctx: Ctx, *, fix: bool = False, force: bool = False) -> Result:
    """The reference's checks, in its order and words where they mean the same here (history
    is Cerememory's raw journal, not cass), plus Cerememory's own; `overallStatus` healthy |
    degraded (a warn) | unhealthy (a fail), the reference's `recommendedActions`; `fix`
    applies the safe fixes (every fix with `force`)."""
    checks: list[dict[str, Any]] = []
    fixable: list[dict[str, Any]] = []
    home = global_dir()

    def check(category: str, item: str, status: str, message: str, **details: Any) -> None:
        entry: dict[str, Any] = {"category": category, "item": item, "status": status, "message": message}
        if details:
            entry["details"] = details
        checks.append(entry)

    def fixable_issue(issue_id: str, description: str, category: str, severity: str, safety: str = "safe") -> None:
        fixable.append({"id": issue_id, "description": description, "category": category, "severity": severity,
                        "safety": safety, "howToFix": "cm doctor --fix" + (" --force" if safety != "safe" else "")})

    stats: dict[str, Any] | None = None
    try:
        stats = ctx.backend.call("introspect.stats", {})
        records = int(stats.get("raw_journal_records", 0))
        check("Cass Integration", "cass", "pass" if records else "warn",
              f"History: Cerememory's raw journal ({records} records)" if records else
              "History: Cerememory's raw journal holds no sessions yet (cm ingest)", records=records)
    except CmError as exc:
        check("Cass Integration", "cass", "fail", f"History unavailable: {exc.message}")
    absent = [name for name in ("config.json", "blocked.log", "usage.jsonl") if not (home / name).exists()]
    if not home.is_dir():
        check(GLOBAL_STORAGE, "Structure", "warn", f"{home} not found")
        fixable_issue("missing-global-dir", "Create the cm home", GLOBAL_STORAGE, "warn")
    elif absent:
        check(GLOBAL_STORAGE, "Structure", "warn", f"Missing: {', '.join(absent)}")
    else:
        check(GLOBAL_STORAGE, "Structure", "pass", "All global files found")
    if home.is_dir() and not (home / "diary").is_dir():
        fixable_issue("missing-diary-dir", "Create diary/", GLOBAL_STORAGE, "warn")
    if home.is_dir() and not (home / "blocked.log").exists():
        fixable_issue("missing-blocked-log", "Create the empty blocked.log", GLOBAL_STORAGE, "warn")
    config_path = home / "config.json"
    try:
        assert ctx.config is not None
        if config_path.exists():
            check("Configuration", "config.json", "pass", "Global config.json is valid JSON", path=str(config_path))
        else:
            check("Configuration", "config.json", "warn", "No global config.json (defaults in use)",
                  path=str(config_path))
    except CmError as exc:
        check("Configuration", "config.json", "fail", exc.message, path=str(config_path))
        fixable_issue("reset-config", "Reset config.json to defaults", "Configuration", "fail", "cautious")
    try:
        _, meta = ctx.backend.playbook_meta()
        path = str(global_playbook_path(ctx.config))
        if meta is None:
            check("Playbook", "Global playbook.yaml", "warn", "Global playbook not initialised (cm init)", path=path)
            fixable_issue("missing-playbook", "Create the global playbook record", "Playbook", "warn")
        else:
            version = meta.get("schema_version", 2)
            check("Playbook", "Global playbook.yaml", "pass", f"Schema version {version}", path=path,
                  schemaVersion=version, rules=len(ctx.playbook.global_bullets()))
    except CmError as exc:
        check("Playbook", "Global playbook.yaml", "fail", exc.message)
    llm = _llm_status()
    # optional: without an LLM every command works (reflect is deterministic), so its absence is
    # no reason to call the installation degraded; the recommended actions still offer one
    check("LLM Configuration", "Provider", "pass", llm["message"], configured=llm["configured"])
    _repo_checks(ctx, check, fixable_issue)
    _sanitization_check(ctx, check)
    from . import trauma  # here, not at import: stats, top and why need none of it

    traumas = len(trauma.load())
    check("Trauma System", "Database", "pass", f"Loaded {traumas} trauma patterns", count=traumas)
    _guard_check(ctx, check)
    if stats is not None:
        check("Cerememory", "storage", "pass", f"{ctx.backend.mode} storage reachable", mode=ctx.backend.mode,
              notice=ctx.backend.notice)
        check("Cerememory", "semantic search", "pass" if stats.get("semantic_search") else "warn",
              "on" if stats.get("semantic_search") else f"off: {stats.get('semantic_off_reason')}")
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
                            "recommendedActions": recommended_actions(overall, checks, fixable, fix)}
    if fix:
        data["fixResults"] = fix_results
    return Result(data)


def _repo_checks(ctx: Ctx, check: Callable[..., None], fixable_issue: Callable[..., None]) -> None:
    category = "Repo .cass/ Structure"
    rdir = ctx.playbook.repo_dir
    if rdir is None:
        check(category, "Availability", "warn", "Not in a git repository. Repo-level memory not available.")
        return
    if not rdir.is_dir():
        check(category, "Structure", "warn", f"No .cass/ directory in the repository ({rdir})")
        fixable_issue("missing-repo-cass-dir", "Create .cass/ in the repository", category, "warn")
        return
    try:
        repo = ctx.playbook.repo()
    except CmError as exc:
        check(category, "Repo .cass/playbook.yaml", "fail", exc.message)
        return
    if repo is None:
        check(category, "Structure", "pass", f".cass/ present ({rdir}); no playbook.yaml yet")
    else:
        version = repo.get("schema_version", 2)
        check(category, "Repo .cass/playbook.yaml", "pass", f"Schema version {version}",
              path=str(ctx.playbook.repo_path), schemaVersion=version)


def _sanitization_check(ctx: Ctx, check: Callable[..., None]) -> None:
    """The reference's breadth check: secret patterns that redact ordinary sentences."""
    from ..security.sanitize import sanitize

    category, item = "Sanitization Pattern Health", "Pattern Health"
    rules = ctx.config.get("sanitization") or {}
    if rules.get("enabled", True) is False:
        check(category, item, "warn", "Sanitization disabled; breadth checks skipped")
        return
    extra = tuple(rules.get("extraPatterns") or ())
    builtin = [s for s in BENIGN_SAMPLES if sanitize(s)[1]]
    try:
        extras = [s for s in BENIGN_SAMPLES if sanitize(s, extra)[1] > sanitize(s)[1]]
    except (ValueError, re.error) as exc:
        check(category, item, "warn", f"An extra pattern does not compile: {exc}")
        return
    hits = len(builtin) + len(extras)
    tested = len(BENIGN_SAMPLES) * (1 + len(extra))
    rate = hits / tested if tested else 0
    check(category, item, "warn" if hits else "pass",
          f"Potential broad patterns detected ({hits} benign hits, ~{rate * 100:.1f}% est. FP)" if hits
          else "All patterns passed benign breadth checks",
          benignSamples=BENIGN_SAMPLES, builtInMatches=builtin, extraMatches=extras, falsePositiveRate=rate)


def _guard_check(ctx: Ctx, check: Callable[..., None]) -> None:
    """The Claude Code safety guard, when the project uses Claude Code (`.claude/`): installed,
    and parseable as Python (a hook that does not parse blocks nothing)."""
    if not (ctx.cwd / ".claude").exists():
        return
    script = ctx.cwd / ".claude" / "hooks" / "trauma_guard.py"
    if not script.exists():
        check("Trauma System", "Safety Guard", "warn",
              "Guard NOT installed in .claude/hooks (run 'cm guard --install')")
        return
    import ast

    try:
        ast.parse(script.read_text(encoding="utf-8"))
        check("Trauma System", "Safety Guard", "pass", "Guard installed in .claude/hooks and parses as valid Python")
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        check("Trauma System", "Safety Guard", "fail", f"Guard is installed but does NOT parse as valid Python — "
                                                      f"{exc}. Reinstall with 'cm guard --install'.")


def recommended_actions(overall: str, checks: list[dict[str, Any]], fixable: list[dict[str, Any]],
                        fixing: bool) -> list[dict[str, Any]]:
    """The reference's next steps for what the checks found, most urgent first."""
    status = {(c["category"], c["item"]): c["status"] for c in checks}
    actions: list[dict[str, Any]] = []
    history = status.get(("Cass Integration", "cass"))
    if history in ("warn", "fail"):
        actions.append({"label": "Ingest agent sessions (enables history)", "command": "cm ingest",
                        "reason": "History snippets and validation evidence come from Cerememory's raw journal.",
                        "urgency": "high" if history == "fail" else "medium"})
    if status.get((GLOBAL_STORAGE, "Structure")) == "warn":
        actions.append({"label": "Initialize global storage", "command": "cm init",
                        "reason": "Global config/playbook/diary is required for normal operation.", "urgency": "high"})
    llm = next((c for c in checks if (c["category"], c["item"]) == ("LLM Configuration", "Provider")), {})
    if llm.get("status") == "warn" or (llm.get("details") or {}).get("configured") is False:
        actions.append({"label": "Configure an LLM (optional)",
                        "command": 'export CEREMEMORY_LLM__PROVIDER=anthropic CEREMEMORY_LLM__API_KEY="..."',
                        "reason": "Enables AI-powered reflection. The CLI works fully without it.", "urgency": "low"})
    if status.get(("Repo .cass/ Structure", "Structure")) == "warn":
        actions.append({"label": "Initialize repo-level memory (optional)", "command": "cm init --repo",
                        "reason": "Repo-level playbook/blocked list enables shared project memory.", "urgency": "low"})
    if fixable and not fixing:
        actions.append({"label": "Apply safe auto-fixes", "command": "cm doctor --fix --no-interactive",
                        "reason": "Fixes missing files/dirs and other safe issues.",
                        "urgency": "low" if overall == "healthy" else "medium"})
    order = {"high": 0, "medium": 1, "low": 2}
    return sorted(actions, key=lambda a: order[a["urgency"]])


def _llm_status() -> dict[str, Any]:
    try:
        from ..config import load_config
        from ..llm.settings import LLMSettings  # noqa: F401

        config = load_config(None, {"data_dir": str(data_dir())})
        provider = config.get("llm.provider") if hasattr(config, "get") else None
    except Exception as exc:  # the LLM layer is optional
        return {"configured": False, "message": f"LLM layer unavailable: {exc}"}
    if not provider or provider == "none":
        return {"configured": False, "message": "No LLM configured (optional: llm.provider = none); reflect is "
                                                "deterministic"}
    return {"configured": True, "message": f"LLM provider {provider}"}


# ---------------------------------------------------------------- privacy


def privacy_status(ctx: Ctx, days: int = 365) -> Result:
    """The cross-agent settings and journal sessions per agent over `days` (the reference's
    `cass` block: our history is the raw journal), then the rule they make, the current agent
    and the recent changes."""
    from . import privacy

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
    from . import privacy

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
