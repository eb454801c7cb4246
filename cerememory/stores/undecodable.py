"""Stored records that cannot be read back: a damaged body, or a record stored before the
request limits existed that no answer can carry (metadata nested hundreds deep).

Every read skips such a record instead of failing its whole answer. Each is logged once with
its id and reason and counted (introspect.stats `undecodable_records`, the
`cerememory_undecodable_records_total` metric), and the operation running when it was skipped
collects its id for its answer's `undecodable_ids`.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from pydantic import ValidationError

from ..cmp.errors import CMPError, ErrorCode

log = logging.getLogger("cerememory")
R = TypeVar("R")

_collected: ContextVar[list[uuid.UUID] | None] = ContextVar("cerememory_undecodable", default=None)
MAX_REASON_CHARS = 300


class UndecodableRecord(Exception):
    """Raised by a store's decoding for one record; already logged and counted when raised."""

    def __init__(self, record_id: uuid.UUID, reason: str) -> None:
        super().__init__(f"record {record_id} cannot be decoded: {reason}")
        self.record_id = record_id
        self.reason = reason

    def error(self) -> CMPError:
        """The answer to a request for this one record by id."""
        return CMPError(ErrorCode.INTERNAL_ERROR, f"record {self.record_id} is stored but cannot be decoded: "
                        f"{self.reason}",
                        hint="reads and exports skip it; lifecycle.forget with its id removes it",
                        details={"record_id": str(self.record_id), "reason": "undecodable"})


def describe(exc: BaseException) -> str:
    """A short reason: the first field pydantic refused, or the exception's own message."""
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        text = f"{where}: {first['msg']}" if where else first["msg"]
    elif isinstance(exc, CMPError):
        text = exc.message
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:MAX_REASON_CHARS]


class UndecodableLog:
    """The records found undecodable since the data directory was opened, shared by its stores."""

    def __init__(self) -> None:
        self._reasons: dict[uuid.UUID, str] = {}
        self._lock = threading.Lock()

    def note(self, record_id: uuid.UUID, exc: BaseException) -> UndecodableRecord:
        """Record a failed decoding (logging the first for each id) and return the exception
        the store raises; the running operation's `collect()` gets the id."""
        reason = describe(exc)
        with self._lock:
            first = record_id not in self._reasons
            self._reasons[record_id] = reason
        if first:
            log.warning("record %s cannot be decoded and is left out of answers: %s", record_id, reason)
        collected = _collected.get()
        if collected is not None and record_id not in collected:
            collected.append(record_id)
        return UndecodableRecord(record_id, reason)

    def reason(self, record_id: uuid.UUID) -> str | None:
        return self._reasons.get(record_id)

    @property
    def count(self) -> int:
        """How many records were found undecodable (each once)."""
        return len(self._reasons)


@contextmanager
def collect() -> Iterator[list[uuid.UUID]]:
    """The ids of the records skipped as undecodable while the body runs, in the order met."""
    skipped: list[uuid.UUID] = []
    token = _collected.set(skipped)
    try:
        yield skipped
    finally:
        _collected.reset(token)
        outer = _collected.get()
        if outer is not None:  # an enclosing operation reports them too
            outer.extend(i for i in skipped if i not in outer)


def reporting(operation: Callable[[Any, Any], R]) -> Callable[[Any, Any], R]:
    """Wrap an engine operation so its answer's `undecodable_ids` names the records it skipped."""

    @functools.wraps(operation)
    def run(engine: Any, req: Any) -> R:
        with collect() as skipped:
            answer = operation(engine, req)
        if skipped:
            answer.undecodable_ids = list(skipped)  # type: ignore[attr-defined]
        return answer

    return run
