"""Every head's numeric fields as numpy columns, for the questions asked of all records at once
(`introspect.stats`, `introspect.fading`, the most recent memories).

Reading 100k heads field by field costs a Python call per field per record, about 100 ms a
question; the columns are built once per change of the record set and then reused. A recall
changes a few heads in place (strength, stability, last access): those rows are patched into
a copy instead of a rebuild (`RecordStore.columns`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from operator import attrgetter
from typing import Protocol

import numpy as np

from ..model import STORE_CODE, StoreType


class HeadFields(Protocol):
    store: StoreType
    created_at: float
    last_accessed_at: float
    stability: float
    emotion_intensity: float
    fidelity_base: float


class HeadSource(Protocol):
    def get(self, record_id: uuid.UUID, /) -> HeadFields | None: ...


PATCHED = ("last_accessed_at", "stability", "fidelity_base", "emotion_intensity")


@dataclass(frozen=True)
class HeadColumns:
    ids: list[uuid.UUID]
    codes: np.ndarray  # STORE_CODE of each record's store
    created_at: np.ndarray
    last_accessed_at: np.ndarray
    stability: np.ndarray
    emotion_intensity: np.ndarray
    fidelity_base: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def row_of(self) -> dict[int, int]:
        """The row of each id, by `uuid.int` (made when first patched: most columns never are)."""
        return dict(zip(map(attrgetter("int"), self.ids), range(len(self.ids)), strict=True))

    @classmethod
    def of(cls, items: Sequence[tuple[uuid.UUID, HeadFields]]) -> HeadColumns:
        n = len(items)
        ids = [i for i, _ in items]
        heads = [h for _, h in items]

        def column(name: str) -> np.ndarray:
            return np.fromiter(map(attrgetter(name), heads), dtype=np.float64, count=n)

        codes = np.fromiter((STORE_CODE[h.store] for h in heads), dtype=np.int64, count=n)
        return cls(ids, codes, column("created_at"), last_accessed_at=column("last_accessed_at"),
                   stability=column("stability"), emotion_intensity=column("emotion_intensity"),
                   fidelity_base=column("fidelity_base"))

    def patched(self, heads: HeadSource, ids: Iterable[uuid.UUID]) -> HeadColumns:
        """A copy with the rows of `ids` read again from `heads` (callers may still hold this one)."""
        rows = [(row, head) for i in set(ids)
                if (row := self.row_of.get(i.int)) is not None and (head := heads.get(i)) is not None]
        if not rows:
            return self
        changed = {name: getattr(self, name).copy() for name in PATCHED}
        for row, head in rows:
            for name, values in changed.items():
                values[row] = getattr(head, name)
        copy = replace(self, **changed)
        object.__setattr__(copy, "row_of", self.row_of)  # the same ids in the same rows
        return copy

    def newest(self, stores: Iterable[StoreType], k: int, start: float | None = None,
               end: float | None = None) -> list[uuid.UUID]:
        """The `k` most recently created records of `stores` (created within [start, end] when
        given), newest first."""
        mask = np.isin(self.codes, [STORE_CODE[s] for s in stores])
        if start is not None and end is not None:
            mask &= (self.created_at >= start) & (self.created_at <= end)
        rows = np.flatnonzero(mask)
        if len(rows) > k:
            rows = rows[np.argpartition(-self.created_at[rows], k - 1)[:k]]
        rows = rows[np.argsort(-self.created_at[rows], kind="stable")]
        return [self.ids[row] for row in rows]
