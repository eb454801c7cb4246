"""The model names of the reference Python SDK (PyPI `cerememory` 0.2.2, `cerememory.types`),
bound to this package's models, so code written for that SDK imports them unchanged.

Most are the same class under the same name; a few are this package's model of the same shape
under the SDK's name (`TimeGranularity`, `EncodeBatchStoreRawRequest`, `ExportArchiveResponse`,
`EvolutionMetrics` for what `introspect.evolution` answers). This package's models are a superset:
they carry more fields than the SDK's, and refuse unknown ones.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .cmp.messages import (
    ActivationNode,
    ActivationTrace,
    CMPHeader,
    ConflictResolution,
    ConsolidateRequest,
    ConsolidateResponse,
    ConsolidationStrategy,
    DecayForecast,
    DecayForecastRequest,
    DecayForecastResponse,
    DecayTickRequest,
    DecayTickResponse,
    DreamTickRequest,
    DreamTickResponse,
    EncodeBatchRequest,
    EncodeBatchResponse,
    EncodeContext,
    EncodeStoreRawRequest,
    EncodeStoreRawResponse,
    EncodeStoreRequest,
    EncodeStoreResponse,
    EncodeUpdateRequest,
    ExportRequest,
    ExportResponse,
    ForgetRequest,
    ForgetResponse,
    GraphEdge,
    GraphNode,
    ImportRequest,
    ImportResponse,
    ImportStrategy,
    ManualAssociation,
    ParameterAdjustment,
    QueryMetadata,
    RecallAssociateRequest,
    RecallAssociateResponse,
    RecallCue,
    RecalledMemory,
    RecallGraphRequest,
    RecallGraphResponse,
    RecallQueryRequest,
    RecallQueryResponse,
    RecallRawQueryRequest,
    RecallRawQueryResponse,
    RecallTimelineRequest,
    RecallTimelineResponse,
    SetModeRequest,
    StatsResponse,
    TemporalRange,
    TimelineBucket,
)
from .cmp.messages import EncodeBatchRawRequest as EncodeBatchStoreRawRequest
from .cmp.messages import EncodeBatchRawResponse as EncodeBatchStoreRawResponse
from .cmp.messages import EvolutionResponse as EvolutionMetrics
from .cmp.messages import ExportResponse as ExportArchiveResponse
from .cmp.messages import TimelineGranularity as TimeGranularity
from .model import (
    Association,
    AssociationType,
    ContentBlock,
    EmotionVector,
    FidelityState,
    MemoryContent,
    MemoryRecord,
    Modality,
    RawJournalRecord,
    RawSource,
    RawSpeaker,
    RawVisibility,
    RecallMode,
    SecrecyLevel,
    StoreType,
)


class HealthResponse(BaseModel):
    """`GET /health`: `status` is "ok" while the process serves."""

    model_config = ConfigDict(extra="allow")
    status: str


class ReadinessResponse(BaseModel):
    """`GET /readiness`: `status` is "ready" once the engine is open (`background` names the role)."""

    model_config = ConfigDict(extra="allow")
    status: str


__all__ = [
    "ActivationNode", "ActivationTrace", "Association", "AssociationType", "CMPHeader", "ConflictResolution",
    "ConsolidateRequest", "ConsolidateResponse", "ConsolidationStrategy", "ContentBlock", "DecayForecast",
    "DecayForecastRequest", "DecayForecastResponse", "DecayTickRequest", "DecayTickResponse", "DreamTickRequest",
    "DreamTickResponse", "EmotionVector", "EncodeBatchRequest", "EncodeBatchResponse", "EncodeBatchStoreRawRequest",
    "EncodeBatchStoreRawResponse", "EncodeContext", "EncodeStoreRawRequest", "EncodeStoreRawResponse",
    "EncodeStoreRequest", "EncodeStoreResponse", "EncodeUpdateRequest", "EvolutionMetrics", "ExportArchiveResponse",
    "ExportRequest", "ExportResponse", "FidelityState", "ForgetRequest", "ForgetResponse", "GraphEdge", "GraphNode",
    "HealthResponse", "ImportRequest", "ImportResponse", "ImportStrategy", "ManualAssociation", "MemoryContent",
    "MemoryRecord", "Modality", "ParameterAdjustment", "QueryMetadata", "RawJournalRecord", "RawSource",
    "RawSpeaker", "RawVisibility", "ReadinessResponse", "RecallAssociateRequest", "RecallAssociateResponse",
    "RecallCue", "RecallGraphRequest", "RecallGraphResponse", "RecallMode", "RecallQueryRequest",
    "RecallQueryResponse", "RecallRawQueryRequest", "RecallRawQueryResponse", "RecallTimelineRequest",
    "RecallTimelineResponse", "RecalledMemory", "SecrecyLevel", "SetModeRequest", "StatsResponse", "StoreType",
    "TemporalRange", "TimeGranularity", "TimelineBucket",
]
