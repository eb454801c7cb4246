"""Forensic recall's one hop: the raw journal records a dream made a memory from."""

from __future__ import annotations

import uuid

from ..model import MemoryRecord


def sources_of(record: MemoryRecord) -> list[uuid.UUID]:
    """The raw record ids a derived memory was made from (empty for a record a dream did not make)."""
    ids = (record.metadata.get("_origin") or {}).get("raw_record_ids") or []
    return [uuid.UUID(str(i)) for i in ids]
