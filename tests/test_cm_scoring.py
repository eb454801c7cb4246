"""cm scoring against values computed by hand from the reference formulas (cm reference §3)."""

from __future__ import annotations

import hashlib

import pytest

from cerememory.cm.outcome import detect_sentiment, extract_rule_ids, inline_feedback, score_outcome
from cerememory.cm.scoring import (
    MS_PER_DAY,
    calculate_maturity,
    decayed_counts,
    detect_conflicts,
    effective_score,
    extract_keywords,
    final_score,
    hash_content,
    inverted_content,
    jaccard,
    keyword_relevance,
    now_iso,
    should_invert,
    tokenize,
)

NOW = 1_800_000_000_000.0


def events(kind: str, n: int, age_days: float = 0, weight: float | None = None) -> list[dict]:
    stamp = now_iso(NOW - age_days * MS_PER_DAY)
    out = [{"type": kind, "timestamp": stamp} for _ in range(n)]
    if weight is not None:
        for e in out:
            e["decayedValue"] = weight
    return out


def test_tokenizer_keeps_dotted_and_symbol_tokens() -> None:
    assert tokenize("Use Node.js with user_id and C++ or C#, a b") == \
        ["use", "node.js", "with", "user_id", "and", "c++", "or", "c#"]
    assert tokenize("session.ts --fix x") == ["session.ts", "fix"]
    assert tokenize("café über") == ["caf", "ber"]  # ASCII only, like the reference's regex


def test_keywords_drop_stop_words_rank_by_count_with_stable_ties() -> None:
    assert extract_keywords("fix the auth token timeout bug") == ["fix", "auth", "token", "timeout", "bug"]
    assert extract_keywords("token auth token cache auth token") == ["token", "auth", "cache"]
    assert len(extract_keywords(" ".join(f"w{i}x" for i in range(20)))) == 10


def test_hash_normalises_case_and_whitespace() -> None:
    expected = hashlib.sha256(b"always run tests").hexdigest()[:16]
    assert hash_content("  Always\n\tRUN   tests ") == expected


def test_jaccard_edge_cases() -> None:
    assert jaccard("", "") == 1.0
    assert jaccard("alpha beta", "") == 0.0
    assert jaccard("alpha beta gamma", "beta gamma delta") == pytest.approx(2 / 4)


def test_decay_half_life_and_weights() -> None:
    bullet = {"feedbackEvents": events("helpful", 1, 90) + events("helpful", 1, 180) + events("harmful", 1, 365)}
    helpful, harmful = decayed_counts(bullet, None, NOW)
    assert helpful == pytest.approx(0.5 + 0.25)
    assert harmful == pytest.approx(0.5 ** (365 / 90))
    future = {"feedbackEvents": events("helpful", 1, -10) + [{"type": "helpful", "timestamp": "garbage"}]}
    assert decayed_counts(future, None, NOW) == (1.0, 0.0)
    weighted = {"feedbackEvents": events("helpful", 1, 0, weight=1.8)}
    assert decayed_counts(weighted, None, NOW)[0] == pytest.approx(1.8)
    custom = {"scoring": {"decayHalfLifeDays": 30}}
    assert decayed_counts({"feedbackEvents": events("helpful", 1, 30)}, custom, NOW)[0] == pytest.approx(0.5)


def test_effective_score_worked_examples() -> None:
    three = {"feedbackEvents": events("helpful", 3), "maturity": "candidate"}
    assert effective_score(three, None, NOW) == pytest.approx(1.5)
    assert effective_score({**three, "maturity": "established"}, None, NOW) == pytest.approx(3.0)
    proven = {"feedbackEvents": events("helpful", 10), "maturity": "proven"}
    assert effective_score(proven, None, NOW) == pytest.approx(15.0)
    mixed = {"feedbackEvents": events("helpful", 3) + events("harmful", 1), "maturity": "established"}
    assert effective_score(mixed, None, NOW) == pytest.approx(-1.0)
    assert effective_score({**mixed, "maturity": "deprecated"}, None, NOW) == 0.0


def test_maturity_transitions() -> None:
    def maturity(helpful: int, harmful: int, **extra: object) -> str:
        bullet = {"feedbackEvents": events("helpful", helpful) + events("harmful", harmful), **extra}
        return calculate_maturity(bullet, None, NOW)

    assert maturity(2, 0) == "candidate"
    assert maturity(3, 0) == "established"
    assert maturity(3, 1) == "established"  # ratio 0.25
    assert maturity(2, 1) == "deprecated"  # ratio 0.33 with 3 events
    assert maturity(10, 0) == "proven"
    assert maturity(10, 1) == "proven"  # ratio 0.0909 < 0.1
    assert maturity(9, 1) == "established"  # ratio 0.1 is not < 0.1
    assert maturity(0, 5, pinned=True, maturity="established") == "established"
    assert maturity(10, 0, deprecated=True) == "deprecated"


def test_anti_pattern_inversion() -> None:
    bad = {"content": "Always cache auth tokens", "maturity": "established", "harmfulCount": 3,
           "feedbackEvents": events("harmful", 3) + events("helpful", 1)}
    assert should_invert(bad, None, NOW)
    assert inverted_content(bad) == "AVOID: cache auth tokens. Marked harmful 3 times"
    assert not should_invert({**bad, "pinned": True}, None, NOW)
    assert not should_invert({**bad, "feedbackEvents": events("harmful", 3) + events("helpful", 2)}, None, NOW)
    assert not should_invert({**bad, "kind": "anti_pattern"}, None, NOW)


def test_context_relevance_worked_example() -> None:
    keywords = extract_keywords("fix the auth token timeout bug")
    relevance = keyword_relevance("Always check token expiry before other auth debugging", keywords)
    assert relevance == 7
    assert final_score(relevance, -1.0) == pytest.approx(0.7)
    assert keyword_relevance("anything", ["auth"], tags=["AUTH"]) == 5
    assert keyword_relevance("", ["auth"]) == 0


def test_outcome_worked_example_and_no_signal() -> None:
    sentiment = detect_sentiment("thanks, that worked")
    assert sentiment == "positive"
    signal = score_outcome({"outcome": "success", "durationSec": 300, "sentiment": sentiment, "rulesUsed": ["b-1"]})
    assert signal == {"type": "helpful", "weight": 1.8, "context": "success, fast, sentiment+"}
    assert score_outcome({"outcome": "mixed", "errorCount": 1}) is None
    harm = score_outcome({"outcome": "failure", "errorCount": 2})
    assert harm["type"] == "harmful" and harm["weight"] == pytest.approx(1.7)
    broad = score_outcome({"outcome": "failure", "autoGraded": True, "rulesUsed": [f"b-{i}" for i in range(9)]})
    assert broad is None


def test_rule_ids_and_inline_feedback() -> None:
    text = "used b-mx2cz7du-ptto9j and b-tree, uuid 1a2b-3c4d5e6f7 not b-abcdef; B-K1L2M3N4"
    assert extract_rule_ids(text) == ["b-mx2cz7du-ptto9j", "b-k1l2m3n4"]
    found = inline_feedback("x = 1  # [cass: helpful b-mx2cz7du-ptto9j] - saved me\n// [cass: harmful b-abc1234]")
    assert found == [{"type": "helpful", "bulletId": "b-mx2cz7du-ptto9j", "reason": "saved me"},
                     {"type": "harmful", "bulletId": "b-abc1234", "reason": None}]


def test_conflict_markers() -> None:
    existing = [{"id": "b-1", "content": "Always mock the database in unit tests", "maturity": "established"}]
    conflicts = detect_conflicts("Never mock the database in unit tests", existing)
    assert conflicts and conflicts[0]["conflictingBulletId"] == "b-1"
    assert detect_conflicts("Prefer tabs in makefiles", existing) == []
