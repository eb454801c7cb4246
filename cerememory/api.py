"""The Python API: typed convenience methods over CMP, shared by the embedded and remote forms.

`Memory` (embedded, from `cerememory.open`) and the HTTP client implement `_invoke`; every
convenience method builds a CMP request and returns the typed response, so code written
against one works against the other.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from .cmp import messages as m
from .cmp.dispatch import call, dispatch
from .cmp.errors import CMPError, ErrorCode
from .model import EmotionVector, MemoryRecord

R = TypeVar("R", bound=BaseModel)
EmotionLike = str | EmotionVector | Mapping[str, float] | None


def _emotion(value: EmotionLike) -> Any:
    if value is None or isinstance(value, EmotionVector | Mapping):
        return value
    try:
        return EmotionVector.from_label(value)
    except ValueError as exc:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"emotion: {exc}",
                       hint="use a Plutchik label or an emotion object") from None


def _content(text: str | None, content: Any, embedding: Sequence[float] | None,
             summary: str | None) -> Any:
    if content is not None:
        return content
    if text is None:
        raise CMPError(ErrorCode.VALIDATION_ERROR, "content: give text or content",
                       hint="store('what happened') or store(content={...})")
    block: dict[str, Any] = {"modality": "text", "text": text}
    if embedding is not None:
        block["embedding"] = list(embedding)
    return {"blocks": [block], "summary": summary}


def _range(start: datetime | None, end: datetime | None) -> dict | None:
    if start is None and end is None:
        return None
    if start is None or end is None:
        raise CMPError(ErrorCode.VALIDATION_ERROR, "temporal range: give both start and end")
    return {"start": start, "end": end}


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class MemoryAPI:
    """Typed methods for every CMP operation of the core; subclasses provide `_invoke`."""

    def _invoke(self, op: str, request: dict[str, Any]) -> BaseModel:
        raise NotImplementedError

    def dispatch(self, op: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def _call(self, op: str, request: dict[str, Any], response: type[R]) -> R:
        result = self._invoke(op, _drop_none(request))
        return result if isinstance(result, response) else response.model_validate(result)

    # ------------------------------------------------------------ encode

    def store(self, text: str | None = None, *, content: Any = None, store: str | None = None,
              emotion: EmotionLike = None, metadata: Mapping[str, Any] | None = None,
              meta: Any = None, embedding: Sequence[float] | None = None,
              summary: str | None = None, associations: Sequence[Mapping[str, Any]] | None = None,
              created_at: datetime | None = None) -> m.EncodeStoreResponse:
        """Remember one thing. Without `store`, a summary routes to semantic, else episodic."""
        return self._call("encode.store", {
            "content": _content(text, content, embedding, summary), "store": store,
            "emotion": _emotion(emotion), "metadata": metadata, "meta": meta,
            "associations": associations, "created_at": created_at,
        }, m.EncodeStoreResponse)

    def store_batch(self, records: Sequence[Mapping[str, Any]], *,
                    infer_associations: bool = False) -> m.EncodeBatchResponse:
        """Store up to 1000 `encode.store` requests in one transaction."""
        return self._call("encode.batch", {"records": list(records),
                                           "infer_associations": infer_associations},
                          m.EncodeBatchResponse)

    def update(self, record_id: uuid.UUID | str, *, text: str | None = None, content: Any = None,
               emotion: EmotionLike = None, metadata: Mapping[str, Any] | None = None,
               meta: Any = None) -> m.Empty:
        return self._call("encode.update", {
            "record_id": record_id,
            "content": _content(text, content, None, None) if text or content else None,
            "emotion": _emotion(emotion), "metadata": metadata, "meta": meta,
        }, m.Empty)

    def store_raw(self, text: str | None = None, *, session_id: str, content: Any = None,
                  turn_id: str | None = None, topic_id: str | None = None,
                  source: str | None = None, speaker: str | None = None,
                  visibility: str | None = None, secrecy_level: str | None = None,
                  metadata: Mapping[str, Any] | None = None, meta: Any = None,
                  created_at: datetime | None = None) -> m.EncodeStoreRawResponse:
        """Append verbatim text (a turn, a tool result, a scratchpad) to the raw journal."""
        return self._call("encode.store_raw", {
            "session_id": session_id, "content": _content(text, content, None, None),
            "turn_id": turn_id, "topic_id": topic_id, "source": source, "speaker": speaker,
            "visibility": visibility, "secrecy_level": secrecy_level, "metadata": metadata,
            "meta": meta, "created_at": created_at,
        }, m.EncodeStoreRawResponse)

    def store_raw_batch(self, records: Sequence[Mapping[str, Any]]) -> m.EncodeBatchRawResponse:
        return self._call("encode.batch_raw", {"records": list(records)}, m.EncodeBatchRawResponse)

    def update_raw(self, record_id: uuid.UUID | str, *, suppressed: bool | None = None,
                   visibility: str | None = None, secrecy_level: str | None = None) -> m.Empty:
        """Suppress a journal record (hidden from raw recall, never dreamed) or reclassify it."""
        return self._call("encode.update_raw", {"record_id": record_id, "suppressed": suppressed,
                                                "visibility": visibility, "secrecy_level": secrecy_level}, m.Empty)

    def dream_tick(self, *, session_id: str | None = None, dry_run: bool = False, max_groups: int = 10,
                   promote_semantic: bool = True, include_private_scratch: bool = False,
                   include_sealed: bool = False,
                   secrecy_levels: Sequence[str] | None = None) -> m.DreamTickResponse:
        """Summarise unprocessed raw journal topics into episodic memories (and semantic facts)."""
        return self._call("lifecycle.dream_tick", {
            "session_id": session_id, "dry_run": dry_run, "max_groups": max_groups,
            "promote_semantic": promote_semantic, "include_private_scratch": include_private_scratch,
            "include_sealed": include_sealed, "secrecy_levels": secrecy_levels}, m.DreamTickResponse)

    # ------------------------------------------------------------ recall

    def recall(self, query: str | None = None, *, limit: int = 10,
               stores: Sequence[str] | None = None, min_fidelity: float | None = None,
               include_decayed: bool = False, reconsolidate: bool = True,
               activation_depth: int = 2, mode: str = "human",
               embedding: Sequence[float] | None = None, emotion: EmotionLike = None,
               start: datetime | None = None, end: datetime | None = None) -> m.RecallQueryResponse:
        """Hybrid recall; with no cue at all, the most recent memories."""
        cue = _drop_none({"text": query, "embedding": list(embedding) if embedding else None,
                          "emotion": _emotion(emotion), "temporal": _range(start, end)})
        return self._call("recall.query", {
            "cue": cue, "stores": stores, "limit": limit, "min_fidelity": min_fidelity,
            "include_decayed": include_decayed, "reconsolidate": reconsolidate,
            "activation_depth": activation_depth, "recall_mode": mode,
        }, m.RecallQueryResponse)

    def raw_recall(self, query: str | None = None, *, session_id: str | None = None,
                   record_ids: Sequence[uuid.UUID | str] | None = None, limit: int = 10,
                   include_private_scratch: bool = False, include_sealed: bool = False,
                   secrecy_levels: Sequence[str] | None = None, start: datetime | None = None,
                   end: datetime | None = None) -> m.RecallRawQueryResponse:
        """Verbatim journal records; private, sealed and secret ones only when asked for."""
        return self._call("recall.raw_query", {
            "query": query, "session_id": session_id, "record_ids": record_ids, "limit": limit,
            "include_private_scratch": include_private_scratch, "include_sealed": include_sealed,
            "secrecy_levels": secrecy_levels, "temporal": _range(start, end),
        }, m.RecallRawQueryResponse)

    def list_records(self, store: str, *, metadata: dict[str, Any] | None = None,
                     fields: Sequence[str] | None = None, cursor: str | None = None,
                     limit: int = 1000, similar_to: str | None = None) -> m.RecallListResponse:
        """One page of a store's records, oldest first, whose metadata has these key/values;
        decayed ones included, nothing reconsolidated. Pass `next_cursor` back for the next page;
        `similar_to` adds each record's cosine to that text (`similarity`) when search is semantic."""
        return self._call("recall.list", {"store": store, "metadata": metadata, "fields": fields,
                                          "cursor": cursor, "limit": limit, "similar_to": similar_to},
                          m.RecallListResponse)

    def associate(self, record_id: uuid.UUID | str, *, depth: int = 2, min_weight: float = 0.1,
                  limit: int = 10, types: Sequence[str] | None = None) -> m.RecallAssociateResponse:
        return self._call("recall.associate", {
            "record_id": record_id, "depth": depth, "min_weight": min_weight, "limit": limit,
            "association_types": types,
        }, m.RecallAssociateResponse)

    def timeline(self, start: datetime, end: datetime, *, granularity: str = "hour",
                 min_fidelity: float | None = None, emotion: EmotionLike = None,
                 stores: Sequence[str] | None = None) -> m.RecallTimelineResponse:
        return self._call("recall.timeline", {
            "range": {"start": start, "end": end}, "granularity": granularity,
            "min_fidelity": min_fidelity, "emotion_filter": _emotion(emotion), "stores": stores,
        }, m.RecallTimelineResponse)

    def graph(self, center_id: uuid.UUID | str | None = None, *, depth: int = 2,
              limit_nodes: int = 10, edge_types: Sequence[str] | None = None,
              include_meta: bool = False) -> m.RecallGraphResponse:
        return self._call("recall.graph", {
            "center_id": center_id, "depth": depth, "limit_nodes": limit_nodes,
            "edge_types": edge_types, "include_meta": include_meta,
        }, m.RecallGraphResponse)

    # ------------------------------------------------------------ lifecycle and introspection

    def forget(self, record_ids: Sequence[uuid.UUID | str] | None = None, *,
               store: str | None = None, start: datetime | None = None,
               end: datetime | None = None, cascade: bool = False,
               confirm: bool = False) -> m.ForgetResponse:
        """Delete permanently; `confirm=True` is required."""
        return self._call("lifecycle.forget", {
            "record_ids": record_ids, "store": store, "temporal_range": _range(start, end),
            "cascade": cascade, "confirm": confirm,
        }, m.ForgetResponse)

    def set_mode(self, mode: str, *, scope: Sequence[str] | None = None) -> m.Empty:
        return self._call("lifecycle.set_mode", {"mode": mode, "scope": scope}, m.Empty)

    def decay_tick(self) -> m.DecayTickResponse:
        """Materialise fidelity and noise now, and count forgotten records."""
        return self._call("lifecycle.decay_tick", {}, m.DecayTickResponse)

    def consolidate(self, strategy: str = "incremental", *, min_age_hours: float = 0, min_access_count: int = 0,
                    dry_run: bool = False) -> m.ConsolidateResponse:
        """Merge near-duplicate episodic memories and promote episodic memories to semantic facts."""
        return self._call("lifecycle.consolidate", {
            "strategy": strategy, "min_age_hours": min_age_hours, "min_access_count": min_access_count,
            "dry_run": dry_run}, m.ConsolidateResponse)

    def evolution(self) -> m.EvolutionResponse:
        """The decay parameters the evolution engine adjusted, and why."""
        return self._call("introspect.evolution", {}, m.EvolutionResponse)

    def forecast(self, record_ids: Sequence[uuid.UUID | str], at: datetime) -> m.DecayForecastResponse:
        """Fidelity of records at `at`, and when each will be forgotten."""
        return self._call("introspect.decay_forecast", {"record_ids": list(record_ids), "forecast_at": at},
                          m.DecayForecastResponse)

    def stats(self) -> m.StatsResponse:
        return self._call("introspect.stats", {}, m.StatsResponse)

    def inspect(self, record_id: uuid.UUID | str) -> MemoryRecord:
        return self._call("introspect.record", {"record_id": record_id}, MemoryRecord)


class Memory(MemoryAPI):
    """An embedded Cerememory: the engine in this process, owning its data directory.

    ```python
    with cerememory.open("~/.cerememory/data") as mem:
        mem.store("The deploy key rotates on Mondays", store="semantic")
        for hit in mem.recall("when does the key rotate").memories:
            print(hit.relevance_score, hit.rendered_content.plain_text())
    ```
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    @property
    def data_dir(self) -> Path:
        return self.engine.data_dir

    def dispatch(self, op: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a CMP operation on JSON-like data, exactly as a transport would."""
        return dispatch(self.engine, op, request)

    def _invoke(self, op: str, request: dict[str, Any]) -> BaseModel:
        try:
            return call(self.engine, op, request)
        except CMPError:
            raise
        except Exception as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, "internal error",
                           details={"operation": op, "exception": type(exc).__name__}) from exc

    def reindex(self, progress: Any = None) -> dict[str, int]:
        """Rebuild both full-text indexes from the database."""
        return {"records": self.engine.reindex_records(progress),
                "journal": self.engine.reindex_journal(progress)}

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
         clock: Any = None, **settings: Any) -> Memory:
    """Open (creating if needed) a data directory in this process.

    Settings come from the config file and `CEREMEMORY_*` variables as for the CLI; keyword
    arguments override them: `semantic="off"`, `working_capacity=12`, `fusion="normalized"`,
    or any setting name with dots written as double underscores (`decay__episodic__prune=0.2`).
    """
    from .config import load_config

    flags = {_OPEN_ALIASES.get(k, k.replace("__", ".")): v for k, v in settings.items()}
    if data_dir is not None:
        flags["data_dir"] = str(data_dir)
    return open_config(load_config(config, flags), clock=clock)


def open_config(cfg: Any, *, server_url: str | None = None, clock: Any = None,
                passphrase: str | None = None) -> Memory:
    """Open the data directory a loaded `Config` names, with its engine settings. `clock`
    (seconds since the epoch, like `time.time`) lets tests move time without sleeping."""
    from .engine import Engine, EngineOptions

    options = EngineOptions(**cfg.engine_options(), server_url=server_url)
    if clock is not None:
        options.clock = clock
    if passphrase is not None:
        options.passphrase = passphrase
    return Memory(Engine(cfg.data_dir, options))
