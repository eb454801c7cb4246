"""The one write path: what it means for a record to exist, in one place.

A record is rows in the database (its head and body, its vector, its associations, a
consolidation ledger row) and RAM mirrors of them (heads, graph, vectors, working memory,
staged full-text documents) and, in an encrypted data directory, a key. `Writer` alone opens
write transactions. Each write commits to the database first, then mirrors the committed
change into RAM and the text index; a crash between the two leaves the indexes stale, never
the data: the next open finds the stamp behind and rebuilds them.

Every method expects the caller to hold `lock` when it read what it is about to change (the
lock is re-entrant, so a method also takes it itself).
"""

from __future__ import annotations

import contextvars
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .. import crashpoints
from ..cmp.context import note_records
from ..cmp.errors import not_found
from ..dream import failures
from ..dream.grouping import Group
from ..index.graph import Edge
from ..model import STORE_CODE, MemoryRecord, RawJournalRecord, RecallMode, StoreType, to_ts
from ..storage.base import Tables
from ..storage.codec import blobs_of_rows
from ..storage.crypto import VECTOR, Plaintext
from ..stores.records import Head, Written
from . import sessions
from .core import EngineCore, VectorColumns, Vectors, by_dimension, merge_columns
from .docs import raw_text_doc, record_text_doc, record_text_docs
from .group import GroupCommit, Pending
from .handoff import HandoffLock

log = logging.getLogger("cerememory")

RECORDS_SEQ = "records_seq"  # bumped by every committed change to the records: the text index stamp
JOURNAL_SEQ = "journal_seq"


@dataclass(frozen=True)
class Alongside:
    """What a write changes beside the records it writes or deletes, in the same transaction."""

    edges: Sequence[Edge] = ()  # associations added (a merge moves the dropped record's to the kept one)
    ledger: Mapping[uuid.UUID, uuid.UUID] = field(default_factory=dict)  # consolidation: episodic -> semantic
    ledger_strategy: str = ""
    ledger_at: float = 0.0
    raw: Sequence[RawJournalRecord] = ()  # journal records rewritten in place (a dream's backlinks)
    counters: Sequence[str] = ()  # state counters bumped
    state: Mapping[str, str] = field(default_factory=dict)  # state keys set
    touched: Sequence[uuid.UUID] = ()  # other records the change is about, for the audit log
    crashpoint: str | None = None  # named crash point reached inside the transaction (tests)


NOTHING = Alongside()


@dataclass
class NewRecords:
    """An encode's records with their edges and vectors, and the association targets that must
    still exist when they commit. The writer links the turns of each session (`sessions.py`)
    and sets `session_links` to the number of edges it made for this write."""

    records: Sequence[MemoryRecord]
    edges: Sequence[Edge]
    vectors: Sequence[VectorColumns]  # from `core.vector_columns`
    targets: Sequence[uuid.UUID] = ()
    session_links: int = 0


@dataclass
class Replacement:
    """An import's change: records cleared (overwritten or removed) and written, raw records
    removed and written, all in one transaction."""

    cleared: set[uuid.UUID]  # records whose rows go before the archive's are written
    gone: set[uuid.UUID]  # records that no longer exist afterwards
    records: list[MemoryRecord]  # durable and working, as archived
    heads: dict[uuid.UUID, Head]  # the archived decay state of each durable record
    edges: list[Edge]
    vectors: Vectors
    raw_removed: list[uuid.UUID]
    raw: list[RawJournalRecord]


class Writer:
    """Commits changes and mirrors them; see the module docstring."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.lock = HandoffLock()  # the follower hands its changes here (handoff.py)
        self.group: GroupCommit[NewRecords] = GroupCommit(self._commit_group)
        self._flushed_recall_count = core.total_recall_count

    @contextmanager
    def _transaction(self) -> Iterator[Tables]:
        with self.lock, self.core.backend.transaction() as uow:
            yield uow

    # ------------------------------------------------------------ curated records

    def persist(self, records: Sequence[MemoryRecord], edges: Sequence[Edge], vectors: Vectors,
                alongside: Alongside = NOTHING, *, step: str = "write") -> None:
        """Write new records with their edges and vectors (from `core.vectors_for`, made before
        the lock), then mirror them."""
        ids = [*(r.id for r in records), *alongside.touched]
        self._persist(records, edges, by_dimension(vectors), alongside,
                      lambda: self.core.intend_audit(step, ids, edges=len(edges)))

    def add(self, write: NewRecords) -> None:
        """`persist` through the group commit: writes from concurrent callers share one
        transaction. Returns once this one is committed. The caller must not hold `lock`."""
        self.group.submit(write)

    def add_each(self, writes: Sequence[tuple[NewRecords, contextvars.Context]]) -> list[BaseException | None]:
        """`add` for the writes of many callers handed in by one thread, each audited in its
        caller's context: what refused each (None where it was committed)."""
        return self.group.submit_each(writes)

    def _commit_group(self, take: Callable[[], list[Pending[NewRecords]]]) -> None:
        with self.lock:
            group = take()
            kept = []
            for pending in group:
                missing = next((t for t in pending.write.targets if not self.core.exists(t)), None)
                if missing is None:
                    kept.append(pending)
                else:
                    pending.error = not_found(missing, "association target")
            if not kept:
                return

            def intents() -> None:  # one per caller, in the caller's context: its request id, its key
                self.core.intend_audits("write", [(p.context, [r.id for r in p.write.records],
                                                   {"edges": len(p.write.edges)}) for p in kept])

            vectors = merge_columns(g for p in kept for g in p.write.vectors)
            edges = [e for p in kept for e in p.write.edges]

            def link(uow: Tables) -> list[Edge]:  # inside the transaction: the session tails it reads and moves
                taken = {(e.source, e.target, e.type) for e in edges}
                made, counts = sessions.link_turns([p.write.records for p in kept], uow.state, self.core.exists,
                                                   to_ts(self.core.now()), taken)
                for pending, count in zip(kept, counts, strict=True):
                    pending.write.session_links = count
                return made

            self._persist([r for p in kept for r in p.write.records], edges, vectors, NOTHING, intents, link)

    def _persist(self, records: Sequence[MemoryRecord], edges: Sequence[Edge], groups: Sequence[VectorColumns],
                 alongside: Alongside, intents: Callable[[], None],
                 link: Callable[[Tables], list[Edge]] | None = None) -> None:
        """`groups`: the vectors, one matrix per dimension, for the table and RAM alike."""
        core = self.core
        durable = [r for r in records if r.store is not StoreType.WORKING]
        all_durable = len(durable) == len(records)  # the usual batch: nothing to leave out
        durable_ids = None if all_durable else {r.id for r in durable}
        with self._transaction() as uow:
            if link is not None:
                edges = [*edges, *link(uow)]
            if edges:  # an edge is stored when its source is: a record written here, or one stored before
                stored = durable_ids if durable_ids is not None else {r.id for r in durable}
                self._insert_edges(uow, [e for e in edges if e.source in stored or e.source in core.records.heads])
            self._insert_vectors(uow, groups if durable_ids is None else [g.only(durable_ids) for g in groups],
                                 replace=False)
            self._alongside(uow, alongside)
            self._flush_in(uow)
            intents()
            # last, bumping the stamp in the same statement: a lone store commits as that one statement
            written = core.records.insert(uow, durable, bump=RECORDS_SEQ)
        seq = written.bumped
        assert seq is not None
        self._mirror_added(written, records, [*edges, *alongside.edges], groups, seq)
        self._mirror_alongside(alongside)

    def delete(self, ids: Sequence[uuid.UUID], alongside: Alongside = NOTHING) -> None:
        """Delete records with their vectors, edges and ledger rows, then from RAM; the keys
        of the durable ones are erased, so what is left of them on disk can never be opened."""
        gone = set(ids)
        with self._transaction() as uow:
            self._remove_rows(uow, gone, gone)
            self._alongside(uow, alongside)
            seq = uow.state.bump(RECORDS_SEQ)
            self.core.intend_audit("delete", [*ids, *alongside.touched])
        self._mirror_removed(gone, gone, seq)
        self._mirror_added(None, [], alongside.edges, [], seq)
        self._mirror_alongside(alongside)
        note_records(ids)  # the audit entry of the running operation lists every deleted record

    def update(self, record: MemoryRecord, vectors: Vectors | None) -> None:
        """Replace one record's content, emotion, metadata, meta or store; `vectors` when its content
        changed (its old vector goes)."""
        core = self.core
        durable = record.store is not StoreType.WORKING
        written = None
        groups = by_dimension(vectors) if vectors is not None else None  # for the table and RAM alike
        with self._transaction() as uow:
            if durable:
                written = core.records.insert(uow, [record], replace=True)
                if groups is not None:
                    uow.vectors.delete([record.id])
                    self._insert_vectors(uow, groups, replace=False)
            seq = uow.state.bump(RECORDS_SEQ)
            core.intend_audit("update", [record.id])
        if written is not None:
            core.records.commit_heads(written)
        else:
            core.working.put(record)
        if groups is not None:
            core.vectors.remove([record.id])
            self._add_vectors_ram(groups, record.store)
        else:  # a move to another store keeps its vector, filed under the new store
            core.vectors.set_code(record.id, STORE_CODE[record.store])
        core.text.stage(seq, delete=[str(record.id)], add=[record_text_doc(record)])
        core.text.mark_pending()

    def replace(self, change: Replacement) -> None:
        """An import, all or nothing: clear what it displaces, write what it brings."""
        core = self.core
        durable = [r for r in change.records if r.store is not StoreType.WORKING]
        durable_ids = {r.id for r in durable}
        with self._transaction() as uow:
            self._remove_rows(uow, change.cleared, change.gone)
            written = core.records.insert(uow, durable, replace=True, heads=[change.heads[r.id] for r in durable])
            self._insert_edges(uow, [e for e in change.edges if e.source in durable_ids])  # as encode does
            self._insert_vectors(uow, by_dimension({i: v for i, v in change.vectors.items() if i in durable_ids}))
            uow.journal.delete(change.raw_removed)
            if change.raw:
                core.journal.insert(uow, change.raw)
            self._flush_in(uow, written.ids)
            seq = uow.state.bump(RECORDS_SEQ)
            journal_seq = uow.state.bump(JOURNAL_SEQ) if change.raw or change.raw_removed else None
            ids = [*change.gone, *change.raw_removed, *(r.id for r in change.records), *(r.id for r in change.raw)]
            core.intend_audit("import", ids)
        note_records(ids)
        kept_raw = {r.id for r in change.raw}
        self._destroy_keys([i for i in change.raw_removed if i not in kept_raw])
        self._mirror_removed(change.cleared, change.gone, seq)
        working = [r.model_copy(update={"associations": []})  # the graph holds them
                   for r in change.records if r.store is StoreType.WORKING]
        self._mirror_added(written, working, change.edges, by_dimension(change.vectors), seq,
                           stores={r.id: r.store for r in change.records}, docs=change.records)
        if journal_seq is not None:
            core.raw_text.stage(journal_seq, delete=[str(i) for i in change.raw_removed],
                                add=[raw_text_doc(r) for r in change.raw])
            core.raw_text.mark_pending()

    # ------------------------------------------------------------ the raw journal

    def append_raw(self, records: Sequence[RawJournalRecord]) -> None:
        core = self.core
        with self._transaction() as uow:
            core.intend_audit("raw", [r.id for r in records])
            seq = core.journal.insert(uow, records, bump=JOURNAL_SEQ)  # as persist writes its records
        assert seq is not None
        core.raw_text.stage(seq, add=[raw_text_doc(r) for r in records])
        core.raw_text.mark_pending()

    def set_raw_flags(self, record_id: uuid.UUID, *, suppressed: bool | None, visibility: str | None,
                      secrecy_level: str | None) -> bool:
        """False (and nothing changed) when there is no such journal record."""
        with self._transaction() as uow:
            if not self.core.journal.set_flags(uow, record_id, updated_at=self.core.clock(), suppressed=suppressed,
                                               visibility=visibility, secrecy_level=secrecy_level):
                return False
            self.core.intend_audit("raw_flags", [record_id])
        return True

    # ------------------------------------------------------------ state

    def set_mode(self, mode: RecallMode, scope: Sequence[StoreType]) -> None:
        """The recall mode of the stores in `scope`, or of all (which clears per-store modes)."""
        core = self.core
        with self._transaction() as uow:
            if scope:
                for store in scope:
                    uow.state.set(f"recall_mode:{store.value}", mode.value)
            else:
                uow.state.set("recall_mode", mode.value)
                uow.state.delete_prefix("recall_mode:")
            core.intend_audit("mode", [])
        if scope:
            core.modes.update(dict.fromkeys(scope, mode))
        else:
            core.modes = {None: mode}

    def set_state(self, values: Mapping[str, str]) -> None:
        with self._transaction() as uow:
            for key, value in values.items():
                uow.state.set(key, value)

    def record_dream_failure(self, group: Group, exc: BaseException, now: float) -> failures.Failure:
        with self._transaction() as uow:
            return failures.record(uow, group, exc, now)

    def end_dream_tick(self, state: Mapping[str, str]) -> None:
        """Forget the failures of groups whose raw records are gone or done; set `state`."""
        with self._transaction() as uow:
            uow.failures.prune()
            for key, value in state.items():
                uow.state.set(key, value)

    def write_decay(self, ids: Sequence[uuid.UUID], heads: Sequence[Head]) -> None:
        """Materialised fidelity of many records (their heads in RAM already changed)."""
        with self._transaction() as uow:
            self.core.records.write_decay(uow, ids, heads)
            self._flush_in(uow)
            self.core.intend_audit("decay", [], records=len(ids))  # every record: too many to list

    def flush(self) -> None:
        """Write back what recall changed in RAM (access counts, stability, recall count)."""
        core = self.core
        if (not core.records.reinforcements and core.total_recall_count == self._flushed_recall_count
                and not core.evolution.dirty):
            return
        with self._transaction() as uow:
            self._flush_in(uow)

    def _flush_in(self, uow: Tables, rewritten: Sequence[uuid.UUID] = ()) -> None:
        """Recalls and counters kept in RAM since the last flush; `rewritten` are records this
        transaction writes whole."""
        core = self.core
        core.records.flush_reinforcements(uow, set(rewritten))
        count = core.total_recall_count
        if count != self._flushed_recall_count:
            uow.state.set("total_recall_count", str(count))
            self._flushed_recall_count = count
        if core.evolution.dirty:
            uow.state.set("evolution", json.dumps(core.evolution.to_state()))

    # ------------------------------------------------------------ rows

    def _remove_rows(self, uow: Tables, cleared: set[uuid.UUID], gone: set[uuid.UUID]) -> None:
        """Rows of `cleared` records (their own rows and outgoing edges) and of `gone` ones (also
        the edges into them and their ledger rows)."""
        heads = self.core.records.heads
        durable = [i for i in cleared if i in heads]
        self.core.records.delete(uow, durable)
        uow.vectors.delete(durable)
        uow.edges.delete_from(list(cleared))
        uow.edges.delete_to(list(gone))
        uow.ledger.delete(list(gone))

    def _alongside(self, uow: Tables, alongside: Alongside) -> None:
        """Write `alongside` (the caller bumps the records sequence number)."""
        self._insert_edges(uow, alongside.edges)
        if alongside.ledger:
            ledger = alongside.ledger
            uow.ledger.insert({"episodic_id": list(ledger), "semantic_id": list(ledger.values()),
                               "consolidated_at": [alongside.ledger_at] * len(ledger),
                               "strategy": [alongside.ledger_strategy] * len(ledger)})
        if alongside.raw:
            self.core.journal.insert(uow, alongside.raw, replace=True)
        for counter in alongside.counters:
            uow.state.bump(counter)
        for key, value in alongside.state.items():
            uow.state.set(key, value)
        if alongside.crashpoint:
            crashpoints.reached(alongside.crashpoint)

    def _insert_vectors(self, uow: Tables, groups: Sequence[VectorColumns], *, replace: bool = True) -> None:
        """One columnar insert per dimension: an unencrypted directory hands the float32 matrix
        itself to storage; an encrypted one seals each row under its record's key. `replace=False`
        when no id has a vector stored (new records, or theirs deleted in the same transaction)."""
        sealer = self.core.sealer
        for group in groups:
            n, dim = group.matrix.shape
            vec: np.ndarray | list[bytes] = group.matrix
            if not isinstance(sealer, Plaintext):
                vec = sealer.seal_many(group.ids, blobs_of_rows(group.matrix), VECTOR)
            uow.vectors.insert({"record_id": group.ids, "dim": [dim] * n, "model": group.models}, vec,
                               replace=replace)

    def _insert_edges(self, uow: Tables, edges: Sequence[Edge]) -> None:
        uow.edges.insert(
            {"source_id": [e.source for e in edges], "target_id": [e.target for e in edges],
             "association_type": [e.type for e in edges], "weight": [e.weight for e in edges],
             "created_at": [e.created_at for e in edges],
             "last_co_activation": [e.last_co_activation for e in edges]})

    # ------------------------------------------------------------ mirrors

    def _mirror_added(self, written: Written | None, records: Sequence[MemoryRecord], edges: Sequence[Edge],
                      groups: Sequence[VectorColumns], seq: int, *, stores: Mapping[uuid.UUID, StoreType] | None = None,
                      docs: Sequence[MemoryRecord] | None = None) -> None:
        core = self.core
        if written is not None:
            core.records.commit_heads(written)
        for record in records:
            if record.store is StoreType.WORKING:
                self._evict(core.working.put(record), seq)
        core.graph.add(edges)
        self._add_vectors_ram(groups, stores if stores is not None else _stores_of(records))
        added = docs if docs is not None else records
        if added:
            core.text.stage(seq, add=record_text_docs(added))
        core.text.mark_pending()

    def _mirror_removed(self, cleared: set[uuid.UUID], gone: set[uuid.UUID], seq: int) -> None:
        core = self.core
        self._destroy_keys([i for i in gone if i in core.records.heads])
        for i in gone:
            core.consolidated.pop(i, None)
        core.records.forget_heads(cleared)
        core.working.remove(list(cleared))
        core.graph.remove_nodes(gone)
        core.graph.remove_out_edges(cleared - gone)
        core.vectors.remove(list(cleared))
        core.text.stage(seq, delete=[str(i) for i in cleared])

    def _mirror_alongside(self, alongside: Alongside) -> None:
        self.core.consolidated.update(alongside.ledger)

    def _destroy_keys(self, ids: Sequence[uuid.UUID]) -> None:
        try:
            self.core.sealer.destroy(ids)  # crypto-erase: the ciphertext left behind can never be opened
        except OSError:  # committed regardless; the keys left over are erased on the next open
            log.exception("the keys of %d forgotten records could not be erased yet", len(ids))

    def _add_vectors_ram(self, groups: Sequence[VectorColumns],
                         stores: Mapping[uuid.UUID, StoreType] | StoreType) -> None:
        """`stores`: each vector's record's store, or the one store all of them are in."""
        for group in groups:
            codes = ([STORE_CODE[stores]] * len(group.ids) if isinstance(stores, StoreType)
                     else [STORE_CODE[stores[i]] for i in group.ids])
            self.core.vectors.add(group.ids, codes, group.matrix)

    def _evict(self, ids: Sequence[uuid.UUID], seq: int) -> None:
        """Working-memory evictions leave no trace in the indexes."""
        if ids:
            self.core.graph.remove_nodes(ids)
            self.core.vectors.remove(ids)
            self.core.text.stage(seq, delete=[str(i) for i in ids])


def _stores_of(records: Sequence[MemoryRecord]) -> Mapping[uuid.UUID, StoreType] | StoreType:
    """The store of each record, or the one store of them all (a batch's usual case: no id is
    looked up per vector)."""
    first = records[0].store if records else StoreType.EPISODIC
    if all(r.store is first for r in records):
        return first
    return {r.id: r.store for r in records}
