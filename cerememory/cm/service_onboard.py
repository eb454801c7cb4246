"""`cm onboard`, as typed operations: where onboarding stands, which past sessions to read for
rules (gaps first), one session with what an agent needs to extract rules from it, and the
progress record (onboarding.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import onboarding
from .app import Ctx, Result
from .bullets import agent_from_path
from .errors import CmError
from .onboard_text import EXAMPLE_RULES, EXTRACTION_PROMPT, recommendation
from .quality import CATEGORY_KEYWORDS, detect_categories, gap_analysis, gap_queries


def _status(ctx: Ctx) -> dict[str, Any]:
    state = onboarding.load_state()
    rules = len(ctx.playbook.active())
    messages = ctx.backend.journal_records()
    conversations = len(ctx.backend.sessions(365)) if messages else 0
    return {"status": {"cassAvailable": False, "historySource": "cerememory raw journal",
                       "totalConversations": conversations, "totalMessages": messages, "playbookRules": rules,
                       "needsOnboarding": rules < 20,
                       "onboardingRatio": round(100 * rules / conversations, 2) if conversations else 0,
                       "recommendation": recommendation(rules)},
            "progress": {"sessionsProcessed": state["stats"]["totalSessionsProcessed"],
                         "rulesExtracted": state["stats"]["totalRulesExtracted"], "startedAt": state["startedAt"],
                         "lastActivity": state["lastUpdatedAt"], "hasStarted": bool(state["startedAt"])}}


GUIDED = {"workflow": [
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
    {"step": 7, "action": "Repeat from step 2 until status says the playbook looks healthy", "command": None}],
    "tips": ["Rules say when they apply (before, when, unless)", "One rule, one practice",
             "Prefer rules a future agent could act on without the session"]}


def status(ctx: Ctx) -> Result:
    """Where onboarding stands, with the playbook's category gaps (`status`, `gaps`)."""
    data = _status(ctx)
    data["gapAnalysis"] = gap_analysis(ctx.playbook.active())
    return Result(data)


def sample(ctx: Ctx, *, days: int | None = None, limit: int | None = None, fill_gaps: bool = False,
           include_processed: bool = False) -> Result:
    """Journal sessions of the last `days` (90) worth reading for rules, `limit` (10) of them;
    `fill_gaps` ranks first those on the categories the playbook lacks."""
    state = _status(ctx)
    gaps = gap_analysis(ctx.playbook.active())
    processed = {p["path"] for p in onboarding.load_state()["processedSessions"]}
    sessions = ctx.backend.sessions(days or 90)
    rows = []
    for session_id, records in sessions.items():
        if session_id in processed and not include_processed:
            continue
        text = " ".join(_text(r) for r in records)
        cats = detect_categories(text)
        score = sum(3 if c in gaps["gaps"]["critical"] else 2 if c in gaps["gaps"]["underrepresented"] else 1
                    for c in cats)
        rows.append({"path": session_id, "agent": (records[0].get("metadata") or {}).get("agent", "unknown"),
                     "workspace": (records[0].get("metadata") or {}).get("workspace"),
                     "snippet": " ".join(text.split())[:300], "score": len(records), "gapScore": score,
                     "matchedCategories": cats})
    if fill_gaps:
        rows.sort(key=lambda r: -r["gapScore"])
    limit = limit or 10
    data = {**state, "step": "sample", "sessions": rows[:limit], "totalFound": len(sessions),
            "filtered": len(sessions) - len(rows), "sessionsRemaining": max(0, len(rows) - limit)}
    if fill_gaps:
        data["gapAnalysis"] = gaps
        data["gapQueries"] = gap_queries(gaps)
    return Result(data)


def read(ctx: Ctx, ref: str, *, template: bool = False) -> Result:
    """One session (a raw-journal session id or a file), with the extraction prompt; `template`
    adds its metadata, related rules, the playbook's gaps and the extraction format."""
    content, meta = _session_text(ctx, ref)
    if template:
        return Result(_read_template(ctx, ref, content, meta))
    return Result({**_status(ctx), "step": "read", "sessionPath": ref, "sessionContent": content,
                   "extractionPrompt": EXTRACTION_PROMPT})


def prompt(ctx: Ctx) -> Result:
    return Result({**_status(ctx), "step": "prompt", "extractionPrompt": EXTRACTION_PROMPT,
                   "categories": list(CATEGORY_KEYWORDS), "examples": EXAMPLE_RULES})


def guided(ctx: Ctx) -> Result:
    """The reference's `{status, step, extractionPrompt, categories, examples}`, with the
    workflow as numbered steps."""
    return Result({**_status(ctx), "step": "guided", "categories": list(CATEGORY_KEYWORDS),
                   "examples": EXAMPLE_RULES, "extractionPrompt": EXTRACTION_PROMPT, **GUIDED})


def mark_done(ref: str) -> Result:
    """Record a session as read with nothing to learn."""
    onboarding.record_onboarding(ref, 0, skipped=True)
    return Result({"message": "Session marked as processed", "sessionPath": ref, "rulesExtracted": 0, "skipped": True})


def reset() -> Result:
    onboarding.reset()
    return Result({"message": "Onboarding progress reset"})


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
    workspace = meta.get("workspace")
    gaps = gap_analysis(ctx.playbook.active())
    hints = detect_categories(content)
    related, notice = _related_rules(ctx, content)
    context: dict[str, Any] = {"relatedRules": related, "playbookGaps": gaps["gaps"],
                               "suggestedFocus": suggested_focus(gaps["gaps"], hints)}
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
                                 "categories": list(CATEGORY_KEYWORDS),
                                 "examples": [{"content": e["rule"], "category": e["category"]}
                                              for e in EXAMPLE_RULES]},
            "sessionContent": content}


def suggested_focus(gaps: dict[str, list[str]], hints: list[str]) -> str:
    """What to look for in a session, given the playbook's gaps and the session's topics (the
    reference's words)."""
    critical = [t for t in hints if t in gaps["critical"]]
    under = [t for t in hints if t in gaps["underrepresented"]]
    parts = []
    if critical:
        parts.append(f"This session may contain {', '.join(critical)} patterns - you have NO rules in these areas!")
    if under:
        parts.append(f"Look for {', '.join(under)} insights - these categories need more rules.")
    if not parts:
        parts.append(f"Focus on extracting {' and '.join(hints[:2])} patterns from this session." if hints
                     else "Look for debugging strategies, workflow insights, or tool-specific knowledge.")
    if gaps["critical"] and not critical:
        parts.append(f"Also note: you have NO rules for {', '.join(gaps['critical'][:3])}.")
    return " ".join(parts)


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
