"""lifecycle.dream_tick: select pending raw records, group them by topic, summarise each group and
commit it — summary, optional semantic facts, backlinks both ways — in one transaction.

A group is all-or-nothing: a crash before its commit leaves its raw records pending, so the
next tick redoes exactly that group; after the commit its raw records are marked processed,
so no tick processes them twice. Summaries (possibly an LLM call) and embeddings are made
outside the write lock; just before committing, the group's raw records are re-read under the
lock and the group is skipped if any of them changed meanwhile (processed, suppressed or
reclassified). A group that fails is recorded and skipped, and the tick goes on with the rest
(see failures.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .. import crashpoints
from ..cmp import messages as m
from ..cmp.context import note_records
from ..dream import failures
from ..dream.grouping import Group, group_records
from ..dream.summarise import Summariser, Summary
from ..index.graph import Edge
from ..model import (
    AssociationType,
    CaptureStatus,
    MemoryContent,
    MetaEdge,
    MetaEvidenceRef,
    MetaMemory,
    MetaRelation,
    RawJournalRecord,
    StoreType,
)
from ..security.sanitize import Sanitizer
from ..stores.journal import DEFAULT_SECRECY, allowed_visibility
from .core import EngineCore
from .encode import Encoding
from .writer import Alongside, Writer

log = logging.getLogger("cerememory.dream")
OP = "lifecycle.dream_tick"
REPORT_CHARS = 200  # of a failed group's session and topic in a response

STATE_SUMMARIES = "dream_episodic_summaries"
STATE_SEMANTIC = "dream_semantic_nodes"
STATE_LAST_TICK = "last_dream_tick_at"


def select(core: EngineCore, req: m.DreamTickRequest) -> list[RawJournalRecord]:
    """Pending candidates: not suppressed, not processed, allowed visibility and secrecy, session."""
    return core.journal.pending(
        visibility=allowed_visibility(req.include_private_scratch, req.include_sealed),
        secrecy=[s.value for s in (req.secrecy_levels or DEFAULT_SECRECY)],
        session_id=req.session_id,
    )


def _promotes(group: Group, promote: bool) -> bool:
    """Whether a group may give a semantic fact at all; it does when its summary has facts."""
    return promote and group.redaction().normal_records >= 2 and group.has_topic_signal


def report(group: Group, summary: Summary | None = None, episodic_id: uuid.UUID | None = None,
           semantic_id: uuid.UUID | None = None) -> m.DreamGroupReport:
    counts = group.redaction()
    return m.DreamGroupReport(
        session_id=group.session_id, topic_id=group.topic_id, topic_hint=group.topic_hint,
        topic_inferred=group.inferred, range_start=group.start, range_end=group.end,
        raw_record_count=len(group.records), **counts.as_dict(),
        summariser=summary.summariser if summary else None,
        llm_fallback_reason=summary.llm_fallback_reason if summary else None,
        headline=summary.headline if summary else None,
        episodic_summary_id=episodic_id, semantic_id=semantic_id,
    )


def _cut(text: str) -> str:
    return text if len(text) <= REPORT_CHARS else text[: REPORT_CHARS - 1] + "…"


class Dreaming:
    """The dream tick over the engine's parts; `closing` says when to stop early."""

    def __init__(self, core: EngineCore, writer: Writer, encoding: Encoding, closing: Callable[[], bool]) -> None:
        self.core = core
        self.writer = writer
        self.encoding = encoding
        self.closing = closing
        self._summariser: Summariser | None = None

    def summariser(self) -> Summariser:
        """Made on the first dream (its LLM client keeps a connection pool and a budget)."""
        if self._summariser is None:
            from ..llm import make_client

            options = self.core.options
            self._summariser = Summariser(make_client(options.llm, self.core.data_dir),
                                          max_chars=options.dream.summary_max_chars,
                                          sanitizer=Sanitizer(options.sanitize_patterns))
        return self._summariser

    def tick(self, req: m.DreamTickRequest) -> m.DreamTickResponse:
        return run(self, req)

    def stats(self) -> dict[str, Any]:
        """The dream figures of introspect.stats."""
        get = self.core.read.state.get
        last = get(STATE_LAST_TICK)
        return {
            "dream_episodic_summaries": int(get(STATE_SUMMARIES, "0") or 0),
            "dream_semantic_nodes": int(get(STATE_SEMANTIC, "0") or 0),
            "last_dream_tick_at": datetime.fromtimestamp(float(last), UTC) if last else None,
        }


def _failed(parts: Dreaming, group: Group, exc: Exception, now: datetime) -> m.DreamGroupFailure:
    """Record the failure of `group`, so later ticks skip it, and report it."""
    log.warning("dream: the group of raw record %s failed; skipped until its raw records change",
                group.records[0].id, exc_info=exc)
    failure = parts.writer.record_dream_failure(group, exc, now.timestamp())
    return m.DreamGroupFailure(session_id=_cut(group.session_id), topic_hint=_cut(group.topic_hint),
                               first_raw_record_id=failure.first_raw_id, raw_record_count=failure.raw_record_count,
                               code=failure.code, reason=failure.reason, failed_at=now)


def run(parts: Dreaming, req: m.DreamTickRequest) -> m.DreamTickResponse:
    """The whole tick; see the module docstring."""
    now = parts.core.now()
    groups = group_records(select(parts.core, req))
    known = failures.load(parts.core.read.failures)
    fresh = [g for g in groups if not ((f := known.get(g.records[0].id)) and f.holds_for(g))]
    chosen = fresh[: req.max_groups]
    skipped = len(groups) - len(fresh)
    if req.dry_run:
        return m.DreamTickResponse(
            groups_processed=len(chosen), raw_records_processed=sum(len(g.records) for g in chosen),
            episodic_summaries_created=len(chosen),
            semantic_nodes_created=sum(_promotes(g, req.promote_semantic) and bool(parts.summariser().facts(g))
                                       for g in chosen),
            dry_run=True, groups_pending=len(fresh) - len(chosen), groups_skipped=skipped,
            groups=[report(g) for g in chosen])
    out = m.DreamTickResponse(groups_pending=len(fresh) - len(chosen), groups_skipped=skipped)
    summariser = parts.summariser()
    for n, group in enumerate(chosen):
        if parts.closing():  # shutting down: the rest waits for the next tick
            out.groups_pending += len(chosen) - n
            return out
        try:
            summary = summariser.summarise(group)
            done = commit_group(parts, group, summary, promote=req.promote_semantic, now=now)
        except Exception as exc:
            if parts.closing() or failures.is_machine_failure(exc):
                raise  # not the group's fault: the next tick retries it
            out.groups_failed.append(_failed(parts, group, exc, now))
            continue
        if done is None:
            out.groups_pending += 1
            continue
        episodic_id, semantic_id = done
        out.groups_processed += 1
        out.raw_records_processed += len(group.records)
        out.episodic_summaries_created += 1
        out.semantic_nodes_created += semantic_id is not None
        out.llm_fallbacks += summary.llm_fallback_reason is not None
        out.groups.append(report(group, summary, episodic_id, semantic_id))
        crashpoints.reached("dream.group_committed")
    parts.writer.end_dream_tick({STATE_LAST_TICK: str(now.timestamp())})
    return out


def _origin(group: Group, now: datetime) -> dict[str, Any]:
    return {"raw_session_id": group.session_id, "raw_topic_id": group.topic_id,
            "raw_topic_hint": group.topic_hint, "raw_topic_inferred": group.inferred,
            "raw_record_ids": [str(r.id) for r in group.records], "raw_record_count": len(group.records),
            "dream_tick_at": now.isoformat(), "range_start": group.start.isoformat(),
            "range_end": group.end.isoformat()}


def _meta(group: Group, rationale: str, tags: list[str], edges: list[MetaEdge] | None = None,
          sources: list[uuid.UUID] | None = None) -> MetaMemory:
    return MetaMemory(
        capture_status=CaptureStatus.INFERRED, intent="consolidate the raw journal into memory",
        rationale=rationale, trigger=OP, confidence=1.0, tags=tags,
        evidence=[MetaEvidenceRef(raw_record_id=r.id, label="raw journal record") for r in group.records],
        context_edges=edges or [], source_record_ids=sources or [])


def _unchanged(core: EngineCore, group: Group) -> bool:
    """Under the write lock: are the group's raw records still pending and as they were?"""
    fresh = {r.id: r for r in core.journal.get([r.id for r in group.records])}
    for r in group.records:
        now = fresh.get(r.id)
        if (now is None or now.suppressed or (now.metadata.get("_dream") or {}).get("processed_at")
                or (now.visibility, now.secrecy_level) != (r.visibility, r.secrecy_level)):
            return False
    return True


def commit_group(parts: Dreaming, group: Group, summary: Summary, *, promote: bool,
                 now: datetime) -> tuple[uuid.UUID, uuid.UUID | None] | None:
    """Write one group in one transaction; None when the group changed under us (retried later)."""
    counts = group.redaction()
    origin = _origin(group, now)
    described = (f"dream summary of {len(group.records)} raw journal records of session "
                 f"{group.session_id}, topic {group.topic_hint}")
    episodic_req = m.EncodeStoreRequest(
        content=MemoryContent.of_text(summary.text, summary=summary.headline), store=StoreType.EPISODIC,
        created_at=group.end, meta=_meta(group, described, ["dream", "episodic_summary"]),
        metadata={"_origin": origin, "_dream": {
            "kind": "episodic_summary", "source": "raw_journal", "summariser": summary.summariser,
            "llm_fallback_reason": summary.llm_fallback_reason, "summary_stats": counts.as_dict()}})
    episodic = parts.encoding.build_records([episodic_req], OP, now)[0]
    records = [episodic]
    edges: list[Edge] = []
    semantic = None
    if _promotes(group, promote) and summary.facts:  # no facts: nothing to promote, not the whole summary
        facts = "\n".join(summary.facts)
        semantic_req = m.EncodeStoreRequest(
            content=MemoryContent.of_text(facts, summary=summary.headline), store=StoreType.SEMANTIC,
            created_at=group.end,
            meta=_meta(group, f"facts promoted from the {described}", ["dream", "semantic_summary"],
                       [MetaEdge(target_id=episodic.id, relation=MetaRelation.DERIVED_FROM,
                                 rationale="promoted from the dream's episodic summary")], [episodic.id]),
            metadata={"_origin": {**origin, "episodic_summary_id": str(episodic.id)},
                      "_dream": {"kind": "semantic_summary", "source": "raw_journal",
                                 "summary_stats": counts.as_dict()}})
        semantic = parts.encoding.build_records([semantic_req], OP, now)[0]
        records.append(semantic)
        stamp = now.timestamp()
        kind = AssociationType.SEMANTIC.value
        edges = [Edge(episodic.id, semantic.id, kind, 1.0, stamp), Edge(semantic.id, episodic.id, kind, 1.0, stamp)]
    derived = [episodic.id] + ([semantic.id] if semantic else [])
    updated = [_backlinked(r, episodic.id, semantic.id if semantic else None, now) for r in group.records]

    alongside = Alongside(raw=updated, counters=[STATE_SUMMARIES, *([STATE_SEMANTIC] if semantic else [])],
                          state={STATE_LAST_TICK: str(now.timestamp())}, touched=[r.id for r in group.records],
                          crashpoint="dream.group_writing")
    vectors = parts.core.vectors_for(records)
    with parts.writer.lock:
        if not _unchanged(parts.core, group):
            return None
        parts.writer.persist(records, edges, vectors, alongside)
    note_records([*derived, *(r.id for r in group.records)])
    return derived[0], (derived[1] if semantic else None)


def _backlinked(record: RawJournalRecord, episodic_id: uuid.UUID, semantic_id: uuid.UUID | None,
                now: datetime) -> RawJournalRecord:
    metadata = dict(record.metadata)
    old = dict(metadata.get("_derived") or {})
    metadata["_dream"] = {"processed_at": now.isoformat(), "last_summary_id": str(episodic_id)}
    metadata["_derived"] = {
        "episodic_summary_ids": [*old.get("episodic_summary_ids", []), str(episodic_id)],
        "semantic_ids": [*old.get("semantic_ids", []), *([str(semantic_id)] if semantic_id else [])]}
    derived = [*record.derived_memory_ids, episodic_id, *([semantic_id] if semantic_id else [])]
    return record.model_copy(update={"metadata": metadata, "derived_memory_ids": derived, "updated_at": now})
