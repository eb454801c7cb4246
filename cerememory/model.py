"""The record model: memory records, content blocks, emotion, associations, meta-memory, raw journal.

Every type here is a pydantic model so that one definition validates JSON from any transport,
serialises to JSON (bytes as base64) and to Python values for the msgpack codec.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import struct
import sys
import threading
import time
import uuid
from binascii import a2b_base64, b2a_base64
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from itertools import repeat
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    Strict,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .limits import MAX_META_BYTES, MAX_META_ITEMS, MIB, StoredJson, text_bytes

# ---------------------------------------------------------------- identifiers and time

_uuid7_lock = threading.Lock()
_uuid7_last = (0, 0)


class _RandomBytes:
    """Bytes from `os.urandom`, drawn a few kilobytes at a time: each draw is a system call that
    lets go of the interpreter lock, and a server thread writing a set of stores, one id each,
    then waited to get the lock back from the event loop once for every store. Callers hold
    `_uuid7_lock`. A forked child draws afresh, so that it never repeats its parent's bytes."""

    SIZE = 4096

    def __init__(self) -> None:
        self._bytes, self._at = b"", 0
        os.register_at_fork(after_in_child=self.forget)

    def forget(self) -> None:
        self._bytes, self._at = b"", 0

    def take(self, count: int) -> bytes:
        if count > self.SIZE // 4:  # a batch's ids: one draw of their own
            return os.urandom(count)
        if self._at + count > len(self._bytes):
            self._bytes, self._at = os.urandom(self.SIZE), 0
        taken = self._bytes[self._at:self._at + count]
        self._at += count
        return taken


_random = _RandomBytes()


def new_id() -> uuid.UUID:
    """A UUIDv7: time-ordered, so ids sort by creation and index locality stays good."""
    return new_ids(1)[0]


_RANDOM_BITS = (1 << 62) - 1
_FEW_IDS = 32  # below it, one id at a time is quicker than setting up a conversion in bulk
_MS_BITS = (1 << 48) - 1
_V7 = 0x7 << 76 | 0b10 << 62  # the version and variant bits


def new_ids(count: int) -> list[uuid.UUID]:
    """`count` UUIDv7s in creation order, with one clock read and one take of random bytes for
    all (a batch makes a thousand). Within a millisecond the 12-bit counter after the time
    orders them; a counter that runs out carries into the next millisecond, so ids made in one
    process always sort in the order they were made."""
    global _uuid7_last
    with _uuid7_lock:
        ms = time.time_ns() // 1_000_000
        last_ms, last_seq = _uuid7_last
        if ms <= last_ms:
            start = (last_ms << 12 | last_seq) + 1
        else:
            start = ms << 12 | int.from_bytes(_random.take(2), "big") & 0x3FF
        end = start + count - 1
        _uuid7_last = (end >> 12, end & 0xFFF)
        drawn = _random.take(8 * count)
    rand = struct.unpack(f">{count}Q", drawn)
    numbers = [(counter >> 12 & _MS_BITS) << 80 | (counter & 0xFFF) << 64 | _V7 | r & _RANDOM_BITS
               for counter, r in zip(range(start, end + 1), rand, strict=True)]
    return uuids_of_ints(numbers) if count >= _FEW_IDS else [_uuid_of_int(n) for n in numbers]


def _uuid_of_int(number: int) -> uuid.UUID:
    """`uuid.UUID(int=number)` for a number known to be a valid UUID, without the constructor's
    checks: opening or storing 100k records builds 100k of these."""
    value = object.__new__(uuid.UUID)
    object.__setattr__(value, "int", number)
    object.__setattr__(value, "is_safe", uuid.SafeUUID.unknown)
    return value


def uuids_of_hex(hexes: Sequence[str]) -> list[uuid.UUID]:
    """`[uuid.UUID(h) for h in hexes]` for trusted 32-digit hex ids (a bulk read from our own
    database), about twice as fast: every step is a builtin mapped over the whole list, so no
    Python frame runs per id. Opening 100k records builds 100k of these."""
    return uuids_of_ints(list(map(int, hexes, repeat(16, len(hexes)))))


def uuids_of_ints(numbers: Sequence[int]) -> list[uuid.UUID]:
    """`[uuid.UUID(int=n) for n in numbers]` for numbers known to be valid UUIDs (ids read
    back from our own database or indexes), every step a builtin mapped over the whole list."""
    n = len(numbers)
    ids = list(map(object.__new__, repeat(uuid.UUID, n)))
    deque(map(object.__setattr__, ids, repeat("int", n), numbers), maxlen=0)
    deque(map(object.__setattr__, ids, repeat("is_safe", n), repeat(uuid.SafeUUID.unknown, n)), maxlen=0)
    return ids


_HYPHEN = 45  # b"-"
_INT_OF = operator.attrgetter("int")
_BYTES_OF = operator.methodcaller("to_bytes", 16, "big")
_DIGIT_AT = [*range(0, 8), *range(9, 13), *range(14, 18), *range(19, 23), *range(24, 36)]  # 8-4-4-4-12


def uuid_texts(ids: Sequence[uuid.UUID]) -> list[str]:
    """`[str(i) for i in ids]`, about twice as fast for a batch's thousand ids (its documents and
    audit entries name every one): all hex digits made at once, the hyphens put in by numpy."""
    n = len(ids)
    if n < _FEW_IDS:
        return [str(i) for i in ids]
    import numpy as np  # loaded already wherever batches are written; a short command never gets here

    raw = b"".join(map(_BYTES_OF, map(_INT_OF, ids)))
    digits = np.frombuffer(raw.hex().encode("ascii"), dtype=np.uint8).reshape(n, 32)
    text = np.full((n, 36), _HYPHEN, dtype=np.uint8)
    text[:, _DIGIT_AT] = digits
    joined = text.tobytes().decode("ascii")
    return list(map(joined.__getitem__, map(slice, range(0, 36 * n, 36), range(36, 36 * n + 1, 36))))


def uuid_from_text(text: str) -> uuid.UUID:
    """`uuid.UUID(text)` for trusted, canonical text (ids read back from our own database)."""
    return _uuid_of_int(int(text.replace("-", ""), 16))


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_ts(value: datetime) -> float:
    """Seconds since the epoch: how times are stored and compared in RAM."""
    return value.timestamp()


def from_ts(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _as_utc(value: Any) -> Any:
    """Naive datetimes are UTC. A number is refused: JSON carries instants as RFC 3339 text, and
    pydantic would otherwise read `0` or `true` as 1970."""
    if value.__class__ is str:  # JSON's form, parsed by pydantic: every instant of an answer read
        return value
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        raise PydanticCustomError("datetime_type", "expected an RFC 3339 date-time string, not a number")
    return value


# Instants a request gives are kept far from the calendar's ends: arithmetic on them (time zones,
# float timestamps, a timeline's week and month buckets) must never step outside what datetime can
# hold, or a stored record could not be read back.
EARLIEST = datetime(100, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _in_range(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise PydanticCustomError("datetime_range", "instants must lie from the year 100 up to the year 9000")
    return value


INSTANTS_KEPT = 1 << 16  # instants whose wire form is kept (`iso_utc`, the gRPC Timestamp's)


@functools.lru_cache(maxsize=INSTANTS_KEPT)
def iso_utc(value: datetime) -> str:
    """An instant as JSON carries it: RFC 3339 in UTC, `Z` for the offset.

    Kept by instant (equal instants are one text, whatever their zone): a record's times are
    mostly one instant (created, updated, last accessed, captured), and an answer repeats the
    records of the answers before it, so most values cost a lookup instead of formatting."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


UtcDatetime = Annotated[datetime, BeforeValidator(_as_utc), PlainSerializer(iso_utc, when_used="json")]
Instant = Annotated[UtcDatetime, AfterValidator(_in_range)]  # an instant a request gives


# ---------------------------------------------------------------- bytes on the wire


def base64_text(value: bytes) -> str:
    """Bytes as JSON carries them (b64encode's core, without its extra steps)."""
    return b2a_base64(value, newline=False).decode("ascii")


def _parse_bytes(value: Any) -> Any:
    """Bytes arrive as base64 strings (our form) or integer arrays (the reference's form)."""
    if type(value) is bytes:  # a text block's data, made from its text: the usual case, first
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return a2b_base64(value, strict_mode=True)  # b64decode(validate=True), without its regex
        except ValueError as exc:
            raise PydanticCustomError("bytes_encoding", "bytes must be base64 or an integer array") from exc
    if isinstance(value, list):
        if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value):
            raise PydanticCustomError("bytes_encoding", "integer array entries must be 0..255")
        return bytes(value)
    return value



def _same_bytes(given: Any, data: bytes) -> bool:
    """Whether `given`, in any form `_parse_bytes` takes, is `data`. Base64 is compared encoded
    first: an answer read back carries each text block twice, as text and as its base64."""
    if isinstance(given, str) and b2a_base64(data, newline=False) == given.encode("utf-8", "surrogatepass"):
        return True
    return bool(_parse_bytes(given) == data)

Bytes = Annotated[
    bytes,
    BeforeValidator(_parse_bytes),
    PlainSerializer(base64_text, when_used="json"),
]


# A vector checked where pydantic-core parses it (finite, at least one number), with no Python
# call per vector: a batch of a thousand 384-d vectors validates at the speed of the parser.
Embedding = Annotated[list[Annotated[float, Strict(), AllowInfNan(False)]], Field(min_length=1)]


def _parse_f32(value: Any) -> bytes:
    """A vector's float32 bytes from base64 text (JSON), bytes (gRPC, in process) or, in process,
    a 1-D numpy array of any real dtype (cast to float32 here, so a float64 row is no mistake),
    held to the rules of `Embedding`: at least one component, every one finite. One validator
    for both steps: a batch of a thousand vectors calls it a thousand times."""
    return _f32_bytes(value, "embedding_f32", 1)


def _parse_f32_rows(value: Any) -> bytes:
    """`EmbeddingRowsF32`: the rows of a matrix as one run of float32 bytes, from base64 text,
    bytes or, in process, a 2-D numpy array, every value finite; checked in one pass, whatever
    the number of rows. How many rows it holds is the request's to check (`EncodeBatchRequest`)."""
    return _f32_bytes(value, "embeddings_f32", 2)


def _f32_bytes(value: Any, field: str, ndim: int) -> bytes:
    """`value` as little-endian float32 bytes, all finite; `ndim`: the shape an array must have."""
    np = sys.modules.get("numpy")  # a caller holding an array has numpy loaded: short commands never load it
    if np is not None and isinstance(value, np.ndarray):
        if value.ndim == ndim and value.dtype.str == "<f4":  # the usual array: no cast, no error state to set up
            return _finite_f32(value.tobytes(), field, value)
        if value.ndim != ndim or value.dtype.kind not in "fiu":
            raise PydanticCustomError("vector_encoding", "{field} as an array must be {ndim}-D and real, "
                                      "not {shape} {dtype}",
                                      {"field": field, "ndim": ndim, "shape": value.shape, "dtype": str(value.dtype)})
        with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf, refused below
            cast = value.astype("<f4")
        return _finite_f32(cast.tobytes(), field, cast)
    if isinstance(value, bytes | bytearray | memoryview):
        return _finite_f32(bytes(value), field)
    if isinstance(value, str):
        try:
            data = a2b_base64(value, strict_mode=True)
        except ValueError:
            raise PydanticCustomError("vector_encoding", "{field} is not valid base64", {"field": field}) from None
        return _finite_f32(data, field)
    raise PydanticCustomError("vector_encoding", "{field} must be base64 text of little-endian float32 values",
                              {"field": field})


def _finite_f32(data: bytes, field: str, values: Any = None) -> bytes:
    """`data` when it holds at least one float32 and every one is finite (`values`: the same
    numbers as an array, when the caller has one)."""
    if not data or len(data) % 4:
        raise PydanticCustomError("vector_encoding", "{field} is {size} bytes, not a whole number of float32 "
                                  "values (4 bytes each)", {"field": field, "size": len(data)})
    import numpy as np

    if not np.isfinite(np.frombuffer(data, "<f4") if values is None else values).all():
        raise PydanticCustomError("vector_encoding", "{field} must hold finite numbers (no NaN or Infinity)",
                                  {"field": field})
    return data


# The compact form of `Embedding` (after OpenAI's `encoding_format: "base64"`): little-endian float32,
# base64 in JSON like every bytes field, raw bytes in gRPC and in process. Four bytes a component
# instead of about twenty characters of JSON, and no Python float per component anywhere: the engine
# reads a batch's vectors into one matrix straight from these bytes.
EmbeddingF32 = Annotated[bytes, BeforeValidator(_parse_f32), PlainSerializer(base64_text, when_used="json")]

# Many vectors of one dimension in that form, row after row (`encode.batch`'s `embeddings_f32`):
# a 2-D array in process, one base64 string in JSON, one bytes field in gRPC. A batch's vectors
# are then checked, sent and read as one matrix, with nothing done per row.
EmbeddingRowsF32 = Annotated[bytes, BeforeValidator(_parse_f32_rows), PlainSerializer(base64_text, when_used="json")]


# ---------------------------------------------------------------- enums


class StoreType(StrEnum):
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    EMOTIONAL = "emotional"
    WORKING = "working"


ALL_STORES = tuple(StoreType)
STORE_CODE = {s: i for i, s in enumerate(ALL_STORES)}  # a store as a small int, for numpy filters


class Modality(StrEnum):
    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    STRUCTURED = "structured"
    SPATIAL = "spatial"
    TEMPORAL = "temporal"
    INTEROCEPTIVE = "interoceptive"


MODALITY_LIMITS: dict[Modality, int] = {
    Modality.TEXT: 1 * MIB,
    Modality.STRUCTURED: 1 * MIB,
    Modality.SPATIAL: 1 * MIB,
    Modality.TEMPORAL: 1 * MIB,
    Modality.INTEROCEPTIVE: 1 * MIB,
    Modality.IMAGE: 10 * MIB,
    Modality.AUDIO: 50 * MIB,
    Modality.VIDEO: 50 * MIB,
}

# Modalities whose payload is JSON text and therefore searchable once flattened.
JSON_MODALITIES = {Modality.STRUCTURED, Modality.SPATIAL, Modality.TEMPORAL, Modality.INTEROCEPTIVE}

DEFAULT_FORMATS: dict[Modality, str] = {
    Modality.TEXT: "text/plain",
    Modality.STRUCTURED: "application/json",
    Modality.SPATIAL: "application/json",
    Modality.TEMPORAL: "application/json",
    Modality.INTEROCEPTIVE: "application/json",
    Modality.IMAGE: "application/octet-stream",
    Modality.AUDIO: "application/octet-stream",
    Modality.VIDEO: "application/octet-stream",
}


class AssociationType(StrEnum):
    TEMPORAL = "temporal"
    SPATIAL = "spatial"
    SEMANTIC = "semantic"
    EMOTIONAL = "emotional"
    CAUSAL = "causal"
    SEQUENTIAL = "sequential"
    CROSS_MODAL = "cross_modal"
    USER_DEFINED = "user_defined"


class RawSource(StrEnum):
    CONVERSATION = "conversation"
    TOOL_IO = "tool_io"
    SCRATCHPAD = "scratchpad"
    SUMMARY = "summary"
    IMPORTED = "imported"


class RawSpeaker(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class RawVisibility(StrEnum):
    NORMAL = "normal"
    PRIVATE_SCRATCH = "private_scratch"
    SEALED = "sealed"


class SecrecyLevel(StrEnum):
    PUBLIC = "public"
    SENSITIVE = "sensitive"
    SECRET = "secret"


class CaptureStatus(StrEnum):
    PROVIDED = "provided"
    INFERRED = "inferred"
    LEGACY = "legacy"
    UNAVAILABLE = "unavailable"


class MetaRelation(StrEnum):
    MOTIVATED_BY = "motivated_by"
    CAUSED_BY = "caused_by"
    DERIVED_FROM = "derived_from"
    SUPPORTS = "supports"
    CONTRADICTS = "contradicts"
    CHOSE_OVER = "chose_over"
    EXPLAINS = "explains"
    CONTEXT_OF = "context_of"


class RecallMode(StrEnum):
    HUMAN = "human"
    PERFECT = "perfect"


# ---------------------------------------------------------------- base


class Model(BaseModel):
    """Strict about unknown fields so that a typo in a request is an error, not a silent no-op.

    Any string-length constraint, even `str_min_length=0`, makes pydantic-core read every `str`
    field (and `dict[str, ...]` key) as UTF-8, so text that is not valid Unicode (a lone
    surrogate such as U+D800, which `json.loads` lets through) fails validation naming its
    field (type `string_unicode`) instead of failing later, deep in storage or indexing.
    Free-form JSON values get the same check from `limits`."""

    # defer_build: a model's validator is built when first used, so a short command pays only for
    # the few models it touches, not for all of them at import
    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_enum_values=False, str_min_length=0,
                              defer_build=True)


Score = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False, strict=True)]  # `true` is not 1.0


# ---------------------------------------------------------------- content


ANSWER_CONTEXT = {"answer": True}
"""The validation context of a server's answer read back by a client: its content was checked as
it was written, so a content block takes its text as it comes, without the request's checks."""


class ContentBlock(Model):
    modality: Modality = Modality.TEXT
    format: str | None = None
    data: Bytes = b""
    embedding: Embedding | None = None
    embedding_f32: EmbeddingF32 | None = None  # the same vector in compact form; give one of the two

    @model_validator(mode="before")
    @classmethod
    def _accept_text(cls, value: Any, info: ValidationInfo) -> Any:
        """`{"text": "..."}` is accepted as a convenience for a UTF-8 text block. A block without
        a format gets its modality's here, where it costs a dict lookup (an assignment after
        validation costs pydantic several times that)."""
        if not isinstance(value, dict):
            return value
        modality = value.get("modality", Modality.TEXT)
        default_format = (DEFAULT_FORMATS.get(modality)  # type: ignore[call-overload]  # a StrEnum key
                          if value.get("format") is None and isinstance(modality, str) else None)
        if default_format is None and "text" not in value:
            return value
        value = dict(value)
        if default_format is not None:
            value["format"] = default_format
        if "text" in value:
            text = value.pop("text")
            if not isinstance(text, str):
                raise PydanticCustomError("string_type", "text must be a string")
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise PydanticCustomError("string_unicode", "text is not valid Unicode: a lone surrogate "
                                          "at character {pos}", {"pos": exc.start}) from None
            answer = info.context is ANSWER_CONTEXT  # an answer's text was written from its data
            if "data" in value and not answer and not _same_bytes(value["data"], data):
                raise PydanticCustomError("text_mismatch", "give either text or data, not both")
            value["data"] = data
        return value

    @model_serializer(mode="wrap")
    def _with_text(self, handler: Any, info: Any) -> Any:
        """JSON readers get text blocks as text too, beside the base64 `data`."""
        data = handler(self)
        if info.mode == "json" and self.modality is Modality.TEXT and isinstance(data, dict):
            data["text"] = self.data.decode("utf-8")
        return data

    @model_validator(mode="after")
    def _check_payload(self, info: ValidationInfo) -> ContentBlock:
        if self.format is None:
            self.format = DEFAULT_FORMATS[self.modality]
        if info.context is ANSWER_CONTEXT:
            return self
        limit = MODALITY_LIMITS[self.modality]
        if len(self.data) > limit:
            raise PydanticCustomError(
                "content_too_large",
                "{modality} block is {size} bytes; the limit is {limit} bytes",
                {"modality": self.modality.value, "size": len(self.data), "limit": limit},
            )
        if not self.data:
            raise PydanticCustomError("empty_content", "block has no data")
        if self.embedding is not None and self.embedding_f32 is not None:
            raise PydanticCustomError("vector_encoding", "give either embedding or embedding_f32, not both")
        if self.modality is Modality.TEXT or self.modality in JSON_MODALITIES:
            try:
                text = self.data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PydanticCustomError(
                    "invalid_utf8", "{modality} block is not valid UTF-8 (byte {pos})",
                    {"modality": self.modality.value, "pos": exc.start},
                ) from exc
            if self.modality in JSON_MODALITIES:
                try:
                    json.loads(text)
                except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands deep
                    error = str(exc) if isinstance(exc, ValueError) else "nested too deeply to parse"
                    raise PydanticCustomError(
                        "invalid_json", "{modality} block is not valid JSON: {error}",
                        {"modality": self.modality.value, "error": error},
                    ) from None
            elif not text.strip():
                raise PydanticCustomError("empty_content", "text block is blank")
        return self

    @property
    def text(self) -> str | None:
        """The block as a string when it is text or JSON, else None."""
        if self.modality is Modality.TEXT or self.modality in JSON_MODALITIES:
            return self.data.decode("utf-8")
        return None

    @classmethod
    def of_text(cls, text: str, embedding: list[float] | None = None) -> ContentBlock:
        return cls(modality=Modality.TEXT, data=text.encode("utf-8"), embedding=embedding)


class MemoryContent(Model):
    blocks: list[ContentBlock] = Field(min_length=1)
    summary: str | None = None

    @field_validator("summary")
    @classmethod
    def _summary_size(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode("utf-8")) > MODALITY_LIMITS[Modality.TEXT]:
            raise PydanticCustomError("content_too_large", "summary exceeds 1 MiB")
        return value

    @classmethod
    def of_text(cls, text: str, *, summary: str | None = None,
                embedding: list[float] | None = None) -> MemoryContent:
        return cls(blocks=[ContentBlock.of_text(text, embedding)], summary=summary)

    def plain_text(self) -> str:
        """Text blocks joined: what a person would read."""
        return "\n".join(b.text for b in self.blocks if b.modality is Modality.TEXT and b.text)

    def first_embedding(self) -> list[float] | bytes | None:
        """The caller's vector: a list of floats, or little-endian float32 bytes (`embedding_f32`)."""
        for block in self.blocks:
            if block.embedding is not None:
                return block.embedding
            if block.embedding_f32 is not None:
                return block.embedding_f32
        return None


# ---------------------------------------------------------------- fidelity and emotion


class FidelityState(Model):
    score: Score = 1.0
    noise_level: Score = 0.0
    decay_rate: Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)] = 0.3
    emotional_anchor: Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False)] = 1.0
    reinforcement_count: int = Field(default=0, ge=0)
    stability: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0
    last_decay_tick: UtcDatetime = Field(default_factory=utcnow)


EMOTION_CHANNELS = ("joy", "trust", "fear", "surprise", "sadness", "disgust", "anger", "anticipation")

_LABELS: dict[str, tuple[str, float]] = {
    "joy": ("joy", 1.0), "happy": ("joy", 1.0), "happiness": ("joy", 1.0),
    "trust": ("trust", 0.7),
    "fear": ("fear", -0.8),
    "surprise": ("surprise", 0.0),
    "sadness": ("sadness", -1.0), "sad": ("sadness", -1.0),
    "disgust": ("disgust", -0.9),
    "anger": ("anger", -0.9), "angry": ("anger", -0.9),
    "anticipation": ("anticipation", 0.4), "anticipatory": ("anticipation", 0.4),
}


class EmotionVector(Model):
    joy: Score = 0.0
    trust: Score = 0.0
    fear: Score = 0.0
    surprise: Score = 0.0
    sadness: Score = 0.0
    disgust: Score = 0.0
    anger: Score = 0.0
    anticipation: Score = 0.0
    intensity: Score = 0.0
    valence: Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False, strict=True)] = 0.0

    @classmethod
    def from_label(cls, label: str) -> EmotionVector:
        """Parse a Plutchik label ("joy", "angry", ...) into a full-intensity vector."""
        key = label.strip().lower()
        if key not in _LABELS:
            raise ValueError(
                f"unknown emotion label {label!r}; expected one of {', '.join(sorted(_LABELS))}"
            )
        channel, valence = _LABELS[key]
        return cls(**{channel: 1.0}, intensity=1.0, valence=valence)

    def dominant(self) -> str | None:
        """The strongest channel, or None for a neutral vector."""
        name, value = max(((c, getattr(self, c)) for c in EMOTION_CHANNELS), key=lambda kv: kv[1])
        return name if value > 0 else None

    def channels(self) -> list[float]:
        return [getattr(self, c) for c in EMOTION_CHANNELS]


# ---------------------------------------------------------------- associations


class Association(Model):
    target_id: uuid.UUID
    association_type: AssociationType
    weight: Score
    created_at: UtcDatetime = Field(default_factory=utcnow)
    last_co_activation: UtcDatetime | None = Field(
        None, description="when both ends were last recalled together; until then, when the link was made")

    @model_validator(mode="after")
    def _never_co_activated(self) -> Association:
        """A link never co-activated reads as made-and-activated at once (always a timestamp, as
        the reference SDK's model requires)."""
        if self.last_co_activation is None:
            self.last_co_activation = self.created_at
        return self


# ---------------------------------------------------------------- meta-memory plane


class MetaEvidenceRef(Model):
    record_id: uuid.UUID | None = None
    raw_record_id: uuid.UUID | None = None
    label: str | None = None
    excerpt: str | None = None
    uri: str | None = None
    confidence: Score | None = None


class MetaAlternative(Model):
    option: str
    reason: str | None = None
    chosen: StrictBool = False


class MetaEdge(Model):
    source_id: uuid.UUID | None = None
    target_id: uuid.UUID
    relation: MetaRelation = MetaRelation.CONTEXT_OF
    rationale: str | None = None
    evidence: list[MetaEvidenceRef] = Field(default_factory=list)
    confidence: Score | None = None
    created_at: UtcDatetime | None = None

    @field_validator("target_id")
    @classmethod
    def _not_nil(cls, value: uuid.UUID) -> uuid.UUID:
        if value.int == 0:
            raise ValueError("target_id must not be the nil UUID")
        return value


_OLD_PLACEHOLDER = "no meta-memory was supplied with this record"


class MetaMemory(Model):
    """Why a memory exists: intent, rationale, evidence, alternatives, decision, context edges."""

    schema_version: StrictInt = Field(default=1, ge=1)
    capture_status: CaptureStatus = CaptureStatus.LEGACY
    intent: str | None = None
    rationale: str | None = None
    trigger: str | None = None
    goals: list[str] = Field(default_factory=list)
    evidence: list[MetaEvidenceRef] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)
    alternatives: list[MetaAlternative] = Field(default_factory=list)
    decision: str | None = None
    confidence: Score | None = None
    source_record_ids: list[uuid.UUID] = Field(default_factory=list)
    parent_meta_ids: list[uuid.UUID] = Field(default_factory=list)
    context_edges: list[MetaEdge] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    captured_at: UtcDatetime | None = None

    @model_validator(mode="after")
    def _no_placeholder(self) -> MetaMemory:
        """Records stored by earlier releases carry a placeholder rationale where no meta-memory
        was supplied; it is no rationale, so it reads back as none."""
        if self.capture_status is CaptureStatus.UNAVAILABLE and self.rationale == _OLD_PLACEHOLDER:
            self.rationale = None
        return self

    def texts(self) -> list[str]:
        """Every piece of text the meta-memory holds."""
        parts: list[str | None] = [self.intent, self.rationale, self.trigger, self.decision]
        parts += self.goals + self.assumptions + self.tags
        for ev in self.evidence:
            parts += [ev.label, ev.excerpt, ev.uri]
        for alt in self.alternatives:
            parts += [alt.option, alt.reason]
        for edge in self.context_edges:
            parts.append(edge.rationale)
            for ev in edge.evidence:
                parts += [ev.label, ev.excerpt, ev.uri]
        return [p for p in parts if p]

    def searchable_text(self) -> str:
        """The "why" plane as text; empty unless the meta was provided or inferred."""
        if self.capture_status not in (CaptureStatus.PROVIDED, CaptureStatus.INFERRED):
            return ""
        return "\n".join(self.texts())


_META_LISTS = ("goals", "evidence", "assumptions", "alternatives", "source_record_ids", "parent_meta_ids",
               "context_edges", "tags")


def check_request_meta(meta: MetaMemory) -> MetaMemory:
    """What a client may send as meta-memory (the engine's own, a dream's evidence of every raw
    record of a topic, may hold more): each list, an edge's evidence included, at most
    MAX_META_ITEMS entries, and all its text together at most MAX_META_BYTES."""
    lists = [(name, getattr(meta, name)) for name in _META_LISTS]
    lists += [(f"context_edges[{n}].evidence", edge.evidence) for n, edge in enumerate(meta.context_edges)]
    for name, items in lists:
        if len(items) > MAX_META_ITEMS:
            raise PydanticCustomError("meta_too_many_items", "{name} has {count} entries; the limit is {limit}",
                                      {"name": name, "count": len(items), "limit": MAX_META_ITEMS})
    size = sum(text_bytes(text) for text in meta.texts())
    if size > MAX_META_BYTES:
        raise PydanticCustomError("content_too_large", "holds {size} bytes of text; the limit is {limit}",
                                  {"size": size, "limit": MAX_META_BYTES})
    return meta


def normalise_meta(meta: MetaMemory | None, trigger: str, now: datetime | None = None) -> MetaMemory:
    """Ingest rule: absent meta is `unavailable` (capture_status says so; no field is filled in
    with words that would read as data); supplied legacy meta counts as `provided`."""
    now = now or utcnow()
    if meta is None:
        return MetaMemory(capture_status=CaptureStatus.UNAVAILABLE, trigger=trigger, captured_at=now)
    update: dict[str, Any] = {}
    if meta.capture_status is CaptureStatus.LEGACY:
        update["capture_status"] = CaptureStatus.PROVIDED
    if meta.trigger is None:
        update["trigger"] = trigger
    if meta.captured_at is None:
        update["captured_at"] = now
    return meta.model_copy(update=update) if update else meta


# ---------------------------------------------------------------- records


M = TypeVar("M", bound=BaseModel)
_FIELD_NAMES: dict[type[BaseModel], list[str]] = {}


def built(cls: type[M], values: dict[str, Any]) -> M:
    """`cls.model_construct(**values)` for trusted `values` that name every field of `cls` in
    its order (the order a dump follows), for a model without private attributes: one object,
    no pass over the model's fields. A batch builds a thousand records and their answers so."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = list(cls.model_fields)  # a class property: read once per class
    if list(values) != names:
        raise TypeError(f"{cls.__name__}: give every field in order: {', '.join(names)}")
    return instance_of(cls, values)


_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def instance_of(cls: type[M], values: dict[str, Any]) -> M:
    """The model `built` makes, without its check that `values` name every field in order: for
    code that puts them in order once, when it is made (the gRPC client's builders)."""
    model = cls.__new__(cls)
    _set_dict(model, values)
    _set_fields_set(model, set(values))
    _set_extra(model, None)
    _set_private(model, None)
    return model


class MemoryRecord(Model):
    id: uuid.UUID = Field(default_factory=new_id)
    store: StoreType
    created_at: UtcDatetime = Field(default_factory=utcnow)
    updated_at: UtcDatetime = Field(default_factory=utcnow)
    last_accessed_at: UtcDatetime = Field(default_factory=utcnow)
    access_count: int = Field(default=0, ge=0)
    content: MemoryContent
    fidelity: FidelityState = Field(default_factory=FidelityState)
    emotion: EmotionVector = Field(default_factory=EmotionVector)
    associations: list[Association] = Field(default_factory=list)
    metadata: StoredJson = Field(default_factory=dict)
    version: int = Field(default=1, ge=1)
    meta: MetaMemory = Field(default_factory=MetaMemory)

    @classmethod
    def of_stored(cls, body: RecordBody, id: uuid.UUID, store: StoreType, created_at: datetime,
                  updated_at: datetime, last_accessed_at: datetime, access_count: int,
                  fidelity: FidelityState, version: int, associations: list[Association]) -> MemoryRecord:
        """A record read back: its validated `body` and head values already typed (as validating
        them would leave them), without a second pass over the body's fields."""
        return built(cls, {
            "id": id, "store": store, "created_at": created_at, "updated_at": updated_at,
            "last_accessed_at": last_accessed_at, "access_count": access_count, "content": body.content,
            "fidelity": fidelity, "emotion": body.emotion, "associations": associations,
            "metadata": body.metadata, "version": version, "meta": body.meta,
        })


class RecordBody(Model):
    """The stored body of a `MemoryRecord` (its fields from `content` on that no head holds),
    checked on its own: a record read back is these, validated, beside head values that RAM
    holds already typed (`MemoryRecord.of_stored`)."""

    content: MemoryContent
    emotion: EmotionVector = Field(default_factory=EmotionVector)
    metadata: StoredJson = Field(default_factory=dict)
    meta: MetaMemory = Field(default_factory=MetaMemory)


class RawJournalRecord(Model):
    id: uuid.UUID = Field(default_factory=new_id)
    session_id: str
    turn_id: str | None = None
    topic_id: str | None = None
    source: RawSource = RawSource.CONVERSATION
    speaker: RawSpeaker = RawSpeaker.USER
    visibility: RawVisibility = RawVisibility.NORMAL
    secrecy_level: SecrecyLevel = SecrecyLevel.PUBLIC
    created_at: UtcDatetime = Field(default_factory=utcnow)
    updated_at: UtcDatetime = Field(default_factory=utcnow)
    content: MemoryContent
    metadata: StoredJson = Field(default_factory=dict)
    derived_memory_ids: list[uuid.UUID] = Field(default_factory=list)
    suppressed: bool = False
    meta: MetaMemory = Field(default_factory=MetaMemory)

    @field_validator("session_id")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("session_id must not be blank")
        return value
