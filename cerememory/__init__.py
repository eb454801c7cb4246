"""Cerememory: a living memory database for LLM agents.

```python
import cerememory

with cerememory.open("./memory") as mem:
    mem.store("Alice prefers tabs over spaces", store="procedural")
    print(mem.recall("what does Alice prefer").memories[0].rendered_content.plain_text())
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import exports
from .version import __version__ as __version__

# Public names, imported on first use (PEP 562): `import cerememory.cm.cli` or the HTTP client
# then do not pay for the engine (DuckDB, tantivy, the models) unless they use it.
_LAZY = {
    "Memory": ".api", "MemoryAPI": ".api", "open": ".api",
    "CMPError": ".cmp.errors", "ErrorCode": ".cmp.errors",
    "ContentBlock": ".model", "EmotionVector": ".model", "MemoryContent": ".model", "MemoryRecord": ".model",
    "MetaMemory": ".model", "RawJournalRecord": ".model", "StoreType": ".model",
    "AsyncClient": ".transport.client", "Client": ".transport.client",
}
# The reference Python SDK's model and exception names (`cerememory.types`, `cerememory.errors`; its
# ConnectionError and TimeoutError only there, as in the SDK), so code written for it imports them
# from here unchanged; tests/test_reference_sdk.py keeps the lists whole.
SDK_TYPES = (
    "ActivationNode", "ActivationTrace", "Association", "AssociationType", "CMPHeader", "ConflictResolution",
    "ConsolidateRequest", "ConsolidateResponse", "ConsolidationStrategy", "ContentBlock", "DecayForecast",
    "DecayForecastRequest", "DecayForecastResponse", "DecayTickRequest", "DecayTickResponse",
    "DreamTickRequest", "DreamTickResponse", "EmotionVector", "EncodeBatchRequest", "EncodeBatchResponse",
    "EncodeBatchStoreRawRequest", "EncodeBatchStoreRawResponse", "EncodeContext", "EncodeStoreRawRequest",
    "EncodeStoreRawResponse", "EncodeStoreRequest", "EncodeStoreResponse", "EncodeUpdateRequest",
    "EvolutionMetrics", "ExportArchiveResponse", "ExportRequest", "ExportResponse", "FidelityState",
    "ForgetRequest", "ForgetResponse", "GraphEdge", "GraphNode", "HealthResponse", "ImportRequest",
    "ImportResponse", "ImportStrategy", "ManualAssociation", "MemoryContent", "MemoryRecord", "Modality",
    "ParameterAdjustment", "QueryMetadata", "RawJournalRecord", "RawSource", "RawSpeaker", "RawVisibility",
    "ReadinessResponse", "RecallAssociateRequest", "RecallAssociateResponse", "RecallCue",
    "RecallGraphRequest", "RecallGraphResponse", "RecallMode", "RecallQueryRequest", "RecallQueryResponse",
    "RecallRawQueryRequest", "RecallRawQueryResponse", "RecallTimelineRequest", "RecallTimelineResponse",
    "RecalledMemory", "SecrecyLevel", "SetModeRequest", "StatsResponse", "StoreType", "TemporalRange",
    "TimeGranularity", "TimelineBucket",
)
SDK_ERRORS = (
    "CerememoryError", "ConsolidationInProgressError", "ContentTooLargeError",
    "DecayEngineBusyError", "ExportFailedError", "ForgetUnconfirmedError", "ImportConflictError",
    "InternalError", "ModalityUnsupportedError", "RateLimitedError", "RecordNotFoundError",
    "ServerUnreachableError", "StoreInvalidError", "UnauthorizedError", "ValidationError",
    "VersionMismatchError", "WorkingMemoryFullError",
)
_LAZY.update({name: ".types" for name in SDK_TYPES if name not in _LAZY})
_LAZY.update({name: ".errors" for name in SDK_ERRORS})
__all__ = [*_LAZY, "__version__"]

if TYPE_CHECKING:
    from .api import Memory as Memory
    from .api import MemoryAPI as MemoryAPI
    from .api import open as open
    from .cmp.errors import CMPError as CMPError
    from .cmp.errors import ErrorCode as ErrorCode
    from .model import ContentBlock as ContentBlock
    from .model import EmotionVector as EmotionVector
    from .model import MemoryContent as MemoryContent
    from .model import MemoryRecord as MemoryRecord
    from .model import MetaMemory as MetaMemory
    from .model import RawJournalRecord as RawJournalRecord
    from .model import StoreType as StoreType
    from .transport.client import AsyncClient as AsyncClient
    from .transport.client import Client as Client


__getattr__ = exports(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
