"""Request and response models for every CMP operation (wire names follow the reference)."""

from __future__ import annotations

import math
import uuid
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..limits import MAX_ID_CHARS, RequestJson, RequestJsonValue, StoredJson
from ..model import (
    AssociationType,
    Bytes,
    Embedding,
    EmbeddingRowsF32,
    EmotionVector,
    Instant,
    MemoryContent,
    MemoryRecord,
    MetaEdge,
    MetaMemory,
    Model,
    RawJournalRecord,
    RawSource,
    RawSpeaker,
    RawVisibility,
    RecallMode,
    Score,
    SecrecyLevel,
    StoreType,
    UtcDatetime,
    check_request_meta,
)

PROTOCOL_VERSION = "1.0"
MAX_BATCH = 1000
MAX_DEPTH = 8
MAX_ASSOCIATE_LIMIT = 256
MAX_RECALL_LIMIT = 1000
MAX_LIST_LIMIT = 5000
MAX_SIMILAR_CHARS = 20_000


# What a client sends is held to the limits of `cerememory.limits`; integers and booleans are
# strict (`"confirm": "yes"` and `"limit": true` are errors, not true and 1).
RequestMeta = Annotated[MetaMemory, AfterValidator(check_request_meta)]
Id = Annotated[str, Field(max_length=MAX_ID_CHARS)]


UNDECODABLE = ("records this answer left out because they cannot be decoded (damaged, or stored nested "
               "too deep to answer); the server log says why")


class CMPHeader(Model):
    protocol: str = "cmp"
    version: str = PROTOCOL_VERSION
    request_id: str | None = None
    timestamp: Instant | None = None


class Request(Model):
    header: CMPHeader | None = None


class Empty(Model):
    """The response of operations that return nothing (HTTP 204)."""


class TemporalRange(Model):
    start: Instant
    end: Instant

    @model_validator(mode="after")
    def _ordered(self) -> TemporalRange:
        if self.end < self.start:
            raise ValueError("end must not be before start")
        return self


# ---------------------------------------------------------------- encode


class EncodeContext(Model):
    source: Id | None = None
    session_id: Id | None = None
    spatial: RequestJsonValue = None
    temporal: RequestJsonValue = None


class ManualAssociation(Model):
    target_id: uuid.UUID
    association_type: AssociationType = AssociationType.USER_DEFINED
    weight: Score = 0.5


class EncodeStoreRequest(Request):
    content: MemoryContent
    store: StoreType | None = None
    emotion: EmotionVector | None = None
    context: EncodeContext | None = None
    metadata: RequestJson | None = None
    associations: list[ManualAssociation] | None = None
    meta: RequestMeta | None = None
    created_at: Instant | None = Field(
        default=None, description="when the remembered event happened (default: now)"
    )


class EncodeStoreResponse(Model):
    record_id: uuid.UUID
    store: StoreType
    initial_fidelity: float = 1.0
    associations_created: int = 0


def row_length(rows: Any) -> int | None:
    """The length of each row of a 2-D array of vectors (its `embedding_dim`); None for anything else."""
    shape = getattr(rows, "shape", None)
    return int(shape[1]) if shape is not None and len(shape) == 2 else None


class EncodeBatchRequest(Request):
    records: list[EncodeStoreRequest] = Field(min_length=1, max_length=MAX_BATCH)
    infer_associations: StrictBool = False
    embedding_dim: StrictInt | None = Field(
        default=None, ge=1,
        description="the length of each row of embeddings_f32 (in process, a 2-D array gives its own)")
    embeddings_f32: EmbeddingRowsF32 | None = Field(
        default=None, description="the records' vectors as one matrix, row i for record i: little-endian float32, "
                                  "base64 in JSON (instead of a vector in each record's block)")

    @model_validator(mode="before")
    @classmethod
    def _array_shape(cls, value: Any) -> Any:
        """A 2-D array of vectors says its own row length."""
        dim = row_length(value.get("embeddings_f32")) if isinstance(value, dict) else None
        if dim is not None and value.get("embedding_dim") is None:
            value = {**value, "embedding_dim": dim}
        return value

    @field_validator("embeddings_f32")
    @classmethod
    def _rows_for_records(cls, value: bytes | None, info: ValidationInfo) -> bytes | None:
        """One row of `embedding_dim` values per record, and no record with a vector of its own."""
        records, dim = info.data.get("records"), info.data.get("embedding_dim")
        if value is None or not records:  # records refused already: their error is the one to give
            return value
        if dim is None:
            raise PydanticCustomError("vector_encoding", "embeddings_f32 needs embedding_dim, the length of each row")
        if len(value) != 4 * dim * len(records):
            raise PydanticCustomError(
                "vector_encoding", "embeddings_f32 is {size} bytes, not {rows} rows (one per record) of {dim} float32 "
                "values", {"size": len(value), "rows": len(records), "dim": dim})
        given = next((i for i, r in enumerate(records) if r.content.first_embedding() is not None), None)
        if given is not None:
            raise PydanticCustomError(
                "vector_encoding", "records[{index}] carries a vector of its own: give every record's vector in "
                "embeddings_f32, or each in its record", {"index": given})
        return value


class EncodeBatchResponse(Model):
    results: list[EncodeStoreResponse]
    associations_inferred: int = 0


class EncodeUpdateRequest(Request):
    record_id: uuid.UUID
    content: MemoryContent | None = None
    emotion: EmotionVector | None = None
    metadata: RequestJson | None = None
    meta: RequestMeta | None = None
    store: StoreType | None = Field(
        default=None, description="move the record to this curated store (not to or from working memory)")


class EncodeStoreRawRequest(Request):
    session_id: Id
    turn_id: Id | None = None
    topic_id: Id | None = None
    source: RawSource = RawSource.CONVERSATION
    speaker: RawSpeaker = RawSpeaker.USER
    visibility: RawVisibility = RawVisibility.NORMAL
    secrecy_level: SecrecyLevel = SecrecyLevel.PUBLIC
    content: MemoryContent
    metadata: RequestJson | None = None
    meta: RequestMeta | None = None
    created_at: Instant | None = None

    @field_validator("session_id")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("session_id must not be blank")
        return value


class EncodeUpdateRawRequest(Request):
    record_id: uuid.UUID
    suppressed: StrictBool | None = Field(default=None, description="a suppressed record is hidden from raw "
                                                              "recall and never dreamed")
    visibility: RawVisibility | None = None
    secrecy_level: SecrecyLevel | None = None


class EncodeStoreRawResponse(Model):
    record_id: uuid.UUID
    session_id: str
    visibility: RawVisibility
    secrecy_level: SecrecyLevel


class EncodeBatchRawRequest(Request):
    records: list[EncodeStoreRawRequest] = Field(min_length=1, max_length=MAX_BATCH)


class EncodeBatchRawResponse(Model):
    results: list[EncodeStoreRawResponse]


# ---------------------------------------------------------------- recall


class RecallCue(Model):
    text: str | None = None
    image: Bytes | None = None
    audio: Bytes | None = None
    emotion: EmotionVector | None = None
    temporal: TemporalRange | None = None
    spatial: RequestJsonValue = None
    semantic: RequestJsonValue = None
    embedding: Embedding | None = None


class RecallQueryRequest(Request):
    cue: RecallCue = Field(default_factory=RecallCue)
    stores: list[StoreType] | None = None
    limit: StrictInt = Field(default=10, ge=1, le=MAX_RECALL_LIMIT)
    min_fidelity: Score | None = None
    include_decayed: StrictBool = False
    reconsolidate: StrictBool = True
    activation_depth: StrictInt = Field(default=2, ge=0, le=MAX_DEPTH)
    recall_mode: RecallMode = RecallMode.HUMAN


class ScoreBreakdown(Model):
    """Why a memory ranked where it did; each signal is on its own 0..1 scale."""

    text: float | None = None
    text_rank: int | None = None
    vector: float | None = None
    vector_rank: int | None = None
    fused: float = 0.0
    activation: float = 0.0
    fidelity: float = 1.0
    recency: float | None = None
    emotion: float | None = None


class RecalledMemory(Model):
    record: MemoryRecord
    relevance_score: float
    activation_path: list[uuid.UUID] | None = None
    rendered_content: MemoryContent
    score_breakdown: ScoreBreakdown | None = None


class QueryMetadata(Model):
    total_records_scanned: int = 0
    stores_searched: list[StoreType] = Field(default_factory=list)
    fidelity_filtered: int = 0
    signals: list[str] = Field(default_factory=list)
    fusion: str | None = None
    semantic_search: bool = False
    semantic_off_reason: str | None = None
    embedding_ms: float | None = None


class ActivationNode(Model):
    record_id: uuid.UUID
    activation_level: float = Field(description="the gain spreading activation gave this memory")
    hop: int = Field(description="edges between its seed and this memory")
    edge_type: AssociationType = Field(description="the type of the last edge on that path")


class ActivationTrace(Model):
    """How spreading activation reached the returned memories it touched: `source_id` (the seed of
    the strongest) with one `activations` entry each, and their gains by record id (the path of
    each is its `RecalledMemory.activation_path`)."""

    source_id: uuid.UUID
    activations: list[ActivationNode] = Field(default_factory=list)
    gains: dict[str, float] = Field(default_factory=dict, description="record id -> activation_level")


class RecallQueryResponse(Model):
    memories: list[RecalledMemory]
    activation_trace: ActivationTrace | None = None
    total_candidates: int = 0
    query_metadata: QueryMetadata | None = None
    undecodable_ids: list[uuid.UUID] = Field(default_factory=list, description=UNDECODABLE)


class RecallAssociateRequest(Request):
    record_id: uuid.UUID
    association_types: list[AssociationType] | None = None
    depth: StrictInt = Field(default=2, ge=0, le=MAX_DEPTH)
    min_weight: Score = 0.1
    limit: StrictInt = Field(default=10, ge=1, le=MAX_ASSOCIATE_LIMIT)


class RecallAssociateResponse(Model):
    memories: list[RecalledMemory]
    total_candidates: int = 0
    undecodable_ids: list[uuid.UUID] = Field(default_factory=list, description=UNDECODABLE)


class TimelineGranularity(StrEnum):
    MINUTE = "minute"
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class RecallTimelineRequest(Request):
    range: TemporalRange
    granularity: TimelineGranularity = TimelineGranularity.HOUR
    min_fidelity: Score | None = None
    emotion_filter: EmotionVector | None = None
    stores: list[StoreType] | None = None
    limit_per_bucket: StrictInt = Field(default=50, ge=1, le=MAX_RECALL_LIMIT)


class TimelineBucket(Model):
    start: UtcDatetime
    end: UtcDatetime
    memories: list[RecalledMemory]
    count: int


class RecallTimelineResponse(Model):
    buckets: list[TimelineBucket]
    undecodable_ids: list[uuid.UUID] = Field(default_factory=list, description=UNDECODABLE)


class RecallGraphRequest(Request):
    center_id: uuid.UUID | None = None
    depth: StrictInt = Field(default=2, ge=0, le=MAX_DEPTH)
    edge_types: list[AssociationType] | None = None
    limit_nodes: StrictInt = Field(default=10, ge=1, le=MAX_RECALL_LIMIT)
    include_meta: StrictBool = False


class GraphNode(Model):
    id: uuid.UUID
    store: StoreType
    summary: str | None = None
    fidelity: float
    meta: MetaMemory | None = None


class GraphEdge(Model):
    source: uuid.UUID
    target: uuid.UUID
    edge_type: AssociationType
    weight: float


class RecallGraphResponse(Model):
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    total_nodes: int
    meta_edges: list[MetaEdge] = Field(default_factory=list)
    undecodable_ids: list[uuid.UUID] = Field(default_factory=list, description=UNDECODABLE)


class RecallRawQueryRequest(Request):
    session_id: Id | None = None
    query: str | None = None
    record_ids: list[uuid.UUID] | None = Field(default=None, description="only these records (empty: no filter)")
    derived_memory_id: uuid.UUID | None = Field(
        default=None, description="only the raw records this memory (a dream summary or fact) was made from")
    temporal: TemporalRange | None = None
    limit: StrictInt = Field(default=10, ge=1, le=MAX_RECALL_LIMIT)
    include_private_scratch: StrictBool = False
    include_sealed: StrictBool = False
    secrecy_levels: list[SecrecyLevel] | None = None


class RecallRawQueryResponse(Model):
    records: list[RawJournalRecord]
    total_candidates: int = 0
    undecodable_ids: list[uuid.UUID] = Field(default_factory=list, description=UNDECODABLE)


class RecallSessionsRequest(Request):
    agent: Id | None = Field(default=None, description="only sessions of this agent (as `ingest` names it)")
    workspace: str | None = Field(default=None, max_length=4096,
                                  description="only sessions in this workspace (a directory)")
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    limit: StrictInt = Field(default=50, ge=1, le=MAX_RECALL_LIMIT)
    include_private_scratch: StrictBool = False
    include_sealed: StrictBool = False
    secrecy_levels: list[SecrecyLevel] | None = None


class JournalSession(Model):
    session_id: str
    agent: str | None = Field(default=None, description="metadata.agent of its first turn")
    workspace: str | None = Field(default=None, description="metadata.workspace of its first turn")
    turns: int
    dreamed: int = Field(description="turns a dream tick has made memories from")
    first_at: UtcDatetime
    last_at: UtcDatetime


class RecallSessionsResponse(Model):
    sessions: list[JournalSession]
    next_cursor: str | None = None
    total_sessions: int = Field(default=0, description="sessions with a visible turn, before the agent and "
                                                       "workspace filters")


class ListField(StrEnum):
    """What `recall.list` returns of each record beyond id, store and times."""

    TEXT = "text"  # the text blocks joined by newlines
    CONTENT = "content"
    METADATA = "metadata"
    META = "meta"
    EMOTION = "emotion"
    FIDELITY = "fidelity"


class RecallListRequest(Request):
    store: StoreType
    metadata: RequestJson | None = Field(
        default=None, description="only records whose metadata has each of these keys with exactly this value")
    fields: list[ListField] | None = Field(default=None, description="empty or absent: text and metadata")
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    limit: StrictInt = Field(default=1000, ge=1, le=MAX_LIST_LIMIT)
    similar_to: str | None = Field(
        default=None, max_length=MAX_SIMILAR_CHARS,
        description="also give each listed record's cosine to this text, when the store searches by meaning")

    @field_validator("metadata")
    @classmethod
    def _scalars(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_filter(value)


def check_filter(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A `recall.list` metadata filter: scalar values only (ValueError names the first that is not)."""
    for key, item in (value or {}).items():
        if not isinstance(item, str | int | float | bool | type(None)):
            raise ValueError(f"{key}: a filter value is a string, number, boolean or null, "
                             f"not {type(item).__name__}")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{key}: a filter number must be finite")
    return value


class ListedRecord(Model):
    """Frozen: a listing page may be served again to the next caller (see recall.list)."""

    model_config = ConfigDict(**Model.model_config, frozen=True)

    id: uuid.UUID
    store: StoreType
    created_at: UtcDatetime
    updated_at: UtcDatetime
    text: str | None = None
    content: MemoryContent | None = None
    metadata: StoredJson | None = None
    meta: MetaMemory | None = None
    emotion: EmotionVector | None = None
    fidelity: float | None = None


class RecallListResponse(Model):
    model_config = ConfigDict(**Model.model_config, frozen=True)

    records: tuple[ListedRecord, ...]
    next_cursor: str | None = None
    total_scanned: int = 0
    similarity: dict[str, float] | None = Field(
        default=None, description="record id -> cosine to similar_to, for the listed records that have a vector")
    semantic_search: bool = False
    semantic_off_reason: str | None = None
    undecodable_ids: tuple[uuid.UUID, ...] = Field(default=(), description=UNDECODABLE)


# ---------------------------------------------------------------- lifecycle


class ConsolidationStrategy(StrEnum):
    FULL = "full"
    INCREMENTAL = "incremental"
    SELECTIVE = "selective"


class ConsolidateRequest(Request):
    strategy: ConsolidationStrategy = ConsolidationStrategy.INCREMENTAL
    min_age_hours: Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)] = 0
    min_access_count: StrictInt = Field(default=0, ge=0)
    dry_run: StrictBool = False


class ConsolidationMerge(Model):
    dropped_id: uuid.UUID
    kept_id: uuid.UUID
    similarity: float


class ConsolidationPromotion(Model):
    episodic_id: uuid.UUID
    semantic_id: uuid.UUID | None = Field(default=None, description="null in a dry run")
    summary: str


class ConsolidateResponse(Model):
    records_processed: int = Field(default=0, description="episodic records in the strategy's scope")
    records_migrated: int = Field(default=0, description="episodic records promoted to semantic ones")
    records_compressed: int = Field(default=0, description="near-duplicates merged into a kept record")
    records_pruned: int = Field(default=0, description="always 0: only lifecycle.forget deletes")
    semantic_nodes_created: int = 0
    dry_run: bool = False
    strategy: ConsolidationStrategy = ConsolidationStrategy.INCREMENTAL
    merges: list[ConsolidationMerge] = Field(
        default_factory=list, description=f"the first {MAX_BATCH} merges, each with its cosine similarity")
    promotions: list[ConsolidationPromotion] = Field(
        default_factory=list, description=f"the first {MAX_BATCH} promotions, each with its summary")


class DreamTickRequest(Request):
    session_id: Id | None = None
    dry_run: StrictBool = False
    max_groups: StrictInt = Field(default=10, ge=1, le=10_000)
    include_private_scratch: StrictBool = False
    include_sealed: StrictBool = False
    promote_semantic: StrictBool = True
    secrecy_levels: list[SecrecyLevel] | None = None


class DreamGroupReport(Model):
    """One topic group of a dream tick: where it came from, what was redacted, what it became."""

    session_id: str
    topic_id: str | None = None
    topic_hint: str
    topic_inferred: bool
    range_start: UtcDatetime
    range_end: UtcDatetime
    raw_record_count: int
    normal_records: int = 0
    private_scratch_redacted: int = 0
    sealed_redacted: int = 0
    secret_redacted: int = 0
    redacted_total: int = 0
    summariser: str | None = Field(default=None, description="extractive or llm:<provider>:<model>; null in a dry run")
    llm_fallback_reason: str | None = Field(default=None, description="why the LLM summary was not used")
    headline: str | None = None
    episodic_summary_id: uuid.UUID | None = None
    semantic_id: uuid.UUID | None = None


class DreamGroupFailure(Model):
    """A topic group this tick could not dream: its raw records stay pending, and later ticks
    skip it until they change (see docs/dream.md)."""

    session_id: str = Field(description="the group's session, cut to 200 characters")
    topic_hint: str = Field(description="the group's topic, cut to 200 characters")
    first_raw_record_id: uuid.UUID
    raw_record_count: int
    code: str = Field(description="a CMP error code")
    reason: str
    failed_at: UtcDatetime


class DreamTickResponse(Model):
    groups_processed: int = 0
    raw_records_processed: int = 0
    episodic_summaries_created: int = 0
    semantic_nodes_created: int = 0
    dry_run: bool = False
    groups_pending: int = Field(default=0, description="groups left for a later tick")
    llm_fallbacks: int = Field(default=0, description="groups summarised extractively after an LLM failure")
    groups: list[DreamGroupReport] = Field(default_factory=list)
    groups_failed: list[DreamGroupFailure] = Field(
        default_factory=list, description="groups that failed in this tick, each with its code and reason")
    groups_skipped: int = Field(
        default=0, description="groups that failed at an earlier tick and whose raw records have not changed")


class DecayTickRequest(Request):
    tick_duration_seconds: StrictInt | None = Field(
        default=None, ge=0,
        description="accepted for compatibility; fidelity is a closed-form function of time, so a tick "
                    "always evaluates the curve at the current instant")


class DecayTickResponse(Model):
    records_updated: int = 0
    records_below_threshold: int = 0
    records_forgotten: int = Field(default=0, description="records that crossed their prune threshold "
                                                          "since the last tick (hidden from recall, kept)")
    records_pruned: int = Field(default=0, description="always 0: only lifecycle.forget deletes")


class SetModeRequest(Request):
    mode: RecallMode
    scope: list[StoreType] | None = None


class ForgetRequest(Request):
    record_ids: list[uuid.UUID] | None = None
    store: StoreType | None = None
    temporal_range: TemporalRange | None = None
    cascade: StrictBool = False
    confirm: StrictBool = False

    @model_validator(mode="after")
    def _one_target(self) -> ForgetRequest:
        if not self.record_ids and self.store is None and self.temporal_range is None:
            raise ValueError("give record_ids, store or temporal_range")
        return self


class ForgetResponse(Model):
    records_deleted: int


class ReinforceRequest(Request):
    record_ids: list[uuid.UUID] = Field(min_length=1, max_length=MAX_BATCH)


class ReinforceResponse(Model):
    records_reinforced: int = Field(description="records strengthened as a recall would strengthen them")


class ExportRequest(Request):
    format: str = "cma"
    stores: list[StoreType] | None = None
    include_raw_journal: StrictBool = False
    encrypt: StrictBool = False
    encryption_key: str | None = None


class ExportResponse(Model):
    archive_id: str
    size_bytes: int
    record_count: int = Field(description="curated records in the archive")
    raw_record_count: int = Field(default=0, description="raw journal records in the archive")
    checksum: str = Field(description="SHA-256 (hex) of the archive file as written")
    archive_data: Bytes | None = None
    undecodable_ids: list[uuid.UUID] = Field(
        default_factory=list, description="records (curated or raw) left out of the archive because they "
                                          "cannot be decoded; the server log says why")


class ImportStrategy(StrEnum):
    MERGE = "merge"
    REPLACE = "replace"


class ConflictResolution(StrEnum):
    KEEP_EXISTING = "keep_existing"
    KEEP_IMPORTED = "keep_imported"
    KEEP_NEWER = "keep_newer"


class ImportRequest(Request):
    archive_id: str = "import"
    strategy: ImportStrategy = ImportStrategy.MERGE
    conflict_resolution: ConflictResolution = ConflictResolution.KEEP_NEWER
    decryption_key: str | None = None
    archive_data: Bytes


class ImportResponse(Model):
    records_imported: int = Field(description="curated records written (new or overwriting)")
    raw_records_imported: int = 0
    records_skipped: int = Field(default=0, description="conflicts resolved in favour of stored records")


class ReindexTarget(StrEnum):
    ALL = "all"
    RECORDS = "records"
    JOURNAL = "journal"


class ReindexRequest(Request):
    target: ReindexTarget = Field(default=ReindexTarget.ALL,
                                  description="which full-text index to rebuild from the database")


class ReindexResponse(Model):
    records: int | None = Field(default=None, description="documents in the rebuilt records index")
    journal: int | None = Field(default=None, description="documents in the rebuilt journal index")


# ---------------------------------------------------------------- introspect


class StatsRequest(Request):
    pass


class StoreHistogram(Model):
    store: StoreType
    counts: list[int] = Field(description="records per fidelity tenth, [0, 0.1) first")


class EvolutionMetrics(Model):
    """What the evolution engine observes (docs/decay.md#evolution)."""

    frozen: bool = False
    fidelity_histograms: list[StoreHistogram] = Field(default_factory=list)
    recall_hit_rates: dict[str, float] = Field(default_factory=dict)
    recall_hit_samples: dict[str, int] = Field(default_factory=dict)
    adjustments: int = 0
    last_adapted_at: UtcDatetime | None = None


class StatsResponse(Model):
    total_records: int
    records_by_store: dict[str, int]
    total_associations: int
    avg_fidelity: float
    avg_fidelity_by_store: dict[str, float]
    oldest_record: UtcDatetime | None = None
    newest_record: UtcDatetime | None = None
    total_recall_count: int = 0
    raw_journal_records: int = 0
    raw_journal_pending_dream: int = 0
    vector_index_records: int = 0
    vector_search_backend: str = "numpy_exact_cosine"
    embedder: str | None = None
    semantic_search: bool = False
    semantic_off_reason: str | None = None
    working_capacity: int = 7
    recall_mode: RecallMode = RecallMode.HUMAN
    dream_episodic_summaries: int = 0
    dream_semantic_nodes: int = 0
    last_dream_tick_at: UtcDatetime | None = None
    evolution_metrics: EvolutionMetrics | None = None
    background_decay_enabled: bool = False
    background_dream_enabled: bool = False
    data_dir: str | None = None
    undecodable_records: int = Field(
        default=0, description="stored records found undecodable since the data directory was opened "
                               "(reads skip them; the server log names each once)")
    write_commits: int = Field(
        default=0, description="transactions that committed encode.store and encode.batch calls since the data "
                               "directory was opened: calls arriving together share one (group commit)")
    writes_committed: int = Field(
        default=0, description="encode.store and encode.batch calls those transactions committed; "
                               "writes_committed / write_commits is how many shared a commit on average")


class IntrospectRecordRequest(Request):
    record_id: uuid.UUID
    include_history: StrictBool = False
    include_associations: StrictBool = False
    include_versions: StrictBool = False


class DecayForecastRequest(Request):
    record_ids: list[uuid.UUID] = Field(min_length=1, max_length=MAX_BATCH)
    forecast_at: Instant


class DecayForecast(Model):
    record_id: uuid.UUID
    current_fidelity: float
    forecasted_fidelity: float
    estimated_threshold_date: UtcDatetime | None = None


class DecayForecastResponse(Model):
    forecasts: list[DecayForecast]


class FadingRequest(Request):
    horizons_days: list[Annotated[int, Field(ge=1, le=3650, strict=True)]] | None = Field(
        default=None, max_length=10,
        description="count the records forgotten within each horizon, in days from now (empty: 7 and 30)")
    limit: StrictInt = Field(default=20, ge=0, le=MAX_RECALL_LIMIT,
                             description="how many of the soonest-forgotten records to list")


class FadingHorizon(Model):
    days: int
    total: int
    by_store: dict[str, int]


class FadingRecord(Model):
    record_id: uuid.UUID
    store: StoreType
    current_fidelity: float
    forgotten_at: UtcDatetime


class FadingResponse(Model):
    horizons: list[FadingHorizon]
    soonest: list[FadingRecord] = Field(default_factory=list,
                                        description="records still above their threshold, soonest forgotten first")
    fidelity_histograms: list[StoreHistogram] = Field(default_factory=list,
                                                      description="fidelity now, per store, by tenth")


class AuditRequest(Request):
    limit: StrictInt = Field(default=50, ge=1, le=MAX_RECALL_LIMIT)
    before_seq: StrictInt | None = Field(default=None, ge=1, description="entries older than this (paging)")
    op: str | None = Field(default=None, max_length=64, description="only this operation, e.g. lifecycle.forget")
    verify: StrictBool = Field(default=False, description="also check the whole hash chain")


class AuditEntry(Model):
    seq: int
    time: str
    op: str
    phase: str | None = None
    record_ids: list[str] = Field(default_factory=list)
    key_id: str | None = None
    request_id: str | None = None
    transport: str | None = None
    summary: StoredJson = Field(default_factory=dict)
    hash: str


class AuditVerification(Model):
    ok: bool
    entries: int
    head: str = Field(description="hash of the last good entry")
    first_bad_line: int | None = None
    reason: str | None = None


class AuditResponse(Model):
    entries: list[AuditEntry]
    next_before_seq: int | None = Field(default=None, description="before_seq of the next (older) page")
    verification: AuditVerification | None = None


class EvolutionRequest(Request):
    pass


class ParameterAdjustment(Model):
    store: StoreType
    parameter: str
    original_value: float
    current_value: float
    reason: str


class EvolutionResponse(Model):
    parameter_adjustments: list[ParameterAdjustment] = Field(default_factory=list)
    detected_patterns: list[str] = Field(default_factory=list)
    schema_adaptations: list[str] = Field(default_factory=list)
