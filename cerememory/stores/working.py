"""Working memory: a small, volatile LRU of whole records that never touches disk."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

from ..model import MemoryRecord, utcnow


class WorkingMemory:
    """Capacity-bounded; inserting into a full memory evicts the least recently used record."""

    def __init__(self, capacity: int = 7) -> None:
        if capacity < 1:
            raise ValueError("working memory capacity must be at least 1")
        self.capacity = capacity
        self._records: OrderedDict[uuid.UUID, MemoryRecord] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, record_id: uuid.UUID) -> bool:
        return record_id in self._records

    def put(self, record: MemoryRecord) -> list[uuid.UUID]:
        """Insert or replace; returns the ids evicted to make room."""
        with self._lock:
            self._records[record.id] = record
            self._records.move_to_end(record.id)
            evicted = []
            while len(self._records) > self.capacity:
                old, _ = self._records.popitem(last=False)
                evicted.append(old)
            return evicted

    def get(self, record_id: uuid.UUID) -> MemoryRecord | None:
        return self._records.get(record_id)

    def touch(self, record_id: uuid.UUID) -> None:
        with self._lock:
            record = self._records.get(record_id)
            if record is not None:
                record.access_count += 1
                record.last_accessed_at = utcnow()
                self._records.move_to_end(record_id)

    def remove(self, ids: list[uuid.UUID]) -> int:
        with self._lock:
            return sum(self._records.pop(i, None) is not None for i in ids)

    def records(self) -> list[MemoryRecord]:
        return list(self._records.values())
