"""Pieces of CMP requests that the Python API, the CLI and the MCP tools build alike.

Each helper builds what a request carries and leaves the checking to CMP: a request built here
is validated by the operation's model like any other, so every entry point gets the same error
for the same mistake. Only what CMP cannot read itself is checked here: an emotion given as a
Plutchik label, and a time range given by one end only. The module imports no model at load
time: the CLI builds requests with it before it knows whether it needs the models at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .errors import CMPError, ErrorCode

if TYPE_CHECKING:
    from numpy import ndarray

    from ..model import EmotionVector

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that were given: a field left out takes its CMP default."""
    return {key: value for key, value in values.items() if value is not None}


def text_content(text: str, *, embedding: Sequence[float] | bytes | ndarray | None = None,
                 summary: str | None = None) -> dict[str, Any]:
    """A `MemoryContent` of one text block (with the caller's embedding, when given). A numpy
    array or float32 bytes go as `embedding_f32`, the compact form, never as a list of floats."""
    block: dict[str, Any] = {"modality": "text", "text": text}
    if isinstance(embedding, bytes | bytearray | memoryview) or hasattr(embedding, "__array_interface__"):
        block["embedding_f32"] = embedding
    elif embedding is not None:
        block["embedding"] = list(embedding)
    return drop_none({"blocks": [block], "summary": summary})


def emotion(value: str | EmotionVector | Mapping[str, float] | None, *, field: str = "emotion") -> Any:
    """An emotion as CMP takes it: a Plutchik label ("joy", "angry") becomes its full-intensity
    vector; a vector or a mapping of channels passes as it is (CMP validates it)."""
    if value is None or not isinstance(value, str):
        return value
    from ..model import EMOTION_CHANNELS, EmotionVector  # the models load only for a label

    try:
        return EmotionVector.from_label(value).model_dump(mode="json")
    except ValueError as exc:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"{field}: {exc}",
                       hint="use a Plutchik label (" + ", ".join(EMOTION_CHANNELS) + ") or an emotion object",
                       details={"field": field}) from None


def temporal(start: datetime | str | None, end: datetime | str | None, *,
             open_ended: bool = False) -> dict[str, Any] | None:
    """A `TemporalRange`, or None when neither end is given. One end alone is an error, unless
    `open_ended`: then the range runs from the epoch, or up to now."""
    if start is None and end is None:
        return None
    if open_ended:
        start = EPOCH if start is None else start
        end = datetime.now(UTC) if end is None else end
    if start is None or end is None:
        raise CMPError(ErrorCode.VALIDATION_ERROR, "temporal range: give both start and end, or neither",
                       hint="e.g. start=2026-05-01T00:00:00Z and end=2026-06-01T00:00:00Z")
    return {"start": start, "end": end}
