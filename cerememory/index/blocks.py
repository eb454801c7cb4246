"""A vector group's float32 rows in blocks, so that growing never copies the rows it holds.

One matrix grown by doubling copies all its rows at each doubling into memory touched for the
first time: at 64k rows of 384 dimensions, 100 MB, which cost a bulk write a few hundred ms of
page faults. Here the first block doubles up to `BLOCK_ROWS` (a copy of at most one block), and
every further block is new memory whose pages are touched only as rows are written into it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import numpy as np

BLOCK_ROWS = 16_384  # 24 MB at 384-d


class RowBlocks:
    """Rows 0, 1, ... of one dimension in blocks laid end to end. The rows in use are always the
    first ones (a delete fills its hole with the last row), so a write starts at most right
    after them."""

    def __init__(self, dim: int, capacity: int = 16) -> None:
        self.dim = dim
        self._blocks: list[np.ndarray] = [np.zeros((capacity, dim), dtype=np.float32)]
        self._starts: list[int] = [0]  # the first row of each block

    @property
    def capacity(self) -> int:
        return self._starts[-1] + len(self._blocks[-1])

    def adopt(self, matrix: np.ndarray) -> None:
        """Take `matrix` (float32, C-ordered, used by nothing else) as rows 0... as it is."""
        self._blocks, self._starts = [matrix], [0]

    def write(self, start: int, rows: np.ndarray) -> None:
        """Set rows start, start + 1, ... (`start` at most the rows in use), making room."""
        self._reserve(start, start + len(rows))
        block = bisect.bisect_right(self._starts, start) - 1
        done = 0
        while done < len(rows):
            at = start + done - self._starts[block]
            count = min(len(rows) - done, len(self._blocks[block]) - at)
            self._blocks[block][at:at + count] = rows[done:done + count]
            done += count
            block += 1

    def _reserve(self, used: int, need: int) -> None:
        first = self._blocks[0]
        if len(self._blocks) == 1 and len(first) < min(need, BLOCK_ROWS):  # a small group's block doubles
            grown = np.zeros((min(BLOCK_ROWS, max(need, 2 * len(first))), self.dim), dtype=np.float32)
            grown[:used] = first[:used]
            self._blocks[0] = grown
        capacity = self.capacity
        if need > capacity:
            self._starts.append(capacity)
            self._blocks.append(np.zeros((max(BLOCK_ROWS, need - capacity), self.dim), dtype=np.float32))

    def move(self, source: int, target: int) -> None:
        block = self._block_of(target)
        self._blocks[block][target - self._starts[block]] = self.row(source)

    def row(self, number: int) -> np.ndarray:
        block = self._block_of(number)
        return self._blocks[block][number - self._starts[block]]

    def _block_of(self, number: int) -> int:
        return bisect.bisect_right(self._starts, number) - 1

    def take(self, numbers: np.ndarray) -> np.ndarray:
        """A copy of the rows `numbers` (an integer array), in that order."""
        if len(self._blocks) == 1:
            return self._blocks[0][numbers]
        out = np.empty((len(numbers), self.dim), dtype=np.float32)
        for block, where, local in self._runs(numbers):
            out[where] = block[local]
        return out

    def scores(self, numbers: np.ndarray, query: np.ndarray) -> np.ndarray:
        """The rows `numbers` times `query`, without gathering the rows into one matrix first."""
        if len(self._blocks) == 1:
            return self._blocks[0][numbers] @ query
        out = np.empty(len(numbers), dtype=np.float32)
        for block, where, local in self._runs(numbers):
            out[where] = block[local] @ query
        return out

    def _runs(self, numbers: np.ndarray) -> Iterator[tuple[np.ndarray, slice | np.ndarray, np.ndarray]]:
        """Per block holding some of the rows `numbers`: the block, where those rows are among
        `numbers`, and their numbers within the block. Sorted numbers (a search's candidates)
        fall into one run per block; others are sorted first."""
        order = None
        if len(numbers) > 1 and not (numbers[1:] >= numbers[:-1]).all():
            order = np.argsort(numbers, kind="stable")
            numbers = numbers[order]
        ends = [*np.searchsorted(numbers, self._starts[1:]).tolist(), len(numbers)]
        first = 0
        for block, start, end in zip(self._blocks, self._starts, ends, strict=True):
            if end > first:
                yield block, slice(first, end) if order is None else order[first:end], numbers[first:end] - start
            first = end

    def pieces(self, used: int, piece_rows: int) -> list[tuple[int, np.ndarray]]:
        """Rows [0, used) as (first row, view) pieces of at most `piece_rows` rows, none across
        two blocks."""
        out: list[tuple[int, np.ndarray]] = []
        for start, block in zip(self._starts, self._blocks, strict=True):
            stop = min(used, start + len(block))
            for a in range(start, stop, piece_rows):
                out.append((a, block[a - start:min(stop, a + piece_rows) - start]))
        return out
