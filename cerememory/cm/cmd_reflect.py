"""Reflection over Cerememory's raw journal (deterministic path), validate and audit."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .app import Ctx, Result
from .cmd_feedback import apply_outcome
from .errors import CmError, missing
from .feedback import add_event, curate
from .outcome import detect_sentiment, extract_rule_ids, inline_feedback
from .scoring import extract_keywords, now_iso
from .trauma import scan_text

ERROR_RE = re.compile(r"\b(errors?|failed|exception|traceback|cannot find|not found|undefined|null reference|"
                      r"syntax error|type error|runtime error|crash\w*)\b", re.IGNORECASE)
SUCCESS_RE = re.compile(r"\b(successfully|completed|done|fixed|works now|works correctly|resolved|passed|"
                        r"all tests pass|build successful)\b", re.IGNORECASE)
FILE_RE = re.compile(r"[\w./-]*\.(?:tsx?|jsx?|py|go|rs|java|c|cpp|h|hpp|md|json|ya?ml|toml|txt|css|scss|html)\b")


def _record_text(record: dict[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in (record.get("content") or {}).get("blocks", []) if b.get("text"))


def transcript(records: list[dict[str, Any]]) -> str:
    return "\n".join(f"[{r.get('speaker', 'user')}] {_record_text(r)}" for r in records)


def infer_status(text: str) -> str:
    errors, success = bool(ERROR_RE.search(text)), bool(SUCCESS_RE.search(text))
    return "mixed" if errors and success else "failure" if errors else "success"


def fast_diary(session_id: str, records: list[dict[str, Any]], text: str) -> dict[str, Any]:
    """The no-LLM diary; reads our own `[user]` transcript lines (the reference's fast diary
    missed its own export format, gap 17)."""
    task = next((_record_text(r).strip()[:500] for r in records if r.get("speaker") == "user"
                 and len(_record_text(r).strip()) > 10), "")
    files = list(dict.fromkeys(f for f in FILE_RE.findall(text) if 4 <= len(f) < 200))[:20]
    if len(task) > 20:
        summary = f"Session: {task[:200]}"
    else:
        summary = next((line[:200] for line in text.splitlines() if len(line) > 20), "Coding session")
    agent = next(((r.get("metadata") or {}).get("agent") for r in records if (r.get("metadata") or {}).get("agent")),
                 "unknown")
    digest = hashlib.sha256(f"{session_id}-{text}".encode()).hexdigest()[:16]
    return {"id": f"diary-{digest}", "sessionPath": session_id, "timestamp": records[-1].get("created_at") or now_iso(),
            "agent": agent, "workspace": (records[0].get("metadata") or {}).get("workspace"), "duration": None,
            "status": infer_status(text), "accomplishments": [task[:200]] if task else [], "decisions": [],
            "challenges": [], "preferences": [], "keyLearnings": [summary], "relatedSessions": [],
            "tags": [f.rsplit("/", 1)[-1] for f in files[:5]], "searchAnchors": extract_keywords(summary + " " + task)}


def _error_count(text: str) -> int:
    lowered = text.lower()
    count = sum(1 for p in ("error", "failed", "exception", "traceback", "panic") if lowered.count(p) >= 2)
    count += sum(1 for p in (r"user denied", r"permission denied", r"tool.{0,40}rejected", r"user.{0,40}rejected")
                 if re.search(p, lowered))
    return count


def cmd_reflect(ctx: Ctx, args: Any) -> Result:
    days = args.days or int(ctx.config.get("sessionLookbackDays", 7))
    processed = {e.get("sessionPath") for e in ctx.backend.read_log("processed")}
    if args.session:
        records = ctx.backend.session(args.session)
        if not records:
            raise CmError("SESSION_NOT_FOUND", f"No session {args.session!r} in the raw journal")
        sessions = {args.session: records}
    else:
        excluded = [p.lower() for p in ctx.config.get("sessionExcludePatterns") or []]
        sessions = {s: r for s, r in ctx.backend.sessions(days).items()
                    if s not in processed and not any(p in s.lower() for p in excluded)}
    chosen = list(sessions.items())[: args.max_sessions or 5]
    reports, errors, deltas = [], [], []
    inline_applied, outcome_applied, outcomes_recorded, missing_rules = 0, 0, 0, []
    for session_id, records in chosen:
        text = transcript(records)
        report: dict[str, Any] = {"session": session_id, "records": len(records)}
        if len(text) < 50:
            report["skipped"] = "transcript shorter than 50 characters"
            if not args.dry_run:
                ctx.backend.log("processed", {"sessionPath": session_id, "processedAt": now_iso(),
                                              "deltasGenerated": 0})
            reports.append(report)
            continue
        diary = fast_diary(session_id, records, text)
        inline = inline_feedback(text)
        for item in inline:
            deltas.append({"type": item["type"], "bulletId": item["bulletId"], "sessionPath": session_id,
                           "reason": item["reason"], "source": "inline"})
        tail = text[-max(2000, len(text) // 5):]
        inline_ids = {i["bulletId"].lower() for i in inline}
        rule_ids = [r for r in extract_rule_ids(text) if r not in inline_ids]
        outcome = {"sessionId": session_id, "outcome": diary["status"], "rulesUsed": rule_ids,
                   "sentiment": detect_sentiment(tail), "errorCount": _error_count(text),
                   "hadRetries": bool(re.search(r"try again|retrying|let me try|attempt.{0,20}again", text, re.I)),
                   "autoGraded": True, "recordedAt": records[-1].get("created_at") or now_iso()}
        report.update({"diaryId": diary["id"], "status": diary["status"], "inlineFeedback": len(inline),
                       "rulesMentioned": rule_ids})
        if not args.dry_run:
            ctx.backend.add_diary(diary, "\n".join(diary["keyLearnings"] + diary["accomplishments"]))
            for item in inline:
                bullet = ctx.playbook.find(item["bulletId"])
                if bullet is None:
                    missing_rules.append(item["bulletId"])
                    continue
                if add_event(bullet, ctx.config, item["type"], session=session_id, reason="other",
                             context=item["reason"], idempotent="session"):
                    ctx.playbook.save(bullet)
                    inline_applied += 1
            if rule_ids:
                ctx.backend.log("outcome", outcome)
                outcomes_recorded += 1
                result = apply_outcome(ctx, outcome)
                outcome_applied += result["applied"]
                missing_rules += [m for m in result["missing"] if m not in missing_rules]
        reports.append(report)
    llm = _llm_note()
    if args.dry_run:
        return Result({"deltas": deltas, "sessions": reports, "llm": llm})
    curation = curate(ctx.playbook, ctx.config)
    for session_id, _ in chosen:
        if session_id not in processed:
            ctx.backend.log("processed", {"sessionPath": session_id, "processedAt": now_iso(),
                                          "deltasGenerated": sum(1 for d in deltas if d["sessionPath"] == session_id)})
    data = {"global": {"applied": inline_applied + outcome_applied, "skipped": 0, "conflicts": [], **curation},
            "repo": None, "errors": errors, "sessions": reports, "llm": llm,
            "autoOutcome": {"outcomesRecorded": outcomes_recorded, "feedbackApplied": outcome_applied,
                            "missingRules": missing_rules, "inlineFeedbackDeltas": inline_applied}}
    result = Result(data)
    if not chosen:
        result.effect, result.reason = False, f"No unprocessed sessions in the raw journal in the last {days} days"
    elif not llm["used"]:
        result.warnings.append("New rules are not extracted without an LLM: " + llm["reason"])
    return result


def _llm_note() -> dict[str, Any]:
    return {"used": False, "reason": "the LLM reflector is not wired into cm yet; only inline feedback, "
                                     "auto-outcome, diaries and curation ran (deterministic path)"}


# ---------------------------------------------------------------- validate / audit

SUCCESS_EVIDENCE = re.compile(r"fixed (the|a|an|this|that|it)|successfully|\bsuccess\b|solved (the|a|an|this|that|it)"
                              r"|working now|works (now|correctly|properly)|resolved", re.IGNORECASE)
FAILURE_EVIDENCE = re.compile(r"failed (to|with)|error:|(threw|throws) .{0,40}error|broken|crash(ed|es|ing)"
                              r"|bug (in|found|caused)|doesn'?t work", re.IGNORECASE)


def cmd_validate(ctx: Ctx, args: Any) -> Result:
    rule = " ".join(args.rule).strip()
    if not rule:
        raise missing("Rule text required")
    keywords = extract_keywords(rule)
    days = int(ctx.config.get("validationLookbackDays", 90))
    hits = ctx.backend.history(" ".join(keywords[:8]), days, 20) if keywords else []
    sessions: dict[str, dict[str, Any]] = {}
    for hit in hits:
        outcome = "failure" if FAILURE_EVIDENCE.search(hit["snippet"]) else \
            "success" if SUCCESS_EVIDENCE.search(hit["snippet"]) else "unknown"
        entry = sessions.setdefault(hit["sessionPath"], {"session": hit["sessionPath"], "snippet": hit["snippet"],
                                                         "outcome": outcome})
        if outcome != "unknown" and entry["outcome"] == "unknown":
            entry.update(outcome=outcome, snippet=hit["snippet"])
    evidence = list(sessions.values())
    wins = sum(1 for e in evidence if e["outcome"] == "success")
    fails = sum(1 for e in evidence if e["outcome"] == "failure")
    if not evidence:
        verdict, confidence, reason = "ACCEPT_WITH_CAUTION", 0.6, "No sessions in the journal mention this rule"
    elif wins >= 5 and fails == 0:
        verdict, confidence, reason = "ACCEPT", 0.95, f"{wins} successful sessions, no failures"
    elif fails >= 3 and wins == 0:
        verdict, confidence, reason = "REJECT", 0.9, f"{fails} failing sessions, no successes"
    else:
        verdict, confidence = "ACCEPT_WITH_CAUTION", 0.6
        reason = f"Ambiguous evidence ({wins} success, {fails} failure); the LLM validator is not used by cm"
    return Result({"proposedRule": rule, "verdict": verdict, "confidence": confidence, "reason": reason,
                   "evidence": evidence})


def cmd_audit(ctx: Ctx, args: Any) -> Result:
    if not args.trauma:
        raise CmError("MISSING_API_KEY", "Rule-violation audit needs an LLM, and cm's audit has no LLM path yet",
                      recovery=["Use cm audit --trauma for the deterministic dangerous-command scan"])
    candidates = []
    for session_id, records in ctx.backend.sessions(args.days or 7).items():
        for record in records:
            for hit in scan_text(_record_text(record)):
                candidates.append({"sessionPath": session_id, **hit, "timestamp": record.get("created_at")})
    return Result({"candidates": candidates})
