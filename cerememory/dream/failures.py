"""Topic groups a dream tick could not turn into memories, kept so that later ticks go on.

A group whose summary or records cannot be made (a topic id of two million characters written
before ids were bounded, a content limit, a bug) is recorded with its reason in the
`dream_failures` table, and every later tick skips it until its raw records change (one is
added, suppressed or reclassified) or Cerememory is upgraded; its raw records stay pending. A
group is known by its first raw record and fingerprinted by the ids and update times of all of
them. A failure of the machine rather than of the group (a full disk, the embedding backend
down, the engine closing) is not held against the group: it stops the tick, and the next one
retries.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from pydantic import ValidationError

from ..cmp.errors import CMPError, ErrorCode, from_validation_error
from ..embed import EmbeddingUnavailable
from ..storage.base import FailureRows, StorageUnavailable, Tables
from ..storage.full import is_disk_full
from ..version import __version__
from .grouping import Group

MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class Failure:
    first_raw_id: uuid.UUID
    fingerprint: str
    raw_record_count: int
    code: str
    reason: str
    version: str
    failed_at: float

    def holds_for(self, group: Group) -> bool:
        """Still true of `group`: same raw records, unchanged, and the same Cerememory."""
        return self.version == __version__ and self.fingerprint == fingerprint(group)


def fingerprint(group: Group) -> str:
    """SHA-256 of the group's raw record ids and update times, in id order."""
    digest = hashlib.sha256()
    for record in sorted(group.records, key=lambda r: r.id):
        digest.update(f"{record.id}:{record.updated_at.timestamp()!r};".encode())
    return digest.hexdigest()


def load(rows: FailureRows) -> dict[uuid.UUID, Failure]:
    """Every recorded failure, by the group's first raw record."""
    return {row[0]: Failure(*row) for row in rows.load()}


def is_machine_failure(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is about the machine, not the group."""
    if is_disk_full(exc) or (isinstance(exc, CMPError) and exc.code is ErrorCode.STORAGE_FULL):
        return True
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError | EmbeddingUnavailable | StorageUnavailable):
            return True
        current = current.__cause__ or current.__context__
    return False


def describe(exc: BaseException) -> tuple[str, str]:
    """(code, reason) of a group's failure. The reason is kept at rest, in clear even in an
    encrypted data directory, so it is Cerememory's own wording (field names and limits), never
    the text of an exception that might quote content; the server log has the rest."""
    if isinstance(exc, ValidationError):
        exc = from_validation_error(exc)
    if isinstance(exc, CMPError):
        return exc.code.value, exc.message[:MAX_REASON_CHARS]
    return ErrorCode.INTERNAL_ERROR.value, f"{type(exc).__name__} (the server log has the details)"


def record(uow: Tables, group: Group, exc: BaseException, now: float) -> Failure:
    """Write (or replace) the failure of `group` inside the caller's transaction."""
    code, reason = describe(exc)
    failure = Failure(group.records[0].id, fingerprint(group), len(group.records), code, reason,
                      __version__, now)
    uow.failures.put((failure.first_raw_id, failure.fingerprint, failure.raw_record_count, failure.code,
                      failure.reason, failure.version, failure.failed_at))
    return failure
