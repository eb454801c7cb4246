"""The engine: owns a data directory and implements every CMP operation.

Writes go to DuckDB first (one transaction per operation), then to the RAM structures and the
derived indexes. A crash between the two leaves the indexes stale, never the data: on the
next open the stamp check rebuilds them.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from . import dream
from .cmp import messages as m
from .cmp.context import note_records
from .cmp.errors import CMPError, ErrorCode, not_found
from .consolidate import ConsolidationOperations
from .dream.settings import DreamSettings
from .dynamics import decay, evolution
from .embed import EmbeddingUnavailable, EmbedSettings, make_embedder, normalise_rows
from .index.fulltext import TextDoc, TextIndex
from .index.graph import AssociationGraph, Edge
from .index.vectors import VectorIndex
from .llm.settings import LLMSettings
from .model import (
    JSON_MODALITIES,
    AssociationType,
    EmotionVector,
    FidelityState,
    MemoryContent,
    MemoryRecord,
    RawJournalRecord,
    RecallMode,
    StoreType,
    new_id,
    normalise_meta,
)
from .recall import ALL_STORES, STORE_CODE, RecallOperations
from .shutdown import close_at_exit
from .storage.archive_settings import ArchiveSettings
from .storage.crypto import PLAINTEXT, VECTOR, Vault
from .storage.db import DB_NAME, Database
from .storage.lock import DataDirLock
from .stores.journal import JournalStore
from .stores.records import Head, RecordStore, dt, ts
from .stores.undecodable import UndecodableLog, UndecodableRecord
from .stores.working import WorkingMemory

log = logging.getLogger("cerememory")

SEQUENTIAL_WEIGHT = 0.7
CALLER_MODEL = "caller"
FRESH_FIDELITY = {k: v.default for k, v in FidelityState.model_fields.items()
                  if k not in ("last_decay_tick", "stability", "decay_rate", "emotional_anchor")}
ProgressFn = Callable[[int, int | None], None]
Vectors = dict[uuid.UUID, tuple[np.ndarray, str]]  # record id -> (unit vector, embedding model)


@dataclass
class EngineOptions:
    working_capacity: int = 7
    fusion: str = "rrf"
    rrf_k: int = 10
    activation_seeds: int = 3
    embed: EmbedSettings = field(default_factory=EmbedSettings)
    decay: dict[StoreType, decay.DecayParams] = field(default_factory=lambda: dict(decay.DEFAULT_PARAMS))
    clock: Callable[[], float] = time.time  # seconds since the epoch; injectable for tests
    evolution_frozen: bool = False
    evolution_interval: float = evolution.DEFAULT_INTERVAL
    server_url: str | None = None
    flush_interval: float = 2.0
    passphrase: str | None = None  # unlocks an encrypted data directory (storage/crypto.py)
    sanitize_patterns: tuple[str, ...] = ()  # extra secret patterns for what a dream derives
    audit: bool = True  # the hash-chained audit log of mutating operations (security/audit.py)
    allow_broken_audit: bool = False
    audit_fsync_interval: float = 1.0
    dream: DreamSettings = field(default_factory=DreamSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    archive: ArchiveSettings = field(default_factory=ArchiveSettings)  # import cost, export directory


def flatten_json(value: Any, prefix: str = "", depth: int = 0) -> list[str]:
    """Structured JSON as `a.b: value` lines, so keys and values are searchable words."""
    if depth > 10:
        return []
    if isinstance(value, dict):
        return [line for k, v in value.items()
                for line in flatten_json(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)]
    if isinstance(value, list):
        return [line for v in value for line in flatten_json(v, prefix, depth + 1)]
    return [f"{prefix}: {value}" if prefix else str(value)]


def record_text_doc(record: MemoryRecord) -> TextDoc:
    parts = []
    for block in record.content.blocks:
        if block.modality.value == "text":
            parts.append(block.text or "")
        elif block.modality in JSON_MODALITIES:
            parts.extend(flatten_json(json.loads(block.text or "null")))
    return TextDoc(
        id=str(record.id),
        group=record.store.value,
        body="\n".join(parts),
        summary=record.content.summary or "",
        why=record.meta.searchable_text(),
    )


def raw_text_doc(record: RawJournalRecord) -> TextDoc:
    return TextDoc(id=str(record.id), group=record.session_id, body=record.content.plain_text(),
                   summary=record.content.summary or "", why=record.meta.searchable_text())


def embedding_text(content: MemoryContent) -> str:
    return content.plain_text() or content.summary or ""


class Engine(RecallOperations, ConsolidationOperations):
    """One data directory: the five stores, the raw journal, their indexes and the CMP operations."""

    def __init__(self, data_dir: str | Path, options: EngineOptions | None = None,
                 *, progress: ProgressFn | None = None) -> None:
        self.options = options or EngineOptions()
        self.params = self.options.decay
        self.clock = self.options.clock
        self.background_decay = False  # set by the scheduler of a serving process
        self.background_dream = False
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = DataDirLock(self.data_dir)
        self._lock_file.acquire(server_url=self.options.server_url)
        self._write = threading.RLock()
        self._count_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closed = False
        collecting = gc.isenabled()
        gc.disable()  # opening builds ~20 objects per record; cyclic GC passes over them cost a third
        try:
            self._open(progress)
        except BaseException:
            self._lock_file.release()
            raise
        else:  # what opening built lives as long as the engine: later full collections skip it
            gc.freeze()
        finally:
            if collecting:
                gc.enable()
        close_at_exit(self)

    # ================================================================ lifecycle

    def _open(self, progress: ProgressFn | None) -> None:
        from .security.audit import AuditLog

        self.audit = AuditLog.open(self.data_dir, allow_broken=self.options.allow_broken_audit,
                                   fsync_interval=self.options.audit_fsync_interval) if self.options.audit else None
        try:
            self.embedder, self.semantic_off_reason = make_embedder(self.options.embed)
        except (EmbeddingUnavailable, ValueError) as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"embedding backend unavailable: {exc}",
                           hint=getattr(exc, "hint", None) or "set embed.semantic = auto or off") from exc
        vault = Vault.unlock(self.data_dir, self.options.passphrase)
        self.sealer = PLAINTEXT if vault is None else vault
        self.db = Database(self.data_dir / DB_NAME)
        self.undecodable = UndecodableLog()
        self.records = RecordStore(self.db, sealer=self.sealer, undecodable=self.undecodable)
        stored_vectors = self.records.load()
        self.journal = JournalStore(self.db, self.sealer, self.undecodable)
        if vault is not None:
            vault.erase_orphans(set(self.records.heads) | set(self.journal.ids()))
        self.working = WorkingMemory(self.options.working_capacity)
        self.graph = AssociationGraph()
        self._load_graph()
        self.vectors = VectorIndex()
        self._load_vectors(stored_vectors)
        index_dir = self.data_dir / "index"
        self.text = TextIndex(index_dir / "records", hash_term=self.sealer.token)
        self.raw_text = TextIndex(index_dir / "journal", hash_term=self.sealer.token)
        self.repaired: list[str] = []
        self._repair_indexes(progress)
        self.modes = self._load_modes()
        self._load_consolidations()
        self.evolution = evolution.Evolution(
            self.options.decay, frozen=self.options.evolution_frozen, interval=self.options.evolution_interval,
            state=json.loads(self.db.get_state("evolution") or "{}"))
        self.params = self.evolution.params()
        self.total_recall_count = int(self.db.get_state("total_recall_count", "0") or 0)
        self._flushed_recall_count = self.total_recall_count
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="cerememory-flush", daemon=True)
        self._flusher.start()
        self._warmer = threading.Thread(target=self.records.warm, args=(self._stop,),
                                        name="cerememory-warm", daemon=True)
        self._warmer.start()

    def _load_graph(self) -> None:
        rows = self.db.query("SELECT source_id, target_id, association_type, weight, created_at, "
                             "last_co_activation FROM associations")
        heads = self.records.heads
        self.graph.add(Edge(*row) for row in rows if row[0] in heads and row[1] in heads)

    def _load_vectors(self, rows: list[tuple[uuid.UUID, int, bytes]]) -> None:
        by_dim: dict[int, list[tuple[uuid.UUID, bytes]]] = {}
        for record_id, dim, vec in rows:
            by_dim.setdefault(dim, []).append((record_id, self.sealer.open(record_id, vec, VECTOR)))
        for dim, items in by_dim.items():
            matrix = np.frombuffer(b"".join(v for _, v in items), dtype=np.float32).reshape(-1, dim)
            ids = [i for i, _ in items]
            codes = [STORE_CODE[self.records.heads[i].store] for i in ids]
            self.vectors.add(ids, codes, matrix)

    def _repair_indexes(self, progress: ProgressFn | None) -> None:
        """Rebuild a full-text index that is missing, damaged or behind the database."""
        self.text.purge_group(StoreType.WORKING.value)  # working memory did not survive
        journal_total, _ = self.journal.counts()
        checks = [("records", self.text, "records_seq", len(self.records.heads), self.reindex_records),
                  ("journal", self.raw_text, "journal_seq", journal_total, self.reindex_journal)]
        for name, index, key, expected, rebuild in checks:
            seq = int(self.db.get_state(key, "0") or 0)
            if index.stamp() == seq and index.num_docs() == expected:
                continue
            if expected == 0 and index.num_docs() == 0:
                index.write_stamp(seq)  # a new data directory: nothing to rebuild
                continue
            rebuild(progress)
            self.repaired.append(name)

    def lifecycle_reindex(self, req: m.ReindexRequest, *, progress: ProgressFn | None = None) -> m.ReindexResponse:
        """Rebuild the full-text indexes from the database (after damage, or a changed analyzer)."""
        target = req.target
        return m.ReindexResponse(
            records=self.reindex_records(progress) if target in (m.ReindexTarget.ALL, m.ReindexTarget.RECORDS) else None,
            journal=self.reindex_journal(progress) if target in (m.ReindexTarget.ALL, m.ReindexTarget.JOURNAL) else None)

    def reindex_records(self, progress: ProgressFn | None = None) -> int:
        with self._write:
            total = len(self.records.heads)
            seq = int(self.db.get_state("records_seq", "0") or 0)

            def docs() -> Iterable[TextDoc]:
                for n, (record_id, body) in enumerate(self.records.iter_bodies(), 1):
                    yield self._record_doc(record_id, body)
                    if progress and n % 1000 == 0:
                        progress(n, total)
                yield from (record_text_doc(r) for r in self.working.records())

            count = self.text.rebuild(docs(), seq) - len(self.working)
            if progress:
                progress(count, total)
            return count

    def reindex_journal(self, progress: ProgressFn | None = None) -> int:
        with self._write:
            total, _ = self.journal.counts()
            seq = int(self.db.get_state("journal_seq", "0") or 0)

            def docs() -> Iterable[TextDoc]:
                for n, (record_id, session_id, record) in enumerate(self.journal.scan(), 1):
                    # an undecodable record keeps an empty document, so the index still counts it
                    yield raw_text_doc(record) if record else TextDoc(id=str(record_id), group=session_id, body="")
                    if progress and n % 1000 == 0:
                        progress(n, total)

            count = self.raw_text.rebuild(docs(), seq)
            if progress:
                progress(count, total)
            return count

    def _record_doc(self, record_id: uuid.UUID, body: bytes | None) -> TextDoc:
        """A record's text document; an empty one for an undecodable record, so that the index
        still counts it and is not rebuilt on every open."""
        head = self.records.heads.get(record_id)
        try:
            if body is not None and head is not None:
                return record_text_doc(self.records.assemble(record_id, body, []))
        except UndecodableRecord:
            pass
        return TextDoc(id=str(record_id), group=head.store.value if head else "", body="")

    def _load_modes(self) -> dict[StoreType | None, RecallMode]:
        modes: dict[StoreType | None, RecallMode] = {
            None: RecallMode(self.db.get_state("recall_mode", "human"))
        }
        for store in ALL_STORES:
            value = self.db.get_state(f"recall_mode:{store.value}")
            if value:
                modes[store] = RecallMode(value)
        return modes

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.options.flush_interval):
            try:
                self.flush()
            except CMPError as exc:  # a full disk, say: keep flushing; the next write or close retries
                log.warning("flushing recall statistics failed: %s", exc.message)
            except Exception:
                log.exception("flushing recall statistics failed")

    def flush(self) -> None:
        """Write back what recall changed in RAM (access counts, stability, recall count)."""
        if (not self.records.dirty and self.total_recall_count == self._flushed_recall_count
                and not self.evolution.dirty):
            return
        with self._write, self.db.transaction() as tx:
            self._flush_in(tx)

    def _flush_in(self, tx: Any) -> None:
        self.records.flush_dirty(tx)
        count = self.total_recall_count
        if count != self._flushed_recall_count:
            Database.set_state(tx, "total_recall_count", str(count))
            self._flushed_recall_count = count
        if self.evolution.dirty:
            Database.set_state(tx, "evolution", json.dumps(self.evolution.to_state()))

    @property
    def closing(self) -> bool:
        """True once close() began: long operations (a dream tick) stop at their next step."""
        return self._stop.is_set()

    def close(self) -> None:
        """Join the background threads, flush, close the indexes, the database and the audit log,
        and release the data directory. Safe twice, from any thread and at interpreter exit. A step
        that fails (a full disk) is logged and the others still run, so shutdown stays clean."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self._flusher.join()
        self._warmer.join()
        with self._write:  # an operation still running in another thread finishes first
            steps = [self.flush, self.text.close, self.raw_text.close, self.db.close]
            if self.audit is not None:
                steps.append(self.audit.close)
            for step in steps:
                try:
                    step()
                except Exception:
                    log.exception("closing %s: %s failed", self.data_dir, step.__qualname__)
        self._lock_file.release()

    # ================================================================ helpers

    def _now(self) -> datetime:
        return dt(self.clock())

    def _exists(self, record_id: uuid.UUID) -> bool:
        return record_id in self.records.heads or record_id in self.working

    def _store_of(self, record_id: uuid.UUID) -> StoreType | None:
        head = self.records.heads.get(record_id)
        if head is not None:
            return head.store
        return StoreType.WORKING if record_id in self.working else None

    def _head(self, record_id: uuid.UUID) -> Head | None:
        head = self.records.heads.get(record_id)
        if head is None:
            record = self.working.get(record_id)
            head = Head.of(record) if record is not None else None
        return head

    def _state(self, head: Head, now: float) -> tuple[float, float]:
        """Current (fidelity, noise) of a record, from the closed-form curve of its store."""
        return decay.state_now(head.fidelity_base, now - head.last_accessed_at, head.stability,
                               self.params[head.store], head.emotion_intensity)

    def _fidelity(self, record_id: uuid.UUID, now: float | None = None) -> float:
        head = self._head(record_id)
        return self._state(head, now or self.clock())[0] if head is not None else 0.0

    def _created(self, record_id: uuid.UUID) -> float:
        head = self.records.heads.get(record_id)
        if head is not None:
            return head.created_at
        record = self.working.get(record_id)
        return ts(record.created_at) if record else 0.0

    def fetch(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, MemoryRecord]:
        """Whole records for `ids` (missing and undecodable ones are left out), in one database query."""
        durable = [i for i in ids if i in self.records.heads]
        out: dict[uuid.UUID, MemoryRecord] = {}
        now = self.clock()
        for record_id, body in self.records.bodies(durable).items():
            head = self.records.heads.get(record_id)
            if head is not None:
                try:
                    out[record_id] = self.records.assemble(record_id, body, self._associations(record_id),
                                                           head.fidelity(*self._state(head, now)))
                except UndecodableRecord:
                    continue  # noted: the running operation reports it
        for i in ids:
            record = self.working.get(i)
            if record is not None:
                head = Head.of(record)
                state = head.fidelity(*self._state(head, now))
                out[i] = record.model_copy(update={"associations": self._associations(i), "fidelity": state})
        return out

    def _associations(self, record_id: uuid.UUID) -> list[dict]:
        return [
            {"target_id": e.target, "association_type": e.type, "weight": e.weight,
             "created_at": dt(e.created_at),
             "last_co_activation": dt(e.last_co_activation) if e.last_co_activation else None}
            for e in self.graph.out_edges(record_id)
        ]

    def get(self, record_id: uuid.UUID) -> MemoryRecord:
        record = self.fetch([record_id]).get(record_id)
        if record is None:
            reason = self.undecodable.reason(record_id) if record_id in self.records.heads else None
            if reason is not None:
                raise UndecodableRecord(record_id, reason).error()
            raise not_found(record_id)
        return record

    def _embed(self, texts: list[str]) -> np.ndarray:
        try:
            return self.embedder.embed(texts)
        except EmbeddingUnavailable as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"the embedding backend failed: {exc}",
                           hint=exc.hint or "check the embed.* settings; nothing was stored") from exc

    def vectors_for(self, records: Sequence[MemoryRecord]) -> Vectors:
        return self._vectors_of([(r.id, r.content) for r in records])

    def _vectors_of(self, items: Sequence[tuple[uuid.UUID, MemoryContent]]) -> Vectors:
        """Caller-supplied embeddings win; otherwise the embedder embeds text in one batch.
        Called before taking the write lock: an embedding can take seconds, and no store or
        forget may wait for another request's."""
        out: Vectors = {}
        to_embed: list[tuple[uuid.UUID, str]] = []
        for record_id, content in items:
            given = content.first_embedding()
            if given is not None:
                out[record_id] = (normalise_rows(given), CALLER_MODEL)
            elif self.embedder is not None and (text := embedding_text(content)):
                to_embed.append((record_id, text))
        if to_embed:
            matrix = self._embed([text for _, text in to_embed])
            for (record_id, _), row in zip(to_embed, matrix, strict=True):
                out[record_id] = (row.astype(np.float32), self.embedder.name)
        return out

    def intend_audit(self, step: str, ids: Sequence[uuid.UUID], **counts: int) -> None:
        """The audit intent of a change, written inside its transaction just before the commit
        (a failure to write it rolls the change back): what it is about to change."""
        if self.audit is not None:
            self.audit.intend(ids, {"step": step, "records": len(ids), **counts})

    def _insert_vectors(self, tx: Any, vectors: Vectors) -> None:
        items = list(vectors.items())
        Database.insert_columns(
            tx, "vectors",
            {"record_id": [i for i, _ in items], "dim": [int(v.shape[0]) for _, (v, _) in items],
             "model": [model for _, (_, model) in items],
             "vec": self.sealer.seal_many([i for i, _ in items], [v.tobytes() for _, (v, _) in items], VECTOR)},
            uuid_columns=("record_id",), replace=True,
        )

    @staticmethod
    def _insert_edges(tx: Any, edges: Sequence[Edge]) -> None:
        Database.insert_columns(
            tx, "associations",
            {"source_id": [e.source for e in edges], "target_id": [e.target for e in edges],
             "association_type": [e.type for e in edges], "weight": [e.weight for e in edges],
             "created_at": [e.created_at for e in edges],
             "last_co_activation": [e.last_co_activation for e in edges]},
            uuid_columns=("source_id", "target_id"), replace=True,
        )

    def _add_vectors_ram(self, vectors: Vectors, stores: dict[uuid.UUID, StoreType]) -> None:
        by_dim: dict[int, list[uuid.UUID]] = {}
        for record_id, (vec, _) in vectors.items():
            by_dim.setdefault(vec.shape[0], []).append(record_id)
        for ids in by_dim.values():
            self.vectors.add(ids, [STORE_CODE[stores[i]] for i in ids],
                             np.stack([vectors[i][0] for i in ids]))

    def _evict(self, ids: Sequence[uuid.UUID], seq: int) -> None:
        """Working-memory evictions leave no trace in the indexes."""
        if ids:
            self.graph.remove_nodes(ids)
            self.vectors.remove(ids)
            self.text.stage(seq, delete=[str(i) for i in ids])

    # ================================================================ encode

    @staticmethod
    def _route(req: m.EncodeStoreRequest) -> StoreType:
        if req.store is not None:
            return req.store
        return StoreType.SEMANTIC if req.content.summary else StoreType.EPISODIC

    def _build_records(self, reqs: Sequence[m.EncodeStoreRequest], op: str, now: datetime) -> list[MemoryRecord]:
        """Records from validated requests; constructed without re-validating what already was."""
        no_meta = normalise_meta(None, op, now)  # shared: records are never mutated in place
        neutral = EmotionVector()
        records = []
        for req in reqs:
            store, emotion = self._route(req), req.emotion or neutral
            params = self.params[store]
            metadata = dict(req.metadata or {})
            if req.context is not None:
                metadata["_context"] = req.context.model_dump(mode="json", exclude_none=True)
            records.append(MemoryRecord.model_construct(
                id=new_id(),
                store=store,
                created_at=req.created_at or now,
                updated_at=now,
                last_accessed_at=now,
                access_count=0,
                content=req.content,
                fidelity=FidelityState.model_construct(
                    **FRESH_FIDELITY, last_decay_tick=now, stability=params.stability, decay_rate=params.exponent,
                    emotional_anchor=float(decay.emotion_factor(emotion.intensity))),
                emotion=emotion,
                associations=[],
                metadata=metadata,
                version=1,
                meta=no_meta if req.meta is None else normalise_meta(req.meta, op, now),
            ))
        return records

    def _encode(self, reqs: Sequence[m.EncodeStoreRequest], *, infer: bool,
                op: str) -> tuple[list[m.EncodeStoreResponse], int]:
        now = self._now()
        records = self._build_records(reqs, op, now)
        n_working = sum(r.store is StoreType.WORKING for r in records)
        if n_working > self.working.capacity:
            raise CMPError(
                ErrorCode.WORKING_MEMORY_FULL,
                f"{n_working} records for working memory in one request; it holds {self.working.capacity}",
                hint="store fewer at once, or raise memory.working_capacity",
            )
        now_ts = ts(now)
        edges: list[Edge] = []
        manual_counts = []
        vectors = self.vectors_for(records)
        with self._write:
            for record, req in zip(records, reqs, strict=True):
                for a in req.associations or []:
                    if not self._exists(a.target_id):
                        raise not_found(a.target_id, "association target")
                    edges.append(Edge(record.id, a.target_id, a.association_type.value, a.weight, now_ts))
                manual_counts.append(len(req.associations or []))
            inferred = 0
            if infer:
                for a, b in zip(records, records[1:], strict=False):
                    seq = AssociationType.SEQUENTIAL.value
                    edges.append(Edge(a.id, b.id, seq, SEQUENTIAL_WEIGHT, now_ts))
                    edges.append(Edge(b.id, a.id, seq, SEQUENTIAL_WEIGHT, now_ts))
                    inferred += 2
            self._persist(records, edges, vectors)
        self.text.mark_pending()
        results = [
            m.EncodeStoreResponse(record_id=r.id, store=r.store, initial_fidelity=r.fidelity.score,
                                  associations_created=n)
            for r, n in zip(records, manual_counts, strict=True)
        ]
        return results, inferred

    def _persist(self, records: Sequence[MemoryRecord], edges: Sequence[Edge], vectors: Vectors,
                 also: Callable[[Any], None] | None = None, touched: Sequence[uuid.UUID] = ()) -> None:
        """Write new records with their edges and vectors (from `vectors_for`, made before the
        lock) in one transaction (plus `also`, the caller's own rows, which change the records
        `touched`), then mirror them into RAM and stage them for the text index.
        The caller holds the write lock and calls `text.mark_pending()` afterwards."""
        durable = [r for r in records if r.store is not StoreType.WORKING]
        durable_ids = {r.id for r in durable}
        persisted_edges = [e for e in edges if e.source in durable_ids or e.source in self.records.heads]
        with self.db.transaction() as tx:
            written = self.records.insert(tx, durable)
            self._insert_edges(tx, persisted_edges)
            self._insert_vectors(tx, {i: v for i, v in vectors.items() if i in durable_ids})
            if also is not None:
                also(tx)
            self._flush_in(tx)
            seq = self.db.bump(tx, "records_seq")
            self.intend_audit("write", [*(r.id for r in records), *touched], edges=len(edges))
        self.records.commit_heads(written)
        for record in records:
            if record.store is StoreType.WORKING:
                self._evict(self.working.put(record), seq)
        self.graph.add(edges)
        self._add_vectors_ram(vectors, {r.id: r.store for r in records})
        self.text.stage(seq, add=[record_text_doc(r) for r in records])

    def encode_store(self, req: m.EncodeStoreRequest) -> m.EncodeStoreResponse:
        return self._encode([req], infer=False, op="encode.store")[0][0]

    def encode_batch(self, req: m.EncodeBatchRequest) -> m.EncodeBatchResponse:
        results, inferred = self._encode(req.records, infer=req.infer_associations, op="encode.batch")
        return m.EncodeBatchResponse(results=results, associations_inferred=inferred)

    def encode_update(self, req: m.EncodeUpdateRequest) -> None:
        if req.content is None and req.emotion is None and req.metadata is None and req.meta is None:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "encode.update: nothing to update",
                           hint="give at least one of content, emotion, metadata, meta")
        vectors = self._vectors_of([(req.record_id, req.content)]) if req.content is not None else {}
        with self._write:
            record = self.get(req.record_id)
            update: dict[str, Any] = {"updated_at": self._now(), "version": record.version + 1}
            if req.content is not None:
                update["content"] = req.content
            if req.emotion is not None:
                update["emotion"] = req.emotion
            if req.metadata is not None:
                update["metadata"] = req.metadata
            if req.meta is not None:
                update["meta"] = normalise_meta(req.meta, "encode.update")
            record = record.model_copy(update=update)
            stores = {record.id: record.store}
            durable = record.store is not StoreType.WORKING
            with self.db.transaction() as tx:
                if durable:
                    written = self.records.insert(tx, [record], replace=True)
                    if req.content is not None:
                        Database.delete_ids(tx, "vectors", "record_id", [record.id])
                        self._insert_vectors(tx, vectors)
                seq = self.db.bump(tx, "records_seq")
                self.intend_audit("update", [record.id])
            if durable:
                self.records.commit_heads(written)
            else:
                self.working.put(record)
            if req.content is not None:
                self.vectors.remove([record.id])
                self._add_vectors_ram(vectors, stores)
            self.text.stage(seq, delete=[str(record.id)], add=[record_text_doc(record)])
        self.text.mark_pending()

    def _encode_raw(self, reqs: Sequence[m.EncodeStoreRawRequest], op: str) -> list[m.EncodeStoreRawResponse]:
        now = self._now()
        records = [
            RawJournalRecord(
                session_id=r.session_id, turn_id=r.turn_id, topic_id=r.topic_id, source=r.source,
                speaker=r.speaker, visibility=r.visibility, secrecy_level=r.secrecy_level,
                created_at=r.created_at or now, updated_at=now, content=r.content,
                metadata=dict(r.metadata or {}), meta=normalise_meta(r.meta, op),
            )
            for r in reqs
        ]
        with self._write:
            with self.db.transaction() as tx:
                self.journal.insert(tx, records)
                seq = self.db.bump(tx, "journal_seq")
                self.intend_audit("raw", [r.id for r in records])
            self.raw_text.stage(seq, add=[raw_text_doc(r) for r in records])
        self.raw_text.mark_pending()
        return [m.EncodeStoreRawResponse(record_id=r.id, session_id=r.session_id,
                                         visibility=r.visibility, secrecy_level=r.secrecy_level)
                for r in records]

    def encode_store_raw(self, req: m.EncodeStoreRawRequest) -> m.EncodeStoreRawResponse:
        return self._encode_raw([req], "encode.store_raw")[0]

    def encode_batch_raw(self, req: m.EncodeBatchRawRequest) -> m.EncodeBatchRawResponse:
        return m.EncodeBatchRawResponse(results=self._encode_raw(req.records, "encode.batch_raw"))

    def encode_update_raw(self, req: m.EncodeUpdateRawRequest) -> None:
        """Suppress or reclassify a journal record; its verbatim content never changes."""
        if req.suppressed is None and req.visibility is None and req.secrecy_level is None:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "encode.update_raw: nothing to update",
                           hint="give at least one of suppressed, visibility, secrecy_level")
        with self._write, self.db.transaction() as tx:  # no such record: nothing changed, rolled back
            if not self.journal.set_flags(tx, req.record_id, updated_at=self.clock(), suppressed=req.suppressed,
                                          visibility=req.visibility.value if req.visibility else None,
                                          secrecy_level=req.secrecy_level.value if req.secrecy_level else None):
                raise not_found(req.record_id, "raw journal record")
            self.intend_audit("raw_flags", [req.record_id])

    def lifecycle_dream_tick(self, req: m.DreamTickRequest) -> m.DreamTickResponse:
        return dream.run(self, req)

    # ================================================================ lifecycle

    def lifecycle_set_mode(self, req: m.SetModeRequest) -> None:
        with self._write, self.db.transaction() as tx:
            if req.scope:
                for store in req.scope:
                    Database.set_state(tx, f"recall_mode:{store.value}", req.mode.value)
                    self.modes[store] = req.mode
            else:
                Database.set_state(tx, "recall_mode", req.mode.value)
                tx.execute("DELETE FROM state WHERE key LIKE 'recall_mode:%'")
                self.modes = {None: req.mode}
            self.intend_audit("mode", [])

    def lifecycle_forget(self, req: m.ForgetRequest) -> m.ForgetResponse:
        if not req.confirm:
            raise CMPError(ErrorCode.FORGET_UNCONFIRMED, "forget deletes records permanently; confirm it",
                           hint="send confirm: true (CLI: --confirm)")
        with self._write:
            targets: list[uuid.UUID] = []
            if req.record_ids:
                missing = [i for i in req.record_ids if not self._exists(i)]
                if missing:
                    raise not_found(missing[0])
                targets.extend(req.record_ids)
            if req.store is not None:
                targets.extend(self._candidate_ids([req.store]))
            if req.temporal_range is not None:
                start, end = ts(req.temporal_range.start), ts(req.temporal_range.end)
                targets.extend(i for i in self._candidate_ids(ALL_STORES)
                               if start <= self._created(i) <= end)
            if req.cascade:
                targets.extend(e.target for i in list(targets) for e in self.graph.out_edges(i))
            ids = [i for i in dict.fromkeys(targets) if self._exists(i)]
            self._delete(ids)
        self.text.mark_pending()
        return m.ForgetResponse(records_deleted=len(ids))

    def _delete(self, ids: Sequence[uuid.UUID], also: Callable[[Any], None] | None = None,
                touched: Sequence[uuid.UUID] = ()) -> None:
        """Delete records with their vectors and edges in one transaction (plus `also`, which
        changes the records `touched`), then from RAM and the text index. The caller holds the
        write lock and marks the index pending."""
        durable = [i for i in ids if i in self.records.heads]
        with self.db.transaction() as tx:
            self.records.delete(tx, durable)
            Database.delete_ids(tx, "vectors", "record_id", durable)
            Database.delete_ids(tx, "associations", "source_id", durable)
            Database.delete_ids(tx, "associations", "target_id", ids)
            Database.delete_ids(tx, "consolidations", "episodic_id", durable)
            if also is not None:
                also(tx)
            seq = self.db.bump(tx, "records_seq")
            self.intend_audit("delete", [*ids, *touched])
        try:
            self.sealer.destroy(durable)  # crypto-erase: the ciphertext left behind can never be opened
        except OSError:  # committed regardless; the keys left over are erased on the next open
            log.exception("the keys of %d forgotten records could not be erased yet", len(durable))
        self.records.forget_heads(durable)
        for i in durable:
            self.consolidated.pop(i, None)
        self.working.remove(ids)
        self.graph.remove_nodes(ids)
        self.vectors.remove(ids)
        self.text.stage(seq, delete=[str(i) for i in ids])
        note_records(ids)  # the audit entry of the running operation lists every deleted record

    # ================================================================ archives

    def lifecycle_export(self, req: m.ExportRequest, *, sink: BinaryIO | None = None,
                         progress: ProgressFn | None = None) -> m.ExportResponse:
        """A CMA archive written to `sink`, or returned as `archive_data` (storage/archive.py)."""
        from .storage.archive import export_archive

        return export_archive(self, req, sink, progress=progress)

    def lifecycle_import(self, req: m.ImportRequest, *, progress: ProgressFn | None = None) -> m.ImportResponse:
        """Validate a whole CMA archive, then merge or replace in one transaction (storage/archive.py)."""
        from .storage.archive import import_archive

        return import_archive(self, req, progress=progress)

    # ================================================================ introspect

    def introspect_stats(self, req: m.StatsRequest | None = None) -> m.StatsResponse:
        heads: list[Head] = list(self.records.heads.values()) + [Head.of(r) for r in self.working.records()]
        curve = decay.evaluate(heads, self.clock(), self.params)
        per_store = np.bincount(curve.store_codes, minlength=len(ALL_STORES))
        score_sums = np.bincount(curve.store_codes, weights=curve.score, minlength=len(ALL_STORES))
        counts = {s.value: int(per_store[i]) for i, s in enumerate(ALL_STORES)}
        sums = {s.value: float(score_sums[i]) for i, s in enumerate(ALL_STORES)}
        oldest = newest = None
        if heads:
            oldest = dt(min(h.created_at for h in heads))
            newest = dt(max(h.created_at for h in heads))
        total = sum(counts.values())
        raw_total, raw_pending = self.journal.counts()
        return m.StatsResponse(
            total_records=total,
            records_by_store=counts,
            total_associations=len(self.graph),
            avg_fidelity=round(sum(sums.values()) / total, 6) if total else 0.0,
            avg_fidelity_by_store={s: round(sums[s] / counts[s], 6) if counts[s] else 0.0 for s in counts},
            oldest_record=oldest,
            newest_record=newest,
            total_recall_count=self.total_recall_count,
            raw_journal_records=raw_total,
            raw_journal_pending_dream=raw_pending,
            vector_index_records=len(self.vectors),
            vector_search_backend=self.vectors.backend,
            embedder=self.embedder.name if self.embedder else None,
            semantic_search=self.embedder is not None,
            semantic_off_reason=self.semantic_off_reason,
            working_capacity=self.working.capacity,
            recall_mode=self.modes[None],
            data_dir=str(self.data_dir),
            undecodable_records=self.undecodable.count,
            background_decay_enabled=self.background_decay,
            **dream.stats(self),
            evolution_metrics=self.evolution.metrics(),
        )

    def introspect_record(self, req: m.IntrospectRecordRequest) -> MemoryRecord:
        return self.get(req.record_id)

    # ================================================================ decay

    def lifecycle_decay_tick(self, req: m.DecayTickRequest | None = None) -> m.DecayTickResponse:
        """Materialise every record's fidelity and noise at this instant (vectorised), and count
        the records below their prune threshold. Reads never wait for it: they use the curve."""
        with self._write:
            now = self.clock()
            items = self.records.items()
            if not items:
                return m.DecayTickResponse()
            heads = [h for _, h in items]
            curve = decay.evaluate(heads, now, self.params)
            score, noise = curve.score, curve.noise
            old_score = np.fromiter((h.fidelity_score for h in heads), dtype=np.float64, count=len(heads))
            old_noise = np.fromiter((h.noise_level for h in heads), dtype=np.float64, count=len(heads))
            self.evolution.observe_fidelity(curve.store_codes, score, ALL_STORES)
            if self.evolution.adapt(now):
                self.params = self.evolution.params()
            below = score < curve.prune
            forgotten = below & (old_score >= curve.prune)
            changed = np.flatnonzero((np.abs(score - old_score) > 1e-12) | (np.abs(noise - old_noise) > 1e-12))
            anchor = decay.emotion_factor(curve.intensity)
            for row in changed:
                head = heads[row]
                head.fidelity_score, head.noise_level = float(score[row]), float(noise[row])
                head.emotional_anchor, head.last_decay_tick = float(anchor[row]), now
            with self.db.transaction() as tx:
                self.records.write_decay(tx, [items[row][0] for row in changed], [heads[row] for row in changed])
                self._flush_in(tx)
                self.intend_audit("decay", [], records=len(changed))  # every record: too many to list
        return m.DecayTickResponse(records_updated=len(changed), records_below_threshold=int(below.sum()),
                                   records_forgotten=int(forgotten.sum()))

    def introspect_decay_forecast(self, req: m.DecayForecastRequest) -> m.DecayForecastResponse:
        """Fidelity now and at `forecast_at`, and when each record will be forgotten, all exact."""
        now, at = self.clock(), ts(req.forecast_at)
        forecasts = []
        for record_id in req.record_ids:
            head = self._head(record_id)
            if head is None:
                raise not_found(record_id)
            p = self.params[head.store]
            crossing = float(decay.seconds_until(p.prune, head.fidelity_base, head.stability, p.exponent,
                                                 head.emotion_intensity))
            forecasts.append(m.DecayForecast(
                record_id=record_id,
                current_fidelity=round(self._state(head, now)[0], 9),
                forecasted_fidelity=round(float(decay.fidelity(
                    head.fidelity_base, at - head.last_accessed_at, head.stability, p.exponent,
                    head.emotion_intensity)), 9),
                estimated_threshold_date=dt(head.last_accessed_at + crossing) if np.isfinite(crossing) else None,
            ))
        return m.DecayForecastResponse(forecasts=forecasts)

    def introspect_evolution(self, req: m.EvolutionRequest | None = None) -> m.EvolutionResponse:
        return m.EvolutionResponse(
            parameter_adjustments=[
                m.ParameterAdjustment(store=a.store, parameter=a.parameter, original_value=a.original_value,
                                      current_value=a.current_value, reason=a.reason)
                for a in self.evolution.adjustments.values()],
            detected_patterns=list(self.evolution.patterns),
        )
