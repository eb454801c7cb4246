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


class Fusion:
    """Rankings fused as they come: each one added adds its votes to the sums kept, so a query
    that fuses again after each further signal pays for each ranking once. The scores are
    those of `fuse` over every ranking added, in the order added, to the last bit."""

    def __init__(self, method: str, k: int = 10) -> None:
        self.rrf = method == "rrf"
        self.k = k
        self.sums: dict[uuid.UUID, float] = {}
        self.weights: list[float] = []
        self.total = 0.0  # normalized: the weights of the rankings that had a hit

    def add(self, ranking: Ranking, weight: float = 1.0) -> None:
        w = max(float(weight), 0.0)
        self.weights.append(w)
        sums = self.sums
        if self.rrf:
            k = self.k
            for rank, (record_id, _) in enumerate(ranking):
                sums[record_id] = sums.get(record_id, 0.0) + w / (k + rank + 1)
            return
        high = max((s for _, s in ranking), default=0.0)
        if ranking:
            self.total += w
        if high <= 0:
            return
        for record_id, score in ranking:
            sums[record_id] = sums.get(record_id, 0.0) + w * max(score, 0.0) / high

    def scores(self) -> dict[uuid.UUID, float]:
        """Each record's fused score, a new dictionary (the caller may change it)."""
        scale = sum(self.weights) / (self.k + 1) if self.rrf else self.total
        return {i: s / scale for i, s in self.sums.items()} if scale else dict(self.sums)


def fuse(rankings: Sequence[Ranking], method: str, k: int = 10,
         weights: Sequence[float] | None = None) -> dict[uuid.UUID, float]:
    fusion = Fusion(method, k)
    for ranking, w in zip(rankings, [1.0] * len(rankings) if weights is None else weights, strict=True):
        fusion.add(ranking, w)
    return fusion.scores()
