"""encode.*: new records from requests, updates, and the raw journal's appends."""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..cmp import messages as m
from ..cmp.errors import CMPError, ErrorCode, not_found
from ..dynamics import decay
from ..index.graph import Edge
from ..model import (
    EmotionVector,
    FidelityState,
    MemoryRecord,
    RawJournalRecord,
    StoreType,
    built,
    new_ids,
    normalise_meta,
    to_ts,
)
from .core import EngineCore, VectorColumns
from .sessions import both_ways
from .writer import NewRecords, Writer

FRESH_FIDELITY = {k: v.default for k, v in FidelityState.model_fields.items()
                  if k not in ("last_decay_tick", "stability", "decay_rate", "emotional_anchor")}


def route(req: m.EncodeStoreRequest) -> StoreType:
    """The store a request names, else semantic for a summarised memory, else episodic."""
    if req.store is not None:
        return req.store
    return StoreType.SEMANTIC if req.content.summary else StoreType.EPISODIC


@dataclass
class _Prepared:
    """New records on their way to the writer, and what their answer counts."""

    write: NewRecords
    manual_counts: list[int]  # the associations each request asked for
    asked: int  # the edges infer_associations made

    def answer(self) -> tuple[list[m.EncodeStoreResponse], int]:
        """Once committed: each record's answer, and the associations inferred in all."""
        results = [
            built(m.EncodeStoreResponse, {"record_id": r.id, "store": r.store, "initial_fidelity": r.fidelity.score,
                                          "associations_created": n})
            for r, n in zip(self.write.records, self.manual_counts, strict=True)
        ]
        return results, self.asked + self.write.session_links


class Encoding:
    def __init__(self, core: EngineCore, writer: Writer) -> None:
        self.core = core
        self.writer = writer

    def build_records(self, reqs: Sequence[m.EncodeStoreRequest], op: str, now: datetime) -> list[MemoryRecord]:
        """Records from validated requests, each built once without re-validating what already
        was. What requests share (the absent meta, a store's fresh fidelity at one emotional
        anchor) is one object for all of them: records are never mutated in place."""
        no_meta = normalise_meta(None, op, now)
        neutral = EmotionVector()
        anchors: dict[int, float] = {}  # by id() of the emotion: the requests hold each alive meanwhile
        fidelities: dict[tuple[StoreType, float], FidelityState] = {}
        records = []
        for record_id, req in zip(new_ids(len(reqs)), reqs, strict=True):
            store, emotion = route(req), req.emotion or neutral
            anchor = anchors.get(id(emotion))
            if anchor is None:
                anchor = anchors[id(emotion)] = float(decay.emotion_factor(emotion.intensity))
            fidelity = fidelities.get((store, anchor))
            if fidelity is None:
                fidelity = fidelities[store, anchor] = self._fresh_fidelity(store, anchor, now)
            metadata = dict(req.metadata or {})
            if req.context is not None:
                metadata["_context"] = req.context.model_dump(mode="json", exclude_none=True)
            records.append(built(MemoryRecord, {
                "id": record_id, "store": store, "created_at": req.created_at or now, "updated_at": now,
                "last_accessed_at": now, "access_count": 0, "content": req.content, "fidelity": fidelity,
                "emotion": emotion, "associations": [], "metadata": metadata, "version": 1,
                "meta": no_meta if req.meta is None else normalise_meta(req.meta, op, now)}))
        return records

    def _fresh_fidelity(self, store: StoreType, anchor: float, now: datetime) -> FidelityState:
        params = self.core.params[store]
        fresh = {**FRESH_FIDELITY, "last_decay_tick": now, "stability": params.stability,
                 "decay_rate": params.exponent, "emotional_anchor": anchor}
        return built(FidelityState, {name: fresh[name] for name in FidelityState.model_fields})

    def store(self, req: m.EncodeStoreRequest) -> m.EncodeStoreResponse:
        return self._encode([req], infer=False, op="encode.store")[0][0]

    def batch(self, req: m.EncodeBatchRequest) -> m.EncodeBatchResponse:
        results, inferred = self._encode(req.records, infer=req.infer_associations, op="encode.batch",
                                         rows=req.embeddings_f32)
        return built(m.EncodeBatchResponse, {"results": results, "associations_inferred": inferred})

    def store_each(self, calls: Sequence[tuple[m.EncodeStoreRequest, contextvars.Context]]
                   ) -> list[m.EncodeStoreResponse | BaseException]:
        """`store` for the requests of many callers, committed together, each write audited in
        its caller's context: each answer, or what refused that request, in its place. Their
        texts are embedded in one batch."""
        now = self.core.now()
        made: list[list[MemoryRecord] | Exception] = []
        for req, _ in calls:
            try:
                made.append(self._records([req], "encode.store", now))
            except Exception as exc:  # noqa: BLE001 - this caller's, answered in its place
                made.append(exc)
        prepared: list[_Prepared | Exception] = []
        for records, vectors, (req, _) in zip(made, self._vectors_each(made), calls, strict=True):
            if isinstance(vectors, Exception):  # what refused the request's records or its vectors
                prepared.append(vectors)
            else:
                assert not isinstance(records, Exception)
                prepared.append(self._write([req], records, vectors, infer=False, now=now))
        writes = [(p.write, context) for p, (_, context) in zip(prepared, calls, strict=True)
                  if isinstance(p, _Prepared)]
        refused = iter(self.writer.add_each(writes))
        return [p if isinstance(p, Exception) else next(refused) or p.answer()[0][0] for p in prepared]

    def _vectors_each(self, made: Sequence[list[MemoryRecord] | Exception]
                      ) -> list[list[VectorColumns] | Exception]:
        """The vectors of each request's records, embedded in one batch; should that batch fail,
        each request's alone, so that only the request at fault fails. A request refused already
        keeps its refusal in its place."""
        items = [(r.id, r.content) for records in made if not isinstance(records, Exception) for r in records]
        try:
            together = self.core.vector_columns(items)
            return [records if isinstance(records, Exception) else
                    [g.only({r.id for r in records}) for g in together] for records in made]
        except Exception:  # noqa: BLE001 - found out request by request below
            pass
        out: list[list[VectorColumns] | Exception] = []
        for records in made:
            try:
                out.append(records if isinstance(records, Exception) else
                           self.core.vector_columns([(r.id, r.content) for r in records]))
            except Exception as exc:  # noqa: BLE001 - this caller's, answered in its place
                out.append(exc)
        return out

    def _encode(self, reqs: Sequence[m.EncodeStoreRequest], *, infer: bool, op: str,
                rows: bytes | None = None) -> tuple[list[m.EncodeStoreResponse], int]:
        """`rows`: the records' vectors as one matrix (`embeddings_f32`), else each in its record."""
        now = self.core.now()
        records = self._records(reqs, op, now)
        vectors = (self.core.vector_columns([(r.id, r.content) for r in records]) if rows is None
                   else [self.core.rows_columns([r.id for r in records], rows)])
        prepared = self._write(reqs, records, vectors, infer=infer, now=now)
        self.writer.add(prepared.write)
        return prepared.answer()

    def _records(self, reqs: Sequence[m.EncodeStoreRequest], op: str, now: datetime) -> list[MemoryRecord]:
        """The new records of `reqs`, refused when working memory could not hold them."""
        core = self.core
        records = self.build_records(reqs, op, now)
        n_working = sum(r.store is StoreType.WORKING for r in records)
        if n_working > core.working.capacity:
            raise CMPError(
                ErrorCode.WORKING_MEMORY_FULL,
                f"{n_working} records for working memory in one request; it holds {core.working.capacity}",
                hint="store fewer at once, or raise memory.working_capacity",
            )
        return records

    def _write(self, reqs: Sequence[m.EncodeStoreRequest], records: list[MemoryRecord],
               vectors: Sequence[VectorColumns], *, infer: bool, now: datetime) -> _Prepared:
        """The records of `reqs`, made at `now`, with their edges and `vectors`
        (`core.vector_columns`), ready for the writer."""
        now_ts = to_ts(now)
        edges: list[Edge] = []
        targets = []
        manual_counts = []
        for record, req in zip(records, reqs, strict=True):
            for link in req.associations or []:
                targets.append(link.target_id)
                edges.append(Edge(record.id, link.target_id, link.association_type.value, link.weight, now_ts))
            manual_counts.append(len(req.associations or []))
        asked = []  # infer_associations: every record to the next; the writer links each session's turns
        for a, b in zip(records, records[1:], strict=False) if infer else ():
            asked += both_ways(a.id, b.id, now_ts)
        return _Prepared(NewRecords(records, edges + asked, [g for g in vectors if g.ids], targets),
                         manual_counts, len(asked))

    def update(self, req: m.EncodeUpdateRequest) -> None:
        if req.content is None and req.emotion is None and req.metadata is None and req.meta is None \
                and req.store is None:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "encode.update: nothing to update",
                           hint="give at least one of content, emotion, metadata, meta, store")
        vectors = self.core.vectors_of([(req.record_id, req.content)]) if req.content is not None else None
        with self.writer.lock:
            record = self.core.get(req.record_id)
            update: dict[str, Any] = {"updated_at": self.core.now(), "version": record.version + 1}
            if req.store is not None and req.store is not record.store:
                if StoreType.WORKING in (req.store, record.store):
                    raise CMPError(ErrorCode.VALIDATION_ERROR,
                                   f"encode.update: a record cannot move from {record.store.value} "
                                   f"to {req.store.value}",
                                   hint="working memory lives in RAM only: store a copy with encode.store instead")
                update["store"] = req.store
            if req.content is not None:
                update["content"] = req.content
            if req.emotion is not None:
                update["emotion"] = req.emotion
            if req.metadata is not None:
                update["metadata"] = req.metadata
            if req.meta is not None:
                update["meta"] = normalise_meta(req.meta, "encode.update")
            self.writer.update(record.model_copy(update=update), vectors)

    # ------------------------------------------------------------ the raw journal

    def store_raw(self, req: m.EncodeStoreRawRequest) -> m.EncodeStoreRawResponse:
        return self._encode_raw([req], "encode.store_raw")[0]

    def batch_raw(self, req: m.EncodeBatchRawRequest) -> m.EncodeBatchRawResponse:
        return m.EncodeBatchRawResponse(results=self._encode_raw(req.records, "encode.batch_raw"))

    def _encode_raw(self, reqs: Sequence[m.EncodeStoreRawRequest], op: str) -> list[m.EncodeStoreRawResponse]:
        now = self.core.now()
        records = [
            RawJournalRecord(
                session_id=r.session_id, turn_id=r.turn_id, topic_id=r.topic_id, source=r.source,
                speaker=r.speaker, visibility=r.visibility, secrecy_level=r.secrecy_level,
                created_at=r.created_at or now, updated_at=now, content=r.content,
                metadata=dict(r.metadata or {}), meta=normalise_meta(r.meta, op),
            )
            for r in reqs
        ]
        self.writer.append_raw(records)
        return [m.EncodeStoreRawResponse(record_id=r.id, session_id=r.session_id,
                                         visibility=r.visibility, secrecy_level=r.secrecy_level)
                for r in records]

    def update_raw(self, req: m.EncodeUpdateRawRequest) -> None:
        """Suppress or reclassify a journal record; its verbatim content never changes."""
        if req.suppressed is None and req.visibility is None and req.secrecy_level is None:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "encode.update_raw: nothing to update",
                           hint="give at least one of suppressed, visibility, secrecy_level")
        if not self.writer.set_raw_flags(req.record_id, suppressed=req.suppressed,
                                         visibility=req.visibility.value if req.visibility else None,
                                         secrecy_level=req.secrecy_level.value if req.secrecy_level else None):
            raise not_found(req.record_id, "raw journal record")
