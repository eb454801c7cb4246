"""The exact cosine index against brute force, below and above the size where it scans one slice
per core, with and without a store filter."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from cerememory.embed.base import normalise_rows
from cerememory.index.blocks import BLOCK_ROWS, RowBlocks
from cerememory.index.coarse import Int8Rows
from cerememory.index.vectors import COARSE_ROWS, PARALLEL_ROWS, VectorIndex


def _brute_force(matrix: np.ndarray, ids: list[uuid.UUID], codes: np.ndarray, kept: np.ndarray,
                 query: np.ndarray, k: int, allowed: list[int] | None) -> list[uuid.UUID]:
    """The ids of the k rows of `kept` nearest `query` by cosine, among those whose code is allowed."""
    scores = matrix[kept] @ (query / np.linalg.norm(query))
    mask = np.ones(len(kept), bool) if allowed is None else np.isin(codes[kept], allowed)
    return [ids[kept[i]] for i in np.argsort(-np.where(mask, scores, -np.inf))[:k]]


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
        for allowed in (None, [1, 2]):
            found = index.search(query, 10, allowed)
            assert [i for i, _ in found] == _brute_force(matrix, ids, codes, kept, query, 10, allowed)
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


def test_the_int8_first_pass_returns_the_float32_top_k() -> None:
    """A large group answers from its int8 copy plus a float32 rescoring of what the copy keeps:
    the ids are the exact scan's, with and without a filter, also after the copy has followed
    removes (rows moved into holes) and adds that grow the matrix."""
    rows, dim = COARSE_ROWS + 4_000, 64
    rng = np.random.default_rng(20261202)
    matrix = normalise_rows(rng.standard_normal((rows, dim)).astype(np.float32))
    ids = [uuid.UUID(int=i + 1) for i in range(rows)]
    codes = rng.integers(0, 3, rows)
    index = VectorIndex()
    index.add(ids[:-3_000], codes[:-3_000].tolist(), matrix[:-3_000])
    index.search(matrix[0], 1)  # the first search scans float32; the second makes the copy
    index.search(matrix[0], 1)
    index.remove(ids[:11])
    index.add(ids[-3_000:], codes[-3_000:].tolist(), matrix[-3_000:])  # grows the matrix
    kept = np.arange(11, rows)
    group = index._groups[dim]  # noqa: SLF001 - the test checks which path answered
    assert group.small is not None
    for _ in range(20):
        # a noisy copy of a stored row: one clear neighbour, then the crowd the bound must sort
        query = matrix[rng.integers(0, rows)] + 0.6 * rng.standard_normal(dim).astype(np.float32) / 8
        for allowed in (None, [1, 2]):
            expected = _brute_force(matrix, ids, codes, kept, query, 50, allowed)
            assert [i for i, _ in index.search(query, 50, allowed)] == expected
        picked = group.small.candidates(len(group.ids), query / np.linalg.norm(query), 50, None)
        assert picked is not None and len(picked) < len(group.ids) // 4  # the pass did prune


def test_the_int8_bound_holds_for_every_row() -> None:
    """The bound of the first pass is never smaller than the true error of a row's int8 score."""
    rng = np.random.default_rng(7)
    matrix = normalise_rows(rng.standard_normal((5_000, 384)).astype(np.float32))
    matrix[3] = 0.0  # a zero row stays exact
    small = Int8Rows(len(matrix), 384)
    small.set(0, matrix)
    for _ in range(5):
        query = normalise_rows(rng.standard_normal(384).astype(np.float32))
        q = Int8Rows(1, 384)
        q.set(0, query.reshape(1, -1))
        approx = (small.codes.astype(np.int64) @ q.codes[0].astype(np.int64)) * small.scales * q.scales[0]
        exact = matrix.astype(np.float64) @ query.astype(np.float64)
        bound = small.errors * (1 + q.errors[0]) + q.errors[0]
        assert np.all(np.abs(exact - approx) <= bound + 1e-6)


def test_adding_an_id_again_replaces_its_vector_in_its_dimension_or_another() -> None:
    index = VectorIndex()
    ids = [uuid.uuid4() for _ in range(4)]
    index.add(ids, [0] * 4, np.eye(4, dtype=np.float32))
    index.add([uuid.uuid4(), ids[1]], [0, 0], np.eye(4, dtype=np.float32)[[3, 0]])  # one new, one again
    assert len(index) == 5
    assert {i for i, score in index.search([1, 0, 0, 0], 5) if score > 0.99} == {ids[0], ids[1]}
    index.add([ids[2]], [0], np.ones((1, 3), dtype=np.float32) / np.sqrt(3))  # now 3-d
    assert len(index) == 5
    assert ids[2] not in {i for i, _ in index.search([0, 0, 1, 0], 5)}
    assert [i for i, _ in index.search([1, 1, 1], 5)] == [ids[2]]


@pytest.mark.parametrize("loaded", [False, True])
def test_a_group_grown_batch_by_batch_across_blocks_answers_as_brute_force(loaded: bool) -> None:
    """Rows added a batch at a time fill one block after another (blocks.py) without copying;
    removes move rows between blocks. Search, the int8 pass and `rows` see every row where it
    is, whether the first rows came as a loaded matrix of their own or batch by batch."""
    rows, dim, batch = 2 * BLOCK_ROWS + 5_000, 8, 1_500
    rng = np.random.default_rng(20261207)
    matrix = normalise_rows(rng.standard_normal((rows, dim)).astype(np.float32))
    ids = [uuid.UUID(int=i + 1) for i in range(rows)]
    codes = rng.integers(0, 3, rows)
    index = VectorIndex()
    first = BLOCK_ROWS + 100 if loaded else 0
    if loaded:
        index.add(ids[:first], codes[:first].tolist(), matrix[:first].copy(), own=True)
    for start in range(first, rows, batch):
        index.add(ids[start:start + batch], codes[start:start + batch].tolist(), matrix[start:start + batch])
        if start < COARSE_ROWS <= start + batch:  # from here on the int8 copy follows the adds
            index.search(matrix[0], 1)
            index.search(matrix[0], 1)
    assert index._groups[dim].small is not None  # noqa: SLF001 - the test checks which path answered
    gone = rng.choice(rows, 300, replace=False)  # holes in every block, filled from the last
    index.remove([ids[i] for i in gone])
    kept = np.setdiff1d(np.arange(rows), gone)
    for _ in range(6):
        query = matrix[rng.integers(0, rows)] + 0.05 * rng.standard_normal(dim).astype(np.float32)
        for allowed in (None, [0, 2]):
            expected = _brute_force(matrix, ids, codes, kept, query, 10, allowed)
            assert [i for i, _ in index.search(query, 10, allowed)] == expected
    picked = rng.permutation(kept[::997])  # rows of every block, in no order
    asked = [ids[i] for i in picked]
    found, vectors = index.rows(asked)[dim]
    assert found == asked
    assert np.array_equal(vectors, matrix[picked])


@pytest.mark.parametrize("first_rows", [0, 40, BLOCK_ROWS + 7])
def test_row_blocks_hold_what_a_single_matrix_would(first_rows: int) -> None:
    """Writes, moves and reads over blocks, against one plain matrix doing the same: a first
    matrix adopted as it is (small or large) or none, then growth by doubling and by new blocks,
    rows moved from the end into holes, and the group shrunk and grown again."""
    rng = np.random.default_rng(first_rows)
    dim = 4
    blocks, plain = RowBlocks(dim), np.zeros((0, dim), dtype=np.float32)
    if first_rows:
        plain = rng.standard_normal((first_rows, dim)).astype(np.float32)
        blocks.adopt(plain.copy())
    for size in (1, 300, 5_000, BLOCK_ROWS, 3, 40_000):
        rows = rng.standard_normal((size, dim)).astype(np.float32)
        blocks.write(len(plain), rows)
        plain = np.concatenate([plain, rows])
        holes = rng.choice(len(plain) - 1, 5, replace=False).tolist() if len(plain) > 6 else []
        for hole in holes:  # a delete: the last row fills the hole
            blocks.move(len(plain) - 1, hole)
            plain[hole] = plain[-1]
            plain = plain[:-1]
    assert blocks.capacity >= len(plain)
    assert np.array_equal(np.concatenate([rows for _, rows in blocks.pieces(len(plain), 1_000)]), plain)
    assert all(len(rows) <= 1_000 for _, rows in blocks.pieces(len(plain), 1_000))
    numbers = rng.choice(len(plain), 500, replace=False)
    query = rng.standard_normal(dim).astype(np.float32)
    assert np.array_equal(blocks.take(numbers), plain[numbers])
    assert np.allclose(blocks.scores(np.sort(numbers), query), plain[np.sort(numbers)] @ query, atol=1e-5)
    assert np.allclose(blocks.scores(numbers, query), plain[numbers] @ query, atol=1e-5)
    shrunk = len(plain) - 20_000  # the rows in use shrink below a block's start; writing goes on from there
    plain = plain[:shrunk]
    more = rng.standard_normal((30_000, dim)).astype(np.float32)
    blocks.write(shrunk, more)
    plain = np.concatenate([plain, more])
    assert np.array_equal(np.concatenate([rows for _, rows in blocks.pieces(len(plain), 4_096)]), plain)
