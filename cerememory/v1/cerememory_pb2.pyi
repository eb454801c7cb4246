import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoreType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STORE_TYPE_UNSPECIFIED: _ClassVar[StoreType]
    STORE_TYPE_EPISODIC: _ClassVar[StoreType]
    STORE_TYPE_SEMANTIC: _ClassVar[StoreType]
    STORE_TYPE_PROCEDURAL: _ClassVar[StoreType]
    STORE_TYPE_EMOTIONAL: _ClassVar[StoreType]
    STORE_TYPE_WORKING: _ClassVar[StoreType]

class Modality(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODALITY_UNSPECIFIED: _ClassVar[Modality]
    MODALITY_TEXT: _ClassVar[Modality]
    MODALITY_IMAGE: _ClassVar[Modality]
    MODALITY_AUDIO: _ClassVar[Modality]
    MODALITY_VIDEO: _ClassVar[Modality]
    MODALITY_STRUCTURED: _ClassVar[Modality]
    MODALITY_SPATIAL: _ClassVar[Modality]
    MODALITY_TEMPORAL: _ClassVar[Modality]
    MODALITY_INTEROCEPTIVE: _ClassVar[Modality]

class AssociationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ASSOCIATION_TYPE_UNSPECIFIED: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_TEMPORAL: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_SPATIAL: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_SEMANTIC: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_EMOTIONAL: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_CAUSAL: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_SEQUENTIAL: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_CROSS_MODAL: _ClassVar[AssociationType]
    ASSOCIATION_TYPE_USER_DEFINED: _ClassVar[AssociationType]

class RawSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RAW_SOURCE_UNSPECIFIED: _ClassVar[RawSource]
    RAW_SOURCE_CONVERSATION: _ClassVar[RawSource]
    RAW_SOURCE_TOOL_IO: _ClassVar[RawSource]
    RAW_SOURCE_SCRATCHPAD: _ClassVar[RawSource]
    RAW_SOURCE_SUMMARY: _ClassVar[RawSource]
    RAW_SOURCE_IMPORTED: _ClassVar[RawSource]

class RawSpeaker(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RAW_SPEAKER_UNSPECIFIED: _ClassVar[RawSpeaker]
    RAW_SPEAKER_USER: _ClassVar[RawSpeaker]
    RAW_SPEAKER_ASSISTANT: _ClassVar[RawSpeaker]
    RAW_SPEAKER_SYSTEM: _ClassVar[RawSpeaker]
    RAW_SPEAKER_TOOL: _ClassVar[RawSpeaker]

class RawVisibility(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RAW_VISIBILITY_UNSPECIFIED: _ClassVar[RawVisibility]
    RAW_VISIBILITY_NORMAL: _ClassVar[RawVisibility]
    RAW_VISIBILITY_PRIVATE_SCRATCH: _ClassVar[RawVisibility]
    RAW_VISIBILITY_SEALED: _ClassVar[RawVisibility]

class SecrecyLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SECRECY_LEVEL_UNSPECIFIED: _ClassVar[SecrecyLevel]
    SECRECY_LEVEL_PUBLIC: _ClassVar[SecrecyLevel]
    SECRECY_LEVEL_SENSITIVE: _ClassVar[SecrecyLevel]
    SECRECY_LEVEL_SECRET: _ClassVar[SecrecyLevel]

class CaptureStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPTURE_STATUS_UNSPECIFIED: _ClassVar[CaptureStatus]
    CAPTURE_STATUS_PROVIDED: _ClassVar[CaptureStatus]
    CAPTURE_STATUS_INFERRED: _ClassVar[CaptureStatus]
    CAPTURE_STATUS_LEGACY: _ClassVar[CaptureStatus]
    CAPTURE_STATUS_UNAVAILABLE: _ClassVar[CaptureStatus]

class MetaRelation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    META_RELATION_UNSPECIFIED: _ClassVar[MetaRelation]
    META_RELATION_MOTIVATED_BY: _ClassVar[MetaRelation]
    META_RELATION_CAUSED_BY: _ClassVar[MetaRelation]
    META_RELATION_DERIVED_FROM: _ClassVar[MetaRelation]
    META_RELATION_SUPPORTS: _ClassVar[MetaRelation]
    META_RELATION_CONTRADICTS: _ClassVar[MetaRelation]
    META_RELATION_CHOSE_OVER: _ClassVar[MetaRelation]
    META_RELATION_EXPLAINS: _ClassVar[MetaRelation]
    META_RELATION_CONTEXT_OF: _ClassVar[MetaRelation]

class RecallMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECALL_MODE_UNSPECIFIED: _ClassVar[RecallMode]
    RECALL_MODE_HUMAN: _ClassVar[RecallMode]
    RECALL_MODE_PERFECT: _ClassVar[RecallMode]

class TimelineGranularity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIMELINE_GRANULARITY_UNSPECIFIED: _ClassVar[TimelineGranularity]
    TIMELINE_GRANULARITY_MINUTE: _ClassVar[TimelineGranularity]
    TIMELINE_GRANULARITY_HOUR: _ClassVar[TimelineGranularity]
    TIMELINE_GRANULARITY_DAY: _ClassVar[TimelineGranularity]
    TIMELINE_GRANULARITY_WEEK: _ClassVar[TimelineGranularity]
    TIMELINE_GRANULARITY_MONTH: _ClassVar[TimelineGranularity]

class ConsolidationStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSOLIDATION_STRATEGY_UNSPECIFIED: _ClassVar[ConsolidationStrategy]
    CONSOLIDATION_STRATEGY_FULL: _ClassVar[ConsolidationStrategy]
    CONSOLIDATION_STRATEGY_INCREMENTAL: _ClassVar[ConsolidationStrategy]
    CONSOLIDATION_STRATEGY_SELECTIVE: _ClassVar[ConsolidationStrategy]

class ImportStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMPORT_STRATEGY_UNSPECIFIED: _ClassVar[ImportStrategy]
    IMPORT_STRATEGY_MERGE: _ClassVar[ImportStrategy]
    IMPORT_STRATEGY_REPLACE: _ClassVar[ImportStrategy]

class ConflictResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFLICT_RESOLUTION_UNSPECIFIED: _ClassVar[ConflictResolution]
    CONFLICT_RESOLUTION_KEEP_EXISTING: _ClassVar[ConflictResolution]
    CONFLICT_RESOLUTION_KEEP_IMPORTED: _ClassVar[ConflictResolution]
    CONFLICT_RESOLUTION_KEEP_NEWER: _ClassVar[ConflictResolution]

class ReindexTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REINDEX_TARGET_UNSPECIFIED: _ClassVar[ReindexTarget]
    REINDEX_TARGET_ALL: _ClassVar[ReindexTarget]
    REINDEX_TARGET_RECORDS: _ClassVar[ReindexTarget]
    REINDEX_TARGET_JOURNAL: _ClassVar[ReindexTarget]

class ListField(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIST_FIELD_UNSPECIFIED: _ClassVar[ListField]
    LIST_FIELD_TEXT: _ClassVar[ListField]
    LIST_FIELD_CONTENT: _ClassVar[ListField]
    LIST_FIELD_METADATA: _ClassVar[ListField]
    LIST_FIELD_META: _ClassVar[ListField]
    LIST_FIELD_EMOTION: _ClassVar[ListField]
    LIST_FIELD_FIDELITY: _ClassVar[ListField]
STORE_TYPE_UNSPECIFIED: StoreType
STORE_TYPE_EPISODIC: StoreType
STORE_TYPE_SEMANTIC: StoreType
STORE_TYPE_PROCEDURAL: StoreType
STORE_TYPE_EMOTIONAL: StoreType
STORE_TYPE_WORKING: StoreType
MODALITY_UNSPECIFIED: Modality
MODALITY_TEXT: Modality
MODALITY_IMAGE: Modality
MODALITY_AUDIO: Modality
MODALITY_VIDEO: Modality
MODALITY_STRUCTURED: Modality
MODALITY_SPATIAL: Modality
MODALITY_TEMPORAL: Modality
MODALITY_INTEROCEPTIVE: Modality
ASSOCIATION_TYPE_UNSPECIFIED: AssociationType
ASSOCIATION_TYPE_TEMPORAL: AssociationType
ASSOCIATION_TYPE_SPATIAL: AssociationType
ASSOCIATION_TYPE_SEMANTIC: AssociationType
ASSOCIATION_TYPE_EMOTIONAL: AssociationType
ASSOCIATION_TYPE_CAUSAL: AssociationType
ASSOCIATION_TYPE_SEQUENTIAL: AssociationType
ASSOCIATION_TYPE_CROSS_MODAL: AssociationType
ASSOCIATION_TYPE_USER_DEFINED: AssociationType
RAW_SOURCE_UNSPECIFIED: RawSource
RAW_SOURCE_CONVERSATION: RawSource
RAW_SOURCE_TOOL_IO: RawSource
RAW_SOURCE_SCRATCHPAD: RawSource
RAW_SOURCE_SUMMARY: RawSource
RAW_SOURCE_IMPORTED: RawSource
RAW_SPEAKER_UNSPECIFIED: RawSpeaker
RAW_SPEAKER_USER: RawSpeaker
RAW_SPEAKER_ASSISTANT: RawSpeaker
RAW_SPEAKER_SYSTEM: RawSpeaker
RAW_SPEAKER_TOOL: RawSpeaker
RAW_VISIBILITY_UNSPECIFIED: RawVisibility
RAW_VISIBILITY_NORMAL: RawVisibility
RAW_VISIBILITY_PRIVATE_SCRATCH: RawVisibility
RAW_VISIBILITY_SEALED: RawVisibility
SECRECY_LEVEL_UNSPECIFIED: SecrecyLevel
SECRECY_LEVEL_PUBLIC: SecrecyLevel
SECRECY_LEVEL_SENSITIVE: SecrecyLevel
SECRECY_LEVEL_SECRET: SecrecyLevel
CAPTURE_STATUS_UNSPECIFIED: CaptureStatus
CAPTURE_STATUS_PROVIDED: CaptureStatus
CAPTURE_STATUS_INFERRED: CaptureStatus
CAPTURE_STATUS_LEGACY: CaptureStatus
CAPTURE_STATUS_UNAVAILABLE: CaptureStatus
META_RELATION_UNSPECIFIED: MetaRelation
META_RELATION_MOTIVATED_BY: MetaRelation
META_RELATION_CAUSED_BY: MetaRelation
META_RELATION_DERIVED_FROM: MetaRelation
META_RELATION_SUPPORTS: MetaRelation
META_RELATION_CONTRADICTS: MetaRelation
META_RELATION_CHOSE_OVER: MetaRelation
META_RELATION_EXPLAINS: MetaRelation
META_RELATION_CONTEXT_OF: MetaRelation
RECALL_MODE_UNSPECIFIED: RecallMode
RECALL_MODE_HUMAN: RecallMode
RECALL_MODE_PERFECT: RecallMode
TIMELINE_GRANULARITY_UNSPECIFIED: TimelineGranularity
TIMELINE_GRANULARITY_MINUTE: TimelineGranularity
TIMELINE_GRANULARITY_HOUR: TimelineGranularity
TIMELINE_GRANULARITY_DAY: TimelineGranularity
TIMELINE_GRANULARITY_WEEK: TimelineGranularity
TIMELINE_GRANULARITY_MONTH: TimelineGranularity
CONSOLIDATION_STRATEGY_UNSPECIFIED: ConsolidationStrategy
CONSOLIDATION_STRATEGY_FULL: ConsolidationStrategy
CONSOLIDATION_STRATEGY_INCREMENTAL: ConsolidationStrategy
CONSOLIDATION_STRATEGY_SELECTIVE: ConsolidationStrategy
IMPORT_STRATEGY_UNSPECIFIED: ImportStrategy
IMPORT_STRATEGY_MERGE: ImportStrategy
IMPORT_STRATEGY_REPLACE: ImportStrategy
CONFLICT_RESOLUTION_UNSPECIFIED: ConflictResolution
CONFLICT_RESOLUTION_KEEP_EXISTING: ConflictResolution
CONFLICT_RESOLUTION_KEEP_IMPORTED: ConflictResolution
CONFLICT_RESOLUTION_KEEP_NEWER: ConflictResolution
REINDEX_TARGET_UNSPECIFIED: ReindexTarget
REINDEX_TARGET_ALL: ReindexTarget
REINDEX_TARGET_RECORDS: ReindexTarget
REINDEX_TARGET_JOURNAL: ReindexTarget
LIST_FIELD_UNSPECIFIED: ListField
LIST_FIELD_TEXT: ListField
LIST_FIELD_CONTENT: ListField
LIST_FIELD_METADATA: ListField
LIST_FIELD_META: ListField
LIST_FIELD_EMOTION: ListField
LIST_FIELD_FIDELITY: ListField

class CMPHeader(_message.Message):
    __slots__ = ("protocol", "version", "request_id", "timestamp")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    protocol: str
    version: str
    request_id: str
    timestamp: _timestamp_pb2.Timestamp
    def __init__(self, protocol: _Optional[str] = ..., version: _Optional[str] = ..., request_id: _Optional[str] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TemporalRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: _timestamp_pb2.Timestamp
    end: _timestamp_pb2.Timestamp
    def __init__(self, start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ContentBlock(_message.Message):
    __slots__ = ("modality", "format", "data", "embedding", "text", "embedding_f32")
    MODALITY_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_F32_FIELD_NUMBER: _ClassVar[int]
    modality: Modality
    format: str
    data: bytes
    embedding: _containers.RepeatedScalarFieldContainer[float]
    text: str
    embedding_f32: bytes
    def __init__(self, modality: _Optional[_Union[Modality, str]] = ..., format: _Optional[str] = ..., data: _Optional[bytes] = ..., embedding: _Optional[_Iterable[float]] = ..., text: _Optional[str] = ..., embedding_f32: _Optional[bytes] = ...) -> None: ...

class MemoryContent(_message.Message):
    __slots__ = ("blocks", "summary")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    summary: str
    def __init__(self, blocks: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ..., summary: _Optional[str] = ...) -> None: ...

class FidelityState(_message.Message):
    __slots__ = ("score", "noise_level", "decay_rate", "emotional_anchor", "reinforcement_count", "stability", "last_decay_tick")
    SCORE_FIELD_NUMBER: _ClassVar[int]
    NOISE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DECAY_RATE_FIELD_NUMBER: _ClassVar[int]
    EMOTIONAL_ANCHOR_FIELD_NUMBER: _ClassVar[int]
    REINFORCEMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    STABILITY_FIELD_NUMBER: _ClassVar[int]
    LAST_DECAY_TICK_FIELD_NUMBER: _ClassVar[int]
    score: float
    noise_level: float
    decay_rate: float
    emotional_anchor: float
    reinforcement_count: int
    stability: float
    last_decay_tick: _timestamp_pb2.Timestamp
    def __init__(self, score: _Optional[float] = ..., noise_level: _Optional[float] = ..., decay_rate: _Optional[float] = ..., emotional_anchor: _Optional[float] = ..., reinforcement_count: _Optional[int] = ..., stability: _Optional[float] = ..., last_decay_tick: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EmotionVector(_message.Message):
    __slots__ = ("joy", "trust", "fear", "surprise", "sadness", "disgust", "anger", "anticipation", "intensity", "valence")
    JOY_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    FEAR_FIELD_NUMBER: _ClassVar[int]
    SURPRISE_FIELD_NUMBER: _ClassVar[int]
    SADNESS_FIELD_NUMBER: _ClassVar[int]
    DISGUST_FIELD_NUMBER: _ClassVar[int]
    ANGER_FIELD_NUMBER: _ClassVar[int]
    ANTICIPATION_FIELD_NUMBER: _ClassVar[int]
    INTENSITY_FIELD_NUMBER: _ClassVar[int]
    VALENCE_FIELD_NUMBER: _ClassVar[int]
    joy: float
    trust: float
    fear: float
    surprise: float
    sadness: float
    disgust: float
    anger: float
    anticipation: float
    intensity: float
    valence: float
    def __init__(self, joy: _Optional[float] = ..., trust: _Optional[float] = ..., fear: _Optional[float] = ..., surprise: _Optional[float] = ..., sadness: _Optional[float] = ..., disgust: _Optional[float] = ..., anger: _Optional[float] = ..., anticipation: _Optional[float] = ..., intensity: _Optional[float] = ..., valence: _Optional[float] = ...) -> None: ...

class Association(_message.Message):
    __slots__ = ("target_id", "association_type", "weight", "created_at", "last_co_activation")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_CO_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    association_type: AssociationType
    weight: float
    created_at: _timestamp_pb2.Timestamp
    last_co_activation: _timestamp_pb2.Timestamp
    def __init__(self, target_id: _Optional[str] = ..., association_type: _Optional[_Union[AssociationType, str]] = ..., weight: _Optional[float] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_co_activation: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MetaEvidenceRef(_message.Message):
    __slots__ = ("record_id", "raw_record_id", "label", "excerpt", "uri", "confidence")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    raw_record_id: str
    label: str
    excerpt: str
    uri: str
    confidence: float
    def __init__(self, record_id: _Optional[str] = ..., raw_record_id: _Optional[str] = ..., label: _Optional[str] = ..., excerpt: _Optional[str] = ..., uri: _Optional[str] = ..., confidence: _Optional[float] = ...) -> None: ...

class MetaAlternative(_message.Message):
    __slots__ = ("option", "reason", "chosen")
    OPTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_FIELD_NUMBER: _ClassVar[int]
    option: str
    reason: str
    chosen: bool
    def __init__(self, option: _Optional[str] = ..., reason: _Optional[str] = ..., chosen: _Optional[bool] = ...) -> None: ...

class MetaEdge(_message.Message):
    __slots__ = ("source_id", "target_id", "relation", "rationale", "evidence", "confidence", "created_at")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    target_id: str
    relation: MetaRelation
    rationale: str
    evidence: _containers.RepeatedCompositeFieldContainer[MetaEvidenceRef]
    confidence: float
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, source_id: _Optional[str] = ..., target_id: _Optional[str] = ..., relation: _Optional[_Union[MetaRelation, str]] = ..., rationale: _Optional[str] = ..., evidence: _Optional[_Iterable[_Union[MetaEvidenceRef, _Mapping]]] = ..., confidence: _Optional[float] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MetaMemory(_message.Message):
    __slots__ = ("schema_version", "capture_status", "intent", "rationale", "trigger", "goals", "evidence", "assumptions", "alternatives", "decision", "confidence", "source_record_ids", "parent_meta_ids", "context_edges", "tags", "captured_at")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_STATUS_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    GOALS_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    ASSUMPTIONS_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    PARENT_META_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_EDGES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    capture_status: CaptureStatus
    intent: str
    rationale: str
    trigger: str
    goals: _containers.RepeatedScalarFieldContainer[str]
    evidence: _containers.RepeatedCompositeFieldContainer[MetaEvidenceRef]
    assumptions: _containers.RepeatedScalarFieldContainer[str]
    alternatives: _containers.RepeatedCompositeFieldContainer[MetaAlternative]
    decision: str
    confidence: float
    source_record_ids: _containers.RepeatedScalarFieldContainer[str]
    parent_meta_ids: _containers.RepeatedScalarFieldContainer[str]
    context_edges: _containers.RepeatedCompositeFieldContainer[MetaEdge]
    tags: _containers.RepeatedScalarFieldContainer[str]
    captured_at: _timestamp_pb2.Timestamp
    def __init__(self, schema_version: _Optional[int] = ..., capture_status: _Optional[_Union[CaptureStatus, str]] = ..., intent: _Optional[str] = ..., rationale: _Optional[str] = ..., trigger: _Optional[str] = ..., goals: _Optional[_Iterable[str]] = ..., evidence: _Optional[_Iterable[_Union[MetaEvidenceRef, _Mapping]]] = ..., assumptions: _Optional[_Iterable[str]] = ..., alternatives: _Optional[_Iterable[_Union[MetaAlternative, _Mapping]]] = ..., decision: _Optional[str] = ..., confidence: _Optional[float] = ..., source_record_ids: _Optional[_Iterable[str]] = ..., parent_meta_ids: _Optional[_Iterable[str]] = ..., context_edges: _Optional[_Iterable[_Union[MetaEdge, _Mapping]]] = ..., tags: _Optional[_Iterable[str]] = ..., captured_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MemoryRecord(_message.Message):
    __slots__ = ("id", "store", "created_at", "updated_at", "last_accessed_at", "access_count", "content", "fidelity", "emotion", "associations", "metadata", "version", "meta")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ACCESSED_AT_FIELD_NUMBER: _ClassVar[int]
    ACCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    EMOTION_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATIONS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    id: str
    store: StoreType
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    last_accessed_at: _timestamp_pb2.Timestamp
    access_count: int
    content: MemoryContent
    fidelity: FidelityState
    emotion: EmotionVector
    associations: _containers.RepeatedCompositeFieldContainer[Association]
    metadata: _struct_pb2.Struct
    version: int
    meta: MetaMemory
    def __init__(self, id: _Optional[str] = ..., store: _Optional[_Union[StoreType, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_accessed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., access_count: _Optional[int] = ..., content: _Optional[_Union[MemoryContent, _Mapping]] = ..., fidelity: _Optional[_Union[FidelityState, _Mapping]] = ..., emotion: _Optional[_Union[EmotionVector, _Mapping]] = ..., associations: _Optional[_Iterable[_Union[Association, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., version: _Optional[int] = ..., meta: _Optional[_Union[MetaMemory, _Mapping]] = ...) -> None: ...

class RawJournalRecord(_message.Message):
    __slots__ = ("id", "session_id", "turn_id", "topic_id", "source", "speaker", "visibility", "secrecy_level", "created_at", "updated_at", "content", "metadata", "derived_memory_ids", "suppressed", "meta")
    ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    SECRECY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DERIVED_MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    id: str
    session_id: str
    turn_id: str
    topic_id: str
    source: RawSource
    speaker: RawSpeaker
    visibility: RawVisibility
    secrecy_level: SecrecyLevel
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    content: MemoryContent
    metadata: _struct_pb2.Struct
    derived_memory_ids: _containers.RepeatedScalarFieldContainer[str]
    suppressed: bool
    meta: MetaMemory
    def __init__(self, id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., source: _Optional[_Union[RawSource, str]] = ..., speaker: _Optional[_Union[RawSpeaker, str]] = ..., visibility: _Optional[_Union[RawVisibility, str]] = ..., secrecy_level: _Optional[_Union[SecrecyLevel, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., content: _Optional[_Union[MemoryContent, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., derived_memory_ids: _Optional[_Iterable[str]] = ..., suppressed: _Optional[bool] = ..., meta: _Optional[_Union[MetaMemory, _Mapping]] = ...) -> None: ...

class EncodeContext(_message.Message):
    __slots__ = ("source", "session_id", "spatial", "temporal")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SPATIAL_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_FIELD_NUMBER: _ClassVar[int]
    source: str
    session_id: str
    spatial: _struct_pb2.Value
    temporal: _struct_pb2.Value
    def __init__(self, source: _Optional[str] = ..., session_id: _Optional[str] = ..., spatial: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., temporal: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ManualAssociation(_message.Message):
    __slots__ = ("target_id", "association_type", "weight")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    association_type: AssociationType
    weight: float
    def __init__(self, target_id: _Optional[str] = ..., association_type: _Optional[_Union[AssociationType, str]] = ..., weight: _Optional[float] = ...) -> None: ...

class EncodeStoreRequest(_message.Message):
    __slots__ = ("header", "content", "store", "emotion", "context", "metadata", "associations", "meta", "created_at")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    EMOTION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATIONS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    content: MemoryContent
    store: StoreType
    emotion: EmotionVector
    context: EncodeContext
    metadata: _struct_pb2.Struct
    associations: _containers.RepeatedCompositeFieldContainer[ManualAssociation]
    meta: MetaMemory
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., content: _Optional[_Union[MemoryContent, _Mapping]] = ..., store: _Optional[_Union[StoreType, str]] = ..., emotion: _Optional[_Union[EmotionVector, _Mapping]] = ..., context: _Optional[_Union[EncodeContext, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., associations: _Optional[_Iterable[_Union[ManualAssociation, _Mapping]]] = ..., meta: _Optional[_Union[MetaMemory, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EncodeStoreResponse(_message.Message):
    __slots__ = ("record_id", "store", "initial_fidelity", "associations_created")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    INITIAL_FIDELITY_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATIONS_CREATED_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    store: StoreType
    initial_fidelity: float
    associations_created: int
    def __init__(self, record_id: _Optional[str] = ..., store: _Optional[_Union[StoreType, str]] = ..., initial_fidelity: _Optional[float] = ..., associations_created: _Optional[int] = ...) -> None: ...

class EncodeBatchRequest(_message.Message):
    __slots__ = ("header", "records", "infer_associations", "embeddings_f32", "embedding_dim")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    INFER_ASSOCIATIONS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_F32_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIM_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    records: _containers.RepeatedCompositeFieldContainer[EncodeStoreRequest]
    infer_associations: bool
    embeddings_f32: bytes
    embedding_dim: int
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., records: _Optional[_Iterable[_Union[EncodeStoreRequest, _Mapping]]] = ..., infer_associations: _Optional[bool] = ..., embeddings_f32: _Optional[bytes] = ..., embedding_dim: _Optional[int] = ...) -> None: ...

class EncodeBatchResponse(_message.Message):
    __slots__ = ("results", "associations_inferred")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATIONS_INFERRED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EncodeStoreResponse]
    associations_inferred: int
    def __init__(self, results: _Optional[_Iterable[_Union[EncodeStoreResponse, _Mapping]]] = ..., associations_inferred: _Optional[int] = ...) -> None: ...

class EncodeUpdateRequest(_message.Message):
    __slots__ = ("header", "record_id", "content", "emotion", "metadata", "meta", "store")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EMOTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    record_id: str
    content: MemoryContent
    emotion: EmotionVector
    metadata: _struct_pb2.Struct
    meta: MetaMemory
    store: StoreType
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., record_id: _Optional[str] = ..., content: _Optional[_Union[MemoryContent, _Mapping]] = ..., emotion: _Optional[_Union[EmotionVector, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., meta: _Optional[_Union[MetaMemory, _Mapping]] = ..., store: _Optional[_Union[StoreType, str]] = ...) -> None: ...

class EncodeStoreRawRequest(_message.Message):
    __slots__ = ("header", "session_id", "turn_id", "topic_id", "source", "speaker", "visibility", "secrecy_level", "content", "metadata", "meta", "created_at")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    SECRECY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    session_id: str
    turn_id: str
    topic_id: str
    source: RawSource
    speaker: RawSpeaker
    visibility: RawVisibility
    secrecy_level: SecrecyLevel
    content: MemoryContent
    metadata: _struct_pb2.Struct
    meta: MetaMemory
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., source: _Optional[_Union[RawSource, str]] = ..., speaker: _Optional[_Union[RawSpeaker, str]] = ..., visibility: _Optional[_Union[RawVisibility, str]] = ..., secrecy_level: _Optional[_Union[SecrecyLevel, str]] = ..., content: _Optional[_Union[MemoryContent, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., meta: _Optional[_Union[MetaMemory, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EncodeUpdateRawRequest(_message.Message):
    __slots__ = ("header", "record_id", "suppressed", "visibility", "secrecy_level")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    SECRECY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    record_id: str
    suppressed: bool
    visibility: RawVisibility
    secrecy_level: SecrecyLevel
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., record_id: _Optional[str] = ..., suppressed: _Optional[bool] = ..., visibility: _Optional[_Union[RawVisibility, str]] = ..., secrecy_level: _Optional[_Union[SecrecyLevel, str]] = ...) -> None: ...

class EncodeStoreRawResponse(_message.Message):
    __slots__ = ("record_id", "session_id", "visibility", "secrecy_level")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    SECRECY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    session_id: str
    visibility: RawVisibility
    secrecy_level: SecrecyLevel
    def __init__(self, record_id: _Optional[str] = ..., session_id: _Optional[str] = ..., visibility: _Optional[_Union[RawVisibility, str]] = ..., secrecy_level: _Optional[_Union[SecrecyLevel, str]] = ...) -> None: ...

class EncodeBatchRawRequest(_message.Message):
    __slots__ = ("header", "records")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    records: _containers.RepeatedCompositeFieldContainer[EncodeStoreRawRequest]
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., records: _Optional[_Iterable[_Union[EncodeStoreRawRequest, _Mapping]]] = ...) -> None: ...

class EncodeBatchRawResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EncodeStoreRawResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[EncodeStoreRawResponse, _Mapping]]] = ...) -> None: ...

class RecallCue(_message.Message):
    __slots__ = ("text", "image", "audio", "emotion", "temporal", "spatial", "semantic", "embedding")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    EMOTION_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_FIELD_NUMBER: _ClassVar[int]
    SPATIAL_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: bytes
    audio: bytes
    emotion: EmotionVector
    temporal: TemporalRange
    spatial: _struct_pb2.Value
    semantic: _struct_pb2.Value
    embedding: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, text: _Optional[str] = ..., image: _Optional[bytes] = ..., audio: _Optional[bytes] = ..., emotion: _Optional[_Union[EmotionVector, _Mapping]] = ..., temporal: _Optional[_Union[TemporalRange, _Mapping]] = ..., spatial: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., semantic: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., embedding: _Optional[_Iterable[float]] = ...) -> None: ...

class RecallQueryRequest(_message.Message):
    __slots__ = ("header", "cue", "stores", "limit", "min_fidelity", "include_decayed", "reconsolidate", "activation_depth", "recall_mode")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CUE_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MIN_FIDELITY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DECAYED_FIELD_NUMBER: _ClassVar[int]
    RECONSOLIDATE_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_DEPTH_FIELD_NUMBER: _ClassVar[int]
    RECALL_MODE_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    cue: RecallCue
    stores: _containers.RepeatedScalarFieldContainer[StoreType]
    limit: int
    min_fidelity: float
    include_decayed: bool
    reconsolidate: bool
    activation_depth: int
    recall_mode: RecallMode
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., cue: _Optional[_Union[RecallCue, _Mapping]] = ..., stores: _Optional[_Iterable[_Union[StoreType, str]]] = ..., limit: _Optional[int] = ..., min_fidelity: _Optional[float] = ..., include_decayed: _Optional[bool] = ..., reconsolidate: _Optional[bool] = ..., activation_depth: _Optional[int] = ..., recall_mode: _Optional[_Union[RecallMode, str]] = ...) -> None: ...

class ScoreBreakdown(_message.Message):
    __slots__ = ("text", "text_rank", "vector", "vector_rank", "fused", "activation", "fidelity", "recency", "emotion")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_RANK_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    VECTOR_RANK_FIELD_NUMBER: _ClassVar[int]
    FUSED_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    RECENCY_FIELD_NUMBER: _ClassVar[int]
    EMOTION_FIELD_NUMBER: _ClassVar[int]
    text: float
    text_rank: int
    vector: float
    vector_rank: int
    fused: float
    activation: float
    fidelity: float
    recency: float
    emotion: float
    def __init__(self, text: _Optional[float] = ..., text_rank: _Optional[int] = ..., vector: _Optional[float] = ..., vector_rank: _Optional[int] = ..., fused: _Optional[float] = ..., activation: _Optional[float] = ..., fidelity: _Optional[float] = ..., recency: _Optional[float] = ..., emotion: _Optional[float] = ...) -> None: ...

class RecalledMemory(_message.Message):
    __slots__ = ("record", "relevance_score", "activation_path", "rendered_content", "score_breakdown")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_PATH_FIELD_NUMBER: _ClassVar[int]
    RENDERED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    record: MemoryRecord
    relevance_score: float
    activation_path: _containers.RepeatedScalarFieldContainer[str]
    rendered_content: MemoryContent
    score_breakdown: ScoreBreakdown
    def __init__(self, record: _Optional[_Union[MemoryRecord, _Mapping]] = ..., relevance_score: _Optional[float] = ..., activation_path: _Optional[_Iterable[str]] = ..., rendered_content: _Optional[_Union[MemoryContent, _Mapping]] = ..., score_breakdown: _Optional[_Union[ScoreBreakdown, _Mapping]] = ...) -> None: ...

class QueryMetadata(_message.Message):
    __slots__ = ("total_records_scanned", "stores_searched", "fidelity_filtered", "signals", "fusion", "semantic_search", "semantic_off_reason", "embedding_ms")
    TOTAL_RECORDS_SCANNED_FIELD_NUMBER: _ClassVar[int]
    STORES_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FILTERED_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_SEARCH_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_OFF_REASON_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MS_FIELD_NUMBER: _ClassVar[int]
    total_records_scanned: int
    stores_searched: _containers.RepeatedScalarFieldContainer[StoreType]
    fidelity_filtered: int
    signals: _containers.RepeatedScalarFieldContainer[str]
    fusion: str
    semantic_search: bool
    semantic_off_reason: str
    embedding_ms: float
    def __init__(self, total_records_scanned: _Optional[int] = ..., stores_searched: _Optional[_Iterable[_Union[StoreType, str]]] = ..., fidelity_filtered: _Optional[int] = ..., signals: _Optional[_Iterable[str]] = ..., fusion: _Optional[str] = ..., semantic_search: _Optional[bool] = ..., semantic_off_reason: _Optional[str] = ..., embedding_ms: _Optional[float] = ...) -> None: ...

class ActivationNode(_message.Message):
    __slots__ = ("record_id", "activation_level", "hop", "edge_type")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    activation_level: float
    hop: int
    edge_type: AssociationType
    def __init__(self, record_id: _Optional[str] = ..., activation_level: _Optional[float] = ..., hop: _Optional[int] = ..., edge_type: _Optional[_Union[AssociationType, str]] = ...) -> None: ...

class ActivationTrace(_message.Message):
    __slots__ = ("source_id", "activations", "gains")
    class GainsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    GAINS_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    activations: _containers.RepeatedCompositeFieldContainer[ActivationNode]
    gains: _containers.ScalarMap[str, float]
    def __init__(self, source_id: _Optional[str] = ..., activations: _Optional[_Iterable[_Union[ActivationNode, _Mapping]]] = ..., gains: _Optional[_Mapping[str, float]] = ...) -> None: ...

class RecallQueryResponse(_message.Message):
    __slots__ = ("memories", "total_candidates", "query_metadata", "undecodable_ids", "activation_trace")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    QUERY_METADATA_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_IDS_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_TRACE_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[RecalledMemory]
    total_candidates: int
    query_metadata: QueryMetadata
    undecodable_ids: _containers.RepeatedScalarFieldContainer[str]
    activation_trace: ActivationTrace
    def __init__(self, memories: _Optional[_Iterable[_Union[RecalledMemory, _Mapping]]] = ..., total_candidates: _Optional[int] = ..., query_metadata: _Optional[_Union[QueryMetadata, _Mapping]] = ..., undecodable_ids: _Optional[_Iterable[str]] = ..., activation_trace: _Optional[_Union[ActivationTrace, _Mapping]] = ...) -> None: ...

class RecallAssociateRequest(_message.Message):
    __slots__ = ("header", "record_id", "association_types", "depth", "min_weight", "limit")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATION_TYPES_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    MIN_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    record_id: str
    association_types: _containers.RepeatedScalarFieldContainer[AssociationType]
    depth: int
    min_weight: float
    limit: int
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., record_id: _Optional[str] = ..., association_types: _Optional[_Iterable[_Union[AssociationType, str]]] = ..., depth: _Optional[int] = ..., min_weight: _Optional[float] = ..., limit: _Optional[int] = ...) -> None: ...

class RecallAssociateResponse(_message.Message):
    __slots__ = ("memories", "total_candidates", "undecodable_ids")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_IDS_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[RecalledMemory]
    total_candidates: int
    undecodable_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, memories: _Optional[_Iterable[_Union[RecalledMemory, _Mapping]]] = ..., total_candidates: _Optional[int] = ..., undecodable_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RecallTimelineRequest(_message.Message):
    __slots__ = ("header", "range", "granularity", "min_fidelity", "emotion_filter", "stores", "limit_per_bucket")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    MIN_FIDELITY_FIELD_NUMBER: _ClassVar[int]
    EMOTION_FILTER_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_PER_BUCKET_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    range: TemporalRange
    granularity: TimelineGranularity
    min_fidelity: float
    emotion_filter: EmotionVector
    stores: _containers.RepeatedScalarFieldContainer[StoreType]
    limit_per_bucket: int
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., range: _Optional[_Union[TemporalRange, _Mapping]] = ..., granularity: _Optional[_Union[TimelineGranularity, str]] = ..., min_fidelity: _Optional[float] = ..., emotion_filter: _Optional[_Union[EmotionVector, _Mapping]] = ..., stores: _Optional[_Iterable[_Union[StoreType, str]]] = ..., limit_per_bucket: _Optional[int] = ...) -> None: ...

class TimelineBucket(_message.Message):
    __slots__ = ("start", "end", "memories", "count")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    start: _timestamp_pb2.Timestamp
    end: _timestamp_pb2.Timestamp
    memories: _containers.RepeatedCompositeFieldContainer[RecalledMemory]
    count: int
    def __init__(self, start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., memories: _Optional[_Iterable[_Union[RecalledMemory, _Mapping]]] = ..., count: _Optional[int] = ...) -> None: ...

class RecallTimelineResponse(_message.Message):
    __slots__ = ("buckets", "undecodable_ids")
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_IDS_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedCompositeFieldContainer[TimelineBucket]
    undecodable_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, buckets: _Optional[_Iterable[_Union[TimelineBucket, _Mapping]]] = ..., undecodable_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RecallGraphRequest(_message.Message):
    __slots__ = ("header", "center_id", "depth", "edge_types", "limit_nodes", "include_meta")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CENTER_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_NODES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_META_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    center_id: str
    depth: int
    edge_types: _containers.RepeatedScalarFieldContainer[AssociationType]
    limit_nodes: int
    include_meta: bool
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., center_id: _Optional[str] = ..., depth: _Optional[int] = ..., edge_types: _Optional[_Iterable[_Union[AssociationType, str]]] = ..., limit_nodes: _Optional[int] = ..., include_meta: _Optional[bool] = ...) -> None: ...

class GraphNode(_message.Message):
    __slots__ = ("id", "store", "summary", "fidelity", "meta")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    id: str
    store: StoreType
    summary: str
    fidelity: float
    meta: MetaMemory
    def __init__(self, id: _Optional[str] = ..., store: _Optional[_Union[StoreType, str]] = ..., summary: _Optional[str] = ..., fidelity: _Optional[float] = ..., meta: _Optional[_Union[MetaMemory, _Mapping]] = ...) -> None: ...

class GraphEdge(_message.Message):
    __slots__ = ("source", "target", "edge_type", "weight")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    edge_type: AssociationType
    weight: float
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., edge_type: _Optional[_Union[AssociationType, str]] = ..., weight: _Optional[float] = ...) -> None: ...

class RecallGraphResponse(_message.Message):
    __slots__ = ("nodes", "edges", "total_nodes", "meta_edges", "undecodable_ids")
    NODES_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NODES_FIELD_NUMBER: _ClassVar[int]
    META_EDGES_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_IDS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[GraphNode]
    edges: _containers.RepeatedCompositeFieldContainer[GraphEdge]
    total_nodes: int
    meta_edges: _containers.RepeatedCompositeFieldContainer[MetaEdge]
    undecodable_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, nodes: _Optional[_Iterable[_Union[GraphNode, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[GraphEdge, _Mapping]]] = ..., total_nodes: _Optional[int] = ..., meta_edges: _Optional[_Iterable[_Union[MetaEdge, _Mapping]]] = ..., undecodable_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RecallRawQueryRequest(_message.Message):
    __slots__ = ("header", "session_id", "query", "record_ids", "temporal", "limit", "include_private_scratch", "include_sealed", "secrecy_levels", "derived_memory_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVATE_SCRATCH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SEALED_FIELD_NUMBER: _ClassVar[int]
    SECRECY_LEVELS_FIELD_NUMBER: _ClassVar[int]
    DERIVED_MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    session_id: str
    query: str
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    temporal: TemporalRange
    limit: int
    include_private_scratch: bool
    include_sealed: bool
    secrecy_levels: _containers.RepeatedScalarFieldContainer[SecrecyLevel]
    derived_memory_id: str
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., session_id: _Optional[str] = ..., query: _Optional[str] = ..., record_ids: _Optional[_Iterable[str]] = ..., temporal: _Optional[_Union[TemporalRange, _Mapping]] = ..., limit: _Optional[int] = ..., include_private_scratch: _Optional[bool] = ..., include_sealed: _Optional[bool] = ..., secrecy_levels: _Optional[_Iterable[_Union[SecrecyLevel, str]]] = ..., derived_memory_id: _Optional[str] = ...) -> None: ...

class RecallRawQueryResponse(_message.Message):
    __slots__ = ("records", "total_candidates", "undecodable_ids")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_IDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[RawJournalRecord]
    total_candidates: int
    undecodable_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, records: _Optional[_Iterable[_Union[RawJournalRecord, _Mapping]]] = ..., total_candidates: _Optional[int] = ..., undecodable_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RecallSessionsRequest(_message.Message):
    __slots__ = ("header", "agent", "workspace", "cursor", "limit", "include_private_scratch", "include_sealed", "secrecy_levels")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVATE_SCRATCH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SEALED_FIELD_NUMBER: _ClassVar[int]
    SECRECY_LEVELS_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    agent: str
    workspace: str
    cursor: str
    limit: int
    include_private_scratch: bool
    include_sealed: bool
    secrecy_levels: _containers.RepeatedScalarFieldContainer[SecrecyLevel]
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., agent: _Optional[str] = ..., workspace: _Optional[str] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ..., include_private_scratch: _Optional[bool] = ..., include_sealed: _Optional[bool] = ..., secrecy_levels: _Optional[_Iterable[_Union[SecrecyLevel, str]]] = ...) -> None: ...

class JournalSession(_message.Message):
    __slots__ = ("session_id", "agent", "workspace", "turns", "dreamed", "first_at", "last_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    DREAMED_FIELD_NUMBER: _ClassVar[int]
    FIRST_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent: str
    workspace: str
    turns: int
    dreamed: int
    first_at: _timestamp_pb2.Timestamp
    last_at: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., agent: _Optional[str] = ..., workspace: _Optional[str] = ..., turns: _Optional[int] = ..., dreamed: _Optional[int] = ..., first_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RecallSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_cursor", "total_sessions")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[JournalSession]
    next_cursor: str
    total_sessions: int
    def __init__(self, sessions: _Optional[_Iterable[_Union[JournalSession, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., total_sessions: _Optional[int] = ...) -> None: ...

class RecallListRequest(_message.Message):
    __slots__ = ("header", "store", "metadata", "fields", "cursor", "limit", "similar_to")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SIMILAR_TO_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    store: StoreType
    metadata: _struct_pb2.Struct
    fields: _containers.RepeatedScalarFieldContainer[ListField]
    cursor: str
    limit: int
    similar_to: str
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., store: _Optional[_Union[StoreType, str]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., fields: _Optional[_Iterable[_Union[ListField, str]]] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ..., similar_to: _Optional[str] = ...) -> None: ...

class ListedRecord(_message.Message):
    __slots__ = ("id", "store", "created_at", "updated_at", "text", "content", "metadata", "meta", "emotion", "fidelity")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    EMOTION_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    id: str
    store: StoreType
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    text: str
    content: MemoryContent
    metadata: _struct_pb2.Struct
    meta: MetaMemory
    emotion: EmotionVector
    fidelity: float
    def __init__(self, id: _Optional[str] = ..., store: _Optional[_Union[StoreType, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., text: _Optional[str] = ..., content: _Optional[_Union[MemoryContent, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., meta: _Optional[_Union[MetaMemory, _Mapping]] = ..., emotion: _Optional[_Union[EmotionVector, _Mapping]] = ..., fidelity: _Optional[float] = ...) -> None: ...

class RecallListResponse(_message.Message):
    __slots__ = ("records", "next_cursor", "total_scanned", "similarity", "semantic_search", "semantic_off_reason", "undecodable_ids")
    class SimilarityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SCANNED_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_SEARCH_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_OFF_REASON_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_IDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[ListedRecord]
    next_cursor: str
    total_scanned: int
    similarity: _containers.ScalarMap[str, float]
    semantic_search: bool
    semantic_off_reason: str
    undecodable_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, records: _Optional[_Iterable[_Union[ListedRecord, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., total_scanned: _Optional[int] = ..., similarity: _Optional[_Mapping[str, float]] = ..., semantic_search: _Optional[bool] = ..., semantic_off_reason: _Optional[str] = ..., undecodable_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ConsolidateRequest(_message.Message):
    __slots__ = ("header", "strategy", "min_age_hours", "min_access_count", "dry_run")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    MIN_AGE_HOURS_FIELD_NUMBER: _ClassVar[int]
    MIN_ACCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    strategy: ConsolidationStrategy
    min_age_hours: float
    min_access_count: int
    dry_run: bool
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., strategy: _Optional[_Union[ConsolidationStrategy, str]] = ..., min_age_hours: _Optional[float] = ..., min_access_count: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ConsolidationMerge(_message.Message):
    __slots__ = ("dropped_id", "kept_id", "similarity")
    DROPPED_ID_FIELD_NUMBER: _ClassVar[int]
    KEPT_ID_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    dropped_id: str
    kept_id: str
    similarity: float
    def __init__(self, dropped_id: _Optional[str] = ..., kept_id: _Optional[str] = ..., similarity: _Optional[float] = ...) -> None: ...

class ConsolidationPromotion(_message.Message):
    __slots__ = ("episodic_id", "semantic_id", "summary")
    EPISODIC_ID_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    episodic_id: str
    semantic_id: str
    summary: str
    def __init__(self, episodic_id: _Optional[str] = ..., semantic_id: _Optional[str] = ..., summary: _Optional[str] = ...) -> None: ...

class ConsolidateResponse(_message.Message):
    __slots__ = ("records_processed", "records_migrated", "records_compressed", "records_pruned", "semantic_nodes_created", "dry_run", "strategy", "merges", "promotions")
    RECORDS_PROCESSED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_MIGRATED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_COMPRESSED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PRUNED_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_NODES_CREATED_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    MERGES_FIELD_NUMBER: _ClassVar[int]
    PROMOTIONS_FIELD_NUMBER: _ClassVar[int]
    records_processed: int
    records_migrated: int
    records_compressed: int
    records_pruned: int
    semantic_nodes_created: int
    dry_run: bool
    strategy: ConsolidationStrategy
    merges: _containers.RepeatedCompositeFieldContainer[ConsolidationMerge]
    promotions: _containers.RepeatedCompositeFieldContainer[ConsolidationPromotion]
    def __init__(self, records_processed: _Optional[int] = ..., records_migrated: _Optional[int] = ..., records_compressed: _Optional[int] = ..., records_pruned: _Optional[int] = ..., semantic_nodes_created: _Optional[int] = ..., dry_run: _Optional[bool] = ..., strategy: _Optional[_Union[ConsolidationStrategy, str]] = ..., merges: _Optional[_Iterable[_Union[ConsolidationMerge, _Mapping]]] = ..., promotions: _Optional[_Iterable[_Union[ConsolidationPromotion, _Mapping]]] = ...) -> None: ...

class DecayTickRequest(_message.Message):
    __slots__ = ("header", "tick_duration_seconds")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TICK_DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    tick_duration_seconds: int
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., tick_duration_seconds: _Optional[int] = ...) -> None: ...

class DecayTickResponse(_message.Message):
    __slots__ = ("records_updated", "records_below_threshold", "records_pruned", "records_forgotten")
    RECORDS_UPDATED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_BELOW_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PRUNED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    records_updated: int
    records_below_threshold: int
    records_pruned: int
    records_forgotten: int
    def __init__(self, records_updated: _Optional[int] = ..., records_below_threshold: _Optional[int] = ..., records_pruned: _Optional[int] = ..., records_forgotten: _Optional[int] = ...) -> None: ...

class DreamTickRequest(_message.Message):
    __slots__ = ("header", "session_id", "dry_run", "max_groups", "include_private_scratch", "include_sealed", "promote_semantic", "secrecy_levels")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    MAX_GROUPS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVATE_SCRATCH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SEALED_FIELD_NUMBER: _ClassVar[int]
    PROMOTE_SEMANTIC_FIELD_NUMBER: _ClassVar[int]
    SECRECY_LEVELS_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    session_id: str
    dry_run: bool
    max_groups: int
    include_private_scratch: bool
    include_sealed: bool
    promote_semantic: bool
    secrecy_levels: _containers.RepeatedScalarFieldContainer[SecrecyLevel]
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., session_id: _Optional[str] = ..., dry_run: _Optional[bool] = ..., max_groups: _Optional[int] = ..., include_private_scratch: _Optional[bool] = ..., include_sealed: _Optional[bool] = ..., promote_semantic: _Optional[bool] = ..., secrecy_levels: _Optional[_Iterable[_Union[SecrecyLevel, str]]] = ...) -> None: ...

class DreamGroupReport(_message.Message):
    __slots__ = ("session_id", "topic_id", "topic_hint", "topic_inferred", "range_start", "range_end", "raw_record_count", "normal_records", "private_scratch_redacted", "sealed_redacted", "secret_redacted", "redacted_total", "summariser", "llm_fallback_reason", "headline", "episodic_summary_id", "semantic_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_HINT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_INFERRED_FIELD_NUMBER: _ClassVar[int]
    RANGE_START_FIELD_NUMBER: _ClassVar[int]
    RANGE_END_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    NORMAL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_SCRATCH_REDACTED_FIELD_NUMBER: _ClassVar[int]
    SEALED_REDACTED_FIELD_NUMBER: _ClassVar[int]
    SECRET_REDACTED_FIELD_NUMBER: _ClassVar[int]
    REDACTED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUMMARISER_FIELD_NUMBER: _ClassVar[int]
    LLM_FALLBACK_REASON_FIELD_NUMBER: _ClassVar[int]
    HEADLINE_FIELD_NUMBER: _ClassVar[int]
    EPISODIC_SUMMARY_ID_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    topic_id: str
    topic_hint: str
    topic_inferred: bool
    range_start: _timestamp_pb2.Timestamp
    range_end: _timestamp_pb2.Timestamp
    raw_record_count: int
    normal_records: int
    private_scratch_redacted: int
    sealed_redacted: int
    secret_redacted: int
    redacted_total: int
    summariser: str
    llm_fallback_reason: str
    headline: str
    episodic_summary_id: str
    semantic_id: str
    def __init__(self, session_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., topic_hint: _Optional[str] = ..., topic_inferred: _Optional[bool] = ..., range_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., range_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., raw_record_count: _Optional[int] = ..., normal_records: _Optional[int] = ..., private_scratch_redacted: _Optional[int] = ..., sealed_redacted: _Optional[int] = ..., secret_redacted: _Optional[int] = ..., redacted_total: _Optional[int] = ..., summariser: _Optional[str] = ..., llm_fallback_reason: _Optional[str] = ..., headline: _Optional[str] = ..., episodic_summary_id: _Optional[str] = ..., semantic_id: _Optional[str] = ...) -> None: ...

class DreamGroupFailure(_message.Message):
    __slots__ = ("session_id", "topic_hint", "first_raw_record_id", "raw_record_count", "code", "reason", "failed_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_HINT_FIELD_NUMBER: _ClassVar[int]
    FIRST_RAW_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    topic_hint: str
    first_raw_record_id: str
    raw_record_count: int
    code: str
    reason: str
    failed_at: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., topic_hint: _Optional[str] = ..., first_raw_record_id: _Optional[str] = ..., raw_record_count: _Optional[int] = ..., code: _Optional[str] = ..., reason: _Optional[str] = ..., failed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DreamTickResponse(_message.Message):
    __slots__ = ("groups_processed", "raw_records_processed", "episodic_summaries_created", "semantic_nodes_created", "dry_run", "groups_pending", "llm_fallbacks", "groups", "groups_failed", "groups_skipped")
    GROUPS_PROCESSED_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_PROCESSED_FIELD_NUMBER: _ClassVar[int]
    EPISODIC_SUMMARIES_CREATED_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_NODES_CREATED_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    GROUPS_PENDING_FIELD_NUMBER: _ClassVar[int]
    LLM_FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FAILED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    groups_processed: int
    raw_records_processed: int
    episodic_summaries_created: int
    semantic_nodes_created: int
    dry_run: bool
    groups_pending: int
    llm_fallbacks: int
    groups: _containers.RepeatedCompositeFieldContainer[DreamGroupReport]
    groups_failed: _containers.RepeatedCompositeFieldContainer[DreamGroupFailure]
    groups_skipped: int
    def __init__(self, groups_processed: _Optional[int] = ..., raw_records_processed: _Optional[int] = ..., episodic_summaries_created: _Optional[int] = ..., semantic_nodes_created: _Optional[int] = ..., dry_run: _Optional[bool] = ..., groups_pending: _Optional[int] = ..., llm_fallbacks: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[DreamGroupReport, _Mapping]]] = ..., groups_failed: _Optional[_Iterable[_Union[DreamGroupFailure, _Mapping]]] = ..., groups_skipped: _Optional[int] = ...) -> None: ...

class SetModeRequest(_message.Message):
    __slots__ = ("header", "mode", "scope")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    mode: RecallMode
    scope: _containers.RepeatedScalarFieldContainer[StoreType]
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., mode: _Optional[_Union[RecallMode, str]] = ..., scope: _Optional[_Iterable[_Union[StoreType, str]]] = ...) -> None: ...

class ForgetRequest(_message.Message):
    __slots__ = ("header", "record_ids", "store", "temporal_range", "cascade", "confirm")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_RANGE_FIELD_NUMBER: _ClassVar[int]
    CASCADE_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    store: StoreType
    temporal_range: TemporalRange
    cascade: bool
    confirm: bool
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., record_ids: _Optional[_Iterable[str]] = ..., store: _Optional[_Union[StoreType, str]] = ..., temporal_range: _Optional[_Union[TemporalRange, _Mapping]] = ..., cascade: _Optional[bool] = ..., confirm: _Optional[bool] = ...) -> None: ...

class ForgetResponse(_message.Message):
    __slots__ = ("records_deleted",)
    RECORDS_DELETED_FIELD_NUMBER: _ClassVar[int]
    records_deleted: int
    def __init__(self, records_deleted: _Optional[int] = ...) -> None: ...

class ReinforceRequest(_message.Message):
    __slots__ = ("header", "record_ids")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., record_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ReinforceResponse(_message.Message):
    __slots__ = ("records_reinforced",)
    RECORDS_REINFORCED_FIELD_NUMBER: _ClassVar[int]
    records_reinforced: int
    def __init__(self, records_reinforced: _Optional[int] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("header", "format", "stores", "include_raw_journal", "encrypt", "encryption_key")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_RAW_JOURNAL_FIELD_NUMBER: _ClassVar[int]
    ENCRYPT_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTION_KEY_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    format: str
    stores: _containers.RepeatedScalarFieldContainer[StoreType]
    include_raw_journal: bool
    encrypt: bool
    encryption_key: str
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., format: _Optional[str] = ..., stores: _Optional[_Iterable[_Union[StoreType, str]]] = ..., include_raw_journal: _Optional[bool] = ..., encrypt: _Optional[bool] = ..., encryption_key: _Optional[str] = ...) -> None: ...

class ExportResponse(_message.Message):
    __slots__ = ("archive_id", "size_bytes", "record_count", "checksum", "archive_data", "raw_record_count", "undecodable_ids")
    ARCHIVE_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_DATA_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_IDS_FIELD_NUMBER: _ClassVar[int]
    archive_id: str
    size_bytes: int
    record_count: int
    checksum: str
    archive_data: bytes
    raw_record_count: int
    undecodable_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, archive_id: _Optional[str] = ..., size_bytes: _Optional[int] = ..., record_count: _Optional[int] = ..., checksum: _Optional[str] = ..., archive_data: _Optional[bytes] = ..., raw_record_count: _Optional[int] = ..., undecodable_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ExportChunk(_message.Message):
    __slots__ = ("data", "is_last", "metadata")
    DATA_FIELD_NUMBER: _ClassVar[int]
    IS_LAST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    is_last: bool
    metadata: ExportResponse
    def __init__(self, data: _Optional[bytes] = ..., is_last: _Optional[bool] = ..., metadata: _Optional[_Union[ExportResponse, _Mapping]] = ...) -> None: ...

class ImportRequest(_message.Message):
    __slots__ = ("header", "archive_id", "strategy", "conflict_resolution", "decryption_key", "archive_data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_ID_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    DECRYPTION_KEY_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_DATA_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    archive_id: str
    strategy: ImportStrategy
    conflict_resolution: ConflictResolution
    decryption_key: str
    archive_data: bytes
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., archive_id: _Optional[str] = ..., strategy: _Optional[_Union[ImportStrategy, str]] = ..., conflict_resolution: _Optional[_Union[ConflictResolution, str]] = ..., decryption_key: _Optional[str] = ..., archive_data: _Optional[bytes] = ...) -> None: ...

class ImportChunk(_message.Message):
    __slots__ = ("data", "request")
    DATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    request: ImportRequest
    def __init__(self, data: _Optional[bytes] = ..., request: _Optional[_Union[ImportRequest, _Mapping]] = ...) -> None: ...

class ImportResponse(_message.Message):
    __slots__ = ("records_imported", "raw_records_imported", "records_skipped")
    RECORDS_IMPORTED_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_IMPORTED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    records_imported: int
    raw_records_imported: int
    records_skipped: int
    def __init__(self, records_imported: _Optional[int] = ..., raw_records_imported: _Optional[int] = ..., records_skipped: _Optional[int] = ...) -> None: ...

class ReindexRequest(_message.Message):
    __slots__ = ("header", "target")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    target: ReindexTarget
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., target: _Optional[_Union[ReindexTarget, str]] = ...) -> None: ...

class ReindexResponse(_message.Message):
    __slots__ = ("records", "journal")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    records: int
    journal: int
    def __init__(self, records: _Optional[int] = ..., journal: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("total_records", "records_by_store", "total_associations", "avg_fidelity", "avg_fidelity_by_store", "oldest_record", "newest_record", "total_recall_count", "raw_journal_records", "raw_journal_pending_dream", "vector_index_records", "vector_search_backend", "embedder", "semantic_search", "semantic_off_reason", "working_capacity", "recall_mode", "dream_episodic_summaries", "dream_semantic_nodes", "last_dream_tick_at", "evolution_metrics", "background_decay_enabled", "background_dream_enabled", "data_dir", "undecodable_records", "write_commits", "writes_committed")
    class RecordsByStoreEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class AvgFidelityByStoreEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TOTAL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_BY_STORE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ASSOCIATIONS_FIELD_NUMBER: _ClassVar[int]
    AVG_FIDELITY_FIELD_NUMBER: _ClassVar[int]
    AVG_FIDELITY_BY_STORE_FIELD_NUMBER: _ClassVar[int]
    OLDEST_RECORD_FIELD_NUMBER: _ClassVar[int]
    NEWEST_RECORD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RECALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    RAW_JOURNAL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    RAW_JOURNAL_PENDING_DREAM_FIELD_NUMBER: _ClassVar[int]
    VECTOR_INDEX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SEARCH_BACKEND_FIELD_NUMBER: _ClassVar[int]
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_SEARCH_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_OFF_REASON_FIELD_NUMBER: _ClassVar[int]
    WORKING_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RECALL_MODE_FIELD_NUMBER: _ClassVar[int]
    DREAM_EPISODIC_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    DREAM_SEMANTIC_NODES_FIELD_NUMBER: _ClassVar[int]
    LAST_DREAM_TICK_AT_FIELD_NUMBER: _ClassVar[int]
    EVOLUTION_METRICS_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_DECAY_ENABLED_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_DREAM_ENABLED_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    UNDECODABLE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    WRITE_COMMITS_FIELD_NUMBER: _ClassVar[int]
    WRITES_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    total_records: int
    records_by_store: _containers.ScalarMap[str, int]
    total_associations: int
    avg_fidelity: float
    avg_fidelity_by_store: _containers.ScalarMap[str, float]
    oldest_record: _timestamp_pb2.Timestamp
    newest_record: _timestamp_pb2.Timestamp
    total_recall_count: int
    raw_journal_records: int
    raw_journal_pending_dream: int
    vector_index_records: int
    vector_search_backend: str
    embedder: str
    semantic_search: bool
    semantic_off_reason: str
    working_capacity: int
    recall_mode: RecallMode
    dream_episodic_summaries: int
    dream_semantic_nodes: int
    last_dream_tick_at: _timestamp_pb2.Timestamp
    evolution_metrics: EvolutionMetrics
    background_decay_enabled: bool
    background_dream_enabled: bool
    data_dir: str
    undecodable_records: int
    write_commits: int
    writes_committed: int
    def __init__(self, total_records: _Optional[int] = ..., records_by_store: _Optional[_Mapping[str, int]] = ..., total_associations: _Optional[int] = ..., avg_fidelity: _Optional[float] = ..., avg_fidelity_by_store: _Optional[_Mapping[str, float]] = ..., oldest_record: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., newest_record: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., total_recall_count: _Optional[int] = ..., raw_journal_records: _Optional[int] = ..., raw_journal_pending_dream: _Optional[int] = ..., vector_index_records: _Optional[int] = ..., vector_search_backend: _Optional[str] = ..., embedder: _Optional[str] = ..., semantic_search: _Optional[bool] = ..., semantic_off_reason: _Optional[str] = ..., working_capacity: _Optional[int] = ..., recall_mode: _Optional[_Union[RecallMode, str]] = ..., dream_episodic_summaries: _Optional[int] = ..., dream_semantic_nodes: _Optional[int] = ..., last_dream_tick_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., evolution_metrics: _Optional[_Union[EvolutionMetrics, _Mapping]] = ..., background_decay_enabled: _Optional[bool] = ..., background_dream_enabled: _Optional[bool] = ..., data_dir: _Optional[str] = ..., undecodable_records: _Optional[int] = ..., write_commits: _Optional[int] = ..., writes_committed: _Optional[int] = ...) -> None: ...

class StoreHistogram(_message.Message):
    __slots__ = ("store", "counts")
    STORE_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    store: StoreType
    counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, store: _Optional[_Union[StoreType, str]] = ..., counts: _Optional[_Iterable[int]] = ...) -> None: ...

class EvolutionMetrics(_message.Message):
    __slots__ = ("frozen", "fidelity_histograms", "recall_hit_rates", "recall_hit_samples", "adjustments", "last_adapted_at")
    class RecallHitRatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class RecallHitSamplesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_HISTOGRAMS_FIELD_NUMBER: _ClassVar[int]
    RECALL_HIT_RATES_FIELD_NUMBER: _ClassVar[int]
    RECALL_HIT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ADJUSTMENTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ADAPTED_AT_FIELD_NUMBER: _ClassVar[int]
    frozen: bool
    fidelity_histograms: _containers.RepeatedCompositeFieldContainer[StoreHistogram]
    recall_hit_rates: _containers.ScalarMap[str, float]
    recall_hit_samples: _containers.ScalarMap[str, int]
    adjustments: int
    last_adapted_at: _timestamp_pb2.Timestamp
    def __init__(self, frozen: _Optional[bool] = ..., fidelity_histograms: _Optional[_Iterable[_Union[StoreHistogram, _Mapping]]] = ..., recall_hit_rates: _Optional[_Mapping[str, float]] = ..., recall_hit_samples: _Optional[_Mapping[str, int]] = ..., adjustments: _Optional[int] = ..., last_adapted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class IntrospectRecordRequest(_message.Message):
    __slots__ = ("header", "record_id", "include_history", "include_associations", "include_versions")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HISTORY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ASSOCIATIONS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    record_id: str
    include_history: bool
    include_associations: bool
    include_versions: bool
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., record_id: _Optional[str] = ..., include_history: _Optional[bool] = ..., include_associations: _Optional[bool] = ..., include_versions: _Optional[bool] = ...) -> None: ...

class DecayForecastRequest(_message.Message):
    __slots__ = ("header", "record_ids", "forecast_at")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    FORECAST_AT_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    forecast_at: _timestamp_pb2.Timestamp
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., record_ids: _Optional[_Iterable[str]] = ..., forecast_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DecayForecast(_message.Message):
    __slots__ = ("record_id", "current_fidelity", "forecasted_fidelity", "estimated_threshold_date")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIDELITY_FIELD_NUMBER: _ClassVar[int]
    FORECASTED_FIDELITY_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_THRESHOLD_DATE_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    current_fidelity: float
    forecasted_fidelity: float
    estimated_threshold_date: _timestamp_pb2.Timestamp
    def __init__(self, record_id: _Optional[str] = ..., current_fidelity: _Optional[float] = ..., forecasted_fidelity: _Optional[float] = ..., estimated_threshold_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DecayForecastResponse(_message.Message):
    __slots__ = ("forecasts",)
    FORECASTS_FIELD_NUMBER: _ClassVar[int]
    forecasts: _containers.RepeatedCompositeFieldContainer[DecayForecast]
    def __init__(self, forecasts: _Optional[_Iterable[_Union[DecayForecast, _Mapping]]] = ...) -> None: ...

class FadingRequest(_message.Message):
    __slots__ = ("header", "horizons_days", "limit")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    HORIZONS_DAYS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    horizons_days: _containers.RepeatedScalarFieldContainer[int]
    limit: int
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., horizons_days: _Optional[_Iterable[int]] = ..., limit: _Optional[int] = ...) -> None: ...

class FadingHorizon(_message.Message):
    __slots__ = ("days", "total", "by_store")
    class ByStoreEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DAYS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    BY_STORE_FIELD_NUMBER: _ClassVar[int]
    days: int
    total: int
    by_store: _containers.ScalarMap[str, int]
    def __init__(self, days: _Optional[int] = ..., total: _Optional[int] = ..., by_store: _Optional[_Mapping[str, int]] = ...) -> None: ...

class FadingRecord(_message.Message):
    __slots__ = ("record_id", "store", "current_fidelity", "forgotten_at")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIDELITY_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_AT_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    store: StoreType
    current_fidelity: float
    forgotten_at: _timestamp_pb2.Timestamp
    def __init__(self, record_id: _Optional[str] = ..., store: _Optional[_Union[StoreType, str]] = ..., current_fidelity: _Optional[float] = ..., forgotten_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FadingResponse(_message.Message):
    __slots__ = ("horizons", "soonest", "fidelity_histograms")
    HORIZONS_FIELD_NUMBER: _ClassVar[int]
    SOONEST_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_HISTOGRAMS_FIELD_NUMBER: _ClassVar[int]
    horizons: _containers.RepeatedCompositeFieldContainer[FadingHorizon]
    soonest: _containers.RepeatedCompositeFieldContainer[FadingRecord]
    fidelity_histograms: _containers.RepeatedCompositeFieldContainer[StoreHistogram]
    def __init__(self, horizons: _Optional[_Iterable[_Union[FadingHorizon, _Mapping]]] = ..., soonest: _Optional[_Iterable[_Union[FadingRecord, _Mapping]]] = ..., fidelity_histograms: _Optional[_Iterable[_Union[StoreHistogram, _Mapping]]] = ...) -> None: ...

class AuditRequest(_message.Message):
    __slots__ = ("header", "limit", "before_seq", "op", "verify")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    limit: int
    before_seq: int
    op: str
    verify: bool
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ..., limit: _Optional[int] = ..., before_seq: _Optional[int] = ..., op: _Optional[str] = ..., verify: _Optional[bool] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("seq", "time", "op", "phase", "record_ids", "key_id", "request_id", "transport", "summary", "hash")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: str
    op: str
    phase: str
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    key_id: str
    request_id: str
    transport: str
    summary: _struct_pb2.Struct
    hash: str
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[str] = ..., op: _Optional[str] = ..., phase: _Optional[str] = ..., record_ids: _Optional[_Iterable[str]] = ..., key_id: _Optional[str] = ..., request_id: _Optional[str] = ..., transport: _Optional[str] = ..., summary: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., hash: _Optional[str] = ...) -> None: ...

class AuditVerification(_message.Message):
    __slots__ = ("ok", "entries", "head", "first_bad_line", "reason")
    OK_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    FIRST_BAD_LINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    entries: int
    head: str
    first_bad_line: int
    reason: str
    def __init__(self, ok: _Optional[bool] = ..., entries: _Optional[int] = ..., head: _Optional[str] = ..., first_bad_line: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class AuditResponse(_message.Message):
    __slots__ = ("entries", "next_before_seq", "verification")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    next_before_seq: int
    verification: AuditVerification
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., next_before_seq: _Optional[int] = ..., verification: _Optional[_Union[AuditVerification, _Mapping]] = ...) -> None: ...

class EvolutionRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: CMPHeader
    def __init__(self, header: _Optional[_Union[CMPHeader, _Mapping]] = ...) -> None: ...

class ParameterAdjustment(_message.Message):
    __slots__ = ("store", "parameter", "original_value", "current_value", "reason")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VALUE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    store: StoreType
    parameter: str
    original_value: float
    current_value: float
    reason: str
    def __init__(self, store: _Optional[_Union[StoreType, str]] = ..., parameter: _Optional[str] = ..., original_value: _Optional[float] = ..., current_value: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class EvolutionResponse(_message.Message):
    __slots__ = ("parameter_adjustments", "detected_patterns", "schema_adaptations")
    PARAMETER_ADJUSTMENTS_FIELD_NUMBER: _ClassVar[int]
    DETECTED_PATTERNS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ADAPTATIONS_FIELD_NUMBER: _ClassVar[int]
    parameter_adjustments: _containers.RepeatedCompositeFieldContainer[ParameterAdjustment]
    detected_patterns: _containers.RepeatedScalarFieldContainer[str]
    schema_adaptations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, parameter_adjustments: _Optional[_Iterable[_Union[ParameterAdjustment, _Mapping]]] = ..., detected_patterns: _Optional[_Iterable[str]] = ..., schema_adaptations: _Optional[_Iterable[str]] = ...) -> None: ...
