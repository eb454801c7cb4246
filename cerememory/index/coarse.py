"""An int8 copy of a vector group's rows, for a cheap first pass that provably keeps the exact top k.

Each row x is kept as x ~ s * c (c in int8, s = max|x| / 127) with the norm of what rounding
lost, |e_x| = |x - s*c|. A query q is quantised the same way, so the pass is one int8 dot product
per row (simsimd's SIMD kernels over a quarter of float32's bytes, in pieces shared by the
search's threads: threads.py), and Cauchy-Schwarz bounds its error:
|x.q - (s*c).(t*d)| <= |e_x| |q| + |x| |e_q| + |e_x| |e_q|. Every row whose upper bound reaches
the k-th best lower bound is rescored in float32; a row outside that set cannot be in the exact
top k, so the answer is the float32 scan's.
"""

from __future__ import annotations

import numpy as np

from . import threads

ROUNDING_SLACK = 1e-5  # float32 rounding of the scores themselves (an exact score has ~1e-7)
CHUNK_ROWS = 1_024  # rows quantised per step: the temporaries stay in the core's cache
PIECE_ROWS = 16_384  # rows of the int8 pass a search thread takes at a time (6 MB at 384-d)


class Int8Rows:
    """The int8 copy of a group's float32 rows, row for row, grown with it."""

    def __init__(self, capacity: int, dim: int) -> None:
        self.codes = np.zeros((capacity, dim), dtype=np.int8)
        self.scales = np.ones(capacity, dtype=np.float32)
        self.errors = np.zeros(capacity, dtype=np.float32)

    def set(self, start: int, rows: np.ndarray) -> None:
        """Quantise float32 `rows` into rows start, start + 1, ...; a zero row gets scale 1."""
        for a in range(0, len(rows), CHUNK_ROWS):
            part = rows[a:a + CHUNK_ROWS]
            scale = np.maximum(part.max(axis=1), -part.min(axis=1)) / np.float32(127.0)
            scale[scale == 0] = 1.0
            q = part * (np.float32(1.0) / scale)[:, None]
            np.rint(q, out=q)
            at = slice(start + a, start + a + len(part))
            self.codes[at] = q
            self.scales[at] = scale
            q *= scale[:, None]
            np.subtract(part, q, out=q)  # what rounding lost; its norm's float32 rounding (~1e-9)
            self.errors[at] = np.sqrt(np.einsum("ij,ij->i", q, q))  # is far inside ROUNDING_SLACK

    def move(self, source: int, target: int) -> None:
        self.codes[target] = self.codes[source]
        self.scales[target] = self.scales[source]
        self.errors[target] = self.errors[source]

    def grow(self, n: int, capacity: int) -> None:
        """Room for `capacity` rows, the first `n` kept."""
        bigger = Int8Rows(capacity, self.codes.shape[1])
        bigger.codes[:n], bigger.scales[:n], bigger.errors[:n] = self.codes[:n], self.scales[:n], self.errors[:n]
        self.codes, self.scales, self.errors = bigger.codes, bigger.scales, bigger.errors

    def candidates(self, n: int, query: np.ndarray, k: int, excluded: np.ndarray | None) -> np.ndarray | None:
        """Row numbers (of the first `n`) that hold the exact top k of `query` (unit) over rows of
        norm <= 1; None when the bounds are too loose to save a float32 scan (they would keep
        more than a quarter of the rows). `excluded` marks rows that may not be returned."""
        import simsimd  # loaded with the first large search only

        q = Int8Rows(1, len(query))
        q.set(0, query.reshape(1, -1))
        q_scale, q_error = float(q.scales[0]), float(q.errors[0])
        parts: dict[int, np.ndarray] = {}

        def dot_rows(start: int, stop: int) -> None:  # the int8 dot products of rows start..stop
            # not out=: simsimd 6.5 returns None from it without a reference, which frees None
            parts[start] = np.asarray(simsimd.cdist(q.codes, self.codes[start:stop], metric="dot",
                                                    out_dtype="float32"))[0]

        threads.share(n, PIECE_ROWS, dot_rows)
        dots = parts[0] if len(parts) == 1 else np.concatenate([parts[a] for a in sorted(parts)])
        coarse = dots * (self.scales[:n] * q_scale)  # exact integers times the scales
        bound = self.errors[:n] * (1.0 + q_error) + (q_error + ROUNDING_SLACK)
        lower = coarse - bound
        if excluded is not None:
            if int(np.count_nonzero(~excluded)) <= k:
                return np.flatnonzero(~excluded)
            lower[excluded] = -np.inf
        floor = np.partition(lower, n - k)[n - k]  # the k-th best lower bound
        upper = coarse + bound
        if excluded is not None:
            upper[excluded] = -np.inf
        found = np.flatnonzero(upper >= floor)
        return found if len(found) <= n // 4 else None
