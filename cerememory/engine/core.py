"""The engine's shared state and the questions every part asks of it.

`EngineCore` opens a data directory's stores and indexes and answers, without changing
anything: does a record exist, what is its head, how strong is it now, what is the whole
record, what vector does this content get. Changes go through `writer.Writer`.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextvars import Context, copy_context
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..cmp.errors import CMPError, ErrorCode, not_found
from ..dynamics import decay, evolution
from ..embed import Embedder, EmbeddingUnavailable, make_embedder, normalise_rows
from ..heap import TRIM_AFTER_RECORDS, release_free_memory
from ..index.fulltext import TextIndex
from ..index.graph import AssociationGraph
from ..index.threads import set_blas_policy
from ..index.vectors import VectorIndex
from ..model import (
    ALL_STORES,
    STORE_CODE,
    MemoryContent,
    MemoryRecord,
    RecallMode,
    StoreType,
    from_ts,
    to_ts,
)
from ..security.audit import AuditLog
from ..sets import Sets
from ..storage.backends import open_backend
from ..storage.base import StoredVectors
from ..storage.crypto import PLAINTEXT, VECTOR, Sealer, Vault
from ..stores.journal import JournalStore
from ..stores.records import Head, RecordStore
from ..stores.undecodable import UndecodableLog, UndecodableRecord
from ..stores.working import WorkingMemory
from .docs import embedding_text
from .options import EngineOptions
from .sessions import session_in

CALLER_MODEL = "caller"  # the embedding model of a vector the caller supplied
EMBED_ALONE_FROM = 32  # texts in one request from which it embeds on its own, not with others'
Vectors = dict[uuid.UUID, tuple[np.ndarray, str]]  # record id -> (unit vector, embedding model)


@dataclass(frozen=True)
class VectorColumns:
    """Vectors of one dimension as columns: what goes into a table and the RAM index at once."""

    ids: list[uuid.UUID]
    models: list[str]
    matrix: np.ndarray  # float32, one unit row per id

    def only(self, keep: Collection[uuid.UUID]) -> VectorColumns:
        """The rows of the ids in `keep`."""
        rows = [k for k, i in enumerate(self.ids) if i in keep]
        return VectorColumns([self.ids[k] for k in rows], [self.models[k] for k in rows], self.matrix[rows])


def merge_columns(groups: Iterable[VectorColumns]) -> list[VectorColumns]:
    """Groups of the same dimension joined into one (several writes, or caller and embedder
    vectors, committed together); a dimension's only group is kept as it is."""
    by_dim: dict[int, list[VectorColumns]] = {}
    for group in groups:
        if group.ids:
            by_dim.setdefault(group.matrix.shape[1], []).append(group)
    return [parts[0] if len(parts) == 1 else
            VectorColumns([i for p in parts for i in p.ids], [m for p in parts for m in p.models],
                          np.concatenate([p.matrix for p in parts]))
            for parts in by_dim.values()]


_CODE_OF_NAME = {store.value: code for store, code in STORE_CODE.items()}  # a store's name as STORE_CODE


def by_dimension(vectors: Vectors) -> list[VectorColumns]:
    """`vectors` grouped by dimension, each group one contiguous float32 matrix (one pass over
    the items: no id is looked up again)."""
    groups: dict[int, tuple[list[uuid.UUID], list[str], list[np.ndarray]]] = {}
    for record_id, (vector, model) in vectors.items():
        group = groups.get(vector.shape[0])
        if group is None:
            group = groups[vector.shape[0]] = ([], [], [])
        group[0].append(record_id)
        group[1].append(model)
        group[2].append(vector)
    return [VectorColumns(ids, models, np.stack(rows).astype(np.float32, copy=False))
            for ids, models, rows in groups.values()]


class EngineCore:
    """One opened data directory: stores, indexes, clock, decay parameters, recall modes."""

    def __init__(self, data_dir: Path, options: EngineOptions) -> None:
        self.options = options
        self.clock = options.clock
        self.data_dir = data_dir
        self.embedder: Embedder | None
        self._embedding: Sets[list[str], np.ndarray] = Sets(self._embed_each)
        try:
            self.embedder, self.semantic_off_reason = make_embedder(options.embed)
        except (EmbeddingUnavailable, ValueError) as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"embedding backend unavailable: {exc}",
                           hint=getattr(exc, "hint", None) or "set embed.semantic = auto or off") from exc
        self.backend = open_backend(options.storage, data_dir)
        self.read = read = self.backend.read  # outside a transaction; `Writer` alone opens one
        try:  # the keys before anything is written: a wrong passphrase leaves the memory as it was
            vault = Vault.unlock(self.backend.key_store(), options.passphrase)
            self.audit = self._open_audit(data_dir, options) if options.audit else None
        except BaseException:
            self.backend.close()
            raise
        self.sealer: Sealer = PLAINTEXT if vault is None else vault
        # the change log position this state was read at: later changes by others are applied on top
        self.changes_seen = self.backend.changes.last() if self.backend.changes is not None else 0
        self.undecodable = UndecodableLog()
        self.records = RecordStore(read.records, sealer=self.sealer, undecodable=self.undecodable)
        stored = self.records.load()
        self.journal = JournalStore(read.journal, self.sealer, self.undecodable)
        if vault is not None:
            vault.erase_orphans(set(self.records.heads) | set(self.journal.ids()))
        self.working = WorkingMemory(options.working_capacity)
        self.graph = AssociationGraph()
        edges = read.edges.load(stored)
        # numbered over the heads just read (the usual case), every end is a record held
        self.graph.load(edges, None if edges.nodes is stored.ids else self.records.heads.__contains__)
        del edges
        del stored
        self._vectors: VectorIndex | None = None  # read at its first use (`vectors`)
        self._vectors_lock = threading.Lock()
        index_dir = data_dir / "index"
        self.text = TextIndex(index_dir / "records", hash_term=self.sealer.token)
        self.raw_text = TextIndex(index_dir / "journal", hash_term=self.sealer.token)
        self.modes = self.load_modes()
        self.consolidated: dict[uuid.UUID, uuid.UUID] = dict(read.ledger.load())  # episodic -> semantic
        self.load_evolution()
        self.total_recall_count = int(read.state.get("total_recall_count", "0") or 0)
        self._count_lock = threading.Lock()

    @property
    def vectors(self) -> VectorIndex:
        """The vector index, read from storage at its first use. Opening a data directory does
        not read every vector (at 100k records of 384-d, a third of a second and 150 MB), so a
        command or a first query that never compares vectors never pays for them. Whoever
        changes vectors in RAM goes through here first, so no change is made before the load
        and the load sees every committed row."""
        index = self._vectors
        if index is None:
            with self._vectors_lock:
                if self._vectors is None:
                    self._vectors = self._read_vectors()
                index = self._vectors
        return index

    def _read_vectors(self) -> VectorIndex:
        """Every stored vector of a record whose head is loaded: storage hands them over in
        batches, and the index takes each dimension's rows of all batches at once (a single
        batch's matrix, the usual case, as it is: no copy)."""
        parts: dict[int, tuple[list[uuid.UUID], list[int], list[np.ndarray]]] = {}
        for stored in self.read.vectors.load():
            for dim, ids, codes, matrix in self._by_dimension(stored):
                part = parts.setdefault(dim, ([], [], []))
                part[0].extend(ids)
                part[1].extend(codes)
                part[2].append(matrix)
            del stored  # its blobs, as many bytes as the vectors, are freed before the trim below
        self.backend.release_cache()  # DuckDB would keep about the vectors' size cached
        index = VectorIndex()
        for ids, codes, matrices in parts.values():
            index.add(ids, codes, np.concatenate(matrices) if len(matrices) > 1 else matrices[0], own=True)
        del parts
        if len(index) >= TRIM_AFTER_RECORDS:
            release_free_memory()  # the rows read and dropped: glibc would keep their pages
        return index

    def load_vectors(self, rows: list[tuple[uuid.UUID, int, bytes]]) -> None:
        """Add stored (sealed) vectors of records whose heads are loaded to the vector index."""
        if not rows:
            return
        ids, dims, vecs = zip(*rows, strict=True)
        stored = StoredVectors(list(ids), np.fromiter(dims, dtype=np.int64, count=len(dims)), vecs)
        for _, kept, codes, matrix in self._by_dimension(stored):
            self.vectors.add(kept, codes, matrix)

    def _by_dimension(self, stored: StoredVectors) -> Iterator[tuple[int, list[uuid.UUID], list[int], np.ndarray]]:
        """(dimension, ids, store codes, rows) of `stored`'s vectors whose heads are loaded, each
        dimension's rows joined into one matrix of its own (each row opened first when encrypted)."""
        found = self._store_codes(stored)
        kept = found >= 0
        for dim in np.unique(stored.dims[kept]).tolist():
            chosen = kept & (stored.dims == dim)
            if chosen.all():  # the usual batch: one dimension, every record loaded
                ids, vecs, codes = stored.ids, stored.vecs, found.tolist()
            else:
                rows = np.flatnonzero(chosen).tolist()
                ids, codes = [stored.ids[row] for row in rows], found[rows].tolist()
                vecs = stored.vecs[rows] if isinstance(stored.vecs, np.ndarray) else [stored.vecs[row] for row in rows]
            if self.sealer is not PLAINTEXT:
                vecs = [self.sealer.open(i, bytes(vec), VECTOR) for i, vec in zip(ids, vecs, strict=True)]
            # joined into a bytearray: the matrix over it is writeable, so the index keeps it as is
            yield dim, ids, codes, np.frombuffer(bytearray().join(vecs), dtype=np.float32).reshape(-1, dim)

    def _store_codes(self, stored: StoredVectors) -> np.ndarray:
        """STORE_CODE of each of `stored`'s records, -1 for one whose head is not loaded. From
        the stores storage read beside the vectors when it did, else from the heads. Ids are
        matched by the heads as integers (`HeadTable.holding`)."""
        heads = self.records.heads
        if stored.stores is None:
            return heads.stores_and_created(stored.ids)[0]
        n = len(stored.ids)
        codes = np.fromiter(map(_CODE_OF_NAME.__getitem__, stored.stores), dtype=np.int64, count=n)
        codes[~heads.holding(stored.ids)] = -1
        return codes

    def _open_audit(self, data_dir: Path, options: EngineOptions) -> AuditLog:
        chain = self.backend.audit_chain()
        if chain is not None:
            return AuditLog.over(chain, allow_broken=options.allow_broken_audit)
        return AuditLog.open(data_dir, allow_broken=options.allow_broken_audit,
                             fsync_interval=options.audit_fsync_interval)

    def load_evolution(self) -> None:
        """The evolution engine and the decay parameters it tuned, as last stored."""
        options = self.options
        self.evolution = evolution.Evolution(
            options.decay, frozen=options.evolution_frozen, interval=options.evolution_interval,
            state=json.loads(self.read.state.get("evolution") or "{}"))
        self.params = self.evolution.params()

    def load_modes(self) -> dict[StoreType | None, RecallMode]:
        modes: dict[StoreType | None, RecallMode] = {None: RecallMode(self.read.state.get("recall_mode") or "human")}
        for store in ALL_STORES:
            value = self.read.state.get(f"recall_mode:{store.value}")
            if value:
                modes[store] = RecallMode(value)
        return modes

    # ------------------------------------------------------------ time and counters

    def now(self) -> datetime:
        return from_ts(self.clock())

    def count_recall(self) -> None:
        with self._count_lock:
            self.total_recall_count += 1

    # ------------------------------------------------------------ one record

    def exists(self, record_id: uuid.UUID) -> bool:
        return record_id in self.records.heads or record_id in self.working

    def store_of(self, record_id: uuid.UUID) -> StoreType | None:
        head = self.records.heads.get(record_id)
        if head is not None:
            return head.store
        return StoreType.WORKING if record_id in self.working else None

    def head(self, record_id: uuid.UUID) -> Head | None:
        head = self.records.heads.get(record_id)
        if head is None:
            record = self.working.get(record_id)
            head = Head.of(record) if record is not None else None
        return head

    def heads_of(self, ids: Sequence[uuid.UUID]) -> list[Head | None]:
        """`head` of each of `ids`: the durable ones looked up together, working memory's after."""
        heads = self.records.heads.get_many(ids)
        if len(self.working):
            for n, head in enumerate(heads):
                if head is None:
                    heads[n] = self.head(ids[n])
        return heads

    def state(self, head: Head, now: float) -> tuple[float, float]:
        """Current (fidelity, noise) of a record, from the closed-form curve of its store."""
        return decay.state_now(head.fidelity_base, now - head.last_accessed_at, head.stability,
                               self.params[head.store], head.emotion_intensity)

    def fidelity(self, record_id: uuid.UUID, now: float | None = None) -> float:
        head = self.head(record_id)
        return self.state(head, now or self.clock())[0] if head is not None else 0.0

    def sessions_of(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The session each of `ids` was stored in (`context.session_id`); those of none are left out."""
        out = {}
        for record_id, values in self.records.body_values([i for i in ids if i in self.records.heads]).items():
            if (session := session_in(values.get("metadata"))) is not None:
                out[record_id] = session
        for record_id in ids:
            record = self.working.get(record_id)
            if record is not None and (session := session_in(record.metadata)) is not None:
                out[record_id] = session
        return out

    def created(self, record_id: uuid.UUID) -> float:
        head = self.records.heads.get(record_id)
        if head is not None:
            return head.created_at
        record = self.working.get(record_id)
        return to_ts(record.created_at) if record else 0.0

    def effective_perfect(self, requested: RecallMode, store: StoreType) -> bool:
        """Whether a record of `store` is rendered verbatim: asked for, or the store's mode."""
        if requested is RecallMode.PERFECT:
            return True
        return self.modes.get(store, self.modes[None]) is RecallMode.PERFECT

    def candidate_ids(self, stores: Sequence[StoreType]) -> Iterable[uuid.UUID]:
        wanted = set(stores)
        for record_id, head in self.records.items():
            if head.store in wanted:
                yield record_id
        if StoreType.WORKING in wanted:
            yield from (r.id for r in self.working.records())

    # ------------------------------------------------------------ whole records

    def associations(self, record_id: uuid.UUID) -> list[dict[str, Any]]:
        return [
            {"target_id": e.target, "association_type": e.type, "weight": e.weight,
             "created_at": from_ts(e.created_at),
             "last_co_activation": from_ts(e.last_co_activation) if e.last_co_activation else None}
            for e in self.graph.out_edges(record_id)
        ]

    def fetch(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, MemoryRecord]:
        """Whole records for `ids` (missing and undecodable ones are left out), in one database query."""
        durable = [i for i in ids if i in self.records.heads]
        out: dict[uuid.UUID, MemoryRecord] = {}
        now = self.clock()
        for record_id, body in self.records.bodies(durable).items():
            head = self.records.heads.get(record_id)
            if head is not None:
                try:
                    out[record_id] = self.records.assemble(record_id, body, self.associations(record_id),
                                                           head.fidelity(*self.state(head, now)))
                except UndecodableRecord:
                    continue  # noted: the running operation reports it
        for i in ids:
            record = self.working.get(i)
            if record is not None:
                head = Head.of(record)
                state = head.fidelity(*self.state(head, now))
                out[i] = record.model_copy(update={"associations": self.associations(i), "fidelity": state})
        return out

    def get(self, record_id: uuid.UUID) -> MemoryRecord:
        record = self.fetch([record_id]).get(record_id)
        if record is None:
            reason = self.undecodable.reason(record_id) if record_id in self.records.heads else None
            if reason is not None:
                raise UndecodableRecord(record_id, reason).error()
            raise not_found(record_id)
        return record

    # ------------------------------------------------------------ vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        """`texts` as vectors, one row each. Threads that ask at once are answered by one call of
        the embedder (`Sets`): a forward pass over a few short texts costs the model little more
        than over one, so concurrent stores embed about twice as fast together (bench/embedder_ab.py).
        A request of many texts fills the model's batches by itself and embeds on its own."""
        if self.embedder is None:
            raise CMPError(ErrorCode.INTERNAL_ERROR, "no embedding backend is configured",
                           hint=self.semantic_off_reason or "set embed.semantic")
        set_blas_policy()
        try:
            return self._embed_alone(texts) if len(texts) >= EMBED_ALONE_FROM else self._embedding.call(texts)
        except EmbeddingUnavailable as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"the embedding backend failed: {exc}",
                           hint=exc.hint or "check the embed.* settings; nothing was stored") from exc

    def embeds_waiting(self) -> int:
        """Requests queued to be embedded in the next set."""
        return self._embedding.waiting()

    def _embed_alone(self, texts: list[str]) -> np.ndarray:
        assert self.embedder is not None
        matrix = self.embedder.embed(texts)
        if len(matrix) != len(texts):  # rows would go to the wrong texts
            raise EmbeddingUnavailable(f"the embedder returned {len(matrix)} vectors for {len(texts)} texts",
                                       hint="check the embedding backend")
        return matrix

    def _embed_each(self, requests: list[list[str]]) -> Sequence[np.ndarray | BaseException]:
        """The texts of requests made at once, embedded in one call, each request's rows in its
        place; should that call fail, each request's texts alone, so that only the request at
        fault fails, unless the backend gave no answer at all (it is not asked again)."""
        if len(requests) > 1:
            try:
                matrix = self._embed_alone([text for texts in requests for text in texts])
                return np.split(matrix, np.cumsum([len(texts) for texts in requests[:-1]]))
            except EmbeddingUnavailable as exc:
                if exc.unreachable:
                    return [exc] * len(requests)
            except Exception:  # noqa: BLE001 - found out request by request below
                pass
        out: list[np.ndarray | BaseException] = []
        for texts in requests:
            try:
                out.append(self._embed_alone(texts))
            except Exception as exc:  # noqa: BLE001 - this request's, raised in its caller
                out.append(exc)
        return out

    def vectors_for(self, records: Sequence[MemoryRecord]) -> Vectors:
        return self.vectors_of([(r.id, r.content) for r in records])

    def vectors_of(self, items: Sequence[tuple[uuid.UUID, MemoryContent]]) -> Vectors:
        """`vector_columns` by record id."""
        return {record_id: (row, model) for group in self.vector_columns(items)
                for record_id, model, row in zip(group.ids, group.models, group.matrix, strict=True)}

    def vector_columns(self, items: Sequence[tuple[uuid.UUID, MemoryContent]]) -> list[VectorColumns]:
        """The vectors of records, one matrix per dimension. Caller-supplied embeddings win;
        otherwise the embedder embeds text in one batch. Called before taking the write lock:
        an embedding can take seconds, and no store or forget may wait for another request's."""
        out: list[VectorColumns] = []
        given: dict[int, list[tuple[uuid.UUID, list[float]]]] = {}
        packed: dict[int, tuple[list[uuid.UUID], list[bytes]]] = {}  # embedding_f32, by byte length
        to_embed: list[tuple[uuid.UUID, str]] = []
        for record_id, content in items:
            vector = content.first_embedding()
            if isinstance(vector, bytes):
                ids_blobs = packed.get(len(vector))
                if ids_blobs is None:
                    ids_blobs = packed[len(vector)] = ([], [])
                ids_blobs[0].append(record_id)
                ids_blobs[1].append(vector)
            elif vector is not None:
                given.setdefault(len(vector), []).append((record_id, vector))
            elif self.embedder is not None and (text := embedding_text(content)):
                to_embed.append((record_id, text))
        for rows in given.values():  # one matrix per dimension, normalised at once
            out.append(VectorColumns([i for i, _ in rows], [CALLER_MODEL] * len(rows),
                                     normalise_rows([vector for _, vector in rows])))
        for ids, blobs in packed.values():  # the bytes of a dimension's rows read as one matrix
            out.append(self.rows_columns(ids, b"".join(blobs)))
        if to_embed and self.embedder is not None:
            matrix = self.embed([text for _, text in to_embed]).astype(np.float32, copy=False)
            out.append(VectorColumns([i for i, _ in to_embed], [self.embedder.name] * len(to_embed), matrix))
        return merge_columns(out)

    @staticmethod
    def rows_columns(ids: Sequence[uuid.UUID], rows: bytes) -> VectorColumns:
        """The caller's vectors of `ids` given as one run of float32 rows of one dimension (a
        batch's `embeddings_f32`), read as one matrix and scaled to unit length."""
        matrix = np.frombuffer(rows, dtype="<f4").reshape(len(ids), -1)
        return VectorColumns(list(ids), [CALLER_MODEL] * len(ids), normalise_rows(matrix))

    # ------------------------------------------------------------ audit

    def intend_audit(self, step: str, ids: Sequence[uuid.UUID], **counts: int) -> None:
        """The audit intent of a change, written inside its transaction just before the commit
        (a failure to write it rolls the change back): what it is about to change."""
        self.intend_audits(step, [(copy_context(), ids, counts)])

    def intend_audits(self, step: str, changes: Sequence[tuple[Context, Sequence[uuid.UUID], dict[str, int]]]) -> None:
        """`intend_audit` for the changes of several callers committed together (a group commit),
        each in the context it was asked for in, in one append to the log."""
        if self.audit is not None:
            self.audit.intend([(within, ids, {"step": step, "records": len(ids), **counts})
                                   for within, ids, counts in changes])
