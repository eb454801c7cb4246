"""Keeping one server's RAM current with what other servers write to a shared database.

Every server sharing a PostgreSQL memory holds the same caches as an embedded one (heads,
graph, vectors, the full-text indexes). A write made here updates them at once (read your
writes); a write made elsewhere reaches them through the change log: `Follower` wakes on the
database's notification (or after a short poll), reads what changed since the last entry it
applied, and reads those records again, all without the writer's lock, so local writes go on
meanwhile. It then hands the result to the writer's lock (handoff.py): the local write holding
it applies it as it lets go, between two writes. A record this server itself changed after the
read began is newer in RAM than in the read, so it is read again under the lock instead (the
change log says which: this server's entries past the read's position); a late read therefore
never undoes a local write, a forget above all. A server that fell behind the log's pruning
reloads every record.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..cmp.errors import CMPError
from ..index.graph import Edge
from ..model import RawJournalRecord
from ..storage.base import Change, ChangeFeed, Row
from ..stores.records import FreshRecords
from .core import EngineCore
from .indexes import read_raw, sequence, stage_raw, stage_records
from .writer import RECORDS_SEQ, Writer

log = logging.getLogger("cerememory")

POLL_SECONDS = 0.25  # the longest a change waits when its notification is lost
LEAD_EVERY = 40  # polls between checks of who runs the background work (~10 s)


@dataclass(frozen=True)
class RecordsRead:
    """Records another server changed, read from the database: heads and bodies, the edges
    out of them and their vectors, and the records sequence number their text is staged at."""

    fresh: FreshRecords
    edges: list[Row]
    vectors: list[Row]
    seq: int

    def without(self, ids: set[uuid.UUID]) -> RecordsRead:
        if not ids:
            return self
        return RecordsRead(self.fresh.without(ids), [e for e in self.edges if e[0] not in ids],
                           [v for v in self.vectors if v[0] not in ids], self.seq)


@dataclass(frozen=True)
class Batch:
    """One round of other servers' changes, read outside the writer's lock (`Follower.read`)
    up to change number `upto`."""

    upto: int
    records: RecordsRead | None
    heads: FreshRecords | None
    raw: tuple[list[uuid.UUID], tuple[int, list[RawJournalRecord]]] | None
    ledger: bool
    state: list[str]

    @property
    def empty(self) -> bool:
        return not (self.records or self.heads or self.raw or self.ledger or self.state)


class Follower:
    def __init__(self, core: EngineCore, writer: Writer, feed: ChangeFeed, *, stopping: Callable[[], bool]) -> None:
        self.core = core
        self.writer = writer
        self.feed = feed
        self.stopping = stopping
        self.leads = False  # whether this server runs decay, dreams and consolidation
        self._thread = threading.Thread(target=self._loop, name="cerememory-follow", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _check_lead(self) -> None:
        leads = self.core.backend.leads()
        if leads != self.leads:
            log.info("this server %s the background work (decay, dreams, consolidation)",
                     "now runs" if leads else "no longer runs")
        self.leads = leads

    def join(self) -> None:
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        polls = 0
        self._check_lead()
        while not self.stopping():
            self.feed.wait(POLL_SECONDS)
            if self.stopping():
                return
            try:
                self.catch_up()
                polls += 1
                if polls % LEAD_EVERY == 0:
                    self._check_lead()
                    if self.leads:
                        self.feed.prune()
            except CMPError as exc:  # the database is away: try again at the next poll
                log.warning("following other servers' changes failed: %s", exc.message)
            except Exception:
                log.exception("following other servers' changes failed")

    def catch_up(self) -> int:
        """Apply every change logged since the last one applied; returns how many were read."""
        read = 0
        while True:
            changes, complete = self.feed.since(self.core.changes_seen)
            if not complete:
                log.warning("this server fell behind the change log; reloading every record")
                upto = changes[-1].seq if changes else self.feed.last()
                self.writer.lock.hand(functools.partial(self._reload_all, upto))
            elif changes:
                batch = self.read(changes)  # outside the writer's lock: local writes go on meanwhile
                if batch.empty:  # only this server's own changes: its RAM holds them already
                    self.core.changes_seen = max(self.core.changes_seen, batch.upto)
                else:
                    self.writer.lock.hand(functools.partial(self.apply, batch))
            read += len(changes)
            if len(changes) < 10_000:
                return read

    def read(self, changes: Sequence[Change]) -> Batch:
        """What the changes changed, as the database holds it now (the log stood at least at
        the last change's number when these reads began)."""
        by_kind: dict[str, dict[str, None]] = {}
        for change in changes:
            if not change.mine:
                by_kind.setdefault(change.kind, {})[change.key] = None
        records = [uuid.UUID(k) for k in by_kind.get("record", {})]
        rewritten = set(records)
        heads = [i for i in (uuid.UUID(k) for k in by_kind.get("head", {})) if i not in rewritten]
        raw = [uuid.UUID(k) for k in by_kind.get("raw", {})]
        return Batch(upto=changes[-1].seq, records=self._read_records(records) if records else None,
                     heads=self.core.records.read_fresh(heads, bodies=False) if heads else None,
                     raw=(raw, read_raw(self.core, raw)) if raw else None,
                     ledger="ledger" in by_kind, state=list(by_kind.get("state", {})))

    def apply(self, batch: Batch) -> None:
        """Apply `batch` (under the writer's lock). What this server itself wrote since the
        batch was read is newer in RAM than in the batch: those records are left out of it and
        read again now, while no local write can move them, so a late batch never undoes a
        local write (a forget above all)."""
        core = self.core
        moved = self.feed.mine_since(batch.upto)
        if batch.records is not None:
            again = {i for i in batch.records.fresh.ids if str(i) in moved}
            self._refresh_records(batch.records.without(again))
            if again:
                self._refresh_records(self._read_records(sorted(again)))
        if batch.heads is not None:
            again = {i for i in batch.heads.ids if str(i) in moved}
            kept = batch.heads.without(again)
            core.records.refresh(kept.ids, bodies=False, fresh=kept)
            if again:
                core.records.refresh(sorted(again), bodies=False)
        if batch.raw is not None:
            ids, read = batch.raw
            again = {i for i in ids if str(i) in moved}
            stage_raw(core, [i for i in ids if i not in again], (read[0], [r for r in read[1] if r.id not in again]))
            if again:
                stage_raw(core, sorted(again))
        if batch.ledger:
            core.consolidated = dict(core.read.ledger.load())
        self._refresh_state(batch.state)
        core.changes_seen = max(core.changes_seen, batch.upto)

    def _read_records(self, ids: list[uuid.UUID]) -> RecordsRead:
        core = self.core
        core.sealer.prefetch(ids)  # keys another server made, in one query
        fresh = core.records.read_fresh(ids, bodies=True)
        present = [row[0] for row in fresh.rows]
        return RecordsRead(fresh, core.read.edges.load_from(present), core.read.vectors.load_for(present),
                           sequence(core, RECORDS_SEQ))

    def _refresh_records(self, read: RecordsRead) -> None:
        core = self.core
        ids = read.fresh.ids
        core.records.refresh(ids, bodies=True, fresh=read.fresh)
        present = [i for i in ids if i in core.records.heads]
        gone = [i for i in ids if i not in core.records.heads]
        core.sealer.evict(gone)  # their keys were erased with them
        for i in gone:
            core.consolidated.pop(i, None)
        core.graph.remove_nodes(gone)
        core.graph.remove_out_edges(present)
        heads = core.records.heads
        core.graph.add(Edge(*row) for row in read.edges if row[1] in heads)
        core.vectors.remove(ids)
        core.load_vectors([row for row in read.vectors if row[0] in heads])
        stage_records(core, ids, read.seq)

    def _refresh_state(self, keys: list[str]) -> None:
        if any(k.startswith("recall_mode") for k in keys):
            self.core.modes = self.core.load_modes()
        if "evolution" in keys:
            self.core.load_evolution()

    def _reload_all(self, upto: int) -> None:
        core = self.core
        self._refresh_records(self._read_records(sorted(set(core.records.heads)
                                                        | set(core.read.records.heads().ids))))
        stage_raw(core, core.journal.ids())
        core.consolidated = dict(core.read.ledger.load())
        self._refresh_state(["recall_mode", "evolution"])
        core.changes_seen = upto
