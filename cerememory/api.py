"""The Python API: typed methods over CMP, shared by the embedded and the remote forms.

Each method's request is built once, by the function of the same name in `Calls`, and the
method set is made from them twice: `MemoryAPI` (the embedded `Memory`, the HTTP `Client`, the
`GrpcClient`) returns the typed response, `AsyncMemoryAPI` (the `AsyncClient`) an awaitable of
it. So code written against one form works against the others, and each method keeps its
signature and return type for the type checker. The methods go through the CMP dispatcher like
every transport: embedded, `Memory.dispatcher`; remotely, the server's.
"""

from __future__ import annotations

import functools
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from pydantic import BaseModel

from .cmp import build
from .cmp import messages as m
from .cmp.dispatch import Dispatcher, internal_error
from .cmp.errors import CMPError, ErrorCode
from .compat import Count, Listed, RecordId, wire
from .model import EmotionVector, MemoryRecord
from .progress import ProgressFn
from .storage.lock import owning_server as owning_server  # re-exported: part of the public API

if TYPE_CHECKING:
    from numpy import ndarray

    from .config import Config
    from .engine import Engine

R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")
P = ParamSpec("P")
EmotionLike = str | EmotionVector | Mapping[str, float] | None


@dataclass(frozen=True)
class Call(Generic[R]):
    """One typed call: the operation, its request, the model of its response and, in process
    only, a progress callback (a remote server reports no progress)."""

    op: str
    request: dict[str, Any]
    response: type[R]
    progress: ProgressFn | None = None


def _content(text: str | None, content: Any, embedding: Sequence[float] | bytes | ndarray | None = None,
             summary: str | None = None) -> Any:
    if content is not None:
        return content
    if text is None:
        raise CMPError(ErrorCode.VALIDATION_ERROR, "content: give text or content",
                       hint="store('what happened') or store(content={...})")
    return build.text_content(text, embedding=embedding, summary=summary)


class Calls:
    """The request of every typed method: `Calls.store("x")` builds what `mem.store("x")` sends."""

    # ------------------------------------------------------------ encode

    @staticmethod
    def store(text: str | None = None, *, content: Any = None, store: str | None = None,
              emotion: EmotionLike = None, metadata: Mapping[str, Any] | None = None,
              meta: Any = None, embedding: Sequence[float] | bytes | ndarray | None = None,
              summary: str | None = None, associations: Sequence[Mapping[str, Any]] | None = None,
              created_at: datetime | None = None) -> Call[m.EncodeStoreResponse]:
        """Remember one thing. Without `store`, a summary routes to semantic, else episodic.
        `embedding` as a numpy array (or float32 bytes) travels in the compact `embedding_f32` form."""
        return Call("encode.store", build.drop_none({
            "content": _content(text, content, embedding, summary), "store": store,
            "emotion": build.emotion(emotion), "metadata": metadata, "meta": meta,
            "associations": associations, "created_at": created_at,
        }), m.EncodeStoreResponse)

    @staticmethod
    def store_batch(records: Sequence[Mapping[str, Any]], *, infer_associations: bool = False,
                    embeddings: ndarray | None = None) -> Call[m.EncodeBatchResponse]:
        """Store up to 1000 `encode.store` requests in one transaction. `embeddings`: their
        vectors as one 2-D array, row i for record i, instead of one in each record: checked
        and sent as one matrix (`embeddings_f32`)."""
        return Call("encode.batch", build.drop_none({
            "records": list(records), "infer_associations": infer_associations,
            "embedding_dim": m.row_length(embeddings),
            "embeddings_f32": embeddings,
        }), m.EncodeBatchResponse)

    @staticmethod
    def update(record_id: uuid.UUID | str, *, text: str | None = None, content: Any = None,
               emotion: EmotionLike = None, metadata: Mapping[str, Any] | None = None,
               meta: Any = None, store: str | None = None) -> Call[m.Empty]:
        """Replace the content, emotion, metadata or meta-memory of a record, or move it to
        another curated `store` (at least one)."""
        return Call("encode.update", build.drop_none({
            "record_id": record_id,
            "content": _content(text, content) if text or content else None,
            "emotion": build.emotion(emotion), "metadata": metadata, "meta": meta, "store": store,
        }), m.Empty)

    @staticmethod
    def store_raw(text: str | None = None, *, session_id: str, content: Any = None,
                  turn_id: str | None = None, topic_id: str | None = None,
                  source: str | None = None, speaker: str | None = None,
                  visibility: str | None = None, secrecy_level: str | None = None,
                  metadata: Mapping[str, Any] | None = None, meta: Any = None,
                  created_at: datetime | None = None) -> Call[m.EncodeStoreRawResponse]:
        """Append verbatim text (a turn, a tool result, a scratchpad) to the raw journal."""
        return Call("encode.store_raw", build.drop_none({
            "session_id": session_id, "content": _content(text, content),
            "turn_id": turn_id, "topic_id": topic_id, "source": source, "speaker": speaker,
            "visibility": visibility, "secrecy_level": secrecy_level, "metadata": metadata,
            "meta": meta, "created_at": created_at,
        }), m.EncodeStoreRawResponse)

    @staticmethod
    def store_raw_batch(records: Sequence[Mapping[str, Any]]) -> Call[m.EncodeBatchRawResponse]:
        """Append up to 1000 `encode.store_raw` requests in one transaction."""
        return Call("encode.batch_raw", {"records": list(records)}, m.EncodeBatchRawResponse)

    @staticmethod
    def update_raw(record_id: uuid.UUID | str, *, suppressed: bool | None = None,
                   visibility: str | None = None, secrecy_level: str | None = None) -> Call[m.Empty]:
        """Suppress a journal record (hidden from raw recall, never dreamed) or reclassify it."""
        return Call("encode.update_raw", build.drop_none({
            "record_id": record_id, "suppressed": suppressed, "visibility": visibility,
            "secrecy_level": secrecy_level}), m.Empty)

    @staticmethod
    def dream_tick(*, session_id: str | None = None, dry_run: bool = False, max_groups: int = 10,
                   promote_semantic: bool = True, include_private_scratch: bool = False,
                   include_sealed: bool = False,
                   secrecy_levels: Sequence[str] | None = None) -> Call[m.DreamTickResponse]:
        """Summarise unprocessed raw journal topics into episodic memories (and semantic facts)."""
        return Call("lifecycle.dream_tick", build.drop_none({
            "session_id": session_id, "dry_run": dry_run, "max_groups": max_groups,
            "promote_semantic": promote_semantic, "include_private_scratch": include_private_scratch,
            "include_sealed": include_sealed, "secrecy_levels": secrecy_levels}), m.DreamTickResponse)

    # ------------------------------------------------------------ recall

    @staticmethod
    def recall(query: str | None = None, *, limit: int = 10,
               stores: Sequence[str] | None = None, min_fidelity: float | None = None,
               include_decayed: bool = False, reconsolidate: bool = True,
               activation_depth: int = 2, mode: str = "human",
               embedding: Sequence[float] | None = None, emotion: EmotionLike = None,
               start: datetime | None = None, end: datetime | None = None) -> Call[m.RecallQueryResponse]:
        """Hybrid recall; with no cue at all, the most recent memories."""
        cue = build.drop_none({"text": query, "embedding": list(embedding) if embedding else None,
                               "emotion": build.emotion(emotion), "temporal": build.temporal(start, end)})
        return Call("recall.query", build.drop_none({
            "cue": cue, "stores": stores, "limit": limit, "min_fidelity": min_fidelity,
            "include_decayed": include_decayed, "reconsolidate": reconsolidate,
            "activation_depth": activation_depth, "recall_mode": mode,
        }), m.RecallQueryResponse)

    @staticmethod
    def raw_recall(query: str | None = None, *, session_id: str | None = None,
                   record_ids: Sequence[uuid.UUID | str] | None = None, limit: int = 10,
                   include_private_scratch: bool = False, include_sealed: bool = False,
                   secrecy_levels: Sequence[str] | None = None, start: datetime | None = None,
                   end: datetime | None = None) -> Call[m.RecallRawQueryResponse]:
        """Verbatim journal records; private, sealed and secret ones only when asked for."""
        return Call("recall.raw_query", build.drop_none({
            "query": query, "session_id": session_id, "record_ids": record_ids, "limit": limit,
            "include_private_scratch": include_private_scratch, "include_sealed": include_sealed,
            "secrecy_levels": secrecy_levels, "temporal": build.temporal(start, end),
        }), m.RecallRawQueryResponse)

    @staticmethod
    def sessions(*, agent: str | None = None, workspace: str | None = None, limit: int = 50,
                 cursor: str | None = None, include_private_scratch: bool = False,
                 include_sealed: bool = False) -> Call[m.RecallSessionsResponse]:
        """The journal's sessions, latest activity first, with their agent, workspace and counts."""
        return Call("recall.sessions", build.drop_none({
            "agent": agent, "workspace": workspace, "limit": limit, "cursor": cursor,
            "include_private_scratch": include_private_scratch, "include_sealed": include_sealed,
        }), m.RecallSessionsResponse)

    @staticmethod
    def recall_raw(*, query: str | None = None, session_id: str | None = None, limit: int = 10,
                   include_private_scratch: bool = False, include_sealed: bool = False,
                   secrecy_levels: Sequence[str] | None = None) -> Call[m.RecallRawQueryResponse]:
        """`raw_recall` with the reference SDK's keywords (its method answers the list of records)."""
        return Calls.raw_recall(query, session_id=session_id, limit=limit, include_sealed=include_sealed,
                                include_private_scratch=include_private_scratch, secrecy_levels=secrecy_levels)

    @staticmethod
    def list_records(store: str, *, metadata: dict[str, Any] | None = None,
                     fields: Sequence[str] | None = None, cursor: str | None = None,
                     limit: int = 1000, similar_to: str | None = None) -> Call[m.RecallListResponse]:
        """One page of a store's records, oldest first, whose metadata has these key/values;
        decayed ones included, nothing reconsolidated. Pass `next_cursor` back for the next page;
        `similar_to` adds each record's cosine to that text (`similarity`) when search is semantic."""
        return Call("recall.list", build.drop_none({
            "store": store, "metadata": metadata, "fields": fields, "cursor": cursor, "limit": limit,
            "similar_to": similar_to}), m.RecallListResponse)

    @staticmethod
    def associate(record_id: uuid.UUID | str, *, depth: int = 2, min_weight: float = 0.1,
                  limit: int = 10, types: Sequence[str] | None = None) -> Call[m.RecallAssociateResponse]:
        """Spread activation from a record along its associations."""
        return Call("recall.associate", build.drop_none({
            "record_id": record_id, "depth": depth, "min_weight": min_weight, "limit": limit,
            "association_types": types}), m.RecallAssociateResponse)

    @staticmethod
    def timeline(start: datetime, end: datetime, *, granularity: str = "hour",
                 min_fidelity: float | None = None, emotion: EmotionLike = None,
                 stores: Sequence[str] | None = None) -> Call[m.RecallTimelineResponse]:
        """Memories of a time range in buckets."""
        return Call("recall.timeline", build.drop_none({
            "range": build.temporal(start, end), "granularity": granularity, "min_fidelity": min_fidelity,
            "emotion_filter": build.emotion(emotion), "stores": stores}), m.RecallTimelineResponse)

    @staticmethod
    def graph(center_id: uuid.UUID | str | None = None, *, depth: int = 2,
              limit_nodes: int = 10, edge_types: Sequence[str] | None = None,
              include_meta: bool = False) -> Call[m.RecallGraphResponse]:
        """The association graph around a record (or the best-connected records)."""
        return Call("recall.graph", build.drop_none({
            "center_id": center_id, "depth": depth, "limit_nodes": limit_nodes,
            "edge_types": edge_types, "include_meta": include_meta}), m.RecallGraphResponse)

    # ------------------------------------------------------------ lifecycle and introspection

    @staticmethod
    def forget(*record_ids: uuid.UUID | str | Sequence[uuid.UUID | str], store: str | None = None,
               start: datetime | None = None, end: datetime | None = None, cascade: bool = False,
               confirm: bool | None = None) -> Call[m.ForgetResponse]:
        """Delete permanently. `forget([a, b], confirm=True)`; ids named one by one, as the
        reference SDK does (`forget(a, b)`), confirm themselves; a store or time range never does."""
        ids = [i for arg in record_ids for i in ([arg] if isinstance(arg, uuid.UUID | str) else arg)]
        if confirm is None:
            confirm = bool(record_ids) and all(isinstance(arg, uuid.UUID | str) for arg in record_ids)
        return Call("lifecycle.forget", build.drop_none({
            "record_ids": ids if record_ids else None, "store": store,
            "temporal_range": build.temporal(start, end), "cascade": cascade, "confirm": confirm}),
            m.ForgetResponse)

    @staticmethod
    def reinforce(record_ids: Sequence[uuid.UUID | str]) -> Call[m.ReinforceResponse]:
        """Strengthen records as a recall would, so they fade slower."""
        return Call("lifecycle.reinforce", {"record_ids": list(record_ids)}, m.ReinforceResponse)

    @staticmethod
    def set_mode(mode: str, *, scope: Sequence[str] | None = None) -> Call[m.Empty]:
        """Set the recall mode: human (fades with fidelity) or perfect (verbatim)."""
        return Call("lifecycle.set_mode", build.drop_none({"mode": mode, "scope": scope}), m.Empty)

    @staticmethod
    def decay_tick() -> Call[m.DecayTickResponse]:
        """Materialise fidelity and noise now, and count forgotten records."""
        return Call("lifecycle.decay_tick", {}, m.DecayTickResponse)

    @staticmethod
    def consolidate(strategy: str = "incremental", *, min_age_hours: float = 0, min_access_count: int = 0,
                    dry_run: bool = False) -> Call[m.ConsolidateResponse]:
        """Merge near-duplicate episodic memories and promote episodic memories to semantic facts."""
        return Call("lifecycle.consolidate", {
            "strategy": strategy, "min_age_hours": min_age_hours, "min_access_count": min_access_count,
            "dry_run": dry_run}, m.ConsolidateResponse)

    @staticmethod
    def reindex(target: str = "all", *, progress: ProgressFn | None = None) -> Call[m.ReindexResponse]:
        """Rebuild the full-text indexes (all, records or journal) from the database."""
        return Call("lifecycle.reindex", {"target": target}, m.ReindexResponse, progress)

    @staticmethod
    def evolution() -> Call[m.EvolutionResponse]:
        """The decay parameters the evolution engine adjusted, and why."""
        return Call("introspect.evolution", {}, m.EvolutionResponse)

    @staticmethod
    def forecast(record_ids: Sequence[uuid.UUID | str], at: datetime) -> Call[m.DecayForecastResponse]:
        """Fidelity of records at `at`, and when each will be forgotten."""
        return Call("introspect.decay_forecast", {"record_ids": list(record_ids), "forecast_at": at},
                    m.DecayForecastResponse)

    @staticmethod
    def stats() -> Call[m.StatsResponse]:
        """Counts, fidelity averages, index and journal figures."""
        return Call("introspect.stats", {}, m.StatsResponse)

    @staticmethod
    def inspect(record_id: uuid.UUID | str) -> Call[MemoryRecord]:
        """One record with everything stored about it."""
        return Call("introspect.record", {"record_id": record_id}, MemoryRecord)


def _protocol(op: str, response: type[R]) -> Callable[[BaseModel | Mapping[str, Any]], Call[R]]:
    """A typed method of the reference SDK: one full request model (or mapping) in, the response out."""
    def call(request: BaseModel | Mapping[str, Any]) -> Call[R]:
        return Call(op, wire(request), response)

    call.__doc__ = f"`{op}` with a full request model (or a mapping of its fields)."
    return call


def _protocol_on(op: str, response: type[R]) -> Callable[[uuid.UUID | str, BaseModel | Mapping[str, Any]], Call[R]]:
    """The same for the operations whose record id the reference SDK passes beside the request."""
    def call(record_id: uuid.UUID | str, request: BaseModel | Mapping[str, Any]) -> Call[R]:
        return Call(op, {**wire(request), "record_id": str(record_id)}, response)

    call.__doc__ = f"`{op}` on a record, with a full request model (or a mapping of its fields)."
    return call


def _record_id(response: m.EncodeStoreResponse | m.EncodeStoreRawResponse) -> RecordId:
    return RecordId(response)


def _memories(response: m.RecallQueryResponse) -> Listed:
    return Listed(response, response.memories)


def _records(response: m.RecallRawQueryResponse) -> Listed:
    return Listed(response, response.records)


def _deleted(response: m.ForgetResponse) -> Count:
    return Count(response, response.records_deleted)


def _nothing(response: m.Empty) -> None:
    return None


def _typed(result: BaseModel | dict[str, Any], response: type[R]) -> R:
    return result if isinstance(result, response) else response.model_validate(result)


def _counts(result: m.ReindexResponse) -> dict[str, int]:
    """A reindex's document counts by index ({"records": n, "journal": n} for both)."""
    return {name: count for name, count in result.model_dump().items() if count is not None}


def _method(build: Callable[P, Call[R]]) -> Callable[Concatenate[MemoryAPI, P], R]:
    @functools.wraps(build)
    def method(self: MemoryAPI, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._invoke(build(*args, **kwargs))

    return method


def _async_method(build: Callable[P, Call[R]]) -> Callable[Concatenate[AsyncMemoryAPI, P], Coroutine[Any, Any, R]]:
    @functools.wraps(build)
    async def method(self: AsyncMemoryAPI, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._invoke(build(*args, **kwargs))

    return method


def _shaped(build: Callable[P, Call[R]], shape: Callable[[R], T]) -> Callable[Concatenate[MemoryAPI, P], T]:
    """A method whose answer is `shape(response)` (a record id, a list, a count)."""
    @functools.wraps(build)
    def method(self: MemoryAPI, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return shape(self._invoke(build(*args, **kwargs)))

    return method


def _async_shaped(build: Callable[P, Call[R]],
                  shape: Callable[[R], T]) -> Callable[Concatenate[AsyncMemoryAPI, P], Coroutine[Any, Any, T]]:
    @functools.wraps(build)
    async def method(self: AsyncMemoryAPI, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return shape(await self._invoke(build(*args, **kwargs)))

    return method


class MemoryAPI(ABC):
    """Typed methods for every CMP operation of the core; an implementation provides `dispatch`
    (JSON in, JSON out) and may answer `_invoke` without the JSON round trip."""

    @abstractmethod
    def dispatch(self, op: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a CMP operation on JSON-like data, exactly as a transport would."""

    def _invoke(self, call: Call[R]) -> R:
        return _typed(self.dispatch(call.op, call.request), call.response)

    store = _shaped(Calls.store, _record_id)
    store_batch = _method(Calls.store_batch)
    update = _method(Calls.update)
    store_raw = _shaped(Calls.store_raw, _record_id)
    store_raw_batch = _method(Calls.store_raw_batch)
    update_raw = _method(Calls.update_raw)
    dream_tick = _method(Calls.dream_tick)
    recall = _shaped(Calls.recall, _memories)
    raw_recall = _method(Calls.raw_recall)
    sessions = _method(Calls.sessions)
    recall_raw = _shaped(Calls.recall_raw, _records)
    list_records = _method(Calls.list_records)
    associate = _method(Calls.associate)
    timeline = _method(Calls.timeline)
    graph = _method(Calls.graph)
    forget = _shaped(Calls.forget, _deleted)
    reinforce = _method(Calls.reinforce)
    set_mode = _method(Calls.set_mode)
    decay_tick = _method(Calls.decay_tick)
    consolidate = _method(Calls.consolidate)
    evolution = _method(Calls.evolution)
    forecast = _method(Calls.forecast)
    stats = _method(Calls.stats)
    inspect = _method(Calls.inspect)
    get_record = _method(Calls.inspect)

    # the reference SDK's typed methods: a full request model in, the CMP response out
    encode_store = _method(_protocol("encode.store", m.EncodeStoreResponse))
    encode_batch = _method(_protocol("encode.batch", m.EncodeBatchResponse))
    encode_store_raw = _method(_protocol("encode.store_raw", m.EncodeStoreRawResponse))
    encode_batch_store_raw = _method(_protocol("encode.batch_raw", m.EncodeBatchRawResponse))
    encode_update = _shaped(_protocol_on("encode.update", m.Empty), _nothing)
    recall_query = _method(_protocol("recall.query", m.RecallQueryResponse))
    recall_raw_query = _method(_protocol("recall.raw_query", m.RecallRawQueryResponse))
    recall_associate = _method(_protocol_on("recall.associate", m.RecallAssociateResponse))
    recall_timeline = _method(_protocol("recall.timeline", m.RecallTimelineResponse))
    recall_graph = _method(_protocol("recall.graph", m.RecallGraphResponse))
    lifecycle_consolidate = _method(_protocol("lifecycle.consolidate", m.ConsolidateResponse))
    lifecycle_decay_tick = _method(_protocol("lifecycle.decay_tick", m.DecayTickResponse))
    lifecycle_dream_tick = _method(_protocol("lifecycle.dream_tick", m.DreamTickResponse))
    lifecycle_set_mode = _shaped(_protocol("lifecycle.set_mode", m.Empty), _nothing)
    lifecycle_forget = _method(_protocol("lifecycle.forget", m.ForgetResponse))
    lifecycle_export = _method(_protocol("lifecycle.export", m.ExportResponse))
    lifecycle_import = _method(_protocol("lifecycle.import", m.ImportResponse))
    introspect_stats = _method(Calls.stats)
    introspect_record = _method(Calls.inspect)
    introspect_decay_forecast = _method(_protocol("introspect.decay_forecast", m.DecayForecastResponse))
    introspect_evolution = _method(Calls.evolution)

    def reindex(self, progress: ProgressFn | None = None, *, target: str = "all") -> dict[str, int]:
        """Rebuild the full-text indexes from the database (`lifecycle.reindex`); the document
        count of each rebuilt index. `progress(done, total)` is called in process only."""
        return _counts(self._invoke(Calls.reindex(target, progress=progress)))


class AsyncMemoryAPI(ABC):
    """The methods of `MemoryAPI`, each returning an awaitable of the same typed response."""

    @abstractmethod
    async def dispatch(self, op: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a CMP operation on JSON-like data."""

    async def _invoke(self, call: Call[R]) -> R:
        return _typed(await self.dispatch(call.op, call.request), call.response)

    store = _async_shaped(Calls.store, _record_id)
    store_batch = _async_method(Calls.store_batch)
    update = _async_method(Calls.update)
    store_raw = _async_shaped(Calls.store_raw, _record_id)
    store_raw_batch = _async_method(Calls.store_raw_batch)
    update_raw = _async_method(Calls.update_raw)
    dream_tick = _async_method(Calls.dream_tick)
    recall = _async_shaped(Calls.recall, _memories)
    raw_recall = _async_method(Calls.raw_recall)
    sessions = _async_method(Calls.sessions)
    recall_raw = _async_shaped(Calls.recall_raw, _records)
    list_records = _async_method(Calls.list_records)
    associate = _async_method(Calls.associate)
    timeline = _async_method(Calls.timeline)
    graph = _async_method(Calls.graph)
    forget = _async_shaped(Calls.forget, _deleted)
    reinforce = _async_method(Calls.reinforce)
    set_mode = _async_method(Calls.set_mode)
    decay_tick = _async_method(Calls.decay_tick)
    consolidate = _async_method(Calls.consolidate)
    evolution = _async_method(Calls.evolution)
    forecast = _async_method(Calls.forecast)
    stats = _async_method(Calls.stats)
    inspect = _async_method(Calls.inspect)
    get_record = _async_method(Calls.inspect)

    # the reference SDK's typed methods: a full request model in, the CMP response out
    encode_store = _async_method(_protocol("encode.store", m.EncodeStoreResponse))
    encode_batch = _async_method(_protocol("encode.batch", m.EncodeBatchResponse))
    encode_store_raw = _async_method(_protocol("encode.store_raw", m.EncodeStoreRawResponse))
    encode_batch_store_raw = _async_method(_protocol("encode.batch_raw", m.EncodeBatchRawResponse))
    encode_update = _async_shaped(_protocol_on("encode.update", m.Empty), _nothing)
    recall_query = _async_method(_protocol("recall.query", m.RecallQueryResponse))
    recall_raw_query = _async_method(_protocol("recall.raw_query", m.RecallRawQueryResponse))
    recall_associate = _async_method(_protocol_on("recall.associate", m.RecallAssociateResponse))
    recall_timeline = _async_method(_protocol("recall.timeline", m.RecallTimelineResponse))
    recall_graph = _async_method(_protocol("recall.graph", m.RecallGraphResponse))
    lifecycle_consolidate = _async_method(_protocol("lifecycle.consolidate", m.ConsolidateResponse))
    lifecycle_decay_tick = _async_method(_protocol("lifecycle.decay_tick", m.DecayTickResponse))
    lifecycle_dream_tick = _async_method(_protocol("lifecycle.dream_tick", m.DreamTickResponse))
    lifecycle_set_mode = _async_shaped(_protocol("lifecycle.set_mode", m.Empty), _nothing)
    lifecycle_forget = _async_method(_protocol("lifecycle.forget", m.ForgetResponse))
    lifecycle_export = _async_method(_protocol("lifecycle.export", m.ExportResponse))
    lifecycle_import = _async_method(_protocol("lifecycle.import", m.ImportResponse))
    introspect_stats = _async_method(Calls.stats)
    introspect_record = _async_method(Calls.inspect)
    introspect_decay_forecast = _async_method(_protocol("introspect.decay_forecast", m.DecayForecastResponse))
    introspect_evolution = _async_method(Calls.evolution)

    async def reindex(self, *, target: str = "all") -> dict[str, int]:
        """Rebuild the server's full-text indexes; the document count of each rebuilt index."""
        return _counts(await self._invoke(Calls.reindex(target)))


class Memory(MemoryAPI):
    """An embedded Cerememory: the engine in this process, owning its data directory.

    ```python
    with cerememory.open("~/.cerememory/data") as mem:
        mem.store("The deploy key rotates on Mondays", store="semantic")
        for hit in mem.recall("when does the key rotate").memories:
            print(hit.relevance_score, hit.rendered_content.plain_text())
    ```

    `dispatcher` runs every call (and may be handed to a transport); `engine` is the engine.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dispatcher = Dispatcher(engine)

    @property
    def data_dir(self) -> Path:
        return self.engine.data_dir

    def dispatch(self, op: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a CMP operation on JSON-like data, with the answer a transport would give; the
        simplest reads are answered without building their models (`Dispatcher.dispatch`)."""
        return self.dispatcher.dispatch(op, request, plain=True)

    def _invoke(self, call: Call[R]) -> R:
        try:
            result = self.dispatcher.call(call.op, call.request, progress=call.progress)
        except CMPError:
            raise
        except Exception as exc:
            raise internal_error(call.op, exc) from exc
        return _typed(result, call.response)

    def close(self) -> None:
        """Flush recall statistics and release the data directory."""
        self.engine.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# short keyword arguments of `open` -> setting names
_OPEN_ALIASES = {
    "semantic": "embed.semantic",
    "embedder": "embed.backend",
    "working_capacity": "memory.working_capacity",
    "fusion": "recall.fusion",
}


def open(data_dir: str | Path | None = None, *, config: str | Path | None = None,
         clock: Callable[[], float] | None = None, passphrase: str | None = None, **settings: Any) -> Memory:
    """Open (creating if needed) a data directory in this process.

    Settings come from the config file and `CEREMEMORY_*` variables as for the CLI; keyword
    arguments override them: `semantic="off"`, `working_capacity=12`, `fusion="normalized"`,
    or any setting name with dots written as double underscores (`decay__episodic__prune=0.2`).
    `passphrase` unlocks an encrypted data directory (else `CEREMEMORY_PASSPHRASE`). Any other
    keyword is refused with VALIDATION_ERROR: a misspelt setting must not be ignored silently.
    """
    from .config import BY_NAME, load_config

    flags = {_OPEN_ALIASES.get(k, k.replace("__", ".")): v for k, v in settings.items()}
    unknown = sorted(k for k, name in zip(settings, flags, strict=True) if name not in BY_NAME)
    if unknown:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"cerememory.open() got an unknown keyword {unknown[0]!r}",
                       hint=f"use passphrase=, config=, clock=, {', '.join(sorted(_OPEN_ALIASES))}= or a setting "
                            "name with dots written as __ (`cerememory config show` lists them)",
                       details={"unknown": unknown})
    if data_dir is not None:
        flags["data_dir"] = str(data_dir)
    return open_config(load_config(config, flags), clock=clock, passphrase=passphrase)


def open_config(cfg: Config, *, server_url: str | None = None, clock: Callable[[], float] | None = None,
                passphrase: str | None = None, warm_cache: bool = True) -> Memory:
    """Open the data directory a loaded `Config` names, with its engine settings. `clock`
    (seconds since the epoch, like `time.time`) lets tests move time without sleeping;
    `warm_cache=False` suits a process that runs one short command (`cm`)."""
    from .engine import Engine, EngineOptions

    options = EngineOptions(**cfg.engine_options(), server_url=server_url, warm_cache=warm_cache)
    if clock is not None:
        options.clock = clock
    if passphrase is not None:
        options.passphrase = passphrase
    return Memory(Engine(cfg.data_dir, options))
