"""Reflection over Cerememory's raw journal (deterministic, plus the LLM reflector when
configured), validate and audit, as typed operations, called by the CLI (cmd_reflect.py) and,
for `reflect`, the MCP server (mcp.py)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from . import privacy
from .app import Ctx, Result
from .bullets import new_bullet
from .context import semantic_setting
from .errors import CmError, missing
from .feedback import add_event, apply_outcome, curate, decision
from .outcome import detect_sentiment, extract_rule_ids, inline_feedback
from .playbook import empty_playbook
from .scoring import (
    effective_score,
    extract_keywords,
    hash_content,
    is_active,
    is_anti_pattern,
    jaccard,
    now_iso,
    now_ms,
)
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


def reflect(ctx: Ctx, *, days: int | None = None, max_sessions: int | None = None, dry_run: bool = False,
            session: str | None = None) -> Result:
    """Reflect on the unprocessed journal sessions of the last `days` (sessionLookbackDays), at
    most `max_sessions` (5), or on one `session`: diaries, inline feedback, auto-graded outcomes,
    the LLM reflector's deltas when one is configured, then curation. `dry_run` only reports
    the deltas."""
    days = days or int(ctx.config.get("sessionLookbackDays", 7))
    processed = {e.get("sessionPath") for e in ctx.backend.read_log("processed")}
    if session:
        records = ctx.backend.session(session)
        if not records:
            raise CmError("SESSION_NOT_FOUND", f"No session {session!r} in the raw journal")
        sessions = {session: records}
    else:
        excluded = [p.lower() for p in ctx.config.get("sessionExcludePatterns") or []]
        sessions = {s: r for s, r in ctx.backend.sessions(days).items()
                    if s not in processed and not any(p in s.lower() for p in excluded)}
    chosen = list(sessions.items())[: max_sessions or 5]
    if not chosen:  # the reference's answer; curation waits for new evidence
        return Result({"errors": []}, human="No new sessions to reflect on.")
    reports, errors, deltas = [], [], []
    inline_applied, outcome_applied, outcomes_recorded, missing_rules, llm_applied = 0, 0, 0, [], 0
    llm = _Llm(ctx)
    llm_log: list[dict[str, Any]] = []
    rules = privacy.policy(ctx.backend)
    for session_id, records in chosen:
        text = transcript(records)
        report: dict[str, Any] = {"session": session_id, "records": len(records)}
        if len(text) < 50:
            report["skipped"] = "transcript shorter than 50 characters"
            if not dry_run:
                ctx.backend.log("processed", {"sessionPath": session_id, "processedAt": now_iso(),
                                              "deltasGenerated": 0})
            reports.append(report)
            continue
        diary = fast_diary(session_id, records, text)
        written = llm.diary(text)
        if written:  # the LLM's account replaces the fast one, field by field
            diary.update(written)
            diary["searchAnchors"] = extract_keywords(" ".join(diary["keyLearnings"] + diary["challenges"]))[:10] \
                or diary["searchAnchors"]
        if not dry_run:
            diary["relatedSessions"] = privacy.related_sessions(ctx.backend, diary, rules, ctx.config)
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
        report.update({"diaryId": diary["id"], "diary": "llm" if written else "fast", "status": diary["status"],
                       "inlineFeedback": len(inline),
                       "rulesMentioned": rule_ids})
        proposed = llm.reflect(text, ctx.playbook.active())
        for delta in proposed:
            deltas.append({**delta, "sessionPath": session_id, "source": "llm"})
        if proposed:
            report["llmDeltas"] = len(proposed)
        if not dry_run:
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
                result = apply_outcome(ctx.playbook, outcome)
                outcome_applied += result["applied"]
                missing_rules += [m for m in result["missing"] if m not in missing_rules]
            for delta in proposed:
                if _apply_llm_delta(ctx, delta, session_id, diary["agent"], llm_log):
                    llm_applied += 1
                elif delta["type"] != "add" and ctx.playbook.find(delta["bulletId"]) is None:
                    missing_rules.append(delta["bulletId"])
        reports.append(report)
    note = llm.note()
    if llm.failure:
        errors.append(f"reflector: {llm.failure}")
    usage = llm.usage()
    llm.close()
    if dry_run:
        return Result({"deltas": deltas, "sessions": reports, "llm": note, "usage": usage},
                      warnings=llm.warnings())
    curation = curate(ctx.playbook, ctx.config)
    curation["decisionLog"] = llm_log + list(curation.get("decisionLog") or [])
    for session_id, _ in chosen:
        if session_id not in processed:
            ctx.backend.log("processed", {"sessionPath": session_id, "processedAt": now_iso(),
                                          "deltasGenerated": sum(1 for d in deltas if d["sessionPath"] == session_id)})
    _count_reflection(ctx, len(chosen))
    data = {"global": {"applied": inline_applied + outcome_applied + llm_applied,
                       "skipped": sum(1 for e in llm_log if e["action"] == "skipped"), "conflicts": [], **curation},
            "repo": None, "errors": errors, "sessions": reports, "llm": note, "usage": usage,
            "autoOutcome": {"outcomesRecorded": outcomes_recorded, "feedbackApplied": outcome_applied,
                            "missingRules": missing_rules, "inlineFeedbackDeltas": inline_applied}}
    return Result(data, warnings=llm.warnings())


def _count_reflection(ctx: Ctx, sessions: int) -> None:
    """The playbook's `metadata.totalReflections` / `totalSessionsProcessed`, which the
    reference declares and never increments (gap 10)."""
    _, meta = ctx.backend.playbook_meta()
    data = meta or {k: v for k, v in empty_playbook().items() if k != "bullets"}
    counters = dict(data.get("metadata") or {})
    counters["totalReflections"] = int(counters.get("totalReflections") or 0) + 1
    counters["totalSessionsProcessed"] = int(counters.get("totalSessionsProcessed") or 0) + sessions
    counters["lastReflection"] = now_iso()
    ctx.backend.save_playbook_meta({**data, "metadata": counters})


class _Llm:
    """The reflector for one `cm reflect`: opened lazily, and after its first failure not used
    again in this run (the rest falls back to the deterministic path, with a warning)."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.session: Any = None
        self.source = ""
        self.failure: str | None = None
        self.opened = False
        self.proposed = 0

    def _open(self) -> Any:
        if not self.opened:
            from .reflector import open_session

            self.opened = True
            self.session, self.source = open_session(self.ctx.config)
        return self.session

    def _ask(self, system: str, prompt: str, parse: Any) -> Any:
        """`parse(reply)`, or None when there is no LLM, it failed before, or it fails now (the
        failure is kept: the rest of the run does without it)."""
        if self.failure is not None or self._open() is None:
            return None
        from ..llm import LLMError

        try:
            return parse(self.session.complete_json(system, prompt))
        except LLMError as exc:
            self.failure = exc.reason
            return None

    def reflect(self, text: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Up to `maxReflectorIterations` rounds; stops when a round adds nothing or on failure."""
        from .reflector import REFLECT_SYSTEM, parse_deltas, reflect_prompt

        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for _ in range(max(1, int(self.ctx.config.get("maxReflectorIterations", 3) or 1))):
            deltas = self._ask(REFLECT_SYSTEM, reflect_prompt(text, rules, out), parse_deltas)
            if deltas is None:
                return []
            fresh = [d for d in deltas if _delta_key(d) not in seen]
            seen.update(_delta_key(d) for d in fresh)
            out += fresh
            if not fresh or len(out) >= 50:
                break
        self.proposed += len(out)
        return out

    def diary(self, text: str) -> dict[str, Any] | None:
        """The LLM's diary fields for a session, or None (no LLM, or it failed)."""
        from .reflector import DIARY_SYSTEM, diary_prompt, parse_diary

        return self._ask(DIARY_SYSTEM, diary_prompt(text), parse_diary)

    def note(self) -> dict[str, Any]:
        if self.session is None:
            return {"used": False, "reason": self.source or "no transcript long enough to reflect on"}
        note = {"used": self.failure is None and self.session.usage.calls > 0, "source": self.source,
                "provider": self.session.usage.provider, "model": self.session.usage.model,
                "deltasProposed": self.proposed}
        if self.failure is not None:
            note.update(used=False, reason=f"LLM reflector failed: {self.failure}", fallback="deterministic")
        return note

    def usage(self) -> dict[str, Any] | None:
        return self.session.report() if self.session is not None else None

    def warnings(self) -> list[str]:
        if self.failure is not None:
            return [f"LLM reflector failed ({self.failure}); fell back to the deterministic path "
                    "(inline feedback, auto-outcome, diaries, curation)"]
        if self.session is None and self.opened:
            return ["New rules are not extracted without an LLM: " + self.source]
        return []

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


def _delta_key(delta: dict[str, Any]) -> str:
    if delta["type"] == "add":
        return "add:" + hash_content(delta["bullet"]["content"])
    return f"{delta['type']}:{delta['bulletId']}"


def _apply_llm_delta(ctx: Ctx, delta: dict[str, Any], session_id: str, agent: str,
                     log: list[dict[str, Any]]) -> bool:
    """Curate one reflector delta (reference §3.7): dedup against the playbook, the evidence
    gate, then add as a draft candidate — or apply helpful/harmful feedback idempotently."""
    if delta["type"] != "add":
        bullet = ctx.playbook.find(delta["bulletId"])
        if bullet is None:
            log.append(decision("feedback", "skipped", delta["bulletId"], "", "unknown rule id"))
            return False
        if not add_event(bullet, ctx.config, delta["type"], session=session_id, reason="other",
                         context=delta["reason"] or None, idempotent="session"):
            return False
        ctx.playbook.save(bullet)
        log.append(decision("feedback", "accepted", bullet["id"], bullet["content"], delta["reason"] or delta["type"]))
        return True
    content, category = delta["bullet"]["content"], delta["bullet"]["category"]
    duplicate = _duplicate_of(ctx, content)
    if duplicate is not None:
        bullet, reason = duplicate
        if not is_active(bullet) or ctx.playbook.layer_of(bullet["id"]) != "global":
            log.append(decision("dedup", "skipped", bullet["id"], content, "matches a deprecated or repo rule"))
            return False
        target = ctx.playbook.find(bullet["id"]) or bullet
        if add_event(target, ctx.config, "helpful", session=session_id, context=reason, idempotent="session"):
            ctx.playbook.save(target)
        log.append(decision("dedup", "modified", bullet["id"], content, reason))
        return True
    verdict, _, why, _ = evidence_gate(ctx, content)
    if verdict == "REJECT":
        log.append(decision("add", "rejected", "", content, why))
        return False
    bullet = new_bullet(content, category, reasoning=(delta["reason"] or why)[:500], source="learned",
                        state="active" if verdict == "ACCEPT" else "draft", sourceSessions=[session_id],
                        sourceAgents=[agent or "unknown"])
    ctx.playbook.add([bullet], "global")
    log.append(decision("add", "accepted", bullet["id"], content, delta["reason"] or why))
    return True


SEMANTIC_DUPLICATE = 0.9  # cosine at which a paraphrase counts as the same rule


def _duplicate_of(ctx: Ctx, content: str) -> tuple[dict[str, Any], str] | None:
    """The rule `content` repeats, with the reinforcement reason: the same text, a near copy
    (token Jaccard ≥ dedupSimilarityThreshold) of an active rule, or — where the reference's
    purely lexical dedup let paraphrases through (gap 23) — an active rule whose meaning is
    this close (cosine ≥ 0.9) when storage searches by meaning."""
    digest = hash_content(content)
    threshold = float(ctx.config.get("dedupSimilarityThreshold", 0.85))
    for bullet in ctx.playbook.merged():
        if hash_content(bullet.get("content", "")) == digest:
            return bullet, "Reinforced by exact duplicate insight"
        if is_active(bullet) and jaccard(bullet.get("content", ""), content) >= threshold:
            return bullet, "Reinforced by similar insight"
    if semantic_setting(ctx.config) is False:
        return None
    scores, on, _ = ctx.playbook.semantic_scores(content)
    if not on or not scores:
        return None
    best_id, best = max(scores.items(), key=lambda kv: kv[1])
    nearest = ctx.playbook.find(best_id)
    if best >= SEMANTIC_DUPLICATE and nearest is not None and is_active(nearest):
        return nearest, f"Reinforced by semantically similar insight (cosine {best:.2f})"
    return None


# ---------------------------------------------------------------- validate / audit

SUCCESS_EVIDENCE = re.compile(r"fixed (the|a|an|this|that|it)|successfully|\bsuccess\b|solved (the|a|an|this|that|it)"
                              r"|working now|works (now|correctly|properly)|resolved", re.IGNORECASE)
FAILURE_EVIDENCE = re.compile(r"failed (to|with)|error:|(threw|throws) .{0,40}error|broken|crash(ed|es|ing)"
                              r"|bug (in|found|caused)|doesn'?t work", re.IGNORECASE)


def evidence_gate(ctx: Ctx, rule: str) -> tuple[str, float, str, list[dict[str, Any]]]:
    """(verdict, confidence, reason, evidence): the deterministic gate of reference §3.9 over our
    own journal; AMBIGUOUS when only an LLM validator could decide."""
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
    if not keywords:  # the reference's reasons, word for word
        return "ACCEPT_WITH_CAUTION", 0.6, "No meaningful keywords found for evidence search. Proposing as draft.", []
    if not evidence:
        return "ACCEPT_WITH_CAUTION", 0.6, "No historical evidence found. Proposing as draft.", evidence
    if wins >= 5 and fails == 0:
        return "ACCEPT", 0.95, f"Strong success signal ({wins} sessions). Auto-accepting.", evidence
    if fails >= 3 and wins == 0:
        return "REJECT", 0.9, f"Strong failure signal ({fails} sessions). Auto-rejecting.", evidence
    return "AMBIGUOUS", 0.6, "Evidence found but ambiguous. Proceeding to LLM validation.", evidence


def validate(ctx: Ctx, rule: str) -> Result:
    """A proposed rule against the journal's evidence; the LLM validator decides ambiguous
    evidence when one is configured."""
    rule = rule.strip()
    if not rule:
        raise missing("Rule text required")
    verdict, confidence, reason, evidence = evidence_gate(ctx, rule)
    data: dict[str, Any] = {"proposedRule": rule, "verdict": verdict, "confidence": confidence, "reason": reason,
                            "evidence": evidence}
    warnings: list[str] = []
    if verdict == "AMBIGUOUS":
        data["verdict"] = "ACCEPT_WITH_CAUTION"
        judged, note, usage = _llm_validate(ctx, rule, evidence)
        data["llm"], data["usage"] = note, usage
        if judged is not None:
            data.update(judged)
        else:
            data["reason"] = f"{reason}; {note['reason']}"
            if note.get("fallback"):
                warnings.append(f"LLM validator failed ({note['reason']}); used the evidence gate alone")
    return Result(data, warnings=warnings)


def _llm_validate(ctx: Ctx, rule: str, evidence: list[dict[str, Any]]) -> tuple[dict | None, dict, dict | None]:
    """(verdict fields or None, llm note, usage) from the LLM validator, if one is configured."""
    from ..llm import LLMError
    from .reflector import VALIDATE_SYSTEM, open_session, parse_verdict, validate_prompt

    session, source = open_session(ctx.config)
    if session is None:
        return None, {"used": False, "reason": f"no LLM validator ({source})"}, None
    try:
        judged = parse_verdict(session.complete_json(VALIDATE_SYSTEM, validate_prompt(rule, evidence)))
        return judged, {"used": True, "source": source}, session.report()
    except LLMError as exc:
        return None, {"used": False, "reason": exc.reason, "fallback": "deterministic"}, session.report()
    finally:
        session.close()


def audit(ctx: Ctx, *, days: int | None = None, trauma: bool = False) -> Result:
    """The sessions of the last `days` (7) audited against the active rules by the LLM, or,
    with `trauma`, scanned for dangerous commands (no LLM needed)."""
    sessions = ctx.backend.sessions(days or 7)
    if trauma:
        candidates = []
        for session_id, records in sessions.items():
            for record in records:
                for hit in scan_text(_record_text(record)):
                    candidates.append({"sessionPath": session_id, **hit, "timestamp": record.get("created_at")})
        return Result({"candidates": candidates})
    return _llm_audit(ctx, sessions)


def _llm_audit(ctx: Ctx, sessions: dict[str, list[dict[str, Any]]]) -> Result:
    """Each session's transcript against the active rules (proven ones first), one LLM call per
    session. The first failed call (timeout, malformed reply, budget spent) ends the audit: what
    was found so far is returned, with the failure and the sessions left unaudited."""
    from ..llm import LLMError
    from .reflector import AUDIT_SYSTEM, audit_prompt, open_session, parse_violations

    session, source = open_session(ctx.config)
    if session is None:
        raise CmError("MISSING_API_KEY", "Audit requires LLM access. Set one of: ANTHROPIC_API_KEY, OPENAI_API_KEY, "
                                         "GOOGLE_GENERATIVE_AI_API_KEY, OLLAMA_BASE_URL.",
                      recovery=["Set credentials for your chosen provider (OPENAI_API_KEY / ANTHROPIC_API_KEY / "
                                "GOOGLE_GENERATIVE_AI_API_KEY / OLLAMA_BASE_URL).",
                                "Or store the key in config.json (apiKey) and re-run the command.",
                                "cm audit --trauma scans for dangerous commands without an LLM."],
                      hint=source)
    now = now_ms()
    rules = sorted((b for b in ctx.playbook.active() if not is_anti_pattern(b)),
                   key=lambda b: (b.get("maturity") != "proven", -effective_score(b, ctx.config, now)))
    by_id = {b["id"]: b for b in rules}
    violations: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    scanned = 0
    try:
        for session_id, records in sessions.items() if rules else ():
            try:
                reply = session.complete_json(AUDIT_SYSTEM, audit_prompt(transcript(records), rules))
            except LLMError as exc:
                errors.append({"sessionPath": session_id, "error": exc.reason})
                break
            scanned += 1
            for found in parse_violations(reply, set(by_id)):
                rule = by_id[found["bulletId"]]
                violations.append({"bulletId": rule["id"], "bulletContent": rule["content"], "sessionPath": session_id,
                                   "evidence": found["evidence"],
                                   "severity": "high" if found["proven"] or rule.get("maturity") == "proven"
                                   else "medium", "timestamp": records[-1].get("created_at")})
    finally:
        session.close()
    by_severity = {level: sum(v["severity"] == level for v in violations) for level in ("high", "medium", "low")}
    result = Result({"violations": violations,
                     "stats": {"sessionsScanned": scanned, "rulesChecked": len(rules),
                               "violationsFound": len(violations), "bySeverity": by_severity},
                     "scannedAt": now_iso(), "errors": errors,
                     "llm": {"used": session.usage.calls > 0, "source": source, "provider": session.usage.provider,
                             "model": session.usage.model},
                     "usage": session.report()})
    if errors:
        result.warnings.append(f"LLM auditor failed ({errors[0]['error']}); {len(sessions) - scanned} of "
                               f"{len(sessions)} sessions were not audited")
    if not rules:
        result.warnings.append("No active rules to audit against (cm playbook add, or cm init --starter)")
    return result
