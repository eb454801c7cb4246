"""Consolidation planning: which episodic memories are near-duplicates, which are promoted.

The planner is pure (ids, arrays and numbers in, a `Plan` out), so a dry run reports exactly
what a real run would do, and the engine applies a plan inside its own transactions.

Strategies decide the *scope*, the episodic records a run examines:
- ``full``: every episodic record; duplicates are searched among all pairs.
- ``incremental``: records stored or changed since the previous run, compared against all.
- ``selective``: salient records only, those recalled at least once (or ``min_access_count``
  times) or felt with intensity >= 0.5.

Promotion is idempotent through the consolidation ledger: a record already promoted is never
promoted again, whatever the strategy.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..cmp.messages import ConsolidationStrategy as Strategy

DUPLICATE_COSINE = 0.92
SALIENT_INTENSITY = 0.5
SUMMARY_CHARS = 200
HOUR = 3600.0
_BLOCK = 512
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Candidate:
    """What the planner needs to know about one episodic record."""

    id: uuid.UUID
    created_at: float
    updated_at: float
    access_count: int
    intensity: float
    fidelity: float
    visible: bool  # above its prune threshold: forgotten memories are never promoted


@dataclass(frozen=True)
class Merge:
    drop: uuid.UUID
    keep: uuid.UUID
    similarity: float


@dataclass
class Plan:
    scope: list[uuid.UUID] = field(default_factory=list)
    merges: list[Merge] = field(default_factory=list)
    promote: list[uuid.UUID] = field(default_factory=list)


def in_scope(c: Candidate, strategy: Strategy, watermark: float | None, min_access_count: int) -> bool:
    if strategy is Strategy.INCREMENTAL:
        return watermark is None or max(c.created_at, c.updated_at) > watermark
    if strategy is Strategy.SELECTIVE:
        return c.access_count >= max(1, min_access_count) or c.intensity >= SALIENT_INTENSITY
    return True


def text_key(text: str) -> str | None:
    """Identical text, ignoring case and spacing, is a duplicate even without embeddings."""
    words = text.lower().split()
    return hashlib.sha1(" ".join(words).encode()).hexdigest() if words else None


def duplicate_pairs(matrix: np.ndarray, query_rows: Sequence[int],
                    threshold: float = DUPLICATE_COSINE) -> list[tuple[int, int, float]]:
    """Row pairs with cosine above `threshold`; `matrix` rows are unit vectors. Blocked so the
    similarity matrix never exceeds `_BLOCK` x n floats."""
    pairs: list[tuple[int, int, float]] = []
    rows = np.asarray(query_rows, dtype=np.int64)
    for start in range(0, len(rows), _BLOCK):
        block = rows[start:start + _BLOCK]
        sims = matrix[block] @ matrix.T
        sims[np.arange(len(block)), block] = -1.0
        hit_rows, hit_cols = np.nonzero(sims > threshold)
        pairs.extend((int(block[r]), int(c), float(sims[r, c])) for r, c in zip(hit_rows, hit_cols, strict=True))
    return pairs


def choose_keepers(pairs: Iterable[tuple[uuid.UUID, uuid.UUID, float]],
                   rank: Callable[[uuid.UUID], tuple]) -> list[Merge]:
    """Each duplicate cluster keeps its best-ranked record: records are visited best first, and a
    record still standing absorbs every neighbour not yet absorbed."""
    neighbours: dict[uuid.UUID, dict[uuid.UUID, float]] = defaultdict(dict)
    for a, b, sim in pairs:
        if a != b:
            neighbours[a][b] = max(sim, neighbours[a].get(b, sim))
            neighbours[b][a] = max(sim, neighbours[b].get(a, sim))
    dropped: dict[uuid.UUID, Merge] = {}
    keepers: set[uuid.UUID] = set()
    for record in sorted(neighbours, key=rank, reverse=True):
        if record in dropped:
            continue
        keepers.add(record)
        for other, sim in neighbours[record].items():
            if other not in dropped and other not in keepers:
                dropped[other] = Merge(drop=other, keep=record, similarity=round(sim, 6))
    return list(dropped.values())


def plan(
    candidates: Sequence[Candidate],
    *,
    strategy: Strategy,
    watermark: float | None,
    now: float,
    min_age_hours: float,
    min_access_count: int,
    consolidated: Mapping[uuid.UUID, uuid.UUID] | set[uuid.UUID],
    vectors: Mapping[int, tuple[list[uuid.UUID], np.ndarray]],
    text_keys: Mapping[uuid.UUID, str | None],
) -> Plan:
    """The consolidation plan for one run. `vectors` maps a dimension to (ids, unit rows) of the
    episodic records that have a vector; `text_keys` gives each candidate's `text_key`."""
    by_id = {c.id: c for c in candidates}
    scope = [c.id for c in candidates if in_scope(c, strategy, watermark, min_access_count)]
    scoped = set(scope)

    pairs: list[tuple[uuid.UUID, uuid.UUID, float]] = []
    for ids, matrix in vectors.values():
        query = [row for row, i in enumerate(ids) if i in scoped]
        pairs.extend((ids[a], ids[b], s) for a, b, s in duplicate_pairs(matrix, query))
    same_text: dict[str, list[uuid.UUID]] = defaultdict(list)
    for i, key in text_keys.items():
        if key is not None and i in by_id:
            same_text[key].append(i)
    for group in same_text.values():
        if len(group) > 1 and scoped.intersection(group):
            pairs.extend((a, b, 1.0) for a in group for b in group if a != b and (a in scoped or b in scoped))

    def rank(i: uuid.UUID) -> tuple:
        c = by_id[i]  # fidelity to 4 places: records stored moments apart count as equally clear
        return (round(c.fidelity, 4), c.access_count, -c.created_at, str(i))

    merges = choose_keepers(((a, b, s) for a, b, s in pairs if a in by_id and b in by_id), rank)
    gone = {mg.drop for mg in merges}
    promote = [
        i for i in scope
        if i not in gone and i not in consolidated and by_id[i].visible
        and (now - by_id[i].created_at) >= min_age_hours * HOUR
        and by_id[i].access_count >= min_access_count
    ]
    return Plan(scope=scope, merges=merges, promote=promote)


MIN_FACT_WORDS = 3  # "ok", "a", "thanks!" are not facts


def fact_key(text: str) -> str | None:
    """Two facts are the same when their words are, ignoring case, spacing and the punctuation
    around words ("Rotates every Monday." is "rotates every monday")."""
    return text_key(" ".join(word.strip(".,;:!?…\"'()") for word in text.split()))


def worth_a_fact(summary: str) -> bool:
    """Whether a summary says enough to stand as a semantic fact: at least MIN_FACT_WORDS words
    with a letter or a digit in them."""
    return sum(1 for word in summary.split() if any(ch.isalnum() for ch in word)) >= MIN_FACT_WORDS


def new_facts(summaries: Mapping[uuid.UUID, str], existing: set[str]) -> dict[uuid.UUID, str]:
    """The summaries worth promoting: informative enough, not the text of a fact that already
    exists (`existing`: text_keys of the semantic store), and each text once (the first source
    in order keeps it). A duplicate fact would rank beside its twin on every recall."""
    seen = set(existing)
    out: dict[uuid.UUID, str] = {}
    for i, summary in summaries.items():
        key = fact_key(summary)
        if key is None or key in seen or not worth_a_fact(summary):
            continue
        seen.add(key)
        out[i] = summary
    return out


def summarise(text: str, summary: str | None, limit: int = SUMMARY_CHARS) -> str:
    """The fact a promoted memory keeps: its own summary, else its first sentence, cut at a word
    boundary within `limit` characters."""
    if summary and summary.strip():
        return summary.strip()
    flat = " ".join(text.split())
    first = _SENTENCE_END.split(flat, maxsplit=1)[0] if flat else ""
    if len(first) <= limit:
        return first
    cut = first[:limit].rsplit(" ", 1)[0] or first[:limit]
    return cut.rstrip(" ,;:") + "…"
