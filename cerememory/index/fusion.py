"""Combining rankings from different signals on one scale.

BM25 scores are unbounded and corpus-dependent while cosine lies in [-1, 1], so they are never
added raw. Reciprocal rank fusion uses ranks only; `normalized` divides each signal by its
best score (negative cosines count as 0) before averaging. Both return scores in [0, 1]
(1 = first in every signal).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

Ranking = Sequence[tuple[uuid.UUID, float]]


def rrf(rankings: Sequence[Ranking], k: int = 10) -> dict[uuid.UUID, float]:
    fused: dict[uuid.UUID, float] = {}
    for ranking in rankings:
        for rank, (record_id, _) in enumerate(ranking):
            fused[record_id] = fused.get(record_id, 0.0) + 1.0 / (k + rank + 1)
    best = len(rankings) / (k + 1)
    return {i: s / best for i, s in fused.items()} if best else fused


def normalized(rankings: Sequence[Ranking]) -> dict[uuid.UUID, float]:
    fused: dict[uuid.UUID, float] = {}
    for ranking in rankings:
        high = max((s for _, s in ranking), default=0.0)
        if high <= 0:
            continue
        for record_id, score in ranking:
            fused[record_id] = fused.get(record_id, 0.0) + max(score, 0.0) / high
    n = sum(1 for r in rankings if r) or 1
    return {i: s / n for i, s in fused.items()}


def fuse(rankings: Sequence[Ranking], method: str, k: int = 10) -> dict[uuid.UUID, float]:
    return rrf(rankings, k) if method == "rrf" else normalized(rankings)
