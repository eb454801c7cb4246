"""`cm context`: rank the merged playbook against a task (reference §3.6) and add history from
Cerememory's raw journal and episodic store."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..wording import count
from .bullets import public
from .playbook import Playbook
from .scoring import (
    effective_score,
    extract_keywords,
    final_score,
    is_active,
    is_anti_pattern,
    keyword_relevance,
    now_ms,
    parse_ms,
)

_ISSUE_WORDS = ("error", "fix", "bug", "issue", "problem", "fail", "debug")


def last_helpful(bullet: dict[str, Any], now: float) -> str:
    """When a rule last helped, in the reference's words (`just now`, `3 hours ago`, `Never`),
    every unit rounded down as there (so 28 days is `0 months ago`, as the reference says)."""
    stamps = [ms for e in bullet.get("feedbackEvents") or [] if e.get("type") == "helpful"
              and (ms := parse_ms(e.get("timestamp"))) is not None]
    if not stamps:
        return "Never"
    seconds = int((now - max(stamps)) // 1000)
    if seconds < 60:
        return "just now"
    days = seconds // 86_400
    for amount, unit, limit in ((seconds // 60, "minute", 60), (seconds // 3600, "hour", 24), (days, "day", 7),
                                (days // 7, "week", 4), (days // 30, "month", 12), (days // 365, "year", None)):
        if limit is None or amount < limit:
            return f"{count(amount, unit)} ago"
    raise AssertionError("unreachable")


def _reasoning(bullet: dict[str, Any]) -> str:
    text = bullet.get("reasoning")
    if text:
        return text[:200]
    agent = (bullet.get("sourceAgents") or ["unknown"])[0]
    ms = parse_ms(bullet.get("createdAt"))
    if ms is None:
        return f"From {agent} session"
    from datetime import UTC, datetime

    day = datetime.fromtimestamp(ms / 1000, UTC)
    return f"From {agent} session on {day.month}/{day.day}/{day.year}"


def _realpath(path: str | None) -> str | None:
    return os.path.realpath(os.path.expanduser(path)) if path else None


def history_query(keywords: list[str]) -> str:
    words = [k for k in keywords if len(k) >= 2 and not k.isdigit() and not re.match(r"^(bd|br)-", k)
             and not any(c in k for c in "./\\")]
    return " ".join(words[:8])


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def suggested_queries(keywords: list[str], task: str) -> list[str]:
    """The reference's `suggestedCassQueries`, exactly (its quirks too: a task with "fix" in it
    gets `cass search 'fix fix' --days 60`)."""
    out: list[str] = []
    seen: set[str] = set()

    def add(query: str, days: int) -> None:
        query = query.strip()
        if query and len(out) < 5 and f"{query}-{days}" not in seen:
            seen.add(f"{query}-{days}")
            out.append(f"cass search {_quoted(query)} --days {days}")

    if len(keywords) >= 2:
        add(" ".join(keywords[:3]), 30)
    if keywords:
        add(keywords[0] + (" fix" if any(w in task.lower() for w in _ISSUE_WORDS) else " error"), 60)
        add(keywords[0], 90)
    if len(keywords) >= 2:
        add(" ".join(keywords[:2]), 60)
    if len(keywords) >= 3:
        add(keywords[2], 90)
    return out


def history_queries(keywords: list[str], task: str) -> list[str]:
    """Follow-up searches of our history (`cm history`), without the reference's `'fix fix'`
    nonsense (gap 18): `suggestedHistoryQueries`."""
    out: list[str] = []

    def add(query: str, days: int) -> None:
        words = list(dict.fromkeys(query.split()))
        line = f"cm history {_quoted(' '.join(words))} --days {days}"
        if words and line not in out:
            out.append(line)

    if not keywords:
        return out
    add(" ".join(keywords[:3]), 30)
    suffix = " fix" if any(w in task.lower() for w in _ISSUE_WORDS) else " error"
    if suffix.strip() != keywords[0]:
        add(keywords[0] + suffix, 60)
    add(keywords[0], 90)
    if len(keywords) >= 2:
        add(" ".join(keywords[:2]), 60)
    if len(keywords) >= 3:
        add(keywords[2], 90)
    return out[:5]


def _pattern_matches(pattern: str, text: str) -> bool:
    looks_regex = (pattern.startswith("/") and pattern.endswith("/") and len(pattern) > 2) or \
        bool(re.search(r"[\\^$.*+?()[\]{}|]", pattern))
    if not looks_regex:
        return pattern.lower() in text.lower()
    body = pattern[1:-1] if pattern.startswith("/") and pattern.endswith("/") else pattern
    if len(body) > 256 or re.search(r"\([^)]*[+*]\)[+*{]", body):
        return False
    try:
        return re.search(body, text, re.IGNORECASE) is not None
    except re.error:
        return pattern.lower() in text.lower()


def deprecated_warnings(patterns: list[dict[str, Any]], task: str, snippets: list[dict[str, Any]]) -> list[str]:
    out = []
    for entry in patterns:
        pattern = entry.get("pattern") or ""
        if not pattern:
            continue
        tail = (f" - use {entry['replacement']} instead" if entry.get("replacement") else "") + \
            (f" (Reason: {entry['reason']})" if entry.get("reason") else "")
        if _pattern_matches(pattern, task):
            out.append(f'Task matches deprecated pattern "{pattern}"{tail}')
        elif any(_pattern_matches(pattern, s.get("snippet", "")) for s in snippets):
            out.append(f"{pattern} was deprecated{tail}")
    return out


def semantic_setting(config: dict[str, Any]) -> bool | None:
    value = config.get("semanticSearchEnabled")
    return value if isinstance(value, bool) else None


def build_context(playbook: Playbook, config: dict[str, Any], task: str, *, limit: int | None = None,
                  min_score: float | None = None, history: int | None = None, days: int | None = None,
                  workspace: str | None = None, no_history: bool = False) -> dict[str, Any]:
    """The `data` of `cm context --json`."""
    now = now_ms()
    limit = limit or int(config.get("maxBulletsInContext", 50))
    min_relevance = float(config.get("minRelevanceScore", 0.1) if min_score is None else min_score)
    here = _realpath(workspace) or os.path.realpath(str(Path.cwd()))
    keywords = extract_keywords(task)
    query = history_query(keywords) if not no_history else ""
    history_days = days or int(config.get("historyDays", 7) or 7)
    history_limit = history or int(config.get("maxHistoryInContext", 10))
    if query:  # the journal search runs while the playbook is listed and scored
        playbook.backend.prefetch_history(query, history_days, history_limit)
    if semantic_setting(config) is not False and task.strip():
        playbook.backend.want_similarity(task)  # the cosines come with the listing
    bullets = [b for b in playbook.merged() if is_active(b)
               and (not b.get("workspace") or b.get("scope") != "workspace" or _realpath(b["workspace"]) == here)]

    out: dict[str, Any] = {"task": task}
    semantic: dict[str, float] = {}
    setting = semantic_setting(config)
    mode_info: dict[str, Any] = {}
    weight = float(config.get("semanticWeight", 0.6))
    if setting is False:
        mode_info = {"semanticMode": "keyword", "semanticNotice": "semanticSearchEnabled is false in config"}
    elif not bullets or not task.strip():
        mode_info = {"semanticMode": "keyword", "semanticNotice": "no rules to compare semantically"}
    else:
        try:
            by_bullet, on, reason = playbook.semantic_scores(task)
        except Exception as exc:  # a semantic failure degrades to keywords, visibly
            on, reason, by_bullet = False, f"{type(exc).__name__}: {exc}", {}
        if on:
            semantic = by_bullet
            mode_info = {"semanticMode": "semantic"}
        else:
            key = "semanticError" if setting is True else "semanticNotice"
            mode_info = {"semanticMode": "keyword",
                         key: f"semantic search unavailable: {reason or 'no embedder'}; using keyword scoring"}

    scored = []
    for bullet in bullets:
        relevance = keyword_relevance(bullet.get("content", ""), keywords, bullet.get("tags") or [])
        if bullet["id"] in semantic:
            relevance = relevance * (1 - weight) + max(0.0, semantic[bullet["id"]]) * 10 * weight
        effective = effective_score(bullet, config, now)
        scored.append((final_score(relevance, effective), relevance, effective, bullet))
    scored = [s for s in scored if s[1] >= min_relevance]
    scored.sort(key=lambda s: (-s[0], -s[1]))
    scored = scored[:limit]

    def shape(item: tuple[float, float, float, dict[str, Any]]) -> dict[str, Any]:
        final, relevance, effective, bullet = item
        return {**public(bullet), "relevanceScore": round(relevance, 4), "effectiveScore": round(effective, 4),
                "finalScore": round(final, 4), "lastHelpful": last_helpful(bullet, now),
                "reasoning": _reasoning(bullet)}

    out["relevantBullets"] = [shape(s) for s in scored if not is_anti_pattern(s[3])][:limit]
    out["antiPatterns"] = [shape(s) for s in scored if is_anti_pattern(s[3])][:limit]

    snippets: list[dict[str, Any]] = []
    if not no_history:
        if query:
            try:
                from . import privacy, remote

                rules = privacy.policy(playbook.backend)
                snippets = playbook.backend.history(query, history_days, history_limit, workspace=workspace,
                                                    permits=rules.permits)
                if playbook.backend.history_hidden:
                    out["historyNotice"] = (f"{playbook.backend.history_hidden} history hits from other agents "
                                            f"hidden ({rules.rule()}; cm privacy enable)")
                targets = remote.hosts(config)
                if targets:
                    far, failed = remote.search(targets, query, history_days, history_limit, rules.permits,
                                                insecure=playbook.backend.insecure)
                    snippets += far
                    if failed:
                        out.setdefault("degraded", {})["remoteCass"] = failed
            except Exception as exc:
                out["degraded"] = {"cass": {"available": False, "reason": "OTHER",
                                            "message": f"History search in the raw journal failed: {exc}",
                                            "suggestedFix": ["check the Cerememory server", "cm doctor"]}}
            if not snippets and "degraded" not in out and playbook.backend.journal_empty():
                out["degraded"] = {"cass": {
                    "available": False, "reason": "INDEX_MISSING",
                    "message": "The raw journal holds no records yet, so there is no history: playbook-only mode "
                               "until agent sessions are ingested.",
                    "suggestedFix": ["cm ingest", "cm doctor"]}}
    else:
        out["historyNotice"] = "history skipped (--no-history)"
    out["historySnippets"] = snippets
    out["deprecatedWarnings"] = deprecated_warnings(playbook.deprecated_patterns(), task, snippets)
    out["suggestedCassQueries"] = suggested_queries(keywords, task)
    out["suggestedHistoryQueries"] = history_queries(keywords, task)
    out.update(mode_info)
    return out
