"""Rule quality check (`playbook add --check`, reference §3.11) and category gap analysis (§3.10)."""

from __future__ import annotations

import re
from typing import Any

CATEGORY_KEYWORDS: dict[str, list[str]] = {
    "debugging": "debug error fix bug issue trace stack breakpoint log exception crash fault problem".split(),
    "testing": "test spec mock assert expect jest vitest unit integration e2e coverage fixture stub".split(),
    "architecture": ("architecture design pattern structure module component layer service interface abstraction "
                     "dependency coupling cohesion separation").split(),
    "workflow": "workflow process task priority order step sequence pipeline automation ci cd deploy".split(),
    "documentation": "document doc readme comment jsdoc typedoc api reference guide tutorial example".split(),
    "integration": "api http rest graphql fetch request response json parse serialize endpoint client server".split(),
    "collaboration": "team review pr merge conflict coordinate communicate share handoff pair mob".split(),
    "git": "git commit branch merge rebase push pull checkout stash diff log blame bisect".split(),
    "security": ("security auth token password encrypt permission access secret vulnerability sanitize validate "
                 "xss csrf injection owasp").split(),
    "performance": ("performance optimize cache slow memory profile benchmark latency throughput scale "
                    "efficient").split(),
}
CONTEXT_WORDS = {"when", "if", "before", "after", "always", "never", "only", "unless", "during", "while"}
VAGUE = {"thing", "stuff", "good", "bad", "nice", "better", "best", "use", "make", "do", "get"}


def detect_categories(text: str, top: int = 3) -> list[str]:
    lowered = text.lower()
    scores = {c: sum(1 for k in words if k in lowered) for c, words in CATEGORY_KEYWORDS.items()}
    ranked = sorted((c for c in scores if scores[c] > 0), key=lambda c: -scores[c])
    return ranked[:top]


SIMILAR = 0.8  # an existing rule this close is reported as a likely duplicate


def check_rule(content: str, category: str, *, nearest: tuple[float, dict[str, Any]] | None = None,
               mode: str = "keyword", note: str | None = None) -> dict[str, Any]:
    """The reference's report: `warnings[{type: similarity|quality|category, message, severity:
    warning|suggestion, details?}]` and `suggestions{category?, reason?}`. Nothing is an error,
    so `valid` stays true; `--strict` refuses a rule with a warning-severity entry (`has_issues`).
    `nearest` is the most similar existing rule, measured by `mode` (semantic or keyword; the
    extra `similarity` key says which)."""
    warnings: list[dict[str, Any]] = []
    if nearest is not None and nearest[0] >= SIMILAR:
        score, rule = nearest
        warnings.append({"type": "similarity", "message": f"Similar to existing rule '{rule['id']}' "
                                                          f"({score * 100:.0f}% similar)",
                         "severity": "warning", "details": {"similarRuleId": rule["id"], "similarityScore": score}})
    count = len(content.split())
    if count < 10:
        warnings.append({"type": "quality", "message": f"Rule is too short ({count} words). "
                                                       "Consider adding more context.",
                         "severity": "warning", "details": {"wordCount": count}})
    elif count > 100:
        warnings.append({"type": "quality", "message": f"Rule is quite long ({count} words). "
                                                       "Consider splitting into multiple rules.",
                         "severity": "suggestion", "details": {"wordCount": count}})
    if not any(re.search(rf"\b{word}\b", content, re.IGNORECASE) for word in CONTEXT_WORDS):
        warnings.append({"type": "quality", "severity": "suggestion",
                         "message": "Rule lacks context. Consider specifying when/where this applies."})
    long_words = [w for w in content.lower().split() if len(w) > 2]
    if len(long_words) >= 5 and sum(1 for w in long_words if w in VAGUE) / len(long_words) > 0.4:
        warnings.append({"type": "quality", "message": "Rule seems too vague. Consider being more specific.",
                         "severity": "warning"})
    suggestions: dict[str, str] = {}
    detected = detect_categories(content)
    wanted = category.lower()
    if detected and wanted not in detected:
        warnings.append({"type": "category", "message": f"Category '{category}' may not match content. "
                                                        f"Detected: {detected[0]}",
                         "severity": "suggestion",
                         "details": {"suggestedCategory": detected[0], "detectedCategories": detected}})
        suggestions = {"category": detected[0], "reason": f"Content keywords suggest '{detected[0]}' category"}
    return {"valid": True, "warnings": warnings, "suggestions": suggestions,
            "similarity": {"mode": mode, **({"notice": note} if note else {})}}


def has_issues(validation: dict[str, Any]) -> bool:
    """Whether `--strict` refuses the rule: a warning of severity error or warning (not a suggestion)."""
    return any(w.get("severity") in ("error", "warning") for w in validation["warnings"])


def gap_analysis(bullets: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {c: 0 for c in CATEGORY_KEYWORDS}
    for bullet in bullets:
        category = str(bullet.get("category") or "").lower()
        if category in counts:
            counts[category] += 1
    total = sum(counts.values())
    by_category = {}
    for category, count in counts.items():
        status = "critical" if count == 0 else "underrepresented" if count <= 2 else \
            "adequate" if count <= 10 else "well-covered"
        by_category[category] = {"count": count, "status": status,
                                 "percentage": round(100 * count / total, 1) if total else 0}
    critical = [c for c, v in by_category.items() if v["status"] == "critical"]
    under = [c for c, v in by_category.items() if v["status"] == "underrepresented"]
    well = [c for c, v in by_category.items() if v["status"] == "well-covered"]
    if not bullets:  # the reference's words
        suggestion = "Your playbook is empty! Start by adding foundational rules across all categories."
    elif not critical and not under:
        suggestion = "Your playbook has good coverage across all categories."
    else:
        parts = []
        if critical:
            parts.append(f"Focus on {', '.join(critical)} - you have no rules in these areas.")
        if under:
            parts.append(f"Consider adding more {', '.join(under)} rules.")
        suggestion = " ".join(parts)
    return {"byCategory": by_category, "gaps": {"critical": critical, "underrepresented": under},
            "wellCovered": well, "totalRules": len(bullets), "suggestions": suggestion}


def gap_queries(gaps: dict[str, Any]) -> list[str]:
    out = []
    for category in gaps["gaps"]["critical"] + gaps["gaps"]["underrepresented"]:
        out.append(" ".join(CATEGORY_KEYWORDS[category][:3]))
    return out[:5]
