"""Exact cosine search over L2-normalised float32 rows held in RAM (numpy).

Vectors of different dimensions (an embedder's and caller-supplied ones) live in separate
groups; a query only meets vectors of its own dimension. A large group also keeps an int8 copy
of its rows (a quarter of the float32 size) for a first pass that finds the rows worth scoring
in float32 (coarse.py); the answer is the float32 scan's either way.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import numpy as np

from ..embed.base import normalise_rows
from . import coarse, threads
from .blocks import RowBlocks

PARALLEL_ROWS = 32_768  # below this one thread scans faster than a hand-off to others
SCAN_PIECE_ROWS = 16_384  # rows a thread scans and cuts to its k best at a time
# from this many rows a group keeps an int8 copy for the first pass. It is made at the group's
# second search (about 0.2 s at 100k rows: more than the float32 scans of a short command that
# searches once, and nothing at open), and kept up to date from then on.
COARSE_ROWS = 32_768


def _excluded(codes: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Which rows' codes are not in `allowed`: one lookup in a 256-entry table per row (the
    codes are int8), a quarter of what np.isin costs at 100k rows."""
    table = np.ones(256, dtype=bool)
    table[allowed.view(np.uint8)] = False
    return table[codes.view(np.uint8)]


def _top(matrix: np.ndarray, codes: np.ndarray, query: np.ndarray, k: int,
         allowed: np.ndarray | None, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(row numbers, scores) of the k best rows of one slice, unordered."""
    scores = matrix @ query
    if allowed is not None:
        scores[_excluded(codes, allowed)] = -np.inf
    if k < len(scores):
        rows = np.argpartition(scores, len(scores) - k)[len(scores) - k:]
        return rows + offset, scores[rows]
    return np.arange(offset, offset + len(scores)), scores


def _scan_top(pieces: list[tuple[int, np.ndarray]], codes: np.ndarray, query: np.ndarray, k: int,
              allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The k best of the rows in `pieces` ((first row, rows) each) for `query`, each piece cut to
    its own k best and the few survivors merged here. Many rows are scanned by the search's
    threads (threads.py); fewer than PARALLEL_ROWS by this one."""
    found: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def top_of(first: int, stop: int) -> None:
        for start, rows in pieces[first:stop]:
            found[start] = _top(rows, codes[start:start + len(rows)], query, k, allowed, start)

    if sum(len(rows) for _, rows in pieces) < PARALLEL_ROWS:
        top_of(0, len(pieces))
    else:
        threads.share(len(pieces), 1, top_of)
    if len(found) == 1:
        return found[0]
    found = dict(sorted(found.items()))
    return (np.concatenate([rows for rows, _ in found.values()]),
            np.concatenate([scores for _, scores in found.values()]))


class _Group:
    """Rows of one dimension (blocks.py); deletes swap the last row into the hole."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.rows = RowBlocks(dim)
        self.codes = np.zeros(16, dtype=np.int8)
        self.ids: list[uuid.UUID] = []
        self.row_of: dict[uuid.UUID, int] = {}
        # the int8 copy for the first pass of a large group; None until a search needs it
        self.small: coarse.Int8Rows | None = None
        self.searched = False

    def add(self, ids: Sequence[uuid.UUID], codes: Sequence[int], rows: np.ndarray, *, own: bool = False) -> None:
        """Append rows for ids the group does not hold (`VectorIndex.add` removes any it did)."""
        n, need = len(self.ids), len(self.ids) + len(ids)
        if n == 0 and len(ids) > self.rows.capacity and rows.dtype == np.float32 and rows.flags.c_contiguous \
                and rows.flags.writeable and (own or rows.flags.owndata):
            self.rows.adopt(rows)  # a group's first rows, a matrix of their own (loading at open)
        else:
            self.rows.write(n, rows)
        if need > len(self.codes):
            grown = np.zeros(max(need, 2 * len(self.codes)), dtype=np.int8)
            grown[:n] = self.codes[:n]
            self.codes = grown
        self.codes[n:need] = codes
        if self.small is not None:
            if need > len(self.small.scales):
                self.small.grow(n, max(need, 2 * len(self.small.scales)))
            self.small.set(n, np.asarray(rows, dtype=np.float32))
        self.row_of.update(zip(ids, range(n, need), strict=True))
        self.ids.extend(ids)

    def remove(self, ids: Sequence[uuid.UUID]) -> None:
        for record_id in ids:
            row = self.row_of.pop(record_id, None)
            if row is None:
                continue
            last = len(self.ids) - 1
            if row != last:
                moved = self.ids[last]
                self.rows.move(last, row)
                self.codes[row] = self.codes[last]
                if self.small is not None:
                    self.small.move(last, row)
                self.ids[row] = moved
                self.row_of[moved] = row
            self.ids.pop()

    def set_code(self, record_id: uuid.UUID, code: int) -> None:
        row = self.row_of.get(record_id)
        if row is not None:
            self.codes[row] = code

    def search(self, query: np.ndarray, k: int,
               allowed_codes: Sequence[int] | None) -> list[tuple[uuid.UUID, float]]:
        n = len(self.ids)
        if n == 0:
            return []
        allowed = np.asarray(allowed_codes, dtype=np.int8) if allowed_codes is not None else None
        found = self._coarse_top(query, min(k, n), allowed) if n >= COARSE_ROWS and k < n // 4 else None
        rows, scores = found if found is not None else _scan_top(
            self.rows.pieces(n, SCAN_PIECE_ROWS), self.codes, query, min(k, n), allowed)
        best = np.argsort(-scores, kind="stable")[:k]
        best = best[np.isfinite(scores[best])]
        ids = self.ids  # plain ints and floats: no numpy scalar per hit
        return [(ids[r], s) for r, s in zip(rows[best].tolist(), scores[best].tolist(), strict=True)]

    def _coarse_top(self, query: np.ndarray, k: int,
                    allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The k best rows by the int8 pass and a float32 rescoring of the rows it keeps;
        None when the pass would not save the float32 scan."""
        n = len(self.ids)
        if self.small is None:
            if not self.searched:
                self.searched = True
                return None
            self.small = coarse.Int8Rows(self.rows.capacity, self.dim)
            for start, piece in self.rows.pieces(n, SCAN_PIECE_ROWS):
                self.small.set(start, piece)
        excluded = None if allowed is None else _excluded(self.codes[:n], allowed)
        rows = self.small.candidates(n, query, k, excluded)
        if rows is None:
            return None
        scores = self.rows.scores(rows, query)
        if excluded is not None:
            scores[excluded[rows]] = -np.inf
        if k < len(rows):
            best = np.argpartition(scores, len(scores) - k)[len(scores) - k:]
            rows, scores = rows[best], scores[best]
        return rows, scores


class VectorIndex:
    """id -> unit vector, searchable by exact cosine, with a small integer tag per row for filters."""

    backend = "numpy_exact_cosine"

    def __init__(self) -> None:
        self._groups: dict[int, _Group] = {}
        self._dim_of: dict[uuid.UUID, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._dim_of)

    def __contains__(self, record_id: uuid.UUID) -> bool:
        return record_id in self._dim_of

    def add(self, ids: Sequence[uuid.UUID], codes: Sequence[int], rows: np.ndarray, *, own: bool = False) -> None:
        """Add or replace vectors; rows must already be normalised. `own`: the caller hands
        `rows` over (a matrix nothing else uses), so the index may keep it as its storage."""
        if not len(ids):
            return
        with self._lock:
            # one pass in C: new records are the usual case; an empty index has nothing to check
            if self._dim_of and not self._dim_of.keys().isdisjoint(ids):
                for record_id in ids:
                    self._discard(record_id)
            dim: int = rows.shape[1]
            group = self._groups.setdefault(dim, _Group(dim))
            group.add(list(ids), codes, rows, own=own)
            self._dim_of.update(dict.fromkeys(ids, dim))

    def remove(self, ids: Sequence[uuid.UUID]) -> None:
        with self._lock:
            for record_id in ids:
                self._discard(record_id)

    def _discard(self, record_id: uuid.UUID) -> None:
        dim = self._dim_of.pop(record_id, None)
        if dim is not None:
            self._groups[dim].remove([record_id])

    def set_code(self, record_id: uuid.UUID, code: int) -> None:
        dim = self._dim_of.get(record_id)
        if dim is not None:
            self._groups[dim].set_code(record_id, code)

    def rows(self, ids: Sequence[uuid.UUID]) -> dict[int, tuple[list[uuid.UUID], np.ndarray]]:
        """The stored unit vectors of `ids` (those that have one), grouped by dimension; copies."""
        out: dict[int, tuple[list[uuid.UUID], np.ndarray]] = {}
        with self._lock:
            for dim, group in self._groups.items():
                found = [i for i in ids if i in group.row_of]
                if found:
                    out[dim] = (found, group.rows.take(np.array([group.row_of[i] for i in found])))
        return out

    def search(
        self, query: Sequence[float] | np.ndarray, k: int, allowed_codes: Sequence[int] | None = None
    ) -> list[tuple[uuid.UUID, float]]:
        threads.set_blas_policy()  # at the first search, not at open: a short command may never search
        q = normalise_rows(query)
        with self._lock:
            group = self._groups.get(q.shape[0])
            if group is None:
                return []
            return group.search(q, k, allowed_codes)
