"""SQL both backends write alike, with what differs between their dialects named once: how a
parameter is written and how a column is tested against a list (an array parameter). The raw
journal's repository is written here once (`SqlJournal`), over the read and write primitives
each backend's repositories already have."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .base import JOURNAL_COLUMNS, Columns, RawFilters, Row

JOURNAL = f"SELECT {', '.join(JOURNAL_COLUMNS)} FROM raw_journal"


@dataclass(frozen=True)
class Dialect:
    param: str  # a positional parameter: "?" or "%s"
    in_list: str  # `column` in a list parameter, with {column} and {param}
    in_ids: str  # `column` in a list of UUIDs (passed as `ids`)
    ids: Any  # how a list of UUIDs is passed
    first_id: str  # the aggregate: the id of a group's earliest record

    def any_of(self, column: str) -> str:
        return self.in_list.format(column=column, param=self.param)

    def any_id(self, column: str) -> str:
        return self.in_ids.format(column=column, param=self.param)


def journal_where(d: Dialect, filters: RawFilters, ids: Sequence[uuid.UUID] | None) -> tuple[str, list[Any]]:
    """Never a suppressed record; the allowed visibility and secrecy; optional session, ids, range."""
    where = ["NOT suppressed", d.any_of("visibility"), d.any_of("secrecy_level")]
    params: list[Any] = [list(filters["visibility"]), list(filters["secrecy"])]
    if filters["session_id"] is not None:
        where.append(f"session_id = {d.param}")
        params.append(filters["session_id"])
    if ids is not None:
        where.append(d.any_id("id"))
        params.append(d.ids(ids))
    if filters["start"] is not None:
        where.append(f"created_at >= {d.param}")
        params.append(filters["start"])
    if filters["end"] is not None:
        where.append(f"created_at <= {d.param}")
        params.append(filters["end"])
    return " AND ".join(where), params


def journal_select(d: Dialect, filters: RawFilters, ids: Sequence[uuid.UUID] | None, limit: int | None,
                   newest_first: bool) -> tuple[str, list[Any]]:
    clause, params = journal_where(d, filters, ids)
    sql = f"{JOURNAL} WHERE {clause} ORDER BY created_at {'DESC' if newest_first else 'ASC'}, id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, params


def journal_sessions(d: Dialect, filters: RawFilters) -> tuple[str, list[Any]]:
    """Per session with a record passing the filters: (session_id, records, first and last
    created_at, records a dream processed, the first record's id), latest activity first."""
    clause, params = journal_where(d, filters, None)
    return (f"SELECT session_id, count(*), min(created_at), max(created_at), "
            f"count(*) FILTER (WHERE dream_processed_at IS NOT NULL), {d.first_id} "
            f"FROM raw_journal WHERE {clause} GROUP BY session_id "
            f"ORDER BY max(created_at) DESC, session_id"), params


def journal_pending(d: Dialect, visibility: Sequence[str], secrecy: Sequence[str],
                    session_id: str | None) -> tuple[str, list[Any]]:
    """Journal records a dream has yet to process, oldest first."""
    where = ["NOT suppressed", "dream_processed_at IS NULL", d.any_of("visibility"), d.any_of("secrecy_level")]
    params: list[Any] = [list(visibility), list(secrecy)]
    if session_id is not None:
        where.append(f"session_id = {d.param}")
        params.append(session_id)
    return f"{JOURNAL} WHERE {' AND '.join(where)} ORDER BY created_at, id", params


JOURNAL_COUNTS = ("SELECT count(*), count(*) FILTER (WHERE dream_processed_at IS NULL AND NOT suppressed) "
                  "FROM raw_journal")
FAILURE_COLUMNS = "first_raw_id, fingerprint, raw_record_count, code, reason, version, failed_at"
PRUNE_FAILURES = ("DELETE FROM dream_failures WHERE first_raw_id NOT IN "
                  "(SELECT id FROM raw_journal WHERE dream_processed_at IS NULL AND NOT suppressed)")
EDGES = "SELECT source_id, target_id, association_type, weight, created_at, last_co_activation FROM associations"

RAW = "raw"  # the change-log kind of a journal record
FLAGS = ("suppressed", "visibility", "secrecy_level", "updated_at")  # what `set_flags` may change


def _journal_row(row: Row) -> Row:
    return (*row[:-1], bytes(row[-1]))  # the body: bytes, whatever the driver hands back


class SqlJournal:
    """`storage.base.JournalRows` for a SQL backend. A backend's repository class mixes it in
    after its own base, which supplies the primitives below and names its `dialect`."""

    dialect: Dialect

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        raise NotImplementedError

    def _write(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        raise NotImplementedError

    def _stream(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[list[Row]]:
        raise NotImplementedError

    def _insert(self, table: str, columns: Columns, *, replace: bool = True) -> None:
        raise NotImplementedError

    def _insert_bumped(self, table: str, columns: Columns, *, replace: bool, bump: str | None) -> int | None:
        raise NotImplementedError  # `_insert`, and with `bump` that counter bumped: its new value

    def _delete(self, table: str, column: str, ids: Sequence[uuid.UUID]) -> list[Row]:
        raise NotImplementedError  # returns the deleted rows' `column`

    def _changed(self, kind: str, keys: Sequence[Any], *, mine: bool = True) -> None:
        """Log a change for other processes sharing the database (none by default)."""

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [_journal_row(row) for row in self._read(sql, params)]

    def select(self, filters: RawFilters, *, ids: Sequence[uuid.UUID] | None, limit: int | None,
               newest_first: bool) -> list[Row]:
        return self._rows(*journal_select(self.dialect, filters, ids, limit, newest_first))

    def count(self, filters: RawFilters, *, ids: Sequence[uuid.UUID] | None) -> int:
        clause, params = journal_where(self.dialect, filters, ids)
        return int(self._read(f"SELECT count(*) FROM raw_journal WHERE {clause}", params)[0][0])

    def passing(self, filters: RawFilters, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        clause, params = journal_where(self.dialect, filters, ids)
        return {row[0] for row in self._read(f"SELECT id FROM raw_journal WHERE {clause}", params)}

    def pending(self, visibility: Sequence[str], secrecy: Sequence[str], session_id: str | None) -> list[Row]:
        return self._rows(*journal_pending(self.dialect, visibility, secrecy, session_id))

    def sessions(self, filters: RawFilters) -> list[Row]:
        return self._read(*journal_sessions(self.dialect, filters))

    def by_ids(self, ids: Sequence[uuid.UUID]) -> list[Row]:
        return self._rows(f"{JOURNAL} WHERE {self.dialect.any_id('id')}", [self.dialect.ids(ids)]) if ids else []

    def updated_at(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, float]:
        if not ids:
            return {}
        rows = self._read(f"SELECT id, updated_at FROM raw_journal WHERE {self.dialect.any_id('id')}",
                          [self.dialect.ids(ids)])
        return {row[0]: row[1] for row in rows}

    def ids(self) -> list[uuid.UUID]:
        return [row[0] for row in self._read("SELECT id FROM raw_journal")]

    def counts(self) -> tuple[int, int]:
        row = self._read(JOURNAL_COUNTS)[0]
        return int(row[0]), int(row[1])

    def scan(self, batch: int) -> Iterator[list[Row]]:
        for chunk in self._stream(f"{JOURNAL} ORDER BY id", [], batch):
            yield [_journal_row(row) for row in chunk]

    def insert(self, columns: Columns, *, replace: bool, bump: str | None = None) -> int | None:
        bumped = self._insert_bumped("raw_journal", columns, replace=replace, bump=bump)
        self._changed(RAW, columns["id"])
        return bumped

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        self._changed(RAW, [row[0] for row in self._delete("raw_journal", "id", ids)])

    def set_flags(self, record_id: uuid.UUID, changes: Mapping[str, Any]) -> int:
        unknown = set(changes) - set(FLAGS)
        if unknown:
            raise ValueError(f"not a journal flag: {sorted(unknown)}")
        names, p = list(changes), self.dialect.param
        rows = self._write(f"UPDATE raw_journal SET {', '.join(f'{n} = {p}' for n in names)} WHERE id = {p} "
                           "RETURNING id", [*(changes[n] for n in names), self.dialect.ids([record_id])[0]])
        self._changed(RAW, [row[0] for row in rows])
        return len(rows)
