"""The engine: one data directory, one method per CMP operation.

Each method is a line or two over the parts it is built from (`core`, `writer`, and one part
per family of operations); the parts hold the logic, the façade only joins them, opens them
in order (the ones that only change things on request, on first use) and closes them in reverse.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from ..cmp import messages as m
from ..cmp.errors import CMPError
from ..collector import lasting_objects
from ..heap import TRIM_AFTER_RECORDS, release_free_memory
from ..model import MemoryRecord
from ..progress import ProgressFn
from ..security.audit import AuditLog
from ..shutdown import close_at_exit
from ..storage.lock import DataDirLock
from ..storage.modes import make_private, private_dir
from .core import EngineCore
from .encode import Encoding
from .indexes import TextIndexes
from .introspect import Introspection
from .listing import Listing
from .options import EngineOptions
from .recall import Recall
from .warmup import Warmup
from .writer import Writer

if TYPE_CHECKING:
    from .archive import Archives
    from .consolidate import Consolidation
    from .dreams import Dreaming
    from .follow import Follower
    from .lifecycle import Lifecycle

log = logging.getLogger("cerememory")
P = TypeVar("P")


class Engine:
    """One data directory: the five stores, the raw journal, their indexes and the CMP operations."""

    def __init__(self, data_dir: str | Path, options: EngineOptions | None = None,
                 *, progress: ProgressFn | None = None) -> None:
        self.options = options or EngineOptions()
        self.data_dir = Path(data_dir).expanduser().resolve()
        existed = self.data_dir.exists()
        private_dir(self.data_dir)
        fixed = make_private(self.data_dir)
        if existed and fixed:
            log.warning("%s was readable by other users: made %d paths private to their owner (%s)",
                        self.data_dir, len(fixed), ", ".join(fixed[:5]) + (", …" if len(fixed) > 5 else ""))
        self.background_decay = False  # set by the scheduler of a serving process
        self.background_dream = False
        self._lock_file = DataDirLock(self.data_dir)
        self._lock_file.acquire(server_url=self.options.server_url)
        self._close_lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._warmup: Warmup | None = None
        if self.options.warm_cache:  # started first: its validators build while opening waits on storage
            self._warmup = Warmup(self._stop)
            self._warmup.start()
        # opening builds several objects per record (cyclic GC passes over them would cost a
        # third), and what it builds lives as long as the engine
        with lasting_objects():
            try:
                self._open(progress)
            except BaseException:
                self._stop.set()
                if self._warmup is not None:
                    self._warmup.join()
                self._lock_file.release()
                raise
        if len(self.core.records.heads) >= TRIM_AFTER_RECORDS:
            release_free_memory()  # the rows opening read and dropped
        make_private(self.data_dir)  # the files the stores and indexes just created
        close_at_exit(self)

    def _open(self, progress: ProgressFn | None) -> None:
        self.core = core = EngineCore(self.data_dir, self.options)
        self.writer = writer = Writer(core)
        self.indexes = TextIndexes(core, writer)
        self.indexes.repair(progress)
        self.encoding = Encoding(core, writer)
        self.recall = Recall(core)
        self.listing = Listing(core)
        self.introspection = Introspection(core)
        self._parts_lock = threading.Lock()
        self._parts: dict[str, object] = {}
        self.follower: Follower | None = None
        feed = core.backend.changes
        if feed is not None:
            from .follow import Follower

            self.follower = Follower(core, writer, feed, stopping=self._stop.is_set)
            self.follower.start()
        self._flusher = threading.Thread(target=self._flush_loop, name="cerememory-flush", daemon=True)
        self._flusher.start()
        if self._warmup is not None:
            self._warmup.opened(lambda _: core.records.heads.make_all(), core.records.warm)

    def _serving(self, *, recall: bool = False) -> AbstractContextManager[None]:
        """Around the requests a server answers most: the warm-up waits for a pause in them."""
        return nullcontext() if self._warmup is None else self._warmup.serving(recall=recall)

    # The parts below are made on first use: a short process (one `cm` command) that only reads
    # never imports the code of dreams, consolidation, forgetting or archives.

    def _part(self, name: str, make: Callable[[], P]) -> P:
        with self._parts_lock:
            part = self._parts.get(name)
            if part is None:
                part = self._parts[name] = make()
            return cast(P, part)

    @property
    def consolidation(self) -> Consolidation:
        from .consolidate import Consolidation

        return self._part("consolidation", lambda: Consolidation(self.core, self.writer, self.encoding))

    @property
    def dreaming(self) -> Dreaming:
        from .dreams import Dreaming

        return self._part("dreaming", lambda: Dreaming(self.core, self.writer, self.encoding,
                                                       closing=self._stop.is_set))

    @property
    def lifecycle(self) -> Lifecycle:
        from .lifecycle import Lifecycle

        return self._part("lifecycle", lambda: Lifecycle(self.core, self.writer))

    @property
    def archives(self) -> Archives:
        from .archive import Archives

        return self._part("archives", lambda: Archives(self.core, self.writer))

    @property
    def audit(self) -> AuditLog | None:
        """The hash-chained log of changes, or None when auditing is off."""
        return self.core.audit

    @property
    def repaired(self) -> list[str]:
        """The full-text indexes rebuilt when the data directory was opened."""
        return self.indexes.repaired

    @property
    def leads(self) -> bool:
        """Whether this server runs the background work (always, unless several share a database)."""
        return self.follower.leads if self.follower is not None else True

    @property
    def closing(self) -> bool:
        """True once close() began: long operations (a dream tick) stop at their next step."""
        return self._stop.is_set()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.options.flush_interval):
            try:
                self.writer.flush()
            except CMPError as exc:  # a full disk, say: keep flushing; the next write or close retries
                log.warning("flushing recall statistics failed: %s", exc.message)
            except Exception:
                log.exception("flushing recall statistics failed")

    def flush(self) -> None:
        """Write back what recall changed in RAM (access counts, stability, recall count)."""
        self.writer.flush()

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
        if self._warmup is not None:
            self._warmup.join()
        if self.follower is not None:
            self.follower.join()
        core = self.core
        with self.writer.lock:  # an operation still running in another thread finishes first
            # every change up to this position is in RAM, hence staged: the next open starts there
            position = core.changes_seen if core.backend.changes is not None else None

            def close_text() -> None:
                core.text.close(position)

            def close_raw_text() -> None:
                core.raw_text.close(position)

            steps = [self.writer.flush, close_text, close_raw_text, core.backend.close]
            if core.audit is not None:
                steps.append(core.audit.close)
            for step in steps:
                try:
                    step()
                except Exception:
                    log.exception("closing %s: %s failed", self.data_dir, step.__qualname__)
            try:
                make_private(self.data_dir)  # files written since opening (checkpoints, index stamps)
            except OSError:
                log.exception("closing %s: could not make its files private", self.data_dir)
        self._lock_file.release()

    # ================================================================ encode

    def encode_store(self, req: m.EncodeStoreRequest) -> m.EncodeStoreResponse:
        with self._serving():
            return self.encoding.store(req)

    def gathers(self, op: str) -> bool:
        """Whether concurrent calls of `op` are best taken together (`<method>_each`): stores,
        while no embedder runs. A set is answered once all of it is written, so a store that
        brings its own vector would otherwise wait for another request's embedding."""
        return op == "encode.store" and self.core.embedder is None

    def encode_store_each(self, calls: Sequence[tuple[m.EncodeStoreRequest, contextvars.Context]]
                          ) -> list[m.EncodeStoreResponse | BaseException]:
        with self._serving():
            return self.encoding.store_each(calls)

    def encode_batch(self, req: m.EncodeBatchRequest) -> m.EncodeBatchResponse:
        with self._serving():
            return self.encoding.batch(req)

    def encode_update(self, req: m.EncodeUpdateRequest) -> None:
        self.encoding.update(req)

    def encode_store_raw(self, req: m.EncodeStoreRawRequest) -> m.EncodeStoreRawResponse:
        return self.encoding.store_raw(req)

    def encode_batch_raw(self, req: m.EncodeBatchRawRequest) -> m.EncodeBatchRawResponse:
        return self.encoding.batch_raw(req)

    def encode_update_raw(self, req: m.EncodeUpdateRawRequest) -> None:
        self.encoding.update_raw(req)

    # ================================================================ recall

    def recall_query(self, req: m.RecallQueryRequest) -> m.RecallQueryResponse:
        with self._serving(recall=True):
            return self.recall.query(req)

    def recall_associate(self, req: m.RecallAssociateRequest) -> m.RecallAssociateResponse:
        return self.recall.associate(req)

    def recall_timeline(self, req: m.RecallTimelineRequest) -> m.RecallTimelineResponse:
        return self.recall.timeline(req)

    def recall_graph(self, req: m.RecallGraphRequest) -> m.RecallGraphResponse:
        return self.recall.graph(req)

    def recall_raw_query(self, req: m.RecallRawQueryRequest) -> m.RecallRawQueryResponse:
        return self.recall.raw_query(req)

    def recall_raw_query_plain(self, req: m.RecallRawQueryRequest) -> dict[str, Any] | None:
        return self.recall.raw_query_plain(req)

    def recall_sessions(self, req: m.RecallSessionsRequest) -> m.RecallSessionsResponse:
        return self.recall.sessions(req)

    def recall_list(self, req: m.RecallListRequest) -> m.RecallListResponse:
        return self.listing.list_records(req)

    def recall_list_plain(self, req: m.RecallListRequest) -> dict[str, Any] | None:
        return self.listing.list_plain(req)

    # ================================================================ lifecycle

    def lifecycle_consolidate(self, req: m.ConsolidateRequest) -> m.ConsolidateResponse:
        return self.consolidation.consolidate(req)

    def lifecycle_decay_tick(self, req: m.DecayTickRequest | None = None) -> m.DecayTickResponse:
        return self.lifecycle.decay_tick(req)

    def lifecycle_dream_tick(self, req: m.DreamTickRequest) -> m.DreamTickResponse:
        return self.dreaming.tick(req)

    def lifecycle_set_mode(self, req: m.SetModeRequest) -> None:
        self.lifecycle.set_mode(req)

    def lifecycle_forget(self, req: m.ForgetRequest) -> m.ForgetResponse:
        return self.lifecycle.forget(req)

    def lifecycle_reinforce(self, req: m.ReinforceRequest) -> m.ReinforceResponse:
        return self.recall.reinforce(req)

    def lifecycle_export(self, req: m.ExportRequest, *, sink: BinaryIO | None = None,
                         progress: ProgressFn | None = None) -> m.ExportResponse:
        """A CMA archive written to `sink`, or returned as `archive_data`."""
        return self.archives.export(req, sink, progress=progress)

    def lifecycle_import(self, req: m.ImportRequest, *, progress: ProgressFn | None = None) -> m.ImportResponse:
        """Validate a whole CMA archive, then merge or replace in one transaction."""
        return self.archives.import_(req, progress=progress)

    def lifecycle_reindex(self, req: m.ReindexRequest, *, progress: ProgressFn | None = None) -> m.ReindexResponse:
        """Rebuild the full-text indexes from the database (after damage, or a changed analyzer)."""
        return self.indexes.reindex(req, progress)

    # ================================================================ introspect

    def introspect_stats(self, req: m.StatsRequest | None = None) -> m.StatsResponse:
        group = self.writer.group
        return self.introspection.stats({**self.dreaming.stats(), "background_decay_enabled": self.background_decay,
                                         "background_dream_enabled": self.background_dream,
                                         "write_commits": group.commits, "writes_committed": group.committed})

    def introspect_record(self, req: m.IntrospectRecordRequest) -> MemoryRecord:
        return self.introspection.record(req)

    def introspect_decay_forecast(self, req: m.DecayForecastRequest) -> m.DecayForecastResponse:
        return self.introspection.decay_forecast(req)

    def introspect_fading(self, req: m.FadingRequest) -> m.FadingResponse:
        return self.introspection.fading(req)

    def introspect_audit(self, req: m.AuditRequest) -> m.AuditResponse:
        return self.introspection.audit(req, self.audit)

    def introspect_evolution(self, req: m.EvolutionRequest | None = None) -> m.EvolutionResponse:
        return self.introspection.evolution(req)
