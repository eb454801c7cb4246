"""Keeping one server's RAM current with what other servers write to a shared database.

Every server sharing a PostgreSQL memory holds the same caches as an embedded one (heads,
graph, vectors, the full-text indexes). A write made here updates them at once (read your
writes); a write made elsewhere reaches them through the change log: `Follower` wakes on the
database's notification (or after a short poll), reads what changed since the last entry it
applied, and reads those records again. It holds the writer's lock meanwhile, so it never
interleaves with a local write to the same record. A server that fell behind the log's pruning
reloads every record.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence

from ..cmp.errors import CMPError
from ..index.graph import Edge
from ..storage.base import Change, ChangeFeed
from .core import EngineCore
from .indexes import stage_raw, stage_records
from .writer import Writer

log = logging.getLogger("cerememory")

POLL_SECONDS = 0.25  # the longest a change waits when its notification is lost
LEAD_EVERY = 40  # polls between checks of who runs the background work (~10 s)


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
            with self.writer.lock:
                changes, complete = self.feed.since(self.core.changes_seen)
                if not complete:
                    log.warning("this server fell behind the change log; reloading every record")
                    self._reload_all()
                    self.core.changes_seen = changes[-1].seq if changes else self.feed.last()
                elif changes:
                    self._apply(changes)
                    self.core.changes_seen = changes[-1].seq
            read += len(changes)
            if len(changes) < 10_000:
                return read

    def _apply(self, changes: Sequence[Change]) -> None:
        by_kind: dict[str, dict[str, None]] = {}
        for change in changes:
            if not change.mine:
                by_kind.setdefault(change.kind, {})[change.key] = None
        records = [uuid.UUID(k) for k in by_kind.get("record", {})]
        rewritten = set(records)
        heads = [i for i in (uuid.UUID(k) for k in by_kind.get("head", {})) if i not in rewritten]
        if records:
            self._refresh_records(records)
        if heads:
            self.core.records.refresh(heads, bodies=False)
        if "raw" in by_kind:
            self._refresh_raw([uuid.UUID(k) for k in by_kind["raw"]])
        if "ledger" in by_kind:
            self.core.consolidated = dict(self.core.read.ledger.load())
        self._refresh_state(list(by_kind.get("state", {})))

    def _refresh_records(self, ids: list[uuid.UUID]) -> None:
        core = self.core
        core.sealer.prefetch(ids)  # keys another server made, in one query
        core.records.refresh(ids, bodies=True)
        present = [i for i in ids if i in core.records.heads]
        gone = [i for i in ids if i not in core.records.heads]
        core.sealer.evict(gone)  # their keys were erased with them
        for i in gone:
            core.consolidated.pop(i, None)
        core.graph.remove_nodes(gone)
        core.graph.remove_out_edges(present)
        heads = core.records.heads
        core.graph.add(Edge(*row) for row in core.read.edges.load_from(present) if row[1] in heads)
        core.vectors.remove(ids)
        core.load_vectors([row for row in core.read.vectors.load_for(present) if row[0] in heads])
        stage_records(core, ids)

    def _refresh_raw(self, ids: list[uuid.UUID]) -> None:
        stage_raw(self.core, ids)

    def _refresh_state(self, keys: list[str]) -> None:
        if any(k.startswith("recall_mode") for k in keys):
            self.core.modes = self.core.load_modes()
        if "evolution" in keys:
            self.core.load_evolution()

    def _reload_all(self) -> None:
        core = self.core
        self._refresh_records(sorted(set(core.records.heads) | {row[0] for row in core.read.records.heads()}))
        self._refresh_raw(core.journal.ids())
        core.consolidated = dict(core.read.ledger.load())
        self._refresh_state(["recall_mode", "evolution"])
