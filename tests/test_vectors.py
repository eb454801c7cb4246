"""The exact cosine index against brute force, below and above the size where it scans one slice
per core, with and without a store filter."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from cerememory.embed.base import normalise_rows
from cerememory.index.vectors import PARALLEL_ROWS, VectorIndex


@pytest.mark.parametrize("rows", [50, PARALLEL_ROWS + 1_000])
def test_search_matches_brute_force(rows: int) -> None:
    rng = np.random.default_rng(rows)
    matrix = normalise_rows(rng.standard_normal((rows, 32)).astype(np.float32))
    ids = [uuid.uuid4() for _ in range(rows)]
    codes = rng.integers(0, 3, rows)
    index = VectorIndex()
    index.add(ids, codes.tolist(), matrix)
    index.remove(ids[:7])  # holes filled by moved rows
    kept = np.arange(7, rows)
    for _ in range(5):
        query = rng.standard_normal(32).astype(np.float32)
        unit = query / np.linalg.norm(query)
        scores = matrix[kept] @ unit
        for allowed in (None, [1, 2]):
            mask = np.ones(len(kept), bool) if allowed is None else np.isin(codes[kept], allowed)
            expected = [ids[kept[i]] for i in np.argsort(-np.where(mask, scores, -np.inf))[:10]]
            found = index.search(query, 10, allowed)
            assert [i for i, _ in found] == expected
            assert all(a >= b for (_, a), (_, b) in zip(found, found[1:], strict=False))
