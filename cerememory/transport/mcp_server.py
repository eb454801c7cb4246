"""CMP over MCP: fifteen typed tools over any CMP backend, served over stdio or streamable HTTP.

A *backend* is anything with `dispatch(op, request) -> dict` that raises `CMPError`: the HTTP
`Client` (what `cerememory mcp` uses: a stdio proxy to a running `cerememory serve`), the embedded
`Memory`, or an `Engine` (wrapped with the one CMP dispatcher). Every tool builds a CMP request,
dispatches it and returns readable JSON; every `CMPError` becomes an MCP tool error
(`is_error: true`) whose text starts with the CMP code, then the message and the hint.

The `export` tool writes on the machine that runs this server: the stdio proxy is the user's own
process and writes where its caller says; mounted on `cerememory serve` it writes only inside
the data directory's export directory. This module and `mcp_stdio` are the only ones that
import the `mcp` SDK.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol
from urllib.parse import urlsplit

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from ..cmp.context import bound
from ..cmp.dispatch import dispatch as cmp_dispatch
from ..cmp.errors import CMPError, ErrorCode
from ..cmp.messages import ConsolidationStrategy, TimelineGranularity
from ..model import (
    EMOTION_CHANNELS,
    AssociationType,
    EmotionVector,
    RawSource,
    RawSpeaker,
    RawVisibility,
    SecrecyLevel,
    StoreType,
)
from ..storage.archive_paths import export_target, write_new
from ..version import __version__
from .mcp_stdio import AnsweringMCPServer

if TYPE_CHECKING:
    from ..engine import Engine

log = logging.getLogger("cerememory.mcp")

MCP_PATH = "/mcp"
MCP_BODY_LIMIT = 64 * 1024 * 1024  # as the HTTP routes
STREAM_SECONDS = 60.0  # how long a GET event stream stays open (the mcp.stream_max_seconds default)

# ---------------------------------------------------------------- parameter types
# Choices and bounds are published in the tool schemas but checked by CMP, so that a wrong value
# gets the same CMP error (STORE_INVALID, VALIDATION_ERROR, with the field and a hint) as on
# every other transport.


def _one_of(values: Iterable[str]) -> Any:
    """A string whose schema lists its allowed values."""
    return Annotated[str, WithJsonSchema({"type": "string", "enum": [str(v) for v in values]})]


def _bounds(low: float, high: float) -> dict[str, Any]:
    return {"minimum": low, "maximum": high}


StoreName = _one_of(StoreType)
EmotionLabel = _one_of(EMOTION_CHANNELS)
RawSourceName = _one_of(RawSource)
SpeakerName = _one_of(RawSpeaker)
VisibilityName = _one_of(RawVisibility)
SecrecyName = _one_of(SecrecyLevel)
GranularityName = _one_of(TimelineGranularity)
StrategyName = _one_of(ConsolidationStrategy)
AssociationName = _one_of(AssociationType)
ExportFormat = _one_of(("cma", "jsonl"))


def _split_csv(value: Any) -> Any:
    """Lists are also accepted as comma-separated strings (the reference's form)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


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


# ---------------------------------------------------------------- backends


class Backend(Protocol):
    def dispatch(self, op: str, request: dict[str, Any]) -> dict[str, Any]: ...


class _EngineBackend:
    """An `Engine` (anything with CMP methods like `encode_store`) seen as a backend."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def dispatch(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        with bound(transport="mcp"):  # for the audit log and the metrics
            return cmp_dispatch(self.handler, op, request)


def as_backend(obj: Any) -> Backend:
    """`obj` if it has `dispatch(op, request)`, else an engine wrapped with the CMP dispatcher."""
    return obj if callable(getattr(obj, "dispatch", None)) else _EngineBackend(obj)


# ---------------------------------------------------------------- results and errors


def describe(exc: CMPError) -> str:
    """The text of a tool error: the CMP code and message first, then what to do about it."""
    lines = [f"{exc.code.value}: {exc.message}"]
    if exc.hint:
        lines.append(f"hint: {exc.hint}")
    field = exc.details.get("field")
    if field:
        lines.append(f"field: {field}")
    if exc.retry_after is not None:
        lines.append(f"retry after: {exc.retry_after} s")
    if exc.request_id:
        lines.append(f"request id: {exc.request_id}")
    return "\n".join(lines)


def _tool(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """Turn a CMPError (or a bug) into an MCP tool error instead of a crash of the session."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return fn(*args, **kwargs)
        except CMPError as exc:
            raise ToolError(describe(exc)) from exc
        except Exception as exc:
            log.exception("tool %s failed", fn.__name__)
            raise ToolError(f"INTERNAL_ERROR: {type(exc).__name__} in the MCP bridge\n"
                            "hint: the MCP server's log (stderr) has the details") from exc

    return run


def _bad(message: str, hint: str | None = None) -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, message, hint=hint)


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _content(text: str, summary: str | None = None) -> dict[str, Any]:
    return _drop_none({"blocks": [{"modality": "text", "text": text}], "summary": summary})


def _emotion(label: str | None) -> dict[str, Any] | None:
    if label is None:
        return None
    try:
        return EmotionVector.from_label(label).model_dump(mode="json")
    except ValueError as exc:
        raise _bad(f"emotion: {exc}", hint="use a Plutchik label: " + ", ".join(EMOTION_CHANNELS)) from None


def _iso(value: datetime) -> str:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def _range(start: datetime | None, end: datetime | None) -> dict[str, str] | None:
    if start is None and end is None:
        return None
    if start is None or end is None:
        raise _bad("give both start and end, or neither", hint="e.g. start=2026-05-01T00:00:00Z, end=now")
    return {"start": _iso(start), "end": _iso(end)}


def _text(content: dict[str, Any] | None) -> str:
    if not content:
        return ""
    text = "\n".join(b["text"] for b in content.get("blocks", []) if b.get("text"))
    return text or content.get("summary") or ""


def _dominant(emotion: dict[str, Any] | None) -> str | None:
    if not emotion:
        return None
    name = max(EMOTION_CHANNELS, key=lambda c: emotion.get(c) or 0.0)
    return name if (emotion.get(name) or 0.0) > 0 else None


_WHY = ("intent", "rationale", "decision", "tags")


def _memory(hit: dict[str, Any]) -> dict[str, Any]:
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


def _raw(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("session_id", "turn_id", "topic_id", "source", "speaker", "visibility", "secrecy_level",
            "created_at")
    return {"record_id": record["id"], **{k: record.get(k) for k in keys},
            "text": _text(record.get("content"))}


def _readable_record(record: dict[str, Any]) -> dict[str, Any]:
    """A full record without what only bloats a model's context: embeddings, base64 of text."""
    out = dict(record)
    content = dict(out.get("content") or {})
    blocks = []
    for block in content.get("blocks", []):
        block = {k: v for k, v in block.items() if k != "embedding"}
        if "text" in block:
            block.pop("data", None)
        blocks.append(block)
    content["blocks"] = blocks
    out["content"] = content
    return out


# ---------------------------------------------------------------- the server

INSTRUCTIONS = """\
Cerememory is a long-term memory shared by your sessions (and other agents).
- `store` what is worth remembering: facts (store=semantic), events (episodic), rules and
  preferences (procedural); add `meta` (intent, rationale, decision) so it can be found by why.
- `recall` before answering questions about past work; without a query it lists recent memories.
- `store_raw` / `recall_raw` keep and search verbatim conversation turns and tool output.
- `inspect` one record, `associate` to follow its links, `timeline` for a period, `stats` for counts.
- `forget` deletes permanently and needs confirm=true.
Errors start with a code (e.g. RECORD_NOT_FOUND) and carry a hint on what to do."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


@contextmanager
def _root_logging_untouched() -> Iterator[None]:
    """MCPServer() calls logging.basicConfig; an embedding server keeps its own logging set-up."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


def build_mcp_server(backend: Any, *, export_root: Path | None = None) -> MCPServer:
    """An MCP server with the fifteen Cerememory tools over `backend` (see the module docstring).

    `export_root` confines the `export` tool to one directory: give it whenever the server writes
    on a disk that is not its caller's own. Without it the tool writes where the caller says.
    """
    cmp = as_backend(backend)
    with _root_logging_untouched():
        server = AnsweringMCPServer("cerememory", version=__version__, instructions=INSTRUCTIONS,
                                    website_url="https://github.com/co-r-e/cerememory")

    def call(op: str, request: dict[str, Any]) -> dict[str, Any]:
        return cmp.dispatch(op, _drop_none(request))

    # ------------------------------------------------------------ encode

    @server.tool(annotations=WRITES)
    @_tool
    def store(
        content: Annotated[str, Field(description="the text to remember")],
        store: Annotated[StoreName | None, Field(description=(
            "episodic (events), semantic (facts), procedural (rules, skills, preferences), emotional, "
            "working (small, volatile); default: semantic with a summary, else episodic"))] = None,
        emotion: Emotion = None,
        summary: Annotated[str | None, Field(description="a one-line summary")] = None,
        meta: Meta = None,
        metadata: Metadata = None,
    ) -> dict[str, Any]:
        """Remember one thing in a curated store. Returns its record_id."""
        return call("encode.store", {"content": _content(content, summary), "store": store,
                                     "emotion": _emotion(emotion), "meta": meta, "metadata": metadata})

    @server.tool(annotations=WRITES)
    @_tool
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
    ) -> dict[str, Any]:
        """Append verbatim text to the raw journal (kept word for word, searchable with recall_raw)."""
        return call("encode.store_raw", {
            "content": _content(content), "session_id": session_id, "turn_id": turn_id, "topic_id": topic_id,
            "source": source, "speaker": speaker, "visibility": visibility, "secrecy_level": secrecy_level,
            "meta": meta, "metadata": metadata})

    @server.tool(annotations=WRITES)
    @_tool
    def update(
        record_id: RecordId,
        content: Annotated[str | None, Field(description="new text (replaces the old)")] = None,
        emotion: Emotion = None,
        meta: Meta = None,
        metadata: Metadata = None,
    ) -> dict[str, Any]:
        """Replace the text, emotion, meta-memory or metadata of a record (give at least one)."""
        if content is None and emotion is None and meta is None and metadata is None:
            raise _bad("update: give content, emotion, meta or metadata", hint="nothing to change was given")
        call("encode.update", {"record_id": record_id, "content": _content(content) if content else None,
                               "emotion": _emotion(emotion), "meta": meta, "metadata": metadata})
        return {"record_id": record_id, "updated": True}

    @server.tool(annotations=WRITES)
    @_tool
    def update_raw(
        record_id: RecordId,
        suppressed: Annotated[bool | None, Field(description="true keeps the record out of recall_raw and "
                                                              "dreams (it stays stored)")] = None,
        visibility: VisibilityName | None = None,
        secrecy_level: SecrecyName | None = None,
    ) -> dict[str, Any]:
        """Suppress a raw journal record, or change who may see it (its text never changes)."""
        if suppressed is None and visibility is None and secrecy_level is None:
            raise _bad("update_raw: give suppressed, visibility or secrecy_level", hint="nothing to change was given")
        call("encode.update_raw", {"record_id": record_id, "suppressed": suppressed, "visibility": visibility,
                                   "secrecy_level": secrecy_level})
        return {"record_id": record_id, "updated": True}

    @server.tool(annotations=WRITES)
    @_tool
    def batch_store(
        records: Annotated[list[BatchRecord], Field(min_length=1, max_length=1000, description=(
            "up to 1000 memories: {content, store?, emotion?, summary?, meta?, metadata?}"))],
        infer_associations: Annotated[bool, Field(description="link the records in sequence")] = True,
    ) -> dict[str, Any]:
        """Remember many things at once (one transaction)."""
        requests = [{"content": _content(r.content, r.summary), "store": r.store, "emotion": _emotion(r.emotion),
                     "meta": r.meta, "metadata": r.metadata} for r in records]
        return call("encode.batch", {"records": [_drop_none(r) for r in requests],
                                     "infer_associations": infer_associations})

    @server.tool(annotations=WRITES)
    @_tool
    def batch_store_raw(
        records: Annotated[list[RawBatchRecord], Field(min_length=1, max_length=1000, description=(
            "up to 1000 verbatim records: {content, session_id?, turn_id?, topic_id?, source?, speaker?, "
            "visibility?, secrecy_level?, meta?, metadata?}"))],
        session_id: Annotated[str | None, Field(description="the session of records that name none")] = None,
    ) -> dict[str, Any]:
        """Append many verbatim records to the raw journal at once."""
        requests = []
        for i, r in enumerate(records):
            sid = r.session_id or session_id
            if not sid:
                raise _bad(f"records[{i}].session_id: field required", hint="give it, or session_id for all")
            fields = r.model_dump(exclude={"content", "session_id"}, exclude_none=True)
            requests.append({**fields, "content": _content(r.content), "session_id": sid})
        return call("encode.batch_raw", {"records": requests})

    # ------------------------------------------------------------ recall

    @server.tool(annotations=READ_ONLY)
    @_tool
    def recall(
        query: Annotated[str | None, Field(description="what to look for; omit it for the latest memories")] = None,
        limit: Limit = 10,
        stores: Stores = None,
        min_fidelity: Fidelity = None,
        reconsolidate: Annotated[bool, Field(description="strengthen what is recalled (as remembering does)")] = True,
        activation_depth: Depth = 2,
    ) -> dict[str, Any]:
        """Find memories by keywords, meaning (when vector search is on) and associations, best first."""
        result = call("recall.query", {
            "cue": _drop_none({"text": query}), "limit": limit, "stores": stores, "min_fidelity": min_fidelity,
            "reconsolidate": reconsolidate, "activation_depth": activation_depth, "recall_mode": "perfect"})
        return {"memories": [_memory(hit) for hit in result.get("memories", [])],
                "total_candidates": result.get("total_candidates", 0),
                "query_metadata": result.get("query_metadata")}

    @server.tool(annotations=READ_ONLY)
    @_tool
    def recall_raw(
        session_id: Annotated[str | None, Field(description="only this session")] = None,
        query: Annotated[str | None, Field(description="words to search for")] = None,
        start: When = None,
        end: When = None,
        limit: Limit = 10,
        include_private_scratch: bool = False,
        include_sealed: bool = False,
        secrecy_levels: SecrecyLevels = None,
    ) -> dict[str, Any]:
        """Search the raw journal (verbatim turns and tool output) by session, words or time."""
        result = call("recall.raw_query", {
            "session_id": session_id, "query": query, "temporal": _range(start, end), "limit": limit,
            "include_private_scratch": include_private_scratch, "include_sealed": include_sealed,
            "secrecy_levels": secrecy_levels})
        return {"records": [_raw(r) for r in result.get("records", [])],
                "total_candidates": result.get("total_candidates", 0)}

    @server.tool(annotations=READ_ONLY)
    @_tool
    def timeline(
        start: Annotated[datetime | None, Field(description="RFC 3339; default: 7 days before end")] = None,
        end: Annotated[datetime | None, Field(description="RFC 3339; default: now")] = None,
        granularity: GranularityName = "hour",
        stores: Stores = None,
        min_fidelity: Fidelity = None,
        limit_per_bucket: Annotated[int, Field(json_schema_extra=_bounds(1, 1000))] = 50,
    ) -> dict[str, Any]:
        """Memories of a period, grouped in time buckets (default: the last 7 days, by hour)."""
        end = end or datetime.now(UTC)
        start = start or end - timedelta(days=7)
        result = call("recall.timeline", {
            "range": _range(start, end), "granularity": granularity, "stores": stores,
            "min_fidelity": min_fidelity, "limit_per_bucket": limit_per_bucket})
        return {"buckets": [{"start": b["start"], "end": b["end"], "count": b["count"],
                             "memories": [_memory(hit) for hit in b.get("memories", [])]}
                            for b in result.get("buckets", [])]}

    @server.tool(annotations=READ_ONLY)
    @_tool
    def associate(
        record_id: RecordId,
        depth: Depth = 1,
        limit: Annotated[int, Field(json_schema_extra=_bounds(1, 256))] = 10,
        min_weight: Annotated[float, Field(json_schema_extra=_bounds(0, 1), description="ignore weaker links")] = 0.0,
        association_types: Annotated[list[AssociationName] | None, Csv,
                                     Field(description="follow only these kinds of link")] = None,
    ) -> dict[str, Any]:
        """Memories linked to a record, by spreading activation along its associations."""
        result = call("recall.associate", {"record_id": record_id, "depth": depth, "limit": limit,
                                           "min_weight": min_weight, "association_types": association_types})
        return {"memories": [_memory(hit) for hit in result.get("memories", [])],
                "total_candidates": result.get("total_candidates", 0)}

    # ------------------------------------------------------------ lifecycle

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
    @_tool
    def forget(
        record_ids: Annotated[list[str], Csv, Field(min_length=1, description="the records to delete")],
        confirm: Annotated[bool, Field(description="must be true: forgetting is permanent")] = False,
        cascade: Annotated[bool, Field(description="also delete the records they link to")] = False,
    ) -> dict[str, Any]:
        """Delete records permanently (needs confirm=true)."""
        return call("lifecycle.forget", {"record_ids": record_ids, "cascade": cascade, "confirm": confirm})

    @server.tool(annotations=WRITES)
    @_tool
    def consolidate(
        strategy: StrategyName = "incremental",
        dry_run: Annotated[bool, Field(description="report what would change, change nothing")] = False,
    ) -> dict[str, Any]:
        """Merge duplicate memories and promote episodic ones to semantic facts."""
        return call("lifecycle.consolidate", {"strategy": strategy, "dry_run": dry_run,
                                              "min_age_hours": 0, "min_access_count": 0})

    @server.tool(annotations=WRITES)
    @_tool
    def dream_tick(
        session_id: Annotated[str | None, Field(description="only this session's journal")] = None,
        dry_run: bool = False,
        max_groups: Annotated[int, Field(json_schema_extra=_bounds(1, 10_000))] = 10,
        promote_semantic: Annotated[bool, Field(description="also extract semantic facts")] = True,
        include_private_scratch: bool = False,
        include_sealed: bool = False,
        secrecy_levels: SecrecyLevels = None,
    ) -> dict[str, Any]:
        """Turn unprocessed raw-journal topics into episodic summaries and semantic facts."""
        return call("lifecycle.dream_tick", {
            "session_id": session_id, "dry_run": dry_run, "max_groups": max_groups,
            "promote_semantic": promote_semantic, "include_private_scratch": include_private_scratch,
            "include_sealed": include_sealed, "secrecy_levels": secrecy_levels})

    @server.tool(annotations=WRITES)
    @_tool
    def export(
        output_path: Annotated[str, Field(description=(
            "a new file to write (no '..', its directory must exist, never overwritten); on a shared "
            "server, a name inside its export directory"))],
        format: ExportFormat = "cma",
        encrypt: bool = False,
        encryption_key: Annotated[str | None, Field(description="the passphrase when encrypt is true")] = None,
    ) -> dict[str, Any]:
        """Write every store and the raw journal to an archive file."""
        if format not in ("cma", "jsonl"):
            raise _bad(f"format: {format!r} is not cma or jsonl")
        path = export_target(output_path, export_root)
        result = call("lifecycle.export", {"format": format, "include_raw_journal": True, "encrypt": encrypt,
                                           "encryption_key": encryption_key})
        data = result.get("archive_data")
        if not data:
            raise CMPError(ErrorCode.EXPORT_FAILED, "the server returned no archive data")
        with write_new(path) as out:
            out.write(base64.b64decode(data))
        return {"output_path": str(path), **{k: v for k, v in result.items() if k != "archive_data"}}

    # ------------------------------------------------------------ introspect

    @server.tool(annotations=READ_ONLY)
    @_tool
    def stats() -> dict[str, Any]:
        """Counts per store, average fidelity, journal and index figures, search configuration."""
        return call("introspect.stats", {})

    @server.tool(annotations=READ_ONLY)
    @_tool
    def inspect(record_id: RecordId) -> dict[str, Any]:
        """Everything stored about one record: content, fidelity, emotion, associations, meta-memory."""
        return _readable_record(call("introspect.record", {"record_id": record_id}))

    return server


# ---------------------------------------------------------------- stdio


def _log_to_stderr() -> None:
    """stdout carries the protocol only: every log line goes to stderr."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="cerememory mcp: %(levelname)s %(name)s: %(message)s")


def check_server_url(url: str, api_key: str | None) -> None:
    """An http(s) URL, and never an API key in plaintext to another machine."""
    from .guard import is_loopback

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(f"--server-url: {url!r} is not an http:// or https:// URL", hint="e.g. http://127.0.0.1:8420")
    if api_key and parts.scheme == "http" and not is_loopback(parts.hostname):
        raise _bad(f"refusing to send the API key over plaintext http:// to {parts.hostname}",
                   hint="use an https:// URL, or reach the server over loopback (e.g. an SSH tunnel)")


def run_stdio(url: str, *, api_key: str | None = None, timeout: float | None = 30.0) -> None:
    """Serve the tools over stdio, proxying every call to the Cerememory server at `url`.

    Returns when the client closes stdin. Raises `CMPError` (VALIDATION_ERROR) for a bad URL or an
    API key that would travel in plaintext to a non-loopback host.
    """
    _log_to_stderr()
    check_server_url(url, api_key)
    from .client import Client

    with Client(url, api_key=api_key, timeout=timeout) as client:
        build_mcp_server(client).run("stdio")


# ---------------------------------------------------------------- streamable HTTP


class _Endpoint:
    """The ASGI app at /mcp: the SDK's session manager, started by the app's lifespan when it
    runs, else lazily on the first request (the server runs uvicorn with lifespan="off")."""

    def __init__(self, manager: Any, stream_seconds: float) -> None:
        self.manager = manager
        self.stream_seconds = stream_seconds
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        self._ready = asyncio.Event()
        async with self.manager.run():
            self._ready.set()
            yield

    async def _run_in_background(self) -> None:
        assert self._ready is not None
        try:
            async with self.manager.run():
                self._ready.set()
                await asyncio.Event().wait()  # until the event loop cancels this task at shutdown
        finally:
            self._ready.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run_in_background(), name="mcp-sessions")
        await self._ready.wait()
        if scope.get("method") == "GET":
            await _ending_after(self.stream_seconds, self.manager.handle_request, scope, receive, send)
        else:
            await self.manager.handle_request(scope, receive, send)


async def _ending_after(seconds: float, app: Any, scope: Any, receive: Any, send: Any) -> None:
    """Run `app`, and end a response it still streams after `seconds` with its final, empty chunk.

    A GET on the stateless endpoint opens an event stream on which nothing is ever sent (there is
    no session to send for); unbounded, every such stream would hold a connection and a task.
    """
    state = {"started": False, "ended": False}

    async def tracked(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            state["started"] = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            state["ended"] = True
        await send(message)

    with anyio.move_on_after(seconds):
        await app(scope, receive, tracked)
    if state["started"] and not state["ended"]:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def mount_streamable_http(app: Any, engine: Engine, *, path: str = MCP_PATH,
                          stream_seconds: float = STREAM_SECONDS, export_root: Path | None = None) -> None:
    """Serve the same tools over `engine` as streamable HTTP at `path` of the FastAPI `app`.

    Stateless JSON mode: every tool call is one POST answered with JSON, so no session state
    outlives a request; a GET event stream is ended after `stream_seconds`. Host, Origin and
    Content-Type are checked by the app's middleware as on every route (transport/guard.py), so
    the SDK's own loopback-only check is off: it would refuse a keyed server's own address. The
    `export` tool writes only under `export_root` (default: the engine's `archive.export_dir`, else
    data_dir/exports).
    """
    root = export_root or engine.options.archive.export_root(engine.data_dir)
    server = build_mcp_server(engine, export_root=root)
    server.streamable_http_app(streamable_http_path=path, stateless_http=True, json_response=True,
                               max_request_body_size=MCP_BODY_LIMIT,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    endpoint = _Endpoint(server.session_manager, stream_seconds)
    app.router.add_route(path, endpoint, include_in_schema=False)

    previous = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        async with endpoint.lifespan(), previous(application) as state:
            yield state

    app.router.lifespan_context = lifespan
