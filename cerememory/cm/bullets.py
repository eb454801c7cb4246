"""Bullets (playbook rules) as plain dicts in the reference's field order and defaults (§2.2)."""

from __future__ import annotations

import secrets
import string
import time
from typing import Any

from .scoring import now_iso

FIELD_ORDER = (
    "id", "scope", "scopeKey", "workspace", "category", "content", "source", "searchPointer", "type",
    "isNegative", "kind", "state", "maturity", "promotedAt", "helpfulCount", "harmfulCount",
    "feedbackEvents", "lastValidatedAt", "confidenceDecayHalfLifeDays", "createdAt", "updatedAt",
    "pinned", "pinnedReason", "deprecated", "deprecatedAt", "deprecationReason", "replacedBy",
    "sourceSessions", "sourceAgents", "reasoning", "tags", "embedding", "effectiveScore",
)
DEFAULTS: dict[str, Any] = {
    "scope": "global", "source": "learned", "type": "rule", "isNegative": False, "kind": "stack_pattern",
    "state": "draft", "maturity": "candidate", "helpfulCount": 0, "harmfulCount": 0,
    "confidenceDecayHalfLifeDays": 90, "pinned": False, "deprecated": False,
}
LIST_FIELDS = ("feedbackEvents", "sourceSessions", "sourceAgents", "tags")
_B36 = string.digits + string.ascii_lowercase


def _base36(number: int) -> str:
    out = ""
    while True:
        number, rem = divmod(number, 36)
        out = _B36[rem] + out
        if not number:
            return out


def new_bullet_id() -> str:
    """`b-` + base-36 epoch ms + `-` + 6 random base-36 chars, e.g. `b-mx2cz7du-ptto9j`."""
    return f"b-{_base36(int(time.time() * 1000))}-{''.join(secrets.choice(_B36) for _ in range(6))}"


def normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults and missing lists/counters, drop None values, order fields like the schema."""
    bullet = {**DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    for key in LIST_FIELDS:
        if not isinstance(bullet.get(key), list):
            bullet[key] = []
    if "createdAt" not in bullet:
        bullet["createdAt"] = now_iso()
    bullet.setdefault("updatedAt", bullet["createdAt"])
    bullet.setdefault("category", "general")
    events = bullet["feedbackEvents"]
    if "helpfulCount" not in raw:
        bullet["helpfulCount"] = sum(1 for e in events if e.get("type") == "helpful")
    if "harmfulCount" not in raw:
        bullet["harmfulCount"] = sum(1 for e in events if e.get("type") == "harmful")
    ordered = {k: bullet.pop(k) for k in FIELD_ORDER if k in bullet}
    ordered.update(bullet)
    return ordered


def from_record(record: dict[str, Any]) -> dict[str, Any]:
    """The bullet a procedural record keeps (`recall.list` with text and metadata; backend.py
    `bullet_metadata` writes it)."""
    meta = dict(record.get("metadata") or {})
    meta.pop("cm_kind", None)
    bullet_id = meta.pop("bullet_id", None) or f"b-{str(record['id'])[:8]}"
    return normalise({"id": bullet_id, "content": record.get("text") or "", **meta})


def new_bullet(content: str, category: str = "general", **fields: Any) -> dict[str, Any]:
    """A manual/learned rule: draft, candidate, workflow_rule unless told otherwise."""
    now = now_iso()
    base = {"id": new_bullet_id(), "category": category, "content": content, "kind": "workflow_rule",
            "state": "draft", "maturity": "candidate", "createdAt": now, "updatedAt": now}
    base.update(fields)
    return normalise(base)


def public(bullet: dict[str, Any]) -> dict[str, Any]:
    """The bullet as shown to agents: never its embedding."""
    return {k: v for k, v in bullet.items() if k != "embedding"}


def deprecate(bullet: dict[str, Any], reason: str, replaced_by: str | None = None) -> None:
    now = now_iso()
    bullet.update(deprecated=True, state="retired", maturity="deprecated", deprecatedAt=now,
                  deprecationReason=reason, updatedAt=now)
    if replaced_by:
        bullet["replacedBy"] = replaced_by


def agent_from_path(path: str | None) -> str:
    lowered = (path or "").lower()
    for marker, agent in ((".claude", "claude"), (".cursor", "cursor"), (".codex", "codex"),
                          (".aider", "aider"), (".pi/agent/sessions", "pi_agent")):
        if marker in lowered:
            return agent
    return "unknown"
