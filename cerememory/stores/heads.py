"""Every curated record's head (store, times, access, fidelity, emotion summary), keyed by id.

Opening a data directory reads every head as columns; a `Head` object is made for a record only
when something asks for it (a query's candidates, a write, a decay tick), so opening 100k
records does not build 100k objects before the first query. A head once made is the one
every later reader sees and changes in place (recall reinforces it, decay updates it).
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any

import numpy as np

from ..collector import lasting_objects
from ..model import STORE_CODE, FidelityState, MemoryRecord, StoreType, built, from_ts, to_ts
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

    @staticmethod
    def sources(record: MemoryRecord) -> tuple[int, ...]:
        """The identities of every value `of` reads from `record`: records whose sources are the
        same objects (a batch's shared times, fidelity and emotion) have equal heads."""
        return (id(record.store), id(record.created_at), id(record.updated_at), id(record.last_accessed_at),
                record.access_count, id(record.fidelity), id(record.emotion), record.version)

    def fidelity(self, score: float, noise: float) -> FidelityState:
        """The record's fidelity state, with the current score and noise: built from values
        already checked when they were stored (a recall makes one per memory it returns)."""
        return built(FidelityState, {
            "score": float(score), "noise_level": float(noise), "decay_rate": float(self.decay_rate),
            "emotional_anchor": float(self.emotional_anchor), "reinforcement_count": int(self.reinforcement_count),
            "stability": float(self.stability), "last_decay_tick": from_ts(self.last_decay_tick),
        })


if tuple(f.name for f in fields(Head)) != HEAD_COLUMNS:  # rows are read back by position
    raise ImportError("Head and storage.base.HEAD_COLUMNS disagree")
CREATED_AT = HEAD_COLUMNS.index("created_at") - 1  # among the numeric columns (all but the store)
BY_CODE = {code: store for store, code in STORE_CODE.items()}
CODE_OF = {store.value: code for store, code in STORE_CODE.items()}
ABSENT = -1  # in `stores_and_created`: an id not held
_INT = attrgetter("int")  # an id's key in `_Rows.row_of`
_COMPACT_AFTER = 4096  # removed rows kept before the rows are compacted (and at most as many as live ones)


def _store_codes(heads: Sequence[Head]) -> np.ndarray:
    return np.fromiter(map(STORE_CODE.__getitem__, map(attrgetter("store"), heads)), dtype=np.int64,
                       count=len(heads))


def _floats(heads: Sequence[Head], name: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(name), heads), dtype=np.float64, count=len(heads))


def _numeric(values: Sequence[Any]) -> np.ndarray:
    """A column of numbers as numpy (a masked null becomes NaN, as a float). Only a process that
    imported `numpy.ma` can hold a masked array: one that did not need not import it to ask."""
    ma = sys.modules.get("numpy.ma")
    if ma is not None and isinstance(values, ma.MaskedArray):
        return ma.filled(values.astype(np.float64), np.nan)
    return np.asarray(values)


@dataclass(frozen=True, slots=True)
class _Rows:
    """Which row holds each id (by `uuid.int`: an int hashes in C, a UUID through its Python
    `__hash__`, three times as slow to key the 100k ids read at open), and each row's id and
    head (None: not made yet, or removed). Rows only grow while a table lives, except when `HeadTable` compacts
    them into a new `_Rows`; a reader holding an older one still finds the same heads in it."""

    row_of: dict[int, int] = field(default_factory=dict)
    ids: list[uuid.UUID | None] = field(default_factory=list)
    heads: list[Head | None] = field(default_factory=list)

    def live(self) -> list[int]:
        return list(self.row_of.values())


class HeadTable:
    """The heads of the records on disk, by id: each either a `Head` or, until first asked for,
    its row in the columns read at open (numpy: about a sixth of the memory of the objects).
    Reads take no lock; making a head and every change take one, so two readers of a fresh
    row get the same object."""

    def __init__(self) -> None:
        self._rows = _Rows()
        self._codes = np.zeros(0, dtype=np.int8)  # STORE_CODE of each row read at open
        self._numeric: list[np.ndarray] = []  # HEAD_COLUMNS[1:] of each row read at open
        self._dead = 0  # rows of removed records, until a compaction drops them
        self._lock = threading.Lock()

    def load(self, ids: Sequence[uuid.UUID], values: Sequence[Sequence[Any]]) -> None:
        """Take every head read at open (`values[k][i]` is HEAD_COLUMNS[k] of `ids[i]`, the
        store by name) without making a `Head` of any: each stays a row of the columns."""
        with self._lock:
            if len(self._rows.row_of):
                raise RuntimeError("load() fills an empty table; put_many() adds to one")
            n = len(ids)
            stores = values[0].tolist() if isinstance(values[0], np.ndarray) else values[0]  # a list maps faster
            self._codes = np.fromiter(map(CODE_OF.__getitem__, stores), dtype=np.int8, count=n)
            self._numeric = [_numeric(column) for column in values[1:]]
            self._rows = _Rows(dict(zip(map(_INT, ids), range(n), strict=True)), list(ids), [None] * n)
            self._dead = 0

    def get(self, record_id: uuid.UUID) -> Head | None:
        rows = self._rows
        row = rows.row_of.get(record_id.int)
        if row is None:
            return None
        head = rows.heads[row]
        return head if head is not None else self._make(record_id)

    def get_many(self, ids: Sequence[uuid.UUID]) -> list[Head | None]:
        """`get` of each of `ids`, the rows found by int in one pass (a query asks this of
        every candidate)."""
        rows = self._rows
        found = list(map(rows.row_of.get, map(_INT, ids)))
        heads = [None if row is None else rows.heads[row] for row in found]
        for n, head in enumerate(heads):
            if head is None and found[n] is not None:
                heads[n] = self._make(ids[n])
        return heads

    def __getitem__(self, record_id: uuid.UUID) -> Head:
        head = self.get(record_id)
        if head is None:
            raise KeyError(record_id)
        return head

    def __contains__(self, record_id: object) -> bool:
        return isinstance(record_id, uuid.UUID) and record_id.int in self._rows.row_of

    def __len__(self) -> int:
        return len(self._rows.row_of)

    def holding(self, ids: Sequence[uuid.UUID]) -> np.ndarray:
        """Whether each of `ids` is held, as booleans: one lookup of its int per id, with no
        snapshot of every id held made for it."""
        row_of = self._rows.row_of
        return np.fromiter(map(row_of.__contains__, map(_INT, ids)), dtype=bool, count=len(ids))

    def __iter__(self) -> Iterator[uuid.UUID]:
        """The ids held now (a snapshot, in the order they were first held)."""
        with self._lock:
            rows = self._rows
            return iter(list(map(rows.ids.__getitem__, rows.live())))  # type: ignore[arg-type]

    def items(self) -> list[tuple[uuid.UUID, Head]]:
        """Every head (made now where not made yet), a snapshot safe to iterate while writers
        add or remove records."""
        self.make_all()
        with self._lock:
            rows = self._rows
            live = rows.live()
            return list(zip(map(rows.ids.__getitem__, live), map(rows.heads.__getitem__, live), strict=True))  # type: ignore[arg-type]

    def make_all(self) -> None:
        """Make every head not made yet, at once: contiguous in memory, in id order, and out of
        the collector's way (a long-lived process does it once it is idle after its first
        query, so later queries and decay ticks find every head made, as if opening had)."""
        if self._numeric:
            with self._lock:
                if self._numeric:  # another thread may have made them meanwhile
                    self._make_all()

    def put_many(self, items: Iterable[tuple[uuid.UUID, Head]]) -> None:
        with self._lock:
            rows = self._rows
            for record_id, head in items:
                row = rows.row_of.get(record_id.int)
                if row is None:  # a new record: its row is complete before the id points at it
                    rows.ids.append(record_id)
                    rows.heads.append(head)
                    rows.row_of[record_id.int] = len(rows.ids) - 1
                else:
                    rows.heads[row] = head

    def __setitem__(self, record_id: uuid.UUID, head: Head) -> None:
        self.put_many([(record_id, head)])

    def discard_many(self, ids: Iterable[uuid.UUID]) -> None:
        with self._lock:
            rows = self._rows
            for record_id in ids:
                row = rows.row_of.pop(record_id.int, None)
                if row is not None:  # the id points nowhere before its row is cleared
                    rows.ids[row] = rows.heads[row] = None
                    self._dead += 1
            if self._dead > max(_COMPACT_AFTER, len(rows.row_of)) and not self._numeric:
                self._compact()

    def stores_and_created(self, ids: Sequence[uuid.UUID]) -> tuple[np.ndarray, np.ndarray]:
        """STORE_CODE (-1 for an id not held) and creation time of each of `ids`, read from the
        columns where no head was made: the vector load asks this of every record, and needs
        no `Head` for it."""
        with self._lock:  # one snapshot of the rows and of the columns they point into
            rows, codes_read, numeric = self._rows, self._codes, self._numeric
            found = np.fromiter(map(rows.row_of.get, map(_INT, ids), repeat(ABSENT)), dtype=np.int64,
                                count=len(ids))
            held = np.flatnonzero(found >= 0)
            heads = list(map(rows.heads.__getitem__, found[held].tolist()))
        codes = np.full(len(ids), ABSENT, dtype=np.int64)
        created = np.zeros(len(ids), dtype=np.float64)
        made = np.fromiter(map(is_not, heads, repeat(None)), dtype=bool, count=len(heads))
        lazy = held[~made]
        if len(lazy):  # rows read at open, no head made of them: every one has a row of the columns
            codes[lazy] = codes_read[found[lazy]]
            created[lazy] = numeric[CREATED_AT][found[lazy]]
        made_heads = [head for head in heads if head is not None]
        codes[held[made]] = _store_codes(made_heads)
        created[held[made]] = _floats(made_heads, "created_at")
        return codes, created

    def columns(self) -> HeadColumns:
        """Every head as `HeadColumns`, taken from the columns read at open for the rows no
        head was made of: the newest memories, statistics or fading after opening make no
        `Head` for it."""
        with self._lock:  # one snapshot of the rows and of the columns they point into
            rows, codes_read, numeric = self._rows, self._codes, self._numeric
            order = rows.live()
            ids = list(map(rows.ids.__getitem__, order))
            heads = list(map(rows.heads.__getitem__, order))
        live = np.array(order, dtype=np.int64)
        made = np.fromiter(map(is_not, heads, repeat(None)), dtype=bool, count=len(heads))
        lazy = np.flatnonzero(~made)
        made_at = np.flatnonzero(made)
        made_heads = [head for head in heads if head is not None]

        def column(loaded: np.ndarray | None, of_made: np.ndarray) -> np.ndarray:
            out = np.empty(len(order), dtype=of_made.dtype)
            if len(lazy):  # rows read at open, no head made of them: every one has a row of the columns
                assert loaded is not None
                out[lazy] = loaded[live[lazy]]
            out[made_at] = of_made
            return out

        def numeric_column(name: str) -> np.ndarray:
            return column(numeric[HEAD_COLUMNS.index(name) - 1] if numeric else None, _floats(made_heads, name))

        return HeadColumns(ids, column(codes_read, _store_codes(made_heads)),  # type: ignore[arg-type]
                           numeric_column("created_at"), last_accessed_at=numeric_column("last_accessed_at"),
                           stability=numeric_column("stability"),
                           emotion_intensity=numeric_column("emotion_intensity"),
                           fidelity_base=numeric_column("fidelity_base"))

    def _make(self, record_id: uuid.UUID) -> Head | None:
        with self._lock:
            rows = self._rows
            row = rows.row_of.get(record_id.int)
            if row is None:
                return None
            head = rows.heads[row]
            if head is None:  # a row read at open (a record added later came with its head)
                head = rows.heads[row] = Head(BY_CODE[int(self._codes[row])],
                                              *(column[row].item() for column in self._numeric))
            return head

    def _make_all(self) -> None:
        """Every head not made yet, made at once (the caller holds the lock); the columns read
        at open are then let go."""
        rows = self._rows
        with lasting_objects():
            made = list(map(Head, map(BY_CODE.__getitem__, self._codes.tolist()),
                            *(column.tolist() for column in self._numeric)))
            heads = rows.heads
            for row in rows.live():
                if row < len(made) and heads[row] is None:
                    heads[row] = made[row]
            del made
        self._codes, self._numeric = np.zeros(0, dtype=np.int8), []

    def _compact(self) -> None:
        """Rows of the live records only, renumbered (the caller holds the lock, and every head
        is made, so no column is numbered by the old rows)."""
        rows = self._rows
        live = rows.live()
        ids = list(map(rows.ids.__getitem__, live))
        self._rows = _Rows(dict(zip(map(_INT, ids), range(len(ids)), strict=True)),
                           ids, list(map(rows.heads.__getitem__, live)))
        self._dead = 0
