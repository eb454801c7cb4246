"""What the full-text indexes see of a record: its text, summary and meta-memory as one document."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..index.fulltext import TextDoc
from ..model import JSON_MODALITIES, MemoryContent, MemoryRecord, Modality, RawJournalRecord, uuid_texts

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
    return record_text_docs([record])[0]


def record_text_docs(records: Sequence[MemoryRecord]) -> list[TextDoc]:
    """The document of each record; a meta-memory that records share (a batch's absent one)
    is made text once."""
    whys: dict[int, str] = {}  # by id(): the records hold every meta alive meanwhile
    docs = []
    for record, text_id in zip(records, uuid_texts([r.id for r in records]), strict=True):
        content, meta = record.content, record.meta
        why = whys.get(id(meta))
        if why is None:
            why = whys[id(meta)] = meta.searchable_text()
        docs.append(TextDoc(text_id, record.store.value, _body(content), content.summary or "", why))
    return docs


def _body(content: MemoryContent) -> str:
    blocks = content.blocks
    if len(blocks) == 1 and blocks[0].modality is Modality.TEXT:  # the usual content, read directly
        return blocks[0].data.decode("utf-8")
    parts = []
    for block in blocks:
        if block.modality is Modality.TEXT:
            parts.append(block.text or "")
        elif block.modality in JSON_MODALITIES:
            parts.extend(flatten_json(json.loads(block.text or "null")))
    return "\n".join(parts)


def raw_text_doc(record: RawJournalRecord) -> TextDoc:
    return TextDoc(id=str(record.id), group=record.session_id, body=record.content.plain_text(),
                   summary=record.content.summary or "", why=record.meta.searchable_text())


def embedding_text(content: MemoryContent) -> str:
    return content.plain_text() or content.summary or ""
