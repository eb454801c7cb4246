"""Commands that change rules from evidence: mark, undo, forget, outcome, outcome-apply."""

from __future__ import annotations

from typing import Any

from .app import Ctx, Result
from .bullets import deprecate, new_bullet, public
from .errors import invalid, missing
from .feedback import HARMFUL_REASONS, add_event, apply_maturity
from .home import append_jsonl, global_dir, read_jsonl, write_atomic
from .locks import locked
from .outcome import STATUSES, detect_sentiment, score_outcome
from .scoring import effective_score, now_iso


def cmd_mark(ctx: Ctx, args: Any) -> Result:
    if args.helpful == args.harmful:
        raise missing("Specify exactly one of --helpful or --harmful",
                      recovery=["cm mark <id> --helpful", "cm mark <id> --harmful --reason caused_bug"])
    bullet = ctx.playbook.require(args.bullet_id)
    kind = "helpful" if args.helpful else "harmful"
    reason = context = None
    if kind == "harmful":
        reason = args.reason if args.reason in HARMFUL_REASONS else "other"
        context = args.reason if args.reason and args.reason not in HARMFUL_REASONS else None
    else:
        context = args.reason
    add_event(bullet, ctx.config, kind, session=args.session, reason=reason, context=context)
    ctx.playbook.save(bullet)
    return Result({"bulletId": bullet["id"], "type": kind, "newState": bullet["maturity"],
                   "effectiveScore": round(effective_score(bullet, ctx.config), 4)})


def _blocked_path(ctx: Ctx, bullet_id: str):
    if ctx.playbook.layer_of(bullet_id) == "repo" and ctx.playbook.repo_dir is not None:
        return ctx.playbook.repo_dir / "blocked.log"
    return global_dir() / "blocked.log"


def _unblock(ctx: Ctx, bullet_id: str) -> None:
    import json

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


def cmd_undo(ctx: Ctx, args: Any) -> Result:
    bullet = ctx.playbook.require(args.bullet_id)
    before = {k: bullet.get(k) for k in ("deprecated", "state", "maturity", "helpfulCount", "harmfulCount")}
    layer = ctx.playbook.layer_of(bullet["id"])
    path = str(ctx.playbook.repo_path) if layer == "repo" else "cerememory:procedural"
    if args.hard:
        if not args.yes:
            raise missing("--hard deletes permanently; confirm with --yes")
        if not args.dry_run:
            ctx.playbook.delete(bullet["id"])
        return Result({"bulletId": bullet["id"], "action": "hard-delete", "path": path,
                       "preview": bullet["content"][:100], "before": before, "after": None,
                       "message": "Dry run: would delete" if args.dry_run else "Deleted permanently"})
    if args.feedback:
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
    if not args.dry_run:
        bullet.clear()
        bullet.update(target, updatedAt=now_iso())
        ctx.playbook.save(bullet)
        if action == "un-deprecate":
            _unblock(ctx, bullet["id"])
    return Result({"bulletId": bullet["id"], "action": action, "path": path, "before": before, "after": after,
                   "message": message})


def cmd_forget(ctx: Ctx, args: Any) -> Result:
    if not args.reason:
        raise missing("--reason is required", recovery=['cm forget <id> --reason "why"'])
    bullet = ctx.playbook.require(args.bullet_id)
    layer = ctx.playbook.layer_of(bullet["id"])
    append_jsonl(_blocked_path(ctx, bullet["id"]), {"id": bullet["id"], "content": bullet["content"],
                                                    "reason": args.reason, "forgottenAt": now_iso()})
    data: dict[str, Any] = {"bulletId": bullet["id"], "action": "forgotten", "inverted": bool(args.invert)}
    anti_id = None
    if args.invert:
        anti = new_bullet(f"AVOID: {bullet['content']}. {args.reason}", bullet.get("category", "general"),
                          type="anti-pattern", isNegative=True, kind="anti_pattern", state="active",
                          tags=list(dict.fromkeys([*(bullet.get("tags") or []), "inverted"])),
                          sourceSessions=["forget-command"])
        ctx.playbook.add([anti], layer)
        anti_id = data["antiPatternId"] = anti["id"]
    deprecate(bullet, args.reason, anti_id)
    ctx.playbook.save(bullet)
    return Result(data)


# ---------------------------------------------------------------- outcomes


def apply_outcome(ctx: Ctx, outcome: dict[str, Any]) -> dict[str, Any]:
    """Apply one outcome's implicit feedback to its rules (idempotent per recordedAt)."""
    signal = score_outcome(outcome)
    if signal is None:
        return {"applied": 0, "missing": [], "signal": None}
    applied, absent = 0, []
    for rule in outcome.get("rulesUsed") or []:
        bullet = ctx.playbook.find(rule)
        if bullet is None:
            absent.append(rule)
            continue
        if add_event(bullet, ctx.config, signal["type"], timestamp=outcome["recordedAt"],
                     session=outcome.get("sessionId"), reason="other", context=signal["context"],
                     weight=signal["weight"], idempotent="event"):
            ctx.playbook.save(bullet)
            applied += 1
    return {"applied": applied, "missing": absent, "signal": signal}


def cmd_outcome(ctx: Ctx, args: Any) -> Result:
    if args.status not in STATUSES:
        raise invalid(f"Invalid outcome {args.status!r}: use one of {', '.join(STATUSES)}")
    rules = [r.strip() for r in (args.rules or "").split(",") if r.strip()]
    if not rules:
        raise missing("Rule ids required (comma-separated)", recovery=["cm outcome success b-abc123,b-def456"])
    if args.sentiment and args.sentiment not in ("positive", "negative", "neutral"):
        raise invalid("--sentiment must be positive, negative or neutral")
    sentiment = args.sentiment or (detect_sentiment(args.text) if args.text else None)
    outcome = {"sessionId": args.session or "cli-manual", "outcome": args.status, "rulesUsed": rules,
               "notes": args.text, "durationSec": args.duration, "errorCount": args.errors,
               "hadRetries": bool(args.retries) or None, "sentiment": sentiment, "recordedAt": now_iso(),
               "path": "cerememory:journal/cm:outcomes"}
    outcome = {k: v for k, v in outcome.items() if v is not None}
    ctx.backend.log("outcome", outcome)
    result = apply_outcome(ctx, outcome)
    if result["signal"] is None:
        return Result({"feedbackRecorded": False, "rulesProvided": rules}, effect=False,
                      reason="No implicit signal strong enough to record feedback")
    return Result({"applied": result["applied"], "missing": result["missing"], "type": result["signal"]["type"],
                   "weight": result["signal"]["weight"], "sentiment": sentiment or "neutral"})


def cmd_outcome_apply(ctx: Ctx, args: Any) -> Result:
    outcomes = ctx.backend.read_log("outcome")
    if args.session:
        outcomes = [o for o in outcomes if o.get("sessionId") == args.session]
    outcomes = outcomes[-(args.limit or 50):]
    contexts = ctx.backend.read_log("context") if any(not o.get("rulesUsed") for o in outcomes) else []
    applied, absent = 0, []
    for outcome in outcomes:
        if not outcome.get("rulesUsed"):
            logged = [c for c in contexts if c.get("session") == outcome.get("sessionId")]
            if not logged:
                continue
            outcome = {**outcome, "rulesUsed": logged[-1].get("ruleIds") or [], "autoGraded": True}
        result = apply_outcome(ctx, outcome)
        applied += result["applied"]
        absent += [m for m in result["missing"] if m not in absent]
    data: dict[str, Any] = {"applied": applied, "missing": absent}
    data.update({"session": args.session} if args.session else {"totalOutcomes": len(outcomes)})
    return Result(data)


def cmd_usage(ctx: Ctx, args: Any) -> Result:
    """LLM spend: cm itself spends nothing without an LLM; Cerememory's LLM budget file is reported."""
    import json

    from .home import data_dir

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


def bullet_summary(bullet: dict[str, Any]) -> dict[str, Any]:
    return public(bullet)
