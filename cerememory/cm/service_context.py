"""What the playbook says about a task, as typed operations: context (the rules, anti-patterns
and history for a task), history and similar, called by the CLI (cmd_playbook.py) and, for
`context`, the MCP server (mcp.py). Kept apart from service_playbook.py so that `cm context`,
run on every agent hook, imports no more than it needs."""

from __future__ import annotations

import os
from typing import Any

from .app import Ctx, Result
from .context import build_context, semantic_setting
from .errors import invalid, missing
from .scoring import effective_score, jaccard_sets, now_iso, tokenize


def context(ctx: Ctx, task: str, *, workspace: str | None = None, limit: int | None = None,
            history: int | None = None, days: int | None = None, min_score: float | None = None,
            no_history: bool = False, log_context: bool = False, session: str | None = None) -> Result:
    """Rules, anti-patterns and history relevant to `task` (`cm context`), with the trauma
    warning when the task matches one; logged when asked (or CASS_CONTEXT_LOG is set)."""
    if not task.strip():
        raise invalid("task must be a non-empty string.", hint='Example: cm context "fix the login bug" --json',
                      details={"field": "task", "received": task})
    task = task.strip()
    data = build_context(ctx.playbook, ctx.config, task, limit=limit, min_score=min_score, history=history,
                         days=days, workspace=workspace, no_history=no_history)
    from . import trauma

    hit = trauma.match(task, trauma.load(active_only=True))
    if hit:
        data["traumaWarning"] = {"pattern": hit["pattern"],
                                 "reason": (hit.get("trigger_event") or {}).get("human_message") or "registered trauma",
                                 "reference": (hit.get("trigger_event") or {}).get("session_path")}
        ctx.diag(f"HOT STOVE: the task matches trauma {hit['id']} ({hit['pattern']})")
    if log_context or os.environ.get("CASS_CONTEXT_LOG", "").lower() in ("1", "true"):
        ctx.backend.log("context", {"task": task, "ruleIds": [b["id"] for b in data["relevantBullets"]],
                                    "antiPatternIds": [b["id"] for b in data["antiPatterns"]],
                                    "workspace": workspace, "session": session,
                                    "timestamp": now_iso(), "source": "context"})
    return Result(data)


def history(ctx: Ctx, query: str, *, days: int | None = None, limit: int | None = None,
            workspace: str | None = None) -> Result:
    """Past-session snippets for `query` (30 days, 10 hits by default), under the privacy rule."""
    query = query.strip()
    if not query:
        raise missing("Query required")
    from . import privacy

    rules = privacy.policy(ctx.backend)
    hits = ctx.backend.history(query, days or 30, limit or 10, workspace=workspace, permits=rules.permits)
    data: dict[str, Any] = {"query": query, "days": days or 30, "historySnippets": hits}
    if ctx.backend.history_hidden:
        data["historyNotice"] = f"{ctx.backend.history_hidden} hits from other agents hidden ({rules.rule()})"
    return Result(data)


def similar_rules(ctx: Ctx, text: str) -> tuple[list[tuple[float, dict[str, Any]]], str, str | None]:
    """(similarity, rule) for every active rule, best first; `mode` semantic (cosine through
    recall) when storage searches by meaning and config allows it, else keyword (Jaccard on
    tokens), with a note saying why."""
    allowed = semantic_setting(ctx.config) is not False
    if allowed:
        ctx.backend.want_similarity(text)  # cosines with the listing, when it has not run yet
    rules = ctx.playbook.active()
    note: str | None
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


def _in_scope(bullet: dict[str, Any], scope: str) -> bool:
    return scope == "all" or (bullet.get("scope") or "global") == scope


def similar(ctx: Ctx, query: str, *, limit: int = 5, threshold: float = 0.7, scope: str = "all") -> Result:
    """Active rules at least `threshold` similar to `query` (scope global, workspace or all)."""
    query = query.strip()
    if not query:
        raise missing("Query required")
    if not 0 <= threshold <= 1:
        raise invalid("--threshold must be between 0 and 1")
    ranked, mode, note = similar_rules(ctx, query)
    results = [{"id": b["id"], "similarity": round(score, 4), "content": b["content"], "category": b["category"],
                "scope": b.get("scope", "global"), "effectiveScore": round(effective_score(b, ctx.config), 4),
                "preview": b["content"][:120]}
               for score, b in ranked if score >= threshold and _in_scope(b, scope)]
    data: dict[str, Any] = {"query": query, "mode": mode, "threshold": threshold, "results": results[:limit]}
    if note:
        data["semanticNotice"] = note
    return Result(data)
