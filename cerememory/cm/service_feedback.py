"""Changing rules from evidence, as typed operations: mark, undo, forget, outcomes, and the LLM
spend report, called by the CLI (cmd_feedback.py) and, for `mark` and `record_outcome`, the
MCP server (mcp.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from .app import Ctx, Result
from .bullets import deprecate, new_bullet
from .errors import invalid, missing
from .feedback import HARMFUL_REASONS, add_event, apply_maturity, apply_outcome
from .home import append_jsonl, data_dir, global_dir, read_jsonl, write_atomic
from .locks import locked
from .outcome import STATUSES, detect_sentiment
from .scoring import effective_score, now_iso


def mark(ctx: Ctx, bullet_id: str, kind: Literal["helpful", "harmful"], *, reason: str | None = None,
         session: str | None = None) -> Result:
    """One helpful or harmful event on a rule; a harmful `reason` outside HARMFUL_REASONS is kept
    as the event's context (reason `other`)."""
    bullet = ctx.playbook.require(bullet_id)
    context = None
    cause = None
    if kind == "harmful":
        cause = reason if reason in HARMFUL_REASONS else "other"
        context = reason if reason and reason not in HARMFUL_REASONS else None
    else:
        context = reason
    add_event(bullet, ctx.config, kind, session=session, reason=cause, context=context)
    ctx.playbook.save(bullet)
    return Result({"bulletId": bullet["id"], "type": kind, "newState": bullet["maturity"],
                   "effectiveScore": round(effective_score(bullet, ctx.config), 4)})


def _blocked_path(ctx: Ctx, bullet_id: str) -> Path:
    if ctx.playbook.layer_of(bullet_id) == "repo" and ctx.playbook.repo_dir is not None:
        return ctx.playbook.repo_dir / "blocked.log"
    return global_dir() / "blocked.log"


def _unblock(ctx: Ctx, bullet_id: str) -> None:
    for path in ctx.playbook.blocked_paths():
        if not path.exists():
            continue
        with locked(path):
            lines = path.read_text(encoding="utf-8").splitlines()
            kept = []
            for line in lines:
                try:
                    if json.loads(line).get("id") == bullet_id:
                        continue
                except (ValueError, AttributeError):
                    pass
                kept.append(line)
            if len(kept) != len(lines):
                write_atomic(path, "\n".join(kept) + ("\n" if kept else ""))


def undo(ctx: Ctx, bullet_id: str, *, feedback: bool = False, hard: bool = False, confirmed: bool = False,
         dry_run: bool = False) -> Result:
    """Restore a deprecated rule as an active candidate (and unblock it), or take back its last
    feedback event (`feedback`), or delete it for good (`hard`, `confirmed`)."""
    bullet = ctx.playbook.require(bullet_id)
    before = {k: bullet.get(k) for k in ("deprecated", "state", "maturity", "helpfulCount", "harmfulCount")}
    layer = ctx.playbook.layer_of(bullet["id"])
    path = str(ctx.playbook.repo_path) if layer == "repo" else "cerememory:procedural"
    if hard:
        if not confirmed:
            raise missing("--hard deletes permanently; confirm with --yes")
        if not dry_run:
            ctx.playbook.delete(bullet["id"])
        return Result({"bulletId": bullet["id"], "action": "hard-delete", "path": path,
                       "preview": bullet["content"][:100], "before": before, "after": None,
                       "message": "Dry run: would delete" if dry_run else "Deleted permanently"})
    if feedback:
        events = bullet.get("feedbackEvents") or []
        if not events:
            raise invalid(f"Bullet {bullet['id']} has no feedback to undo")
        target = dict(bullet, feedbackEvents=list(events[:-1]))
        last = events[-1]
        counter = "helpfulCount" if last.get("type") == "helpful" else "harmfulCount"
        target[counter] = max(0, int(target.get(counter) or 0) - 1)
        auto = (target.get("deprecationReason") or "").startswith("Automatically deprecated")
        if auto:
            target.update(deprecated=False, state="active", maturity="candidate")
            for key in ("deprecatedAt", "deprecationReason"):
                target.pop(key, None)
        apply_maturity(target, ctx.config)
        action, message = "undo-feedback", f"Removed the last {last.get('type')} event"
    else:
        target = dict(bullet, deprecated=False, state="active", maturity="candidate")
        for key in ("deprecatedAt", "deprecationReason"):
            target.pop(key, None)
        action, message = "un-deprecate", "Rule restored as an active candidate"
    after = {k: target.get(k) for k in before}
    if not dry_run:
        bullet.clear()
        bullet.update(target, updatedAt=now_iso())
        ctx.playbook.save(bullet)
        if action == "un-deprecate":
            _unblock(ctx, bullet["id"])
    return Result({"bulletId": bullet["id"], "action": action, "path": path, "before": before, "after": after,
                   "message": message})


def forget(ctx: Ctx, bullet_id: str, reason: str | None, *, invert: bool = False) -> Result:
    """Block a rule's content and deprecate it; `invert` adds the anti-pattern in its place."""
    if not reason:
        raise missing("--reason is required", recovery=['cm forget <id> --reason "why"'])
    bullet = ctx.playbook.require(bullet_id)
    layer = ctx.playbook.layer_of(bullet["id"])
    append_jsonl(_blocked_path(ctx, bullet["id"]), {"id": bullet["id"], "content": bullet["content"],
                                                    "reason": reason, "forgottenAt": now_iso()})
    data: dict[str, Any] = {"bulletId": bullet["id"], "action": "forgotten", "inverted": bool(invert)}
    anti_id = None
    if invert:
        anti = new_bullet(f"AVOID: {bullet['content']}. {reason}", bullet.get("category", "general"),
                          type="anti-pattern", isNegative=True, kind="anti_pattern", state="active",
                          tags=list(dict.fromkeys([*(bullet.get("tags") or []), "inverted"])),
                          sourceSessions=["forget-command"])
        ctx.playbook.add([anti], layer)
        anti_id = data["antiPatternId"] = anti["id"]
    deprecate(bullet, reason, anti_id)
    ctx.playbook.save(bullet)
    return Result(data)


# ---------------------------------------------------------------- outcomes


def record_outcome(ctx: Ctx, status: str, rules: Sequence[str], *, session: str | None = None,
                   duration: int | None = None, errors: int | None = None, retries: bool = False,
                   sentiment: str | None = None, text: str | None = None) -> Result:
    """Log a session outcome and apply its implicit feedback to the rules it used (`rules`: ids,
    each entry possibly a comma-separated list)."""
    if status not in STATUSES:
        raise invalid(f"Invalid outcome {status!r}: use one of {', '.join(STATUSES)}")
    used = [r.strip() for entry in rules for r in entry.split(",") if r.strip()]
    if not used:
        raise missing("Rule ids required (comma-separated)", recovery=["cm outcome success b-abc123,b-def456"])
    if sentiment and sentiment not in ("positive", "negative", "neutral"):
        raise invalid("--sentiment must be positive, negative or neutral")
    sentiment = sentiment or (detect_sentiment(text) if text else None)
    outcome = {"sessionId": session or "cli-manual", "outcome": status, "rulesUsed": used,
               "notes": text, "durationSec": duration, "errorCount": errors,
               "hadRetries": bool(retries) or None, "sentiment": sentiment, "recordedAt": now_iso(),
               "path": "cerememory:journal/cm:outcomes"}
    outcome = {k: v for k, v in outcome.items() if v is not None}
    ctx.backend.log("outcome", outcome)
    result = apply_outcome(ctx.playbook, outcome)
    if result["signal"] is None:
        return Result({"feedbackRecorded": False, "rulesProvided": used}, effect=False,
                      reason="No implicit signal strong enough to record feedback")
    return Result({"applied": result["applied"], "missing": result["missing"], "type": result["signal"]["type"],
                   "weight": result["signal"]["weight"], "sentiment": sentiment or "neutral"})


def apply_outcomes(ctx: Ctx, *, session: str | None = None, limit: int | None = None) -> Result:
    """Apply the logged outcomes (the last `limit`, 50 by default; of one session when given);
    an outcome without rules takes those its session's last context log returned."""
    outcomes = ctx.backend.read_log("outcome")
    if session:
        outcomes = [o for o in outcomes if o.get("sessionId") == session]
    outcomes = outcomes[-(limit or 50):]
    contexts = ctx.backend.read_log("context") if any(not o.get("rulesUsed") for o in outcomes) else []
    applied = 0
    absent: list[str] = []
    for outcome in outcomes:
        if not outcome.get("rulesUsed"):
            logged = [c for c in contexts if c.get("session") == outcome.get("sessionId")]
            if not logged:
                continue
            outcome = {**outcome, "rulesUsed": logged[-1].get("ruleIds") or [], "autoGraded": True}
        result = apply_outcome(ctx.playbook, outcome)
        applied += result["applied"]
        absent += [m for m in result["missing"] if m not in absent]
    data: dict[str, Any] = {"applied": applied, "missing": absent}
    data.update({"session": session} if session else {"totalOutcomes": len(outcomes)})
    return Result(data)


def usage(ctx: Ctx) -> Result:
    """LLM spend: cm itself spends nothing without an LLM; Cerememory's LLM budget file is reported."""
    budget = data_dir() / "llm_budget.json"
    used: dict[str, Any] = {}
    if budget.exists():
        try:
            used = json.loads(budget.read_text())
        except ValueError:
            used = {}
    events = read_jsonl(global_dir() / "usage.jsonl")
    limits = ctx.config.get("budget") or {}
    return Result({"today": float(used.get("cost_usd", 0) or 0), "month": None, "total": None,
                   "dailyLimit": limits.get("dailyLimit", 1.0), "monthlyLimit": limits.get("monthlyLimit", 20.0),
                   "llmBudget": used or None, "events": len(events)})
