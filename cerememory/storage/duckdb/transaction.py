"""The writer's transaction, begun by its first statement.

DuckDB commits a statement run outside any transaction as it runs it, and BEGIN and COMMIT
around a one-row INSERT cost about a quarter of its CPU. So `BEGIN` is sent only before the
first statement, and a statement the caller runs as the transaction's last (`run_last`) runs
on its own when nothing ran before it: a lone store is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .driver import duckdb

Row = tuple[Any, ...]


class WriteTransaction:
    """The writer connection inside `Database.transaction()`; `begun` once BEGIN was sent,
    `ended` once a last statement ran on its own (and committed)."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self._conn = conn
        self.begun = False
        self.ended = False

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The writer connection, inside the transaction (begun now if it was not)."""
        if self.ended:
            raise RuntimeError("a statement after the one the transaction ended with")
        if not self.begun:
            self._conn.execute("BEGIN TRANSACTION")
            self.begun = True
        return self._conn

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyConnection:
        conn = self.connection()
        return conn.execute(sql) if params is None else conn.execute(sql, list(params))

    def prepare_on(self) -> duckdb.DuckDBPyConnection:
        """The connection to PREPARE a statement on: outside the transaction, which it does not begin."""
        return self._conn

    def run_last(self, statement: str) -> list[Row] | None:
        """Run `statement` (no parameters) as the transaction's last: on its own, committing
        as it runs, when nothing ran before it; None, with nothing run, when something did
        (the caller then runs it inside the transaction)."""
        if self.begun or self.ended:
            return None
        self.ended = True
        return self._conn.execute(statement).fetchall()
