"""A curated record's body blob: its content (without embeddings), emotion, metadata and meta.

The blob is what `codec.pack_model(record, include=BODY_FIELDS, exclude=NOT_IN_BODY)` gives,
byte for byte, made with less work per record: a thousand records of a batch share one emotion
and one meta-memory object, packed once here, and the content's few fields are read directly
rather than through a model dump with include and exclude rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model import ContentBlock, MemoryContent, MemoryRecord
from ..storage import codec

BODY_FIELDS = {"content", "emotion", "metadata", "meta"}
# A block's embedding is the record's vector: it lives once, in the vectors table (and the RAM
# index), not again in every body, which it would make ten times larger.
NOT_IN_BODY = {"content": {"blocks": {"__all__": {"embedding", "embedding_f32"}}}}

# the blob is a map of these four keys in the record's field order; the fields read below are
# all the content has
_ORDER = tuple(name for name in MemoryRecord.model_fields if name in BODY_FIELDS)
if _ORDER != ("content", "emotion", "metadata", "meta") \
        or tuple(ContentBlock.model_fields) != ("modality", "format", "data", "embedding", "embedding_f32") \
        or tuple(MemoryContent.model_fields) != ("blocks", "summary"):
    raise ImportError("the fields of MemoryRecord, MemoryContent or ContentBlock changed: update bodies.py")
_HEAD = b"\x84"  # a msgpack map of four entries
_KEYS = [codec.pack(name) for name in _ORDER]


def _content(content: MemoryContent) -> dict[str, Any]:
    blocks = [{"modality": b.modality, "format": b.format, "data": b.data} if b.format is not None
              else {"modality": b.modality, "data": b.data} for b in content.blocks]
    return {"blocks": blocks} if content.summary is None else {"blocks": blocks, "summary": content.summary}


def record_bodies(records: Sequence[MemoryRecord]) -> list[bytes]:
    """The body blob of each record."""
    shared: dict[int, bytes] = {}  # by id(): the records hold every object alive meanwhile

    def once(model: Any) -> bytes:
        blob = shared.get(id(model))
        if blob is None:
            blob = shared[id(model)] = codec.pack(model.model_dump(mode="python", exclude_none=True))
        return blob

    content, emotion, metadata, meta = _KEYS
    return [b"".join((_HEAD, content, codec.pack(_content(r.content)), emotion, once(r.emotion),
                      metadata, codec.pack(r.metadata), meta, once(r.meta)))
            for r in records]
