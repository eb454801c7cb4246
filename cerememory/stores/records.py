"""The curated stores (episodic, semantic, procedural, emotional) over the `records` table.

The hot, mutable part of each record (its *head*: store, times, access, fidelity, emotion
summary) is held in RAM for every record (`heads.HeadTable`: as the columns read at open until
a record is first asked for), so ranking and filtering never query per candidate; the body
(content, emotion, metadata, meta-memory) stays in the system of record as a sealed codec blob
and is fetched for the few records a response returns.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import starmap
from typing import Any

import numpy as np

from ..model import Association, FidelityState, MemoryRecord, RecordBody, StoreType, from_ts
from ..storage import codec
from ..storage.base import HEAD_COLUMNS, RecordRows, StoredHeads, Tables
from ..storage.crypto import PLAINTEXT, Sealer
from .bodies import record_bodies
from .columns import HeadColumns
from .heads import STORES, Head, HeadTable
from .undecodable import UndecodableLog, UndecodableRecord

TOUCHED_LIMIT = 10_000  # reinforced heads patched into the columns; past it they are rebuilt


def _head_columns(heads: Sequence[Head]) -> dict[str, Sequence[Any]]:
    columns: dict[str, Sequence[Any]] = {}
    for name in HEAD_COLUMNS:
        columns[name] = [getattr(h, name) for h in heads]
    columns["store"] = [h.store.value for h in heads]
    return columns


def _new_heads(records: Sequence[MemoryRecord]) -> tuple[list[Head], dict[str, Sequence[Any]]]:
    """The heads of new records and their columns. The records of a batch share their times,
    fidelity and emotion (the same objects): a head's values are made once for all records
    sharing them, and the columns are those values transposed, with no attribute read per head."""
    made: dict[tuple[int, ...], tuple[Any, ...]] = {}
    rows = []
    for r in records:
        key = Head.sources(r)
        values = made.get(key)
        if values is None:  # the records hold every object keyed by id() meanwhile
            head = Head.of(r)
            values = made[key] = tuple(getattr(head, name) for name in HEAD_COLUMNS)
        rows.append(values)
    heads = list(starmap(Head, rows))
    transposed = zip(*rows, strict=True) if rows else [()] * len(HEAD_COLUMNS)
    columns: dict[str, Sequence[Any]] = dict(zip(HEAD_COLUMNS, transposed, strict=True))
    columns["store"] = [store.value for store in columns["store"]]
    return heads, columns


@dataclass(frozen=True, slots=True)
class Reinforcement:
    """One recall of a record: the parameters of `dynamics.decay.reinforce` at `at`, and the
    head's strength, stability and last access before and after it in this process."""

    record_id: uuid.UUID
    at: float
    exponent: float
    boost: float
    lift: float  # the share of lost strength a recall restores
    before: tuple[float, float, float]  # (fidelity_base, stability, last_accessed_at)
    after: tuple[float, float]  # (fidelity_base, stability)


@dataclass
class Written:
    ids: list[uuid.UUID]
    heads: list[Head]
    bodies: list[bytes]
    bumped: int | None = None  # the new value of the counter the insert bumped, if it did


class BodyCache:
    """Recently written or read record bodies, bounded in bytes (LRU), so that returning
    results rarely touches DuckDB."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[uuid.UUID, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        with self._lock:
            found = {}
            for i in ids:
                body = self._items.get(i)
                if body is not None:
                    self._items.move_to_end(i)
                    found[i] = body
            return found

    def put_many(self, items: Iterable[tuple[uuid.UUID, bytes]]) -> None:
        with self._lock:
            for record_id, body in items:
                old = self._items.pop(record_id, None)
                if old is not None:
                    self.bytes -= len(old)
                if len(body) > self.max_bytes // 8:
                    continue  # one huge body must not flush the whole cache
                self._items[record_id] = body
                self.bytes += len(body)
            while self.bytes > self.max_bytes and self._items:
                _, evicted = self._items.popitem(last=False)
                self.bytes -= len(evicted)

    def add_missing(self, items: Iterable[tuple[uuid.UUID, bytes]]) -> bool:
        """Cache bodies not cached yet (never replacing a newer one); False once the cache is full."""
        with self._lock:
            for record_id, body in items:
                if record_id in self._items or len(body) > self.max_bytes // 8:
                    continue
                if self.bytes + len(body) > self.max_bytes:
                    return False
                self._items[record_id] = body
                self._items.move_to_end(record_id, last=False)  # warmed bodies are evicted first
                self.bytes += len(body)
            return True

    def discard(self, ids: Iterable[uuid.UUID]) -> None:
        with self._lock:
            for i in ids:
                old = self._items.pop(i, None)
                if old is not None:
                    self.bytes -= len(old)


@dataclass(frozen=True)
class FreshRecords:
    """Heads (and bodies, opened, when `bodies`) of some records as the database held them."""

    ids: list[uuid.UUID]
    rows: list[tuple[uuid.UUID, Any]]
    bodies: list[tuple[uuid.UUID, bytes]]
    with_bodies: bool

    def without(self, ids: Collection[uuid.UUID]) -> FreshRecords:
        """The same read, leaving `ids` out."""
        return FreshRecords([i for i in self.ids if i not in ids], [r for r in self.rows if r[0] not in ids],
                            [b for b in self.bodies if b[0] not in ids], self.with_bodies)


class RecordStore:
    """Persistence and RAM heads for the curated records that live on disk."""

    def __init__(self, rows: RecordRows, *, cache_bytes: int = 256 * 1024 * 1024, sealer: Sealer = PLAINTEXT,
                 undecodable: UndecodableLog | None = None) -> None:
        self.rows = rows  # reads outside a transaction; writes go through the caller's unit of work
        self.sealer = sealer  # bodies are sealed on the way to storage and opened on the way back
        self.undecodable = undecodable or UndecodableLog()  # bodies no read can use: skipped, reported
        self.heads = HeadTable()
        self.reinforcements: list[Reinforcement] = []  # recalls not yet written (see `reinforced`)
        self._queue_lock = threading.Lock()
        self.cache = BodyCache(cache_bytes)
        # bumped whenever a record is written or removed (not by decay or recall, which change
        # only fidelity and access): what was derived from bodies at revision N still holds at N
        self.revision = 0
        # the heads as columns (see `columns`), and the ids recall changed in place since
        self._columns: HeadColumns | None = None
        self._columns_revision = -1
        self._touched: list[uuid.UUID] = []
        self._stale = False  # too many touched, or heads re-read from the database: rebuild
        self._columns_lock = threading.Lock()

    def load(self) -> StoredHeads:
        """Read every head (column by column: a head per record, no row tuple); returns what
        storage handed over (`EdgeRows.load` may number the edges' ends by it)."""
        stored = self.rows.heads()
        self.heads.load(stored.ids, stored.values)
        return stored

    def _put_rows(self, rows: Iterable[tuple[uuid.UUID, Any]]) -> None:
        made = []
        for record_id, values in rows:
            head = Head(*values)
            head.store = STORES[head.store]
            made.append((record_id, head))
        self.heads.put_many(made)

    def read_fresh(self, ids: Sequence[uuid.UUID], *, bodies: bool) -> FreshRecords:
        """What the database holds now for `ids`, without touching RAM: a server following
        another's writes reads this outside the writer's lock and applies it under it."""
        rows = self.rows.heads_of(ids)
        opened = self._open_rows(self.rows.bodies([row[0] for row in rows])) if bodies and rows else []
        return FreshRecords(list(ids), rows, opened, bodies)

    def refresh(self, ids: Sequence[uuid.UUID], *, bodies: bool, fresh: FreshRecords | None = None) -> None:
        """Take the heads of `ids` again (another server changed them) from `fresh`, or from the
        database now; `bodies` when their content may have changed too. Ids no longer in the
        database are forgotten."""
        if fresh is None:
            fresh = self.read_fresh(ids, bodies=bodies)
        found = {row[0] for row in fresh.rows}
        self._put_rows(fresh.rows)
        with self._queue_lock:
            self._stale = True
        gone = [i for i in ids if i not in found]
        if gone:
            self.forget_heads(gone)
        if bodies:
            self.cache.discard(ids)
            self.cache.put_many(fresh.bodies)
            self.revision += 1

    def __contains__(self, record_id: uuid.UUID) -> bool:
        return record_id in self.heads

    def items(self) -> list[tuple[uuid.UUID, Head]]:
        """A snapshot, safe to iterate while writers add or remove records."""
        return self.heads.items()

    def columns(self) -> HeadColumns:
        """Every head as numpy columns: rebuilt when records were written or removed since the
        last call, else the last columns with the rows recall reinforced since patched in."""
        with self._columns_lock:
            with self._queue_lock:
                touched, stale = self._touched, self._stale
                self._touched, self._stale = [], False
            revision = self.revision
            columns = self._columns
            if columns is None or stale or self._columns_revision != revision:
                columns = self.heads.columns()
            elif touched:
                columns = columns.patched(self.heads, touched)
            self._columns, self._columns_revision = columns, revision
            return columns

    # ------------------------------------------------------------ writes (caller holds a transaction)

    def _head_for(self, record: MemoryRecord) -> Head:
        head = Head.of(record)
        old = self.heads.get(record.id)
        if old is not None:  # an update: its decay clock and strength stay as they were
            head.fidelity_base, head.fidelity_score = old.fidelity_base, old.fidelity_score
        return head

    def insert(self, uow: Tables, records: Sequence[MemoryRecord], *, replace: bool = False,
               heads: Sequence[Head] | None = None, bump: str | None = None) -> Written:
        """Write records; returns what `commit_heads` makes visible once the transaction commits.
        `heads` are written as given (an import restores archived decay state exactly). With
        `bump`, the transaction's last write (`RecordRows.insert`)."""
        if heads is None and not replace:  # new records: no head of theirs to keep anything from
            heads, columns = _new_heads(records)
        else:
            heads = list(heads) if heads is not None else [self._head_for(r) for r in records]
            columns = _head_columns(heads)
        ids = [r.id for r in records]
        bodies = record_bodies(records)
        bumped = uow.records.insert({"id": ids, **columns, "body": self.sealer.seal_many(ids, bodies)},
                                    replace=replace, bump=bump)
        return Written(ids, heads, bodies, bumped)

    def commit_heads(self, written: Written) -> None:
        """After the transaction commits: make the records visible to ranking."""
        self.heads.put_many(zip(written.ids, written.heads, strict=True))
        self._drop_reinforcements(written.ids)  # the rows written hold them already
        self.cache.put_many(zip(written.ids, written.bodies, strict=True))
        self.revision += 1

    def delete(self, uow: Tables, ids: Sequence[uuid.UUID]) -> None:
        uow.records.delete(ids)

    def forget_heads(self, ids: Iterable[uuid.UUID]) -> None:
        ids = list(ids)
        self.heads.discard_many(ids)
        self._drop_reinforcements(ids)
        self.cache.discard(ids)
        self.revision += 1

    @staticmethod
    def write_decay(uow: Tables, ids: Sequence[uuid.UUID], heads: Sequence[Head]) -> None:
        """Store materialised fidelity, noise and tick time for many records in one statement."""
        uow.records.write_decay({
            "id": list(ids),
            "fidelity_score": [h.fidelity_score for h in heads],
            "noise_level": [h.noise_level for h in heads],
            "emotional_anchor": [h.emotional_anchor for h in heads],
            "last_decay_tick": [h.last_decay_tick for h in heads],
        })

    def reinforced(self, event: Reinforcement) -> None:
        """A recall already applied to the head in RAM, queued for `flush_reinforcements` (and
        for `columns`)."""
        with self._queue_lock:
            self.reinforcements.append(event)
            if len(self._touched) < TOUCHED_LIMIT:
                self._touched.append(event.record_id)
            else:
                self._stale = True

    def _drop_reinforcements(self, ids: Iterable[uuid.UUID]) -> None:
        with self._queue_lock:
            if self.reinforcements:  # none queued, as after most writes: no set of the ids to make
                gone = set(ids)
                self.reinforcements = [e for e in self.reinforcements if e.record_id not in gone]

    def flush_reinforcements(self, uow: Tables, skip: Collection[uuid.UUID] = ()) -> int:
        """Write queued recalls so that no writer's are lost; `skip` are records this transaction
        rewrites whole (their rows hold them). A row still as this process last saw it takes the
        result computed here, in one statement; a row another writer changed meanwhile gets
        each recall replayed on what it holds now, in the order they happened."""
        with self._queue_lock:
            events, self.reinforcements = self.reinforcements, []
        if not events:  # as at most writes: nothing recalled since the last one
            return 0
        by_record: dict[uuid.UUID, list[Reinforcement]] = {}
        for event in events:
            if event.record_id not in skip:
                by_record.setdefault(event.record_id, []).append(event)
        chains = list(by_record.values())
        applied = uow.records.reinforce_unchanged({
            "id": list(by_record), "base_before": [c[0].before[0] for c in chains],
            "stability_before": [c[0].before[1] for c in chains], "accessed_before": [c[0].before[2] for c in chains],
            "base": [c[-1].after[0] for c in chains], "stability": [c[-1].after[1] for c in chains],
            "n": [len(c) for c in chains], "at": [max(e.at for e in c) for c in chains],
        })
        rounds: list[list[Reinforcement]] = []  # one UPDATE per round: at most one event per record
        seen: dict[uuid.UUID, int] = {}
        for event in events:
            if event.record_id in skip or event.record_id in applied:
                continue
            n = seen[event.record_id] = seen.get(event.record_id, -1) + 1
            if n == len(rounds):
                rounds.append([])
            rounds[n].append(event)
        for batch in rounds:
            uow.records.reinforce({"id": [e.record_id for e in batch], "at": [e.at for e in batch],
                                   "exponent": [e.exponent for e in batch], "boost": [e.boost for e in batch],
                                   "lift": [e.lift for e in batch]})
        return len(events)

    # ------------------------------------------------------------ reads

    def bodies(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        """Bodies of `ids`: from the cache, the misses in one query. A body that fails to open
        (altered ciphertext) is left out and noted as undecodable."""
        found = self.cache.get_many(ids)
        missing = [i for i in ids if i not in found]
        if missing:
            opened = self._open_rows(self.rows.bodies(missing))
            self.cache.put_many(opened)
            found.update(opened)
        return found

    def _open_rows(self, rows: Iterable[tuple[uuid.UUID, bytes]]) -> list[tuple[uuid.UUID, bytes]]:
        """Open sealed bodies one by one, so one altered row costs only itself (noted)."""
        opened = []
        for record_id, sealed in rows:
            try:
                opened.append((record_id, self.sealer.open(record_id, sealed)))
            except Exception as exc:
                self.undecodable.note(record_id, exc)
        return opened

    def body_values(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        """The decoded body fields of each of `ids` still stored; undecodable ones are left out."""
        out = {}
        for record_id, body in self.bodies(ids).items():
            try:
                out[record_id] = self._values(body)
            except Exception as exc:
                self.undecodable.note(record_id, exc)
        return out

    @staticmethod
    def _values(body: bytes) -> dict[str, Any]:
        values = codec.unpack(body)
        for block in values["content"]["blocks"]:
            block.pop("embedding", None)  # bodies written before vectors moved out of them
        return values

    def assemble(self, record_id: uuid.UUID, body: bytes, associations: list,
                 fidelity: FidelityState | None = None) -> MemoryRecord:
        """The whole record; raises `UndecodableRecord` (noted) when its body cannot make one."""
        head = self.heads[record_id]
        try:
            return MemoryRecord.of_stored(
                RecordBody.model_validate(self._values(body)), record_id, head.store,
                from_ts(head.created_at), from_ts(head.updated_at), from_ts(head.last_accessed_at),
                int(head.access_count), fidelity or head.fidelity(head.fidelity_score, head.noise_level),
                int(head.version),
                [Association.model_validate(a) for a in associations])
        except Exception as exc:
            raise self.undecodable.note(record_id, exc) from exc

    def warm(self, ready: Callable[[], bool], batch: int = 1000) -> None:
        """Fill the body cache with the newest records, so first queries need not read storage.
        Newest first by the heads' columns (`columns`: numpy, kept for later questions of every
        record), a small batch per query, each once `ready` (which waits while requests come,
        and says False once closing begins: it never waits for more than one batch)."""
        columns = self.columns()
        newest = list(map(columns.ids.__getitem__, np.argsort(-columns.created_at, kind="stable").tolist()))
        try:
            for start in range(0, len(newest), batch):
                if not ready():
                    return
                rows = self.rows.bodies(newest[start:start + batch])
                if not self.cache.add_missing(self._open_rows(rows)):
                    return
        except Exception:  # the database closed under us: warming is best effort
            pass

    def iter_bodies(self, batch: int = 5000, *,
                    stores: Sequence[StoreType] | None = None) -> Iterable[tuple[uuid.UUID, bytes | None]]:
        """Every stored body (of `stores`, else all), in id order and in batches, for rebuilding
        derived indexes and for exports; None for a body that fails to open (noted)."""
        for rows in self.rows.scan_bodies([s.value for s in stores] if stores is not None else None, batch):
            opened = dict(self._open_rows(rows))
            for record_id, _ in rows:
                yield record_id, opened.get(record_id)

    def scan_with_vectors(self, stores: Sequence[StoreType],
                          batch: int = 2000) -> Iterator[tuple[uuid.UUID, bytes, str | None, bytes | None]]:
        """Every stored record of `stores` with its vector, sealed as stored, in id order: one
        consistent scan for an export (id, body, vector model or None, vector or None)."""
        for rows in self.rows.scan_with_vectors([s.value for s in stores], batch):
            for row in rows:
                yield row[0], row[1], row[2], row[3]

    def undecodable_among(self, stores: Sequence[StoreType]) -> set[uuid.UUID]:
        """Which stored records of `stores` no read can use: a full pass, for an export that
        announces its counts before its first record."""
        bad = set()
        for record_id, body in self.iter_bodies(stores=stores):
            if record_id not in self.heads:
                continue
            if body is None:  # noted when it failed to open
                bad.add(record_id)
                continue
            try:
                self.assemble(record_id, body, [])
            except UndecodableRecord:
                bad.add(record_id)
        return bad
