"""Combining rankings from different signals on one scale.

BM25 scores are unbounded and corpus-dependent while cosine lies in [-1, 1], so they are never
added raw. Reciprocal rank fusion uses ranks only; `normalized` divides each signal by its
best score (negative cosines count as 0) before averaging. Each signal may carry a weight (how
much its vote counts against the others'). Both return scores in [0, 1] (1 = first in every
signal).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

Ranking = Sequence[tuple[uuid.UUID, float]]


def _weights(rankings: Sequence[Ranking], weights: Sequence[float] | None) -> list[float]:
    return [1.0] * len(rankings) if weights is None else [max(float(w), 0.0) for w in weights]


def rrf(rankings: Sequence[Ranking], k: int = 10, weights: Sequence[float] | None = None) -> dict[uuid.UUID, float]:
    ws = _weights(rankings, weights)
    fused: dict[uuid.UUID, float] = {}
    for ranking, w in zip(rankings, ws, strict=True):
        for rank, (record_id, _) in enumerate(ranking):
            fused[record_id] = fused.get(record_id, 0.0) + w / (k + rank + 1)
    best = sum(ws) / (k + 1)
    return {i: s / best for i, s in fused.items()} if best else fused


def normalized(rankings: Sequence[Ranking], weights: Sequence[float] | None = None) -> dict[uuid.UUID, float]:
    ws = _weights(rankings, weights)
    fused: dict[uuid.UUID, float] = {}
    total = 0.0
    for ranking, w in zip(rankings, ws, strict=True):
        high = max((s for _, s in ranking), default=0.0)
        if ranking:
            total += w
        if high <= 0:
            continue
        for record_id, score in ranking:
            fused[record_id] = fused.get(record_id, 0.0) + w * max(score, 0.0) / high
    return {i: s / total for i, s in fused.items()} if total else fused


def fuse(rankings: Sequence[Ranking], method: str, k: int = 10,
         weights: Sequence[float] | None = None) -> dict[uuid.UUID, float]:
    return rrf(rankings, k, weights) if method == "rrf" else normalized(rankings, weights)
