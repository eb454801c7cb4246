"""The arguments of the MCP tools: one function per tool, named like it.

The operation table (cmp/operations.py) says which operation is which tool and describes it;
the function of the same name here is its argument adapter: its signature is the tool's input
schema, and its body turns the arguments into the CMP request (`ToolCall`), saying how to present
the answer to an agent when the CMP response is not what an agent should read. Adapters check
nothing themselves: choices and bounds are published in the schemas but checked by CMP, so a
wrong value gets the same CMP error (with the field and a hint) as on every other transport.
Only a value of the wrong JSON type is refused by the MCP layer before any adapter runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from ..cmp import build
from ..cmp.messages import ConsolidationStrategy, TimelineGranularity
from ..model import (
    EMOTION_CHANNELS,
    AssociationType,
    RawSource,
    RawSpeaker,
    RawVisibility,
    SecrecyLevel,
    StoreType,
)

Result = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """What a tool asks of CMP: the request of its operation; `present`, what the agent gets
    instead of the CMP response; `archive_to`, a new file (on the machine of the MCP server) that
    the response's archive is written to."""

    request: Result
    present: Callable[[Result], Result] | None = None
    archive_to: str | None = None


# ---------------------------------------------------------------- parameter types


def _choices(values: Iterable[object]) -> WithJsonSchema:
    """A string schema listing the allowed values (CMP checks them)."""
    return WithJsonSchema({"type": "string", "enum": [str(v) for v in values]})


def _bounds(low: float, high: float) -> dict[str, Any]:
    return {"minimum": low, "maximum": high}


def _split_csv(value: Any) -> Any:
    """Lists are also accepted as comma-separated strings (the reference's form)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


StoreName: TypeAlias = Annotated[str, _choices(StoreType)]
EmotionLabel: TypeAlias = Annotated[str, _choices(EMOTION_CHANNELS)]
RawSourceName: TypeAlias = Annotated[str, _choices(RawSource)]
SpeakerName: TypeAlias = Annotated[str, _choices(RawSpeaker)]
VisibilityName: TypeAlias = Annotated[str, _choices(RawVisibility)]
SecrecyName: TypeAlias = Annotated[str, _choices(SecrecyLevel)]
GranularityName: TypeAlias = Annotated[str, _choices(TimelineGranularity)]
StrategyName: TypeAlias = Annotated[str, _choices(ConsolidationStrategy)]
AssociationName: TypeAlias = Annotated[str, _choices(AssociationType)]
ExportFormat: TypeAlias = Annotated[str, _choices(("cma", "jsonl"))]

Csv = BeforeValidator(_split_csv)

RecordId = Annotated[str, Field(description="a record id (UUID), as returned by store or recall")]
Stores = Annotated[list[StoreName] | None, Csv,
                   Field(description="restrict to these stores (default: all five)")]
SecrecyLevels = Annotated[list[SecrecyName] | None, Csv,
                          Field(description="secrecy levels to include (default: public and sensitive)")]
Meta = Annotated[dict[str, Any] | None, Field(description=(
    "why this memory exists — the searchable meta-memory plane, an object with any of: intent, "
    "rationale, trigger, goals [..], evidence [{label, excerpt, uri, record_id}], assumptions [..], "
    "alternatives [{option, reason, chosen}], decision, confidence (0-1), tags [..]"))]
Metadata = Annotated[dict[str, Any] | None, Field(description="free-form JSON metadata kept with the record")]
Emotion = Annotated[EmotionLabel | None, Field(description="the feeling attached to it (a Plutchik label)")]
Limit = Annotated[int, Field(json_schema_extra=_bounds(1, 1000), description="how many results at most (1-1000)")]
Fidelity = Annotated[float | None, Field(json_schema_extra=_bounds(0, 1),
                                         description="skip memories whose fidelity decayed below this (0-1)")]
Depth = Annotated[int, Field(json_schema_extra=_bounds(0, 8), description="hops along associations (0-8)")]
When = Annotated[datetime | None, Field(description="an RFC 3339 time, e.g. 2026-05-01T09:00:00Z (UTC if no offset)")]


class BatchRecord(BaseModel):
    """One memory of a batch_store call."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="the text to remember")
    store: StoreName | None = Field(default=None, description="default: semantic with a summary, else episodic")
    emotion: EmotionLabel | None = Field(default=None, description="a Plutchik label")
    summary: str | None = Field(default=None, description="a one-line summary")
    meta: dict[str, Any] | None = Field(default=None, description="meta-memory: intent, rationale, ...")
    metadata: dict[str, Any] | None = Field(default=None, description="free-form JSON metadata")


class RawBatchRecord(BaseModel):
    """One verbatim record of a batch_store_raw call."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="the verbatim text")
    session_id: str | None = Field(default=None, description="its session (default: the call's session_id)")
    turn_id: str | None = None
    topic_id: str | None = None
    source: RawSourceName = "conversation"
    speaker: SpeakerName = "user"
    visibility: VisibilityName = "normal"
    secrecy_level: SecrecyName = "public"
    meta: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


# ---------------------------------------------------------------- what an agent reads


def _text(content: Result | None) -> str:
    if not content:
        return ""
    text = "\n".join(b["text"] for b in content.get("blocks", []) if b.get("text"))
    return text or content.get("summary") or ""


def _dominant(emotion: Result | None) -> str | None:
    if not emotion:
        return None
    name = max(EMOTION_CHANNELS, key=lambda c: emotion.get(c) or 0.0)
    return name if (emotion.get(name) or 0.0) > 0 else None


_WHY = ("intent", "rationale", "decision", "tags")


def _memory(hit: Result) -> Result:
    """A recalled memory, flattened to what an agent reads."""
    record = hit["record"]
    flat = {
        "record_id": record["id"],
        "store": record["store"],
        "text": _text(hit.get("rendered_content") or record.get("content")),
        "relevance_score": round(hit.get("relevance_score", 0.0), 4),
        "fidelity": round(record.get("fidelity", {}).get("score", 1.0), 4),
        "created_at": record.get("created_at"),
        "emotion": _dominant(record.get("emotion")),
    }
    why = {k: v for k, v in (record.get("meta") or {}).items() if k in _WHY and v}
    if why:
        flat["meta"] = why
    return flat


def _memories(result: Result) -> Result:
    return {"memories": [_memory(hit) for hit in result.get("memories", [])],
            "total_candidates": result.get("total_candidates", 0)}


def _recalled(result: Result) -> Result:
    return {**_memories(result), "query_metadata": result.get("query_metadata")}


def _raw_records(result: Result) -> Result:
    keys = ("session_id", "turn_id", "topic_id", "source", "speaker", "visibility", "secrecy_level",
            "created_at")
    return {"records": [{"record_id": r["id"], **{k: r.get(k) for k in keys}, "text": _text(r.get("content"))}
                        for r in result.get("records", [])],
            "total_candidates": result.get("total_candidates", 0)}


def _buckets(result: Result) -> Result:
    return {"buckets": [{"start": b["start"], "end": b["end"], "count": b["count"],
                         "memories": [_memory(hit) for hit in b.get("memories", [])]}
                        for b in result.get("buckets", [])]}


def _readable_record(record: Result) -> Result:
    """A full record without what only bloats a model's context: embeddings, base64 of text."""
    out = dict(record)
    content = dict(out.get("content") or {})
    blocks = []
    for block in content.get("blocks", []):
        block = {k: v for k, v in block.items() if k not in ("embedding", "embedding_f32")}
        if "text" in block:
            block.pop("data", None)
        blocks.append(block)
    content["blocks"] = blocks
    out["content"] = content
    return out


def _updated(record_id: str) -> Callable[[Result], Result]:
    return lambda _: {"record_id": record_id, "updated": True}


# ---------------------------------------------------------------- encode


def store(
    content: Annotated[str, Field(description="the text to remember")],
    store: Annotated[StoreName | None, Field(description=(
        "episodic (events), semantic (facts), procedural (rules, skills, preferences), emotional, "
        "working (small, volatile); default: semantic with a summary, else episodic"))] = None,
    emotion: Emotion = None,
    summary: Annotated[str | None, Field(description="a one-line summary")] = None,
    meta: Meta = None,
    metadata: Metadata = None,
) -> ToolCall:
    return ToolCall({"content": build.text_content(content, summary=summary), "store": store,
                     "emotion": build.emotion(emotion), "meta": meta, "metadata": metadata})


def store_raw(
    content: Annotated[str, Field(description="the verbatim text (a turn, a tool result, a note)")],
    session_id: Annotated[str, Field(description="the conversation or task this belongs to")],
    turn_id: Annotated[str | None, Field(description="the turn within the session")] = None,
    topic_id: Annotated[str | None, Field(description="a topic that groups records for dreaming")] = None,
    source: RawSourceName = "conversation",
    speaker: SpeakerName = "user",
    visibility: Annotated[VisibilityName, Field(description=(
        "private_scratch and sealed records are hidden from recall_raw unless asked for"))] = "normal",
    secrecy_level: SecrecyName = "public",
    meta: Meta = None,
    metadata: Metadata = None,
) -> ToolCall:
    return ToolCall({
        "content": build.text_content(content), "session_id": session_id, "turn_id": turn_id,
        "topic_id": topic_id, "source": source, "speaker": speaker, "visibility": visibility,
        "secrecy_level": secrecy_level, "meta": meta, "metadata": metadata})


def update(
    record_id: RecordId,
    content: Annotated[str | None, Field(description="new text (replaces the old)")] = None,
    emotion: Emotion = None,
    meta: Meta = None,
    metadata: Metadata = None,
    store: Annotated[StoreName | None, Field(description="move the record to this curated store")] = None,
) -> ToolCall:
    return ToolCall({"record_id": record_id, "content": build.text_content(content) if content else None,
                     "emotion": build.emotion(emotion), "meta": meta, "metadata": metadata, "store": store},
                    present=_updated(record_id))


def update_raw(
    record_id: RecordId,
    suppressed: Annotated[bool | None, Field(description="true keeps the record out of recall_raw and "
                                                          "dreams (it stays stored)")] = None,
    visibility: VisibilityName | None = None,
    secrecy_level: SecrecyName | None = None,
) -> ToolCall:
    return ToolCall({"record_id": record_id, "suppressed": suppressed, "visibility": visibility,
                     "secrecy_level": secrecy_level}, present=_updated(record_id))


def batch_store(
    records: Annotated[list[BatchRecord], Field(min_length=1, max_length=1000, description=(
        "up to 1000 memories: {content, store?, emotion?, summary?, meta?, metadata?}"))],
    infer_associations: Annotated[bool, Field(description="link the records in sequence")] = True,
) -> ToolCall:
    return ToolCall({"records": [build.drop_none({
        "content": build.text_content(r.content, summary=r.summary), "store": r.store,
        "emotion": build.emotion(r.emotion), "meta": r.meta, "metadata": r.metadata}) for r in records],
        "infer_associations": infer_associations})


def batch_store_raw(
    records: Annotated[list[RawBatchRecord], Field(min_length=1, max_length=1000, description=(
        "up to 1000 verbatim records: {content, session_id?, turn_id?, topic_id?, source?, speaker?, "
        "visibility?, secrecy_level?, meta?, metadata?}"))],
    session_id: Annotated[str | None, Field(description="the session of records that name none")] = None,
) -> ToolCall:
    return ToolCall({"records": [build.drop_none({
        **r.model_dump(), "content": build.text_content(r.content), "session_id": r.session_id or session_id})
        for r in records]})


# ---------------------------------------------------------------- recall


def recall(
    query: Annotated[str | None, Field(description="what to look for; omit it for the latest memories")] = None,
    limit: Limit = 10,
    stores: Stores = None,
    min_fidelity: Fidelity = None,
    reconsolidate: Annotated[bool, Field(description="strengthen what is recalled (as remembering does)")] = True,
    activation_depth: Depth = 2,
) -> ToolCall:
    return ToolCall({"cue": build.drop_none({"text": query}), "limit": limit, "stores": stores,
                     "min_fidelity": min_fidelity, "reconsolidate": reconsolidate,
                     "activation_depth": activation_depth, "recall_mode": "perfect"}, present=_recalled)


def recall_raw(
    session_id: Annotated[str | None, Field(description="only this session")] = None,
    query: Annotated[str | None, Field(description="words to search for")] = None,
    start: When = None,
    end: When = None,
    limit: Limit = 10,
    include_private_scratch: bool = False,
    include_sealed: bool = False,
    secrecy_levels: SecrecyLevels = None,
) -> ToolCall:
    return ToolCall({"session_id": session_id, "query": query, "temporal": build.temporal(start, end),
                     "limit": limit, "include_private_scratch": include_private_scratch,
                     "include_sealed": include_sealed, "secrecy_levels": secrecy_levels}, present=_raw_records)


def timeline(
    start: Annotated[datetime | None, Field(description="RFC 3339; default: 7 days before end")] = None,
    end: Annotated[datetime | None, Field(description="RFC 3339; default: now")] = None,
    granularity: GranularityName = "hour",
    stores: Stores = None,
    min_fidelity: Fidelity = None,
    limit_per_bucket: Annotated[int, Field(json_schema_extra=_bounds(1, 1000))] = 50,
) -> ToolCall:
    end = end or datetime.now(UTC)
    start = start or end - timedelta(days=7)
    return ToolCall({"range": build.temporal(start, end), "granularity": granularity, "stores": stores,
                     "min_fidelity": min_fidelity, "limit_per_bucket": limit_per_bucket}, present=_buckets)


def associate(
    record_id: RecordId,
    depth: Depth = 1,
    limit: Annotated[int, Field(json_schema_extra=_bounds(1, 256))] = 10,
    min_weight: Annotated[float, Field(json_schema_extra=_bounds(0, 1), description="ignore weaker links")] = 0.0,
    association_types: Annotated[list[AssociationName] | None, Csv,
                                 Field(description="follow only these kinds of link")] = None,
) -> ToolCall:
    return ToolCall({"record_id": record_id, "depth": depth, "limit": limit, "min_weight": min_weight,
                     "association_types": association_types}, present=_memories)


# ---------------------------------------------------------------- lifecycle


def sessions(
    agent: Annotated[str | None, Field(description="only this agent's sessions (claude-code, codex...)")] = None,
    workspace: Annotated[str | None, Field(description="only sessions in this directory")] = None,
    limit: Limit = 50,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous answer")] = None,
) -> ToolCall:
    return ToolCall({"agent": agent, "workspace": workspace, "limit": limit, "cursor": cursor})


def forget(
    record_ids: Annotated[list[str], Csv, Field(min_length=1, description="the records to delete")],
    confirm: Annotated[bool, Field(description="must be true: forgetting is permanent")] = False,
    cascade: Annotated[bool, Field(description="also delete the records they link to")] = False,
) -> ToolCall:
    return ToolCall({"record_ids": record_ids, "cascade": cascade, "confirm": confirm})


def reinforce(
    record_ids: Annotated[list[str], Csv, Field(min_length=1, description="the records to strengthen")],
) -> ToolCall:
    return ToolCall({"record_ids": record_ids})


def consolidate(
    strategy: StrategyName = "incremental",
    dry_run: Annotated[bool, Field(description="report what would change, change nothing")] = False,
) -> ToolCall:
    return ToolCall({"strategy": strategy, "dry_run": dry_run})


def dream_tick(
    session_id: Annotated[str | None, Field(description="only this session's journal")] = None,
    dry_run: bool = False,
    max_groups: Annotated[int, Field(json_schema_extra=_bounds(1, 10_000))] = 10,
    promote_semantic: Annotated[bool, Field(description="also extract semantic facts")] = True,
    include_private_scratch: bool = False,
    include_sealed: bool = False,
    secrecy_levels: SecrecyLevels = None,
) -> ToolCall:
    return ToolCall({"session_id": session_id, "dry_run": dry_run, "max_groups": max_groups,
                     "promote_semantic": promote_semantic, "include_private_scratch": include_private_scratch,
                     "include_sealed": include_sealed, "secrecy_levels": secrecy_levels})


def export(
    output_path: Annotated[str, Field(description=(
        "a new file to write (no '..', its directory must exist, never overwritten); on a shared "
        "server, a name inside its export directory"))],
    format: ExportFormat = "cma",
    encrypt: bool = False,
    encryption_key: Annotated[str | None, Field(description="the passphrase when encrypt is true")] = None,
) -> ToolCall:
    return ToolCall({"format": format, "include_raw_journal": True, "encrypt": encrypt,
                     "encryption_key": encryption_key}, archive_to=output_path)


# ---------------------------------------------------------------- introspect


def stats() -> ToolCall:
    return ToolCall({})


def inspect(record_id: RecordId) -> ToolCall:
    return ToolCall({"record_id": record_id}, present=_readable_record)
