"""SQL both backends write alike, with what differs between their dialects named once: how a
parameter is written and how a column is tested against a list (an array parameter)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import JOURNAL_COLUMNS, RawFilters

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
