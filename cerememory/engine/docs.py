"""What the full-text indexes see of a record: its text, summary and meta-memory as one document."""

from __future__ import annotations

import json
from typing import Any

from ..index.fulltext import TextDoc
from ..model import JSON_MODALITIES, MemoryContent, MemoryRecord, RawJournalRecord

FLATTEN_DEPTH = 10


def flatten_json(value: Any, prefix: str = "", depth: int = 0) -> list[str]:
    """Structured JSON as `a.b: value` lines, so keys and values are searchable words."""
    if depth > FLATTEN_DEPTH:
        return []
    if isinstance(value, dict):
        return [line for k, v in value.items()
                for line in flatten_json(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)]
    if isinstance(value, list):
        return [line for v in value for line in flatten_json(v, prefix, depth + 1)]
    return [f"{prefix}: {value}" if prefix else str(value)]


def record_text_doc(record: MemoryRecord) -> TextDoc:
    parts = []
    for block in record.content.blocks:
        if block.modality.value == "text":
            parts.append(block.text or "")
        elif block.modality in JSON_MODALITIES:
            parts.extend(flatten_json(json.loads(block.text or "null")))
    return TextDoc(
        id=str(record.id),
        group=record.store.value,
        body="\n".join(parts),
        summary=record.content.summary or "",
        why=record.meta.searchable_text(),
    )


def raw_text_doc(record: RawJournalRecord) -> TextDoc:
    return TextDoc(id=str(record.id), group=record.session_id, body=record.content.plain_text(),
                   summary=record.content.summary or "", why=record.meta.searchable_text())


def embedding_text(content: MemoryContent) -> str:
    return content.plain_text() or content.summary or ""
