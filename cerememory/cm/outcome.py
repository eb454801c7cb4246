"""Implicit feedback from session outcomes (reference §3.8) and the sentiment lexicon."""

from __future__ import annotations

import re
from typing import Any

POSITIVE = [r"that worked", r"perfect", r"thanks", r"great", r"exactly what i needed", r"solved it",
            r"lgtm", r"looks good", r"nice work", r"well done", r"ship it"]
NEGATIVE = [r"that'?s wrong|that is wrong", r"doesn'?t work", r"broke", r"not what i wanted", r"try again",
            r"\bundo\b", r"revert", r"don'?t do that", r"that'?s not right", r"start over", r"roll back"]
STATUSES = ("success", "failure", "mixed", "partial")
RULE_ID_RE = re.compile(r"(?<![0-9a-f])b-[a-z0-9]{6,}(?:-[a-z0-9]+)*\b", re.IGNORECASE)
INLINE_RE = re.compile(r"(?://|#|/\*)\s*\[cass:\s*(helpful|harmful)\s+(b-[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*)\]"
                       r"(?:\s*-\s*([^\n*]*))?", re.IGNORECASE)


def detect_sentiment(text: str | None) -> str:
    """Whichever lexicon has more matching patterns; a tie is neutral."""
    lowered = (text or "").lower()
    pos = sum(1 for p in POSITIVE if re.search(p, lowered))
    neg = sum(1 for p in NEGATIVE if re.search(p, lowered))
    return "positive" if pos > neg else "negative" if neg > pos else "neutral"


def score_outcome(outcome: dict[str, Any]) -> dict[str, Any] | None:
    """{type, weight, context} of the feedback an outcome justifies, or None for no signal."""
    status = outcome.get("outcome")
    helpful = harmful = 0.0
    parts = [status]
    if status == "success":
        helpful += 1
    elif status == "failure":
        harmful += 1
    elif status in ("mixed", "partial"):
        helpful += 0.1
        harmful += 0.1
    duration = outcome.get("durationSec")
    if isinstance(duration, int | float):
        if 0 < duration < 600 and status != "failure":
            helpful += 0.5
            parts.append("fast")
        elif duration > 3600:
            harmful += 0.3
            parts.append("slow")
    errors = outcome.get("errorCount")
    if isinstance(errors, int | float) and errors >= 2:
        harmful += 0.7
        parts.append("errors")
    elif isinstance(errors, int | float) and errors == 1:
        harmful += 0.3
        parts.append("error")
    if outcome.get("hadRetries"):
        harmful += 0.5
        parts.append("retries")
    sentiment = outcome.get("sentiment")
    if sentiment == "positive":
        helpful += 0.3
        parts.append("sentiment+")
    elif sentiment == "negative":
        harmful += 0.5
        parts.append("sentiment-")
    if helpful == 0 and harmful == 0:
        return None
    broad = bool(outcome.get("autoGraded")) and len(outcome.get("rulesUsed") or []) > 8
    justified = (status == "failure" and harmful >= helpful) or (status != "failure" and harmful - helpful >= 1.0)
    context = ", ".join(p for p in parts if p)
    if justified and not broad:
        return {"type": "harmful", "weight": _clamp(harmful), "context": context}
    if helpful >= harmful:
        return {"type": "helpful", "weight": _clamp(helpful), "context": context}
    return None


def _clamp(value: float) -> float:
    return round(min(2.0, max(0.1, value)), 10)


def extract_rule_ids(text: str) -> list[str]:
    """Rule ids mentioned in a transcript: UUID-safe, must contain a digit, lower-cased, unique."""
    out: list[str] = []
    for match in RULE_ID_RE.findall(text or ""):
        rule = match.lower()
        if any(c.isdigit() for c in rule) and rule not in out:
            out.append(rule)
    return out


def inline_feedback(text: str) -> list[dict[str, Any]]:
    """`// [cass: helpful b-…] - reason` comments, one delta each."""
    out = []
    for line in (text or "").splitlines():
        for kind, rule, reason in INLINE_RE.findall(line):
            out.append({"type": kind.lower(), "bulletId": rule, "reason": (reason or "").strip() or None})
    return out
