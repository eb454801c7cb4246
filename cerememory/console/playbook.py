"""What the console's playbook page shows of `cm`: its rules, scored and ordered as `cm` scores
them, and its trauma registry.

Rules are memory (procedural records, read through CMP by the page). Traumas are not: `cm` keeps
them as files beside the playbook, as the original does (docs/cm.md), so the page shows the
global registry of the user the server runs as, read-only; project registries live in their
repositories.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cm import scoring, trauma
from ..cm.bullets import from_record

MATURITY_ORDER = {"proven": 0, "established": 1, "candidate": 2, "deprecated": 3}


def playbook_rules(records: Any) -> list[dict[str, Any]]:
    """Each listed record as its bullet plus `record_id`, `score` (cm's effective score with its
    default scoring settings) and `anti_pattern`; most mature first, then best scored."""
    rules = []
    for record in records:
        bullet = from_record({"id": str(record.id), "text": record.text, "metadata": record.metadata})
        events = [e for e in bullet["feedbackEvents"] if isinstance(e, dict)]
        rules.append({**bullet, "record_id": record.id, "feedbackEvents": events,
                      "score": scoring.effective_score({**bullet, "feedbackEvents": events}),
                      "anti_pattern": scoring.is_anti_pattern(bullet)})
    rules.sort(key=lambda r: (MATURITY_ORDER.get(str(r["maturity"]), len(MATURITY_ORDER)), -r["score"]))
    return rules


@dataclass(frozen=True)
class Traumas:
    path: Path
    entries: list[dict[str, Any]]
    built_in: int  # the doom patterns `cm` checks besides the registry


def trauma_registry() -> Traumas:
    """The global trauma registry, active entries first (an unreadable line is skipped, as cm does)."""
    entries = [e for e in trauma.load("global") if isinstance(e, dict)]
    entries.sort(key=lambda e: e.get("status", "active") != "active")
    return Traumas(trauma.global_path(), entries, len(trauma.DOOM_PATTERNS))
