"""Every curated record's head (store, times, access, fidelity, emotion summary), keyed by id.

Opening a data directory reads every head as columns; a `Head` object is made for a record only
when something asks for it (a query's candidates, a write, a decay tick), so opening 100k
records does not build 100k objects before the first query. A head once made is the one
every later reader sees and changes in place (recall reinforces it, decay updates it).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..model import STORE_CODE, FidelityState, MemoryRecord, StoreType, from_ts, to_ts
from ..storage.base import HEAD_COLUMNS

STORES = {s.value: s for s in StoreType}


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
CREATED_AT = HEAD_COLUMNS.index("created_at")


class HeadTable:
    """The heads of the records on disk, by id: each either a `Head` or, until first asked for,
    its row in the columns read at open. Reads without a lock; making a head and every change
    take one, so two readers of a fresh row get the same object."""

    def __init__(self) -> None:
        self._slots: dict[uuid.UUID, Head | int] = {}
        self._loaded: list[Sequence[Any]] = []  # HEAD_COLUMNS values by row, stores as StoreType
        self._lock = threading.Lock()

    def load(self, ids: Sequence[uuid.UUID], values: Sequence[Sequence[Any]]) -> None:
        """Take every head read at open (`values[k][i]` is HEAD_COLUMNS[k] of `ids[i]`, the
        store by name) without making a `Head` of any."""
        with self._lock:
            if self._loaded:  # rows of an earlier load still unmade: make them now
                self._make_all()
            self._loaded = [[STORES[name] for name in values[0]], *values[1:]]
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
        if self._loaded:
            with self._lock:
                self._make_all()
        return list(self._slots.items())  # type: ignore[arg-type]  # every slot a Head now

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
        slots, loaded = self._slots, self._loaded
        codes = np.full(len(ids), -1, dtype=np.int64)
        created = np.zeros(len(ids), dtype=np.float64)
        for k, slot in enumerate(map(slots.get, ids)):
            if slot is None:
                continue
            if isinstance(slot, Head):
                codes[k], created[k] = STORE_CODE[slot.store], slot.created_at
            else:
                codes[k], created[k] = STORE_CODE[loaded[0][slot]], loaded[CREATED_AT][slot]
        return codes, created

    def _make(self, record_id: uuid.UUID) -> Head | None:
        with self._lock:
            slot = self._slots.get(record_id)
            if slot is None or isinstance(slot, Head):
                return slot
            head = self._slots[record_id] = Head(*(column[slot] for column in self._loaded))
            return head

    def _make_all(self) -> None:
        """Every head not made yet, made at once (the caller holds the lock); the columns read
        at open are then let go."""
        loaded, slots = self._loaded, self._slots
        heads = list(map(Head, *loaded))
        for record_id, slot in list(slots.items()):
            if not isinstance(slot, Head):
                slots[record_id] = heads[slot]
        self._loaded = []
