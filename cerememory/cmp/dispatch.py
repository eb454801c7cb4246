"""The one CMP dispatcher: operation name + JSON-like request -> JSON-like response.

`OPERATIONS` is the table every transport is generated from: the operation name, its
request and response models, and the engine method that implements it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..model import MemoryRecord
from ..security.audit import running
from ..storage.full import is_disk_full, storage_full
from . import messages as m
from .context import collecting
from .errors import CMPError, ErrorCode, from_validation_error


@dataclass(frozen=True)
class Operation:
    name: str
    request: type[BaseModel]
    response: type[BaseModel]
    summary: str

    @property
    def method(self) -> str:
        """The engine method implementing the operation: `encode.store` -> `encode_store`."""
        return self.name.replace(".", "_")


_OPS = [
    Operation("encode.store", m.EncodeStoreRequest, m.EncodeStoreResponse,
              "Store one memory record in a curated store."),
    Operation("encode.batch", m.EncodeBatchRequest, m.EncodeBatchResponse,
              "Store up to 1000 records at once, optionally linking them in sequence."),
    Operation("encode.update", m.EncodeUpdateRequest, m.Empty,
              "Replace the content, emotion, metadata or meta-memory of a record."),
    Operation("encode.store_raw", m.EncodeStoreRawRequest, m.EncodeStoreRawResponse,
              "Append one verbatim record to the raw journal."),
    Operation("encode.batch_raw", m.EncodeBatchRawRequest, m.EncodeBatchRawResponse,
              "Append up to 1000 verbatim records to the raw journal."),
    Operation("encode.update_raw", m.EncodeUpdateRawRequest, m.Empty,
              "Suppress a raw journal record or change its visibility or secrecy."),
    Operation("recall.query", m.RecallQueryRequest, m.RecallQueryResponse,
              "Hybrid recall over the curated stores."),
    Operation("recall.associate", m.RecallAssociateRequest, m.RecallAssociateResponse,
              "Spread activation from one record along its associations."),
    Operation("recall.timeline", m.RecallTimelineRequest, m.RecallTimelineResponse,
              "Memories of a time range, bucketed by minute, hour, day, week or month."),
    Operation("recall.graph", m.RecallGraphRequest, m.RecallGraphResponse,
              "The association graph around a record (or the best-connected records)."),
    Operation("recall.raw_query", m.RecallRawQueryRequest, m.RecallRawQueryResponse,
              "Search the raw journal by session, text, ids or time."),
    Operation("recall.list", m.RecallListRequest, m.RecallListResponse,
              "Every record of one store, oldest first, filtered by metadata: an inventory, not a recall."),
    Operation("lifecycle.consolidate", m.ConsolidateRequest, m.ConsolidateResponse,
              "Merge duplicates and promote episodic memories to semantic ones."),
    Operation("lifecycle.decay_tick", m.DecayTickRequest, m.DecayTickResponse,
              "Materialise fidelity and noise and apply the prune threshold."),
    Operation("lifecycle.dream_tick", m.DreamTickRequest, m.DreamTickResponse,
              "Turn unprocessed raw journal topics into episodic summaries and facts."),
    Operation("lifecycle.set_mode", m.SetModeRequest, m.Empty,
              "Set the global recall mode (human or perfect)."),
    Operation("lifecycle.forget", m.ForgetRequest, m.ForgetResponse,
              "Delete records by id, store or time range (confirm required)."),
    Operation("lifecycle.export", m.ExportRequest, m.ExportResponse,
              "Write a CMA archive of the stores and optionally the raw journal."),
    Operation("lifecycle.import", m.ImportRequest, m.ImportResponse,
              "Read a CMA archive into the stores."),
    Operation("introspect.stats", m.StatsRequest, m.StatsResponse,
              "Counts, fidelity averages, index and journal figures."),
    Operation("introspect.record", m.IntrospectRecordRequest, MemoryRecord,
              "One record with everything stored about it."),
    Operation("introspect.decay_forecast", m.DecayForecastRequest, m.DecayForecastResponse,
              "Predicted fidelity of records at a future instant."),
    Operation("introspect.evolution", m.EvolutionRequest, m.EvolutionResponse,
              "Parameter changes the evolution engine proposed or applied."),
]

OPERATIONS: dict[str, Operation] = {op.name: op for op in _OPS}

SUPPORTED_MAJOR = m.PROTOCOL_VERSION.split(".")[0]


def operation(name: str) -> Operation:
    try:
        return OPERATIONS[name]
    except KeyError:
        raise CMPError(
            ErrorCode.VALIDATION_ERROR,
            f"unknown operation {name!r}",
            hint="operations: " + ", ".join(OPERATIONS),
        ) from None


def parse_request(name: str, request: dict[str, Any] | BaseModel | None) -> BaseModel:
    """Validate a request for `name`, checking the optional CMP header's version."""
    op = operation(name)
    if isinstance(request, op.request):
        parsed = request
    else:
        if isinstance(request, BaseModel):
            request = request.model_dump()
        if request is not None and not isinstance(request, dict):
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{name}: the request must be a JSON object")
        try:
            parsed = op.request.model_validate(request or {})
        except ValidationError as exc:
            raise from_validation_error(exc, op=name) from None
    header = getattr(parsed, "header", None)
    if header is not None:
        if header.protocol != "cmp":
            raise CMPError(ErrorCode.VERSION_MISMATCH, f"unknown protocol {header.protocol!r}",
                           hint="set header.protocol to 'cmp'")
        if header.version.split(".")[0] != SUPPORTED_MAJOR:
            raise CMPError(
                ErrorCode.VERSION_MISMATCH,
                f"CMP version {header.version} is not supported; this server speaks {m.PROTOCOL_VERSION}",
                hint=f"send header.version {m.PROTOCOL_VERSION} or omit the header",
                details={"supported": [m.PROTOCOL_VERSION]},
            )
    return parsed


def call(handler: Any, name: str, request: dict[str, Any] | BaseModel | None) -> BaseModel:
    """Validate and run one operation, returning the response model.

    The one place every transport and the embedded API pass through, so the handler's optional
    `audit` log (mutating operations) and `op_metrics` (every call) are fed here. The engine
    writes an intent entry before each change it commits; here the operation gets its outcome:
    `done` when it returned, `failed` when it raised after an intent.
    """
    started = time.perf_counter()
    code = "OK"
    try:
        parsed = parse_request(name, request)
        method = getattr(handler, operation(name).method, None)
        if method is None:
            raise CMPError(
                ErrorCode.NOT_IMPLEMENTED,
                f"{name} is not implemented by this server yet",
                hint="see `cerememory --help` for the operations available",
                details={"operation": name},
            )
        audit = getattr(handler, "audit", None)
        with collecting() as touched, running(name) as run:
            try:
                result = method(parsed)
            except Exception as exc:
                if audit is not None and run.intents:
                    audit.record_failure(name, parsed, exc, touched)
                raise
        result = result if result is not None else m.Empty()
        if audit is not None:
            audit.record(name, parsed, result, touched)
        return result
    except CMPError as exc:
        code = exc.code.value
        raise
    except Exception as exc:
        if is_disk_full(exc):  # wherever a full disk surfaced (a key file, an index): one code
            code = ErrorCode.STORAGE_FULL.value
            raise storage_full(getattr(handler, "data_dir", "the data directory")) from exc
        code = ErrorCode.INTERNAL_ERROR.value
        raise
    finally:
        metrics = getattr(handler, "op_metrics", None)
        if metrics is not None:
            metrics.observe(name, time.perf_counter() - started, code)


def dispatch(handler: Any, name: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
    """The transport entry point: JSON in, JSON out; errors raise `CMPError`."""
    try:
        return call(handler, name, request).model_dump(mode="json")
    except CMPError:
        raise
    except Exception as exc:  # an engine bug must still reach the client as an envelope
        raise CMPError(
            ErrorCode.INTERNAL_ERROR,
            "internal error",
            hint="the server log has the details",
            details={"operation": name, "exception": type(exc).__name__},
        ) from exc
