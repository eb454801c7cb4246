"""The raw journal: conversations, tool I/O and scratchpads kept verbatim, never ranked with
curated memories. Filtering is the system of record's; text search goes through its own index."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..model import RawJournalRecord, RawVisibility, SecrecyLevel, from_ts, to_ts
from ..storage import codec
from ..storage.base import JOURNAL_COLUMNS, JournalRows, RawFilters, Row, Tables
from ..storage.crypto import PLAINTEXT, Sealer
from .undecodable import UndecodableLog, UndecodableRecord

BODY_FIELDS = {"content", "metadata", "derived_memory_ids", "meta"}
DEFAULT_SECRECY = (SecrecyLevel.PUBLIC, SecrecyLevel.SENSITIVE)


def allowed_visibility(include_private_scratch: bool, include_sealed: bool) -> list[str]:
    allowed = [RawVisibility.NORMAL.value]
    if include_private_scratch:
        allowed.append(RawVisibility.PRIVATE_SCRATCH.value)
    if include_sealed:
        allowed.append(RawVisibility.SEALED.value)
    return allowed


class JournalStore:
    def __init__(self, rows: JournalRows, sealer: Sealer = PLAINTEXT,
                 undecodable: UndecodableLog | None = None) -> None:
        self.rows = rows  # reads outside a transaction; writes go through the caller's unit of work
        self.sealer = sealer
        self.undecodable = undecodable or UndecodableLog()  # records no read can use: skipped, reported

    def insert(self, uow: Tables, records: Sequence[RawJournalRecord], *, replace: bool = False,
               bump: str | None = None) -> int | None:
        """Write journal records; with `bump`, as the transaction's last write, bumping that
        counter (`JournalRows.insert`): its new value."""
        columns: dict[str, list[Any]] = {c: [] for c in JOURNAL_COLUMNS}
        for r in records:
            processed = (r.metadata.get("_dream") or {}).get("processed_at")
            if isinstance(processed, str):
                processed = datetime.fromisoformat(processed)
            columns["id"].append(r.id)
            columns["session_id"].append(r.session_id)
            columns["turn_id"].append(r.turn_id)
            columns["topic_id"].append(r.topic_id)
            columns["source"].append(r.source.value)
            columns["speaker"].append(r.speaker.value)
            columns["visibility"].append(r.visibility.value)
            columns["secrecy_level"].append(r.secrecy_level.value)
            columns["created_at"].append(to_ts(r.created_at))
            columns["updated_at"].append(to_ts(r.updated_at))
            columns["suppressed"].append(r.suppressed)
            columns["dream_processed_at"].append(processed.timestamp() if processed else None)
            columns["body"].append(codec.pack_model(r, include=BODY_FIELDS))
        columns["body"] = self.sealer.seal_many(columns["id"], columns["body"])
        return uow.journal.insert(columns, replace=replace, bump=bump)

    @staticmethod
    def set_flags(uow: Tables, record_id: uuid.UUID, *, updated_at: float, suppressed: bool | None = None,
                  visibility: str | None = None, secrecy_level: str | None = None) -> int:
        """Change the columns that decide who sees a record (none of them live in the body);
        returns how many records changed (0: no such record)."""
        changes = {name: value for name, value in (("suppressed", suppressed), ("visibility", visibility),
                                                    ("secrecy_level", secrecy_level)) if value is not None}
        return uow.journal.set_flags(record_id, {"updated_at": updated_at, **changes})

    def pending(self, *, visibility: Sequence[str], secrecy: Sequence[str],
                session_id: str | None = None) -> list[RawJournalRecord]:
        """Records a dream has not processed yet (never suppressed ones), oldest first."""
        return self._records(self.rows.pending(visibility, secrecy, session_id))

    def _row_to_record(self, row: Row) -> RawJournalRecord:
        """One record; raises `UndecodableRecord` (noted) when its row cannot make one."""
        values = dict(zip(JOURNAL_COLUMNS, row, strict=True))
        try:
            body = codec.unpack(self.sealer.open(values["id"], values.pop("body")))
            values.pop("dream_processed_at")
            values["created_at"] = from_ts(values["created_at"])
            values["updated_at"] = from_ts(values["updated_at"])
            values.update(body)
            return RawJournalRecord.model_validate(values)
        except Exception as exc:
            raise self.undecodable.note(values["id"], exc) from exc

    def _records(self, rows: Iterable[Row]) -> list[RawJournalRecord]:
        """The records of `rows` that decode; the others are skipped (and noted)."""
        out = []
        for row in rows:
            try:
                out.append(self._row_to_record(row))
            except UndecodableRecord:
                continue
        return out

    def get(self, ids: Sequence[uuid.UUID]) -> list[RawJournalRecord]:
        return self._records(self.rows.by_ids(ids))

    def query(self, filters: RawFilters, *, ids: Sequence[uuid.UUID] | None = None, limit: int | None = None,
              newest_first: bool = True, count: bool = True) -> tuple[list[RawJournalRecord], int]:
        """Records passing every filter (never suppressed ones) and how many passed in all
        (-1 unless `count`)."""
        total = self.rows.count(filters, ids=ids) if count else -1
        return self._records(self.rows.select(filters, ids=ids, limit=limit, newest_first=newest_first)), total

    def sessions(self, filters: RawFilters) -> list[Row]:
        """Each session's counts, first and last instant and first record id, latest activity first."""
        return self.rows.sessions(filters)

    def passing(self, filters: RawFilters, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of `ids` pass the filters: ids only, so a ranked search reads whole records
        for the few it returns, not for every hit."""
        return self.rows.passing(filters, ids)

    def updated_at(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, float]:
        """When each of `ids` still in the journal was last changed."""
        return self.rows.updated_at(ids)

    def ids(self) -> list[uuid.UUID]:
        return self.rows.ids()

    def counts(self) -> tuple[int, int]:
        """(all records, records not yet consolidated by a dream tick)."""
        return self.rows.counts()

    def scan(self, batch: int = 5000) -> Iterable[tuple[uuid.UUID, str, RawJournalRecord | None]]:
        """Every record as (id, session_id, record) in id order, the record None when it cannot
        be decoded (noted): an index rebuild still counts it, an export leaves it out."""
        for rows in self.rows.scan(batch):
            for row in rows:
                try:
                    record = self._row_to_record(row)
                except UndecodableRecord:
                    record = None
                yield row[0], row[1], record

    def iter_all(self, batch: int = 5000) -> Iterable[RawJournalRecord]:
        """Every record that decodes, in id order."""
        return (record for _, _, record in self.scan(batch) if record is not None)

    def undecodable_ids(self) -> list[uuid.UUID]:
        """The records no read can use: a full pass, for an export that announces its counts first."""
        return [record_id for record_id, _, record in self.scan() if record is None]
