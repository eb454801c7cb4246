"""lifecycle.consolidate: merge near-duplicate episodic memories and promote episodic memories to
semantic facts with backlinks, idempotently.

The plan comes from `dynamics.consolidation` (pure); this part gathers its inputs from the
engine's RAM structures and applies it in two transactions: the merges, then the promotions
together with their ledger rows. Each is all-or-nothing, and a rerun after either finds nothing
left to do, so a crash between them loses nothing and repeats nothing. The promoted facts are
embedded between the two, outside the write lock; a source forgotten meanwhile is not promoted.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

from .. import crashpoints
from ..cmp import messages as m
from ..cmp.context import note_records
from ..cmp.errors import CMPError, ErrorCode
from ..dynamics import consolidation as plan_
from ..index.graph import Edge
from ..model import (
    AssociationType,
    CaptureStatus,
    ContentBlock,
    MemoryContent,
    MemoryRecord,
    MetaEvidenceRef,
    MetaMemory,
    StoreType,
    from_ts,
)
from .core import EngineCore
from .encode import Encoding
from .writer import Alongside, Writer

PROMOTION_WEIGHT = 1.0
WATERMARK_KEY = "consolidate_watermark"
_FETCH_BATCH = 2000


class Consolidation:
    def __init__(self, core: EngineCore, writer: Writer, encoding: Encoding) -> None:
        self.core = core
        self.writer = writer
        self.encoding = encoding
        self._running = threading.Lock()

    @property
    def running(self) -> bool:
        return self._running.locked()

    def consolidate(self, req: m.ConsolidateRequest) -> m.ConsolidateResponse:
        if not self._running.acquire(blocking=False):
            raise CMPError(ErrorCode.CONSOLIDATION_IN_PROGRESS, "a consolidation is already running",
                           hint="retry when it finishes", retry_after=5)
        try:
            return self._consolidate(req)
        finally:
            self._running.release()

    def _consolidate(self, req: m.ConsolidateRequest) -> m.ConsolidateResponse:
        with self.writer.lock:
            now, plan, records, summaries = self._plan(req)
            if not req.dry_run and plan.merges:
                self._apply_merges(plan.merges)
                crashpoints.reached("consolidate.merged")
        promoted: dict[uuid.UUID, uuid.UUID] = {}
        if not req.dry_run:
            promoted = self._promote([records[i] for i in plan.promote if summaries[i]], summaries,
                                     req.strategy.value, now)
            self.writer.set_state({WATERMARK_KEY: repr(now)})
        promotions = [m.ConsolidationPromotion(episodic_id=i, semantic_id=promoted.get(i), summary=summaries[i])
                      for i in plan.promote if summaries[i]]
        return m.ConsolidateResponse(
            records_processed=len(plan.scope),
            records_migrated=len(promotions),
            records_compressed=len(plan.merges),
            semantic_nodes_created=len(promoted),
            dry_run=req.dry_run,
            strategy=req.strategy,
            merges=[m.ConsolidationMerge(dropped_id=g.drop, kept_id=g.keep, similarity=g.similarity)
                    for g in plan.merges[:m.MAX_BATCH]],
            promotions=promotions[:m.MAX_BATCH],
        )

    def _plan(self, req: m.ConsolidateRequest) -> tuple[float, plan_.Plan, dict[uuid.UUID, MemoryRecord],
                                                         dict[uuid.UUID, str]]:
        """Under the write lock: the plan, the episodic records it names, their summaries."""
        now = self.core.clock()
        episodic = [(i, h) for i, h in self.core.records.items() if h.store is StoreType.EPISODIC]
        records = self._fetch_all([i for i, _ in episodic])
        episodic = [(i, h) for i, h in episodic if i in records]  # an undecodable record is left alone
        prune = self.core.params[StoreType.EPISODIC].prune
        candidates = []
        for i, h in episodic:
            fidelity = self.core.state(h, now)[0]
            candidates.append(plan_.Candidate(
                id=i, created_at=h.created_at, updated_at=h.updated_at, access_count=h.access_count,
                intensity=h.emotion_intensity, fidelity=fidelity, visible=fidelity >= prune))
        watermark = self.core.read.state.get(WATERMARK_KEY)
        plan = plan_.plan(
            candidates, strategy=req.strategy, watermark=float(watermark) if watermark else None, now=now,
            min_age_hours=req.min_age_hours, min_access_count=req.min_access_count,
            consolidated=self.core.consolidated, vectors=self.core.vectors.rows([i for i, _ in episodic]),
            text_keys={i: plan_.text_key(r.content.plain_text()) for i, r in records.items()},
        )
        facts = self._fetch_all([i for i, h in self.core.records.items() if h.store is StoreType.SEMANTIC])
        existing = {key for r in facts.values() if (key := plan_.fact_key(r.content.plain_text())) is not None}
        # A dream's summary had its facts chosen by the dream (tool I/O and chatter left out), and a
        # record a fact already names as its source has that fact: neither is promoted again.
        sourced = {source for r in facts.values() for source in r.meta.source_record_ids}
        eligible = [i for i in plan.promote if i not in sourced and "_dream" not in records[i].metadata]
        found = plan_.new_facts({i: plan_.summarise(records[i].content.plain_text(), records[i].content.summary)
                                 for i in eligible}, existing)
        summaries = {i: found.get(i, "") for i in plan.promote}  # "": not promoted
        return now, plan, records, summaries

    def _fetch_all(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, MemoryRecord]:
        out: dict[uuid.UUID, MemoryRecord] = {}
        for start in range(0, len(ids), _FETCH_BATCH):
            out.update(self.core.fetch(ids[start:start + _FETCH_BATCH]))
        return out

    def _apply_merges(self, merges: Sequence[plan_.Merge]) -> None:
        """The kept record inherits the dropped one's associations (the stronger edge wins when
        both had one) and, if only the dropped one was promoted, its ledger row."""
        drops = {g.drop: g.keep for g in merges}
        best: dict[tuple[uuid.UUID, uuid.UUID, str], Edge] = {}

        def offer(edge: Edge) -> None:
            source, target = drops.get(edge.source, edge.source), drops.get(edge.target, edge.target)
            if source == target:
                return
            moved = Edge(source, target, edge.type, edge.weight, edge.created_at, edge.last_co_activation)
            known = best.get((source, target, edge.type))
            if known is None or moved.weight > known.weight:
                best[(source, target, edge.type)] = moved

        for drop in drops:
            for edge in self.core.graph.out_edges(drop) + self.core.graph.in_edges(drop):
                offer(edge)
        for edge in list(best.values()):
            for existing in self.core.graph.out_edges(edge.source, [edge.type]):
                if existing.target == edge.target and existing.weight >= edge.weight:
                    del best[(edge.source, edge.target, edge.type)]
        inherited = {keep: self.core.consolidated[drop] for drop, keep in drops.items()
                     if drop in self.core.consolidated and keep not in self.core.consolidated}
        edges = list(best.values())

        self.writer.delete(list(drops), Alongside(edges=edges, ledger=inherited, ledger_strategy="merge",
                                                  ledger_at=self.core.clock(),
                                                  touched=list(dict.fromkeys(drops.values()))))

    def _promote(self, sources: Sequence[MemoryRecord], summaries: dict[uuid.UUID, str], strategy: str,
                 now: float) -> dict[uuid.UUID, uuid.UUID]:
        """One semantic record per source, holding its summary, linked both ways to it; embedded
        first, then written under the write lock for the sources that are still there."""
        if not sources:
            return {}
        reqs = [m.EncodeStoreRequest.model_construct(
            store=StoreType.SEMANTIC,
            content=MemoryContent(blocks=[ContentBlock.of_text(summaries[r.id])], summary=summaries[r.id]),
            emotion=r.emotion, metadata={"consolidated_from": str(r.id)}, context=None,
            associations=None, created_at=None,
            meta=MetaMemory(
                capture_status=CaptureStatus.INFERRED, intent="a fact consolidated from an episodic memory",
                evidence=[MetaEvidenceRef(record_id=r.id, label="episodic source", excerpt=summaries[r.id])],
                source_record_ids=[r.id]),
        ) for r in sources]
        built = self.encoding.build_records(reqs, "lifecycle.consolidate", from_ts(now))
        vectors = self.core.vectors_for(built)
        with self.writer.lock:
            pairs = [(source, record) for source, record in zip(sources, built, strict=True)
                     if source.id in self.core.records.heads and source.id not in self.core.consolidated]
            ledger: dict[uuid.UUID, uuid.UUID] = {}
            edges: list[Edge] = []
            for source, record in pairs:
                ledger[source.id] = record.id
                kind = AssociationType.SEMANTIC.value
                edges.append(Edge(record.id, source.id, kind, PROMOTION_WEIGHT, now))
                edges.append(Edge(source.id, record.id, kind, PROMOTION_WEIGHT, now))
            if pairs:
                self.writer.persist([record for _, record in pairs], edges, vectors,
                                    Alongside(ledger=ledger, ledger_strategy=strategy, ledger_at=now,
                                              touched=list(ledger)))
        note_records([*ledger, *ledger.values()])
        crashpoints.reached("consolidate.promoted")
        return ledger
