"""Feedback on rules: events, maturity updates, implicit feedback from outcomes, inversion and
deterministic curation (§3.4–3.5)."""

from __future__ import annotations

from typing import Any

from .bullets import deprecate, new_bullet
from .outcome import score_outcome
from .playbook import Playbook
from .scoring import (
    calculate_maturity,
    effective_score,
    inverted_content,
    is_active,
    now_iso,
    should_invert,
)

HARMFUL_REASONS = ("caused_bug", "wasted_time", "contradicted_requirements", "wrong_context", "outdated", "other")
_ORDER = ("candidate", "established", "proven")


def add_event(bullet: dict[str, Any], config: dict[str, Any], kind: str, *, timestamp: str | None = None,
              session: str | None = None, reason: str | None = None, context: str | None = None,
              weight: float | None = None, idempotent: str | None = None) -> bool:
    """Append one feedback event and set maturity from the decayed counts (as `cm mark` does).
    `idempotent="event"` skips an event with the same (type, sessionPath, timestamp);
    `idempotent="session"` one with the same (type, sessionPath) — reflect's rule."""
    timestamp = timestamp or now_iso()
    events = bullet.setdefault("feedbackEvents", [])
    if idempotent and any(e.get("type") == kind and e.get("sessionPath") == session
                          and (idempotent == "session" or e.get("timestamp") == timestamp) for e in events):
        return False
    event: dict[str, Any] = {"type": kind, "timestamp": timestamp}
    if session:
        event["sessionPath"] = session
    if kind == "harmful":
        event["reason"] = reason if reason in HARMFUL_REASONS else "other"
    if context:
        event["context"] = context
    if weight is not None:
        event["decayedValue"] = weight
    events.append(event)
    counter = "helpfulCount" if kind == "helpful" else "harmfulCount"
    bullet[counter] = int(bullet.get(counter) or 0) + 1
    if kind == "helpful":
        bullet["lastValidatedAt"] = timestamp
    bullet["updatedAt"] = now_iso()
    apply_maturity(bullet, config)
    return True


def apply_maturity(bullet: dict[str, Any], config: dict[str, Any]) -> None:
    """One rule for every feedback path (the reference's outcome path left rules half-deprecated, gap 13)."""
    maturity = calculate_maturity(bullet, config)
    if maturity == "deprecated" and not bullet.get("deprecated"):
        deprecate(bullet, "Automatically deprecated due to harmful feedback ratio")
    else:
        bullet["maturity"] = maturity


def apply_outcome(playbook: Playbook, outcome: dict[str, Any]) -> dict[str, Any]:
    """Apply one outcome's implicit feedback to its rules (idempotent per recordedAt)."""
    signal = score_outcome(outcome)
    if signal is None:
        return {"applied": 0, "missing": [], "signal": None}
    applied, absent = 0, []
    for rule in outcome.get("rulesUsed") or []:
        bullet = playbook.find(rule)
        if bullet is None:
            absent.append(rule)
            continue
        if add_event(bullet, playbook.config, signal["type"], timestamp=outcome["recordedAt"],
                     session=outcome.get("sessionId"), reason="other", context=signal["context"],
                     weight=signal["weight"], idempotent="event"):
            playbook.save(bullet)
            applied += 1
    return {"applied": applied, "missing": absent, "signal": signal}


def curate(playbook: Playbook, config: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Deterministic curation of the global and repo rules: inversion, then promotion, then demotion."""
    promotions, inversions, log = [], [], []
    pruned = 0
    threshold = float(config.get("pruneHarmfulThreshold", 3))
    for bullet in [b for b in playbook.merged(apply_blocked=False) if is_active(b)]:
        bullet = playbook.find(bullet["id"]) or bullet
        if should_invert(bullet, config):
            if bullet.get("isNegative"):
                if not dry_run:
                    deprecate(bullet, "Negative rule marked harmful (likely incorrect restriction)")
                    playbook.save(bullet)
                pruned += 1
                continue
            anti = new_bullet(inverted_content(bullet), bullet.get("category", "general"),
                              kind="anti_pattern", type="anti-pattern", isNegative=True, state="active",
                              scope=bullet.get("scope", "global"), workspace=bullet.get("workspace"),
                              sourceSessions=list(bullet.get("sourceSessions") or []),
                              sourceAgents=list(bullet.get("sourceAgents") or []),
                              tags=list(dict.fromkeys([*(bullet.get("tags") or []), "inverted", "anti-pattern"])))
            if not dry_run:
                playbook.add([anti], playbook.layer_of(bullet["id"]))
                deprecate(bullet, f"Inverted to anti-pattern: {anti['id']}", anti["id"])
                playbook.save(bullet)
            inversions.append({"originalId": bullet["id"], "originalContent": bullet["content"],
                               "antiPatternId": anti["id"], "antiPatternContent": anti["content"],
                               "bulletId": bullet["id"], "reason": "harmful feedback outweighs helpful"})
            log.append(decision("inversion", "accepted", bullet["id"], bullet["content"], "harmful ≥ threshold"))
            continue
        if bullet.get("pinned"):
            continue
        before = bullet.get("maturity", "candidate")
        target = calculate_maturity(bullet, config)
        after = before
        if before in _ORDER[:2] and target in _ORDER and _ORDER.index(target) > _ORDER.index(before):
            after = target
        score = effective_score({**bullet, "maturity": after}, config)
        if score < -threshold:
            if not dry_run:
                deprecate(bullet, "Auto-deprecated due to negative effective score")
                playbook.save(bullet)
            pruned += 1
            log.append(decision("demotion", "accepted", bullet["id"], bullet["content"], "auto-deprecated"))
            continue
        if score < 0 and after in ("proven", "established"):
            after = _ORDER[_ORDER.index(after) - 1]
        if after != before:
            phase = "promotion" if _ORDER.index(after) > _ORDER.index(before) else "demotion"
            promotions.append({"bulletId": bullet["id"], "from": before, "to": after,
                               "reason": f"{phase} by decayed feedback"})
            log.append(decision(phase, "accepted", bullet["id"], bullet["content"], f"{before} → {after}"))
            if not dry_run:
                bullet["maturity"] = after
                if phase == "promotion":
                    bullet["promotedAt"] = now_iso()
                playbook.save(bullet)
    return {"promotions": promotions, "inversions": inversions, "pruned": pruned, "decisionLog": log}


def decision(phase: str, action: str, bullet_id: str, content: str, reason: str) -> dict[str, Any]:
    """One line of a curation's `decisionLog`."""
    return {"timestamp": now_iso(), "phase": phase, "action": action, "bulletId": bullet_id,
            "content": content[:100], "reason": reason}
