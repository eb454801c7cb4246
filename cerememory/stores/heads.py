"""Every curated record's head (store, times, access, fidelity, emotion summary), keyed by id.

Opening a data directory reads every head as columns; a `Head` object is made for a record only
when something asks for it (a query's candidates, a write, a decay tick), so opening 100k
records does not build 100k objects before the first query. A head once made is the one
every later reader sees and changes in place (recall reinforces it, decay updates it).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

import numpy as np

from ..collector import lasting_objects
from ..model import STORE_CODE, FidelityState, MemoryRecord, StoreType, from_ts, to_ts
from ..storage.base import HEAD_COLUMNS
from .columns import HeadColumns

STORES = {s.value: s for s in StoreType}  # a store by the name storage holds


@dataclass(slots=True)
class Head:
    store: StoreType
    created_at: float
    updated_at: float
    last_accessed_at: float
    access_count: int
    fidelity_score: float
    noise_level: float
    decay_rate: float
    emotional_anchor: float
    reinforcement_count: int
    stability: float
    last_decay_tick: float
    emotion_intensity: float
    emotion_valence: float
    version: int
    fidelity_base: float  # F0: strength (before emotion) at the last reinforcement

    @classmethod
    def of(cls, record: MemoryRecord) -> Head:
        f = record.fidelity
        return cls(
            store=record.store,
            created_at=to_ts(record.created_at),
            updated_at=to_ts(record.updated_at),
            last_accessed_at=to_ts(record.last_accessed_at),
            access_count=record.access_count,
            fidelity_score=f.score,
            noise_level=f.noise_level,
            decay_rate=f.decay_rate,
            emotional_anchor=f.emotional_anchor,
            reinforcement_count=f.reinforcement_count,
            stability=f.stability,
            last_decay_tick=to_ts(f.last_decay_tick),
            emotion_intensity=record.emotion.intensity,
            emotion_valence=record.emotion.valence,
            version=record.version,
            fidelity_base=f.score,
        )

    def fidelity(self, score: float, noise: float) -> FidelityState:
        """The record's fidelity state, with the current score and noise."""
        return FidelityState(
            score=score,
            noise_level=noise,
            decay_rate=self.decay_rate,
            emotional_anchor=self.emotional_anchor,
            reinforcement_count=self.reinforcement_count,
            stability=self.stability,
            last_decay_tick=from_ts(self.last_decay_tick),
        )


if tuple(f.name for f in fields(Head)) != HEAD_COLUMNS:  # rows are read back by position
    raise ImportError("Head and storage.base.HEAD_COLUMNS disagree")
CREATED_AT = HEAD_COLUMNS.index("created_at") - 1  # among the numeric columns (all but the store)
BY_CODE = {code: store for store, code in STORE_CODE.items()}
CODE_OF = {store.value: code for store, code in STORE_CODE.items()}
ABSENT, MADE = -1, -2  # in `stores_and_created`: an id not held; an id whose head was made


def _numeric(values: Sequence[Any]) -> np.ndarray:
    """A column of numbers as numpy (a masked null becomes NaN, as a float)."""
    if isinstance(values, np.ma.MaskedArray):
        return np.ma.filled(values.astype(np.float64), np.nan)
    return np.asarray(values)


class HeadTable:
    """The heads of the records on disk, by id: each either a `Head` or, until first asked for,
    its row in the columns read at open (numpy: about a sixth of the memory of the objects).
    Reads take no lock; making a head and every change take one, so two readers of a fresh
    row get the same object."""

    def __init__(self) -> None:
        self._slots: dict[uuid.UUID, Head | int] = {}
        self._codes = np.zeros(0, dtype=np.int8)  # STORE_CODE of each row read at open
        self._numeric: list[np.ndarray] = []  # HEAD_COLUMNS[1:] of each row read at open
        self._lock = threading.Lock()

    def load(self, ids: Sequence[uuid.UUID], values: Sequence[Sequence[Any]]) -> None:
        """Take every head read at open (`values[k][i]` is HEAD_COLUMNS[k] of `ids[i]`, the
        store by name) without making a `Head` of any."""
        with self._lock:
            if self._numeric:  # rows of an earlier load still unmade: make them now
                self._make_all()
            self.__dict__.pop("get", None)  # some slots will hold rows again
            self._codes = np.fromiter(map(CODE_OF.__getitem__, values[0]), dtype=np.int8, count=len(ids))
            self._numeric = [_numeric(column) for column in values[1:]]
            self._slots.update(zip(ids, range(len(ids)), strict=True))

    def get(self, record_id: uuid.UUID) -> Head | None:
        slot = self._slots.get(record_id)
        if slot is None or isinstance(slot, Head):
            return slot
        return self._make(record_id)

    def __getitem__(self, record_id: uuid.UUID) -> Head:
        head = self.get(record_id)
        if head is None:
            raise KeyError(record_id)
        return head

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._slots

    def __len__(self) -> int:
        return len(self._slots)

    def __iter__(self) -> Iterator[uuid.UUID]:
        return iter(list(self._slots))

    def items(self) -> list[tuple[uuid.UUID, Head]]:
        """Every head (made now where not made yet), a snapshot safe to iterate while writers
        add or remove records."""
        self.make_all()
        return list(self._slots.items())  # type: ignore[arg-type]  # every slot a Head now

    def make_all(self) -> None:
        """Make every head not made yet, at once: contiguous in memory, in id order, and out of
        the collector's way (a long-lived process does it after its first query, so later
        queries and decay ticks find every head made, as if opening had made them)."""
        if self._numeric:
            with self._lock:
                if self._numeric:  # another thread may have made them meanwhile
                    self._make_all()

    def put_many(self, items: Iterable[tuple[uuid.UUID, Head]]) -> None:
        with self._lock:
            self._slots.update(items)

    def __setitem__(self, record_id: uuid.UUID, head: Head) -> None:
        with self._lock:
            self._slots[record_id] = head

    def discard_many(self, ids: Iterable[uuid.UUID]) -> None:
        with self._lock:
            for record_id in ids:
                self._slots.pop(record_id, None)

    def stores_and_created(self, ids: Sequence[uuid.UUID]) -> tuple[np.ndarray, np.ndarray]:
        """STORE_CODE (-1 for an id not held) and creation time of each of `ids`, read from the
        columns where no head was made: the vector load and the cache warmer ask this of every
        record, and need no `Head` for it."""
        found = list(map(self._slots.get, ids))
        rows = np.fromiter([ABSENT if s is None else MADE if isinstance(s, Head) else s for s in found],
                           dtype=np.int64, count=len(found))
        codes = np.full(len(ids), ABSENT, dtype=np.int64)
        created = np.zeros(len(ids), dtype=np.float64)
        lazy = rows >= 0
        if lazy.any():
            codes[lazy] = self._codes[rows[lazy]]
            created[lazy] = self._numeric[CREATED_AT][rows[lazy]]
        for k in np.flatnonzero(rows == MADE).tolist():
            head = found[k]
            assert isinstance(head, Head)
            codes[k], created[k] = STORE_CODE[head.store], head.created_at
        return codes, created

    def columns(self) -> HeadColumns:
        """Every head as `HeadColumns`, taken from the columns read at open for the rows no
        head was made of: the newest memories, statistics or fading after opening make no
        `Head` for it."""
        with self._lock:  # one snapshot of the slots and of the columns they point into
            if not self._numeric:
                return HeadColumns.of(list(self._slots.items()))  # type: ignore[arg-type]  # every slot a Head
            items, codes, numeric = list(self._slots.items()), self._codes, self._numeric
        slots = [slot for _, slot in items]
        rows = np.fromiter([MADE if isinstance(slot, Head) else slot for slot in slots], dtype=np.int64,
                           count=len(slots))
        lazy, made = rows >= 0, np.flatnonzero(rows == MADE)
        heads = [slots[k] for k in made.tolist()]

        def column(loaded: np.ndarray, of_head: Callable[[Any], Any]) -> np.ndarray:
            out = np.empty(len(slots), dtype=loaded.dtype)
            out[lazy] = loaded[rows[lazy]]
            out[made] = np.fromiter(map(of_head, heads), dtype=loaded.dtype, count=len(heads))
            return out

        def numeric_column(name: str) -> np.ndarray:
            return column(numeric[HEAD_COLUMNS.index(name) - 1].astype(np.float64, copy=False), attrgetter(name))

        ids = [record_id for record_id, _ in items]
        return HeadColumns(ids, column(codes.astype(np.int64), lambda h: STORE_CODE[h.store]),
                           numeric_column("created_at"), last_accessed_at=numeric_column("last_accessed_at"),
                           stability=numeric_column("stability"),
                           emotion_intensity=numeric_column("emotion_intensity"),
                           fidelity_base=numeric_column("fidelity_base"),
                           row_of=dict(zip(ids, range(len(ids)), strict=True)))

    def _make(self, record_id: uuid.UUID) -> Head | None:
        with self._lock:
            slot = self._slots.get(record_id)
            if slot is None or isinstance(slot, Head):
                return slot
            head = self._slots[record_id] = Head(BY_CODE[int(self._codes[slot])],
                                                 *(column[slot].item() for column in self._numeric))
            return head

    def _make_all(self) -> None:
        """Every head not made yet, made at once (the caller holds the lock); the columns read
        at open are then let go."""
        slots = self._slots
        with lasting_objects():
            heads = list(map(Head, map(BY_CODE.__getitem__, self._codes.tolist()),
                             *(column.tolist() for column in self._numeric)))
            for record_id, slot in list(slots.items()):
                if not isinstance(slot, Head):
                    slots[record_id] = heads[slot]
            del heads
        self._codes, self._numeric = np.zeros(0, dtype=np.int8), []
        # every slot holds a Head now: a lookup is the dict's own (recall asks hundreds a query)
        self.get = slots.get  # type: ignore[method-assign,assignment]
