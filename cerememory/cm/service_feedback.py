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
from .feedback import HARMFUL_REASONS, add_event, apply_outcome
from .home import append_jsonl, data_dir, global_dir, read_jsonl, write_atomic
from .locks import locked
from .outcome import STATUSES, detect_sentiment
from .scoring import calculate_maturity, effective_score, now_iso


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
    """Restore a deprecated rule (and unblock it), or take back its last feedback event
    (`feedback`), or delete it for good (`hard`, `confirmed`), with the reference's shapes;
    `dry_run` returns the reference's `plan`. A rule that is not deprecated is refused unless
    `feedback` or `hard` says what to undo."""
    bullet = ctx.playbook.require(bullet_id)
    bid = bullet["id"]
    events = bullet.get("feedbackEvents") or []
    last = events[-1] if events else None
    if feedback and not hard and last is None:
        raise invalid(f"No feedback events to undo for bullet {bid}",
                      details={"bulletId": bid, "action": "undo-feedback"})
    if not feedback and not hard and not bullet.get("deprecated"):
        raise invalid(f"Bullet {bid} is not deprecated",
                      hint="Use --feedback to undo the last feedback event, or --hard to delete",
                      details={"bulletId": bid, "action": "un-deprecate"})
    path = ctx.playbook.path_of(bid)
    preview = " ".join(bullet["content"].split())[:100]
    counts = {k: bullet.get(k) for k in ("deprecated", "state", "maturity", "helpfulCount", "harmfulCount")}
    if dry_run:
        return Result({"plan": _undo_plan(ctx, bullet, feedback=feedback, hard=hard, path=path, preview=preview,
                                          before=counts)})
    if hard:
        if not confirmed:
            raise missing("Confirmation required for --hard deletion", hint="Re-run with --yes in non-interactive mode",
                          details={"confirmPhrase": "DELETE"})
        ctx.playbook.delete(bid)
        return Result({"bulletId": bid, "action": "hard-delete", "path": path, "preview": preview, "before": counts,
                       "after": {"deleted": True},
                       "message": f"Permanently deleted bullet {bid} from {ctx.playbook.layer_of(bid)} playbook"})
    if feedback:
        assert last is not None
        before: dict[str, Any] = {"helpfulCount": bullet.get("helpfulCount"),
                                  "harmfulCount": bullet.get("harmfulCount"), "lastFeedback": last}
        bullet["feedbackEvents"] = list(events[:-1])
        counter = {"helpful": "helpfulCount", "harmful": "harmfulCount"}.get(str(last.get("type")))
        if counter:
            bullet[counter] = max(0, int(bullet.get(counter) or 0) - 1)
        bullet["maturity"] = calculate_maturity(bullet, ctx.config)
        if bullet.get("deprecated") and "Automatically deprecated" in (bullet.get("deprecationReason") or "") \
                and bullet["maturity"] != "deprecated":
            bullet.update(deprecated=False, state="active")
            for key in ("deprecatedAt", "deprecationReason"):
                bullet.pop(key, None)
        bullet["updatedAt"] = now_iso()
        ctx.playbook.save(bullet)
        return Result({"bulletId": bid, "action": "undo-feedback", "before": before,
                       "after": {"helpfulCount": bullet.get("helpfulCount"), "harmfulCount": bullet.get("harmfulCount"),
                                 "feedbackEventsCount": len(bullet["feedbackEvents"])},
                       "message": f"Removed last {last.get('type')} feedback from {bid}"})
    before = {k: bullet.get(k) for k in ("deprecated", "deprecatedAt", "deprecationReason", "state", "maturity")}
    bullet.update(deprecated=False, state="active", updatedAt=now_iso())
    for key in ("deprecatedAt", "deprecationReason"):
        bullet.pop(key, None)
    if bullet.get("maturity") == "deprecated":
        bullet["maturity"] = "candidate"
    ctx.playbook.save(bullet)
    _unblock(ctx, bid)
    return Result({"bulletId": bid, "action": "un-deprecate",
                   "before": {k: v for k, v in before.items() if v is not None},
                   "after": {"deprecated": False, "state": "active", "maturity": bullet.get("maturity")},
                   "message": f"Restored bullet {bid} from deprecated state"})


def _undo_plan(ctx: Ctx, bullet: dict[str, Any], *, feedback: bool, hard: bool, path: str, preview: str,
               before: dict[str, Any]) -> dict[str, Any]:
    """What `undo --dry-run` would do, as the reference's `plan`."""
    bid = bullet["id"]
    last = (bullet.get("feedbackEvents") or [None])[-1]
    if hard:
        action, change, apply = ("hard-delete", "Bullet would be permanently removed from playbook",
                                 f"cm undo {bid} --hard --yes")
    elif feedback:
        assert last is not None
        day = str(last.get("timestamp") or "")[:10] or "unknown"
        action, change, apply = "undo-feedback", f"Would remove last {last.get('type')} feedback from {day}", \
            f"cm undo {bid} --feedback"
        before = {**before, "lastFeedback": last}
    else:
        action, change, apply = ("un-deprecate", "Bullet would be restored to active state (deprecated → active, "
                                 "maturity reset to candidate if needed)", f"cm undo {bid}")
    return {"dryRun": True, "action": action, "bulletId": bid, "path": path,
            "location": ctx.playbook.layer_of(bid), "preview": preview, "category": bullet.get("category"),
            "before": before, "wouldChange": change, "applyCommand": apply}


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
    today = float(used.get("cost_usd", 0) or 0)  # the budget file keeps one day: month and total are at least it
    return Result({"today": today, "month": today, "total": today,
                   "dailyLimit": limits.get("dailyLimit", 1.0), "monthlyLimit": limits.get("monthlyLimit", 20.0),
                   "llmBudget": used or None, "events": len(events)})
