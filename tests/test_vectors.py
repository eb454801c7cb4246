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


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_the_index_runs_blas_on_one_thread_per_call() -> None:
    """The scan parallelises itself; BLAS threads of its own would compete with it for the cores.
    The policy is set at the first search (opening a data dir that is never searched by meaning
    need not pay for it)."""
    VectorIndex().search([1.0, 0.0], 1)
    assert _blas_threads() and set(_blas_threads()) == {1}


def test_a_blas_thread_count_the_user_set_is_left_alone() -> None:
    import os
    import subprocess
    import sys

    code = ("from threadpoolctl import threadpool_info\nfrom cerememory.index.vectors import VectorIndex\n"
            "def blas(): return [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
            "before = blas()\nVectorIndex().search([1.0, 0.0], 1)\nprint(before == blas(), before)")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("True"), out.stdout
