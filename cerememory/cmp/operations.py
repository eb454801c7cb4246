"""The CMP operations, each declared once: what every transport is built from.

An `Operation` names its request and response models, says what it does, and declares how each
transport offers it: the HTTP route, the gRPC method of `CerememoryService`, the MCP tool (or
none), whether the audit log records it, and which call options (an archive `sink`, a `progress`
callback) an in-process caller may pass through to the engine. The HTTP routes
(transport/http.py), the gRPC servicer (transport/grpc_server.py), the MCP tools
(transport/mcp_server.py, whose argument adapters in transport/mcp_tools.py are named like the
tools) and the clients are built from this table; `tests/test_operations.py` checks that every
operation appears on every transport it declares, and nothing else does.

The module stays light (no pydantic at import time) because the standard-library `LightClient`
routes its calls with it: models are named, and resolved from `cerememory.cmp.messages` when a
transport first asks for them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from .errors import CMPError, ErrorCode

if TYPE_CHECKING:
    from pydantic import BaseModel

CALL_OPTIONS = frozenset({"sink", "progress"})


@dataclass(frozen=True)
class Route:
    """An operation's HTTP route; `{name}` segments of the path are request fields."""

    method: str
    path: str

    @property
    def path_params(self) -> list[str]:
        return [part[1:-1] for part in self.path.split("/") if part.startswith("{")]


@dataclass(frozen=True)
class Tool:
    """An operation's MCP tool. Its arguments are those of the function of the same name in
    transport/mcp_tools.py, which turns them into the CMP request; a tool is read-only when its
    operation is not audited (changes nothing), and `destructive` when it deletes."""

    name: str
    description: str
    destructive: bool = False


@dataclass(frozen=True)
class Operation:
    name: str
    request_model: str  # a model of cerememory.cmp.messages (or cerememory.model, which it imports)
    response_model: str
    summary: str
    http: Route
    rpc: str  # the method of cerememory.v1.CerememoryService
    mcp: Tool | None = None
    audited: bool = True  # it changes stored data or its policy, or copies the data out
    options: frozenset[str] = frozenset()  # call options passed through to the engine method
    bulk: bool = False  # a thousand records at once: the cyclic collector waits (collector.py)

    @property
    def method(self) -> str:
        """The engine method implementing the operation: `encode.store` -> `encode_store`."""
        return self.name.replace(".", "_")

    @property
    def group(self) -> str:
        return self.name.split(".")[0]

    @property
    def no_content(self) -> bool:
        """Answered with nothing (HTTP 204, google.protobuf.Empty)."""
        return self.response_model == "Empty"

    @cached_property
    def request(self) -> type[BaseModel]:
        return _model(self.request_model)

    @cached_property
    def response(self) -> type[BaseModel]:
        return _model(self.response_model)


def _model(name: str) -> type[BaseModel]:
    model: type[BaseModel] = getattr(importlib.import_module("cerememory.cmp.messages"), name)
    return model


def _op(name: str, request: str, response: str, summary: str, http: Route, rpc: str, *,
        mcp: Tool | None = None, audited: bool = True, options: tuple[str, ...] = (),
        bulk: bool = False) -> Operation:
    return Operation(name, request, response, summary, http, rpc, mcp, audited, frozenset(options), bulk)


POST, GET, PATCH, PUT, DELETE = "POST", "GET", "PATCH", "PUT", "DELETE"

_OPS = [
    # ------------------------------------------------------------ encode
    _op("encode.store", "EncodeStoreRequest", "EncodeStoreResponse",
        "Store one memory record in a curated store; a turn with `context.session_id` is linked to "
        "its session's previous turn.",
        Route(POST, "/v1/encode"), "EncodeStore",
        mcp=Tool("store", "Remember one thing in a curated store. Returns its record_id.")),
    _op("encode.batch", "EncodeBatchRequest", "EncodeBatchResponse",
        "Store up to 1000 records at once, linking the turns of each session in sequence, across "
        "batches (or, optionally, all records of the batch); `associations_inferred` counts the edges made.",
        Route(POST, "/v1/encode/batch"), "EncodeBatch",
        mcp=Tool("batch_store", "Remember many things at once (one transaction)."), bulk=True),
    _op("encode.update", "EncodeUpdateRequest", "Empty",
        "Replace the content, emotion, metadata or meta-memory of a record, or move it to another store.",
        Route(PATCH, "/v1/encode/{record_id}"), "EncodeUpdate",
        mcp=Tool("update", "Replace the text, emotion, meta-memory or metadata of a record, or move it to "
                              "another store (give at least one).")),
    _op("encode.store_raw", "EncodeStoreRawRequest", "EncodeStoreRawResponse",
        "Append one verbatim record to the raw journal.",
        Route(POST, "/v1/encode/raw"), "EncodeStoreRaw",
        mcp=Tool("store_raw", "Append verbatim text to the raw journal (kept word for word, searchable with "
                              "recall_raw).")),
    _op("encode.batch_raw", "EncodeBatchRawRequest", "EncodeBatchRawResponse",
        "Append up to 1000 verbatim records to the raw journal.",
        Route(POST, "/v1/encode/raw/batch"), "EncodeBatchRaw",
        mcp=Tool("batch_store_raw", "Append many verbatim records to the raw journal at once."), bulk=True),
    _op("encode.update_raw", "EncodeUpdateRawRequest", "Empty",
        "Suppress a raw journal record or change its visibility or secrecy.",
        Route(PATCH, "/v1/encode/raw/{record_id}"), "EncodeUpdateRaw",
        mcp=Tool("update_raw", "Suppress a raw journal record, or change who may see it (its text never "
                               "changes).")),
    # ------------------------------------------------------------ recall
    _op("recall.query", "RecallQueryRequest", "RecallQueryResponse",
        "Hybrid recall over the curated stores.",
        Route(POST, "/v1/recall/query"), "RecallQuery", audited=False,
        mcp=Tool("recall", "Find memories by keywords, meaning (when vector search is on) and associations, "
                           "best first.")),
    _op("recall.associate", "RecallAssociateRequest", "RecallAssociateResponse",
        "Spread activation from one record along its associations.",
        Route(POST, "/v1/recall/associate/{record_id}"), "RecallAssociate", audited=False,
        mcp=Tool("associate", "Memories linked to a record, by spreading activation along its associations.")),
    _op("recall.timeline", "RecallTimelineRequest", "RecallTimelineResponse",
        "Memories of a time range, bucketed by minute, hour, day, week or month.",
        Route(POST, "/v1/recall/timeline"), "RecallTimeline", audited=False,
        mcp=Tool("timeline", "Memories of a period, grouped in time buckets (default: the last 7 days, by hour).")),
    _op("recall.graph", "RecallGraphRequest", "RecallGraphResponse",
        "The association graph around a record (or the best-connected records).",
        Route(POST, "/v1/recall/graph"), "RecallGraph", audited=False),
    _op("recall.raw_query", "RecallRawQueryRequest", "RecallRawQueryResponse",
        "Search the raw journal by session, text, ids or time.",
        Route(POST, "/v1/recall/raw"), "RecallRawQuery", audited=False,
        mcp=Tool("recall_raw", "Search the raw journal (verbatim turns and tool output) by session, words or "
                               "time.")),
    _op("recall.sessions", "RecallSessionsRequest", "RecallSessionsResponse",
        "The raw journal's sessions, latest activity first: agent, workspace, turns and how many were dreamed.",
        Route(POST, "/v1/recall/sessions"), "RecallSessions", audited=False,
        mcp=Tool("sessions", "The raw journal's sessions (what `ingest` brought in), latest first: agent, "
                             "workspace, number of turns, how many were dreamed.")),
    _op("recall.list", "RecallListRequest", "RecallListResponse",
        "Every record of one store, oldest first, filtered by metadata: an inventory, not a recall.",
        Route(POST, "/v1/recall/list"), "RecallList", audited=False),
    # ------------------------------------------------------------ lifecycle
    _op("lifecycle.consolidate", "ConsolidateRequest", "ConsolidateResponse",
        "Merge duplicates and promote episodic memories to semantic ones.",
        Route(POST, "/v1/lifecycle/consolidate"), "Consolidate",
        mcp=Tool("consolidate", "Merge duplicate memories and promote episodic ones to semantic facts.")),
    _op("lifecycle.decay_tick", "DecayTickRequest", "DecayTickResponse",
        "Materialise fidelity and noise and apply the prune threshold.",
        Route(POST, "/v1/lifecycle/decay-tick"), "DecayTick"),
    _op("lifecycle.dream_tick", "DreamTickRequest", "DreamTickResponse",
        "Turn unprocessed raw journal topics into episodic summaries and facts.",
        Route(POST, "/v1/lifecycle/dream-tick"), "DreamTick",
        mcp=Tool("dream_tick", "Turn unprocessed raw-journal topics into episodic summaries and semantic facts.")),
    _op("lifecycle.set_mode", "SetModeRequest", "Empty",
        "Set the global recall mode (human or perfect).",
        Route(PUT, "/v1/lifecycle/mode"), "SetMode"),
    _op("lifecycle.forget", "ForgetRequest", "ForgetResponse",
        "Delete records by id, store or time range (confirm required).",
        Route(DELETE, "/v1/lifecycle/forget"), "Forget",
        mcp=Tool("forget", "Delete records permanently (needs confirm=true).", destructive=True)),
    _op("lifecycle.reinforce", "ReinforceRequest", "ReinforceResponse",
        "Strengthen records as a recall would: fidelity back, more stability, the decay clock restarts.",
        Route(POST, "/v1/lifecycle/reinforce"), "Reinforce",
        mcp=Tool("reinforce", "Strengthen memories you want kept, as recalling them would (they fade slower).")),
    _op("lifecycle.export", "ExportRequest", "ExportResponse",
        "Write a CMA archive of the stores and optionally the raw journal.",
        Route(POST, "/v1/lifecycle/export"), "Export", options=("sink", "progress"),
        mcp=Tool("export", "Write every store and the raw journal to an archive file.")),
    _op("lifecycle.import", "ImportRequest", "ImportResponse",
        "Read a CMA archive into the stores.",
        Route(POST, "/v1/lifecycle/import"), "Import", options=("progress",)),
    _op("lifecycle.reindex", "ReindexRequest", "ReindexResponse",
        "Rebuild the full-text indexes (records, journal or both) from the database.",
        Route(POST, "/v1/admin/reindex"), "Reindex", options=("progress",)),
    # ------------------------------------------------------------ introspect
    _op("introspect.stats", "StatsRequest", "StatsResponse",
        "Counts, fidelity averages, index and journal figures.",
        Route(GET, "/v1/introspect/stats"), "Stats", audited=False,
        mcp=Tool("stats", "Counts per store, average fidelity, journal and index figures, search configuration.")),
    _op("introspect.record", "IntrospectRecordRequest", "MemoryRecord",
        "One record with everything stored about it.",
        Route(GET, "/v1/introspect/record/{record_id}"), "IntrospectRecord", audited=False,
        mcp=Tool("inspect", "Everything stored about one record: content, fidelity, emotion, associations, "
                            "meta-memory.")),
    _op("introspect.decay_forecast", "DecayForecastRequest", "DecayForecastResponse",
        "Predicted fidelity of records at a future instant.",
        Route(POST, "/v1/introspect/decay-forecast"), "DecayForecast", audited=False),
    _op("introspect.fading", "FadingRequest", "FadingResponse",
        "How many records each horizon will see forgotten, per store, and the soonest ones.",
        Route(POST, "/v1/introspect/fading"), "Fading", audited=False),
    _op("introspect.audit", "AuditRequest", "AuditResponse",
        "The audit log, newest first, filtered by operation, and optionally the check of its hash chain.",
        Route(POST, "/v1/introspect/audit"), "Audit", audited=False),
    _op("introspect.evolution", "EvolutionRequest", "EvolutionResponse",
        "Parameter changes the evolution engine proposed or applied.",
        Route(GET, "/v1/introspect/evolution"), "Evolution", audited=False),
]

OPERATIONS: dict[str, Operation] = {op.name: op for op in _OPS}


def operation(name: str) -> Operation:
    try:
        return OPERATIONS[name]
    except KeyError:
        raise CMPError(
            ErrorCode.VALIDATION_ERROR,
            f"unknown operation {name!r}",
            hint="operations: " + ", ".join(OPERATIONS),
        ) from None
