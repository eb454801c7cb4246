"""The reference's scoring, bit for bit: tokenizer, keywords, content hash, Jaccard, decay,
effective score, maturity and anti-pattern inversion (cm reference §3.1–3.5).

Pure functions over bullet dicts (camelCase fields, as in playbook.yaml), so they are testable
against hand-computed values and shared by every command.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

TOKEN_RE = re.compile(r"[a-z0-9]+(?:[._\-+]+[a-z0-9]+)*[+#]*|[a-z0-9]+[+#]*")
STOP_WORDS = frozenset(
    "the a an is are was were be been have has had do does did will would could should can to of in "
    "for on with at by from as into through during before after and or but if when where why how "
    "this that these those what which who there here i you he she it we they me him her us them "
    "const var let import export return null undefined true false async await new".split()
)
MS_PER_DAY = 86_400_000
MATURITY_MULTIPLIER = {"candidate": 0.5, "established": 1.0, "proven": 1.5, "deprecated": 0.0}
DEFAULT_SCORING = {"decayHalfLifeDays": 90, "harmfulMultiplier": 4, "minFeedbackForActive": 3,
                   "minHelpfulForProven": 10, "maxHarmfulRatioForProven": 0.1}
EPS = 0.01


def tokenize(text: str | None) -> list[str]:
    """Lower-case tokens of length ≥ 2; keeps `node.js`, `user_id`, `c++`, `c#`."""
    if not text:
        return []
    return [t for t in TOKEN_RE.findall(text.lower()) if len(t) >= 2]


def extract_keywords(text: str | None, limit: int = 10) -> list[str]:
    """Top tokens by frequency, stop words removed; ties keep first-occurrence order."""
    counts: dict[str, int] = {}
    for token in tokenize(text):
        if token not in STOP_WORDS:
            counts[token] = counts.get(token, 0) + 1
    return [t for t, _ in sorted(counts.items(), key=lambda kv: -kv[1])][:limit]


def hash_content(text: str) -> str:
    """First 16 hex of SHA-256 over lower-cased, whitespace-collapsed, trimmed text."""
    normal = re.sub(r"\s+", " ", text.lower()).strip()
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:16]


def jaccard(a: str, b: str) -> float:
    return jaccard_sets(set(tokenize(a)), set(tokenize(b)))


def jaccard_sets(sa: set[str], sb: set[str]) -> float:
    if not sa and not sb:
        return 1.0
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


# ---------------------------------------------------------------- time


def now_iso(now_ms: float | None = None) -> str:
    """An ISO-8601 UTC timestamp with millisecond precision, as JavaScript prints one."""
    moment = datetime.now(UTC) if now_ms is None else datetime.fromtimestamp(now_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def now_ms() -> float:
    return datetime.now(UTC).timestamp() * 1000


def parse_ms(value: Any) -> float | None:
    """Epoch milliseconds of an ISO string (or a number), None when invalid."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() * 1000


# ---------------------------------------------------------------- decay and scores


def half_life(config: dict | None) -> float:
    scoring = (config or {}).get("scoring") or {}
    value = scoring.get("decayHalfLifeDays")
    if isinstance(value, int | float) and value > 0:
        return float(value)
    legacy = (config or {}).get("defaultDecayHalfLife")
    if isinstance(legacy, int | float) and legacy > 0:
        return float(legacy)
    return 90.0


def event_value(event: dict, half_life_days: float, now: float) -> float:
    """0.5 ** (age_days / half-life) × the event's weight (`decayedValue`, default 1)."""
    ts = parse_ms(event.get("timestamp"))
    if ts is None or half_life_days <= 0:
        return 0.0
    age_days = max(0.0, (now - ts) / MS_PER_DAY)
    weight = event.get("decayedValue")
    if isinstance(weight, int | float) and not isinstance(weight, bool) and math.isfinite(weight):
        weight = max(0.0, float(weight))
    else:
        weight = 1.0
    return 0.5 ** (age_days / half_life_days) * weight


def decayed_counts(bullet: dict, config: dict | None = None, now: float | None = None) -> tuple[float, float]:
    """(decayedHelpful, decayedHarmful): every feedback event decays on its own."""
    now = now_ms() if now is None else now
    hl = half_life(config)
    helpful = harmful = 0.0
    for event in bullet.get("feedbackEvents") or []:
        kind = event.get("type")
        if kind == "helpful":
            helpful += event_value(event, hl, now)
        elif kind == "harmful":
            harmful += event_value(event, hl, now)
    return helpful, harmful


def harmful_multiplier(config: dict | None) -> float:
    value = ((config or {}).get("scoring") or {}).get("harmfulMultiplier")
    return float(value) if isinstance(value, int | float) and value > 0 else 4.0


def effective_score(bullet: dict, config: dict | None = None, now: float | None = None) -> float:
    """(decayedHelpful − 4·decayedHarmful) × maturity multiplier; unfloored."""
    helpful, harmful = decayed_counts(bullet, config, now)
    raw = helpful - harmful_multiplier(config) * harmful
    return raw * MATURITY_MULTIPLIER.get(bullet.get("maturity") or "candidate", 1.0)


def score_bucket(score: float) -> str:
    if score >= 10:
        return "excellent"
    if score >= 5:
        return "good"
    if score >= 0:
        return "neutral"
    return "atRisk"


def calculate_maturity(bullet: dict, config: dict | None = None, now: float | None = None) -> str:
    """The maturity the decayed feedback supports (reference §3.4)."""
    current = bullet.get("maturity") or "candidate"
    if current == "deprecated" or bullet.get("deprecated"):
        return "deprecated"
    if bullet.get("pinned"):
        return current
    scoring = {**DEFAULT_SCORING, **((config or {}).get("scoring") or {})}
    helpful, harmful = decayed_counts(bullet, config, now)
    total = helpful + harmful
    if total <= EPS:
        total = 0.0
    ratio = harmful / total if total > 0 else 0.0
    if ratio > 0.3 and total >= scoring["minFeedbackForActive"] - EPS:
        return "deprecated"
    if total < scoring["minFeedbackForActive"] - EPS:
        return "candidate"
    if helpful >= scoring["minHelpfulForProven"] - EPS and ratio < scoring["maxHarmfulRatioForProven"]:
        return "proven"
    return "established"


def is_anti_pattern(bullet: dict) -> bool:
    return bool(bullet.get("isNegative")) or bullet.get("kind") == "anti_pattern"


def is_active(bullet: dict) -> bool:
    return not bullet.get("deprecated") and bullet.get("state") != "retired" \
        and bullet.get("maturity") != "deprecated"


_INVERT_PREFIX = re.compile(r"^(always|prefer|use|try|consider|ensure)\s+", re.IGNORECASE)


def should_invert(bullet: dict, config: dict | None = None, now: float | None = None) -> bool:
    """Curation's inversion test: decayedHarmful ≥ prune threshold and > 2 × decayedHelpful."""
    if not is_active(bullet) or bullet.get("pinned") or bullet.get("kind") == "anti_pattern":
        return False
    threshold = float((config or {}).get("pruneHarmfulThreshold", 3))
    helpful, harmful = decayed_counts(bullet, config, now)
    return harmful >= threshold - EPS and harmful > 2 * helpful


def inverted_content(bullet: dict) -> str:
    """`AVOID: <content without a leading always/prefer/use/…>. Marked harmful N times`."""
    body = _INVERT_PREFIX.sub("", bullet.get("content", "").strip(), count=1)
    return f"AVOID: {body}. Marked harmful {int(bullet.get('harmfulCount') or 0)} times"


# ---------------------------------------------------------------- context relevance


def keyword_relevance(content: str, keywords: Iterable[str], tags: Iterable[str] = ()) -> float:
    """+3 per keyword that is a token of the content, else +1 if a substring; +5 per tag match."""
    if not content:
        return 0.0
    unique = list(dict.fromkeys(k.lower() for k in keywords))
    if not unique:
        return 0.0
    lowered = content.lower()
    tokens = set(tokenize(content))
    tag_set = {str(t).lower() for t in tags or ()}
    score = 0.0
    for keyword in unique:
        if keyword in tokens:
            score += 3
        elif keyword in lowered:
            score += 1
        if keyword in tag_set:
            score += 5
    return score


def final_score(relevance: float, effective: float) -> float:
    return relevance * max(0.1, effective)


# ---------------------------------------------------------------- conflicts (reference §3.7)

NEGATIVE = ("never", "dont", "don't", "avoid", "forbid", "forbidden", "disable", "prevent", "stop", "skip")
POSITIVE = ("always", "must", "required", "ensure", "use", "enable")
EXCEPTION = ("unless", "except", "only if", "only when", "except when")


def _has(text: str, words: Iterable[str]) -> bool:
    return any(re.search(r"(?<![\w'])" + re.escape(w) + r"(?![\w'])", text, re.IGNORECASE) for w in words)


def detect_conflicts(content: str, bullets: Iterable[dict]) -> list[dict]:
    """Warnings (never blocks) when a new rule contradicts an active one with enough overlap."""
    out = []
    tokens = set(tokenize(content))
    neg, pos, exc = _has(content, NEGATIVE), _has(content, POSITIVE), _has(content, EXCEPTION)
    for other in bullets:
        if not is_active(other):
            continue
        text = other.get("content", "")
        o_neg, o_pos, o_exc = _has(text, NEGATIVE), _has(text, POSITIVE), _has(text, EXCEPTION)
        any_marker = neg or pos or exc or o_neg or o_pos or o_exc
        if jaccard_sets(tokens, set(tokenize(text))) < (0.1 if any_marker else 0.2):
            continue
        reason = None
        if neg != o_neg:
            reason = "Possible negation conflict: one rule negates the other"
        elif (pos and o_neg) or (neg and o_pos):
            reason = "Opposite directives"
        elif (pos and o_exc) or (exc and o_pos):
            reason = "Potential scope conflict: one rule adds an exception"
        if reason:
            out.append({"newBulletContent": content, "conflictingBulletId": other.get("id"),
                        "conflictingContent": text, "reason": reason})
    return out
