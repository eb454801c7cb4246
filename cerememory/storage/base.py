"""The storage seam: what the engine needs from a system of record, as Protocols.

A `Backend` hands out `Tables`: one repository per table, named by what the engine does with
it, with rows as plain tuples and columns as plain lists (the stores above turn them into
records). `Backend.read` answers reads outside any transaction; `Backend.transaction()` yields
the same repositories bound to one all-or-nothing write. Only `engine.writer.Writer` opens
transactions. Every statement, dialect and driver lives in the backend's own package
(`storage/duckdb/`), which also turns its driver's errors into CMP errors.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from ..cmp.errors import CMPError, ErrorCode
from ..security.audit import Verification

if TYPE_CHECKING:
    import numpy as np

Row = tuple[Any, ...]
Columns = Mapping[str, Sequence[Any]]  # column name -> one value per row, all the same length

HEAD_COLUMNS = ("store", "created_at", "updated_at", "last_accessed_at", "access_count", "fidelity_score",
                "noise_level", "decay_rate", "emotional_anchor", "reinforcement_count", "stability",
                "last_decay_tick", "emotion_intensity", "emotion_valence", "version", "fidelity_base")
JOURNAL_COLUMNS = ("id", "session_id", "turn_id", "topic_id", "source", "speaker", "visibility",
                   "secrecy_level", "created_at", "updated_at", "suppressed", "dream_processed_at", "body")


class RawFilters(TypedDict):
    """Which journal records a read may return: visibility and secrecy allowed, and optionally
    one session and a creation-time range (epoch seconds)."""

    visibility: list[str]
    secrecy: list[str]
    session_id: str | None
    start: float | None
    end: float | None


class StorageUnavailable(CMPError):
    """The system of record cannot be read or written (its files, its connection): a failure of
    the machine, not of the request, so work that failed on it is retried, not recorded."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(ErrorCode.INTERNAL_ERROR, message, hint=hint)


@dataclass(frozen=True)
class StoredHeads:
    """Every record's head as columns (lists, or numpy arrays): `values[k][i]` is HEAD_COLUMNS[k]
    of `ids[i]` (the stores above keep them as columns, with no row tuple per record)."""

    ids: list[uuid.UUID]
    values: Sequence[Any]  # a list or a numpy array per HEAD_COLUMNS


class RecordRows(Protocol):
    """Curated records: a head (HEAD_COLUMNS) and a sealed body per id."""

    def heads(self) -> StoredHeads: ...  # every record's
    def heads_of(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, Row]]: ...
    def bodies(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]: ...
    def scan_bodies(self, stores: Sequence[str] | None, batch: int) -> Iterator[list[tuple[uuid.UUID, bytes]]]: ...
    def scan_with_vectors(self, stores: Sequence[str], batch: int) -> Iterator[list[Row]]: ...
    # id, *HEAD_COLUMNS, body; with `bump`, also bumps that counter (StateRows.bump) and returns its new
    # value: the caller writes nothing after it, so a lone write can commit as one statement
    def insert(self, columns: Columns, *, replace: bool, bump: str | None = None) -> int | None: ...
    def delete(self, ids: Sequence[uuid.UUID]) -> None: ...
    def write_decay(self, columns: Columns) -> None: ...  # id, fidelity_score, noise_level, ...
    def reinforce(self, columns: Columns) -> None: ...  # id, at, exponent, boost, lift; each id once
    # where a row still holds base_before, stability_before, accessed_before: set base and stability,
    # add n to the counts, move last access to `at`; returns the ids it changed
    def reinforce_unchanged(self, columns: Columns) -> set[uuid.UUID]: ...


class JournalRows(Protocol):
    """The raw journal (JOURNAL_COLUMNS). Reads never return suppressed records unless they
    name them by id (`by_ids`, `scan`)."""

    def select(self, filters: RawFilters, *, ids: Sequence[uuid.UUID] | None, limit: int | None,
               newest_first: bool) -> list[Row]: ...
    def count(self, filters: RawFilters, *, ids: Sequence[uuid.UUID] | None) -> int: ...
    def passing(self, filters: RawFilters, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]: ...
    def pending(self, visibility: Sequence[str], secrecy: Sequence[str], session_id: str | None) -> list[Row]: ...
    def sessions(self, filters: RawFilters) -> list[Row]: ...  # sql.journal_sessions
    def by_ids(self, ids: Sequence[uuid.UUID]) -> list[Row]: ...
    def updated_at(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, float]: ...
    def ids(self) -> list[uuid.UUID]: ...
    def counts(self) -> tuple[int, int]: ...  # (all, not yet dreamed and not suppressed)
    def scan(self, batch: int) -> Iterator[list[Row]]: ...
    def insert(self, columns: Columns, *, replace: bool, bump: str | None = None) -> int | None: ...  # as records'
    def delete(self, ids: Sequence[uuid.UUID]) -> None: ...
    def set_flags(self, record_id: uuid.UUID, changes: Mapping[str, Any]) -> int: ...


@dataclass
class EdgeColumns:
    """Every edge as columns over node numbers: edge i runs from `nodes[source[i]]` to
    `nodes[target[i]]` (a memory of many associations loads without an object per edge)."""

    nodes: list[uuid.UUID]
    source: np.ndarray  # int, into `nodes`
    target: np.ndarray
    type: list[str]
    weight: np.ndarray  # float64
    created_at: np.ndarray
    last_co_activation: np.ndarray  # NaN: never co-activated since it was made

    @classmethod
    def of_rows(cls, rows: Sequence[Row]) -> EdgeColumns:
        """From (source, target, type, weight, created_at, last_co_activation) rows."""
        import numpy as np

        numbers: dict[uuid.UUID, int] = {}
        source = [numbers.setdefault(row[0], len(numbers)) for row in rows]
        target = [numbers.setdefault(row[1], len(numbers)) for row in rows]
        return cls(list(numbers), np.array(source, dtype=np.int64), np.array(target, dtype=np.int64),
                   [row[2] for row in rows], np.array([row[3] for row in rows], dtype=np.float64),
                   np.array([row[4] for row in rows], dtype=np.float64),
                   np.array([np.nan if row[5] is None else row[5] for row in rows], dtype=np.float64))


class EdgeRows(Protocol):
    # every edge; `heads`, what `records.heads()` of the same backend just read, lets a backend
    # number the ends by their place in it (then `nodes` is `heads.ids`: no id is made twice)
    def load(self, heads: StoredHeads | None = None) -> EdgeColumns: ...
    def load_from(self, ids: Sequence[uuid.UUID]) -> list[Row]: ...  # the edges out of `ids`
    def insert(self, columns: Columns) -> None: ...
    def delete_from(self, ids: Sequence[uuid.UUID]) -> None: ...
    def delete_to(self, ids: Sequence[uuid.UUID]) -> None: ...


@dataclass(frozen=True)
class StoredVectors:
    """Stored vectors as columns, a batch of them: the RAM index takes each dimension's rows of
    a batch as one matrix."""

    ids: list[uuid.UUID]
    dims: np.ndarray  # int, one per id
    vecs: Sequence[bytes | bytearray] | np.ndarray  # sealed as stored (unencrypted: the row's float32 bytes)
    # the store of each id's record, when the backend read it with the vector (joined in the
    # database): then the engine need not look each id up among the heads for it
    stores: Sequence[str] | np.ndarray | None = None


class VectorRows(Protocol):
    def load(self) -> Iterator[StoredVectors]: ...  # every stored vector, in batches
    def load_for(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, int, bytes]]: ...
    # columns record_id, dim, model; `vec` is sealed bytes per row or, unencrypted, one float32
    # matrix of shape (rows, dim) whose rows are stored as their raw bytes. `replace=False`: the
    # ids have no vector stored (new records, or theirs deleted first), so no conflict is looked for
    def insert(self, columns: Columns, vec: Sequence[bytes] | np.ndarray, *, replace: bool = True) -> None: ...
    def delete(self, ids: Sequence[uuid.UUID]) -> None: ...


class LedgerRows(Protocol):
    """Consolidation: which episodic record was promoted to which semantic one."""

    def load(self) -> list[tuple[uuid.UUID, uuid.UUID]]: ...
    def insert(self, columns: Columns) -> None: ...
    def delete(self, episodic_ids: Sequence[uuid.UUID]) -> None: ...


class StateRows(Protocol):
    """Small named values: counters, watermarks, modes, the evolution state."""

    def get(self, key: str, default: str | None = None) -> str | None: ...
    def set(self, key: str, value: str) -> None: ...
    def bump(self, key: str) -> int: ...
    def delete_prefix(self, prefix: str) -> None: ...


class FailureRows(Protocol):
    """Dream groups that failed (dream/failures.py)."""

    def load(self) -> list[Row]: ...
    def put(self, row: Row) -> None: ...
    def prune(self) -> None: ...  # drop failures whose first raw record is no longer pending


class Tables(Protocol):
    """One repository per table (read-only members, so an implementation may narrow them)."""

    @property
    def records(self) -> RecordRows: ...
    @property
    def journal(self) -> JournalRows: ...
    @property
    def edges(self) -> EdgeRows: ...
    @property
    def vectors(self) -> VectorRows: ...
    @property
    def ledger(self) -> LedgerRows: ...
    @property
    def state(self) -> StateRows: ...
    @property
    def failures(self) -> FailureRows: ...


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of a shared database's change log: `kind` (record, head, raw, ledger, state)
    and the record id or state key it is about; `mine` when this process made it and its RAM
    already holds the result."""

    seq: int
    mine: bool
    kind: str
    key: str


class ChangeFeed(Protocol):
    """What other processes sharing the database changed, in order (storage/postgres/feed.py)."""

    def last(self) -> int: ...
    def since(self, seq: int, limit: int = 10_000) -> tuple[list[Change], bool]: ...  # (changes, log complete)
    def mine_since(self, seq: int) -> set[str]: ...  # keys this process changed after `seq`
    def wait(self, timeout: float) -> None: ...
    def prune(self) -> None: ...


class AuditChain(Protocol):
    """The audit log's chain when the database holds it (security.audit.Chain, and `verify`)."""

    where: str

    def extend(self, entries: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]: ...
    def head(self) -> tuple[int, str]: ...
    def lines(self) -> Iterator[bytes]: ...
    def verify(self) -> Verification: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...


class KeyStore(Protocol):
    """Where an encrypted memory keeps its keys (storage/crypto.py): the master key wrapped by
    the passphrase (a small document), and one wrapped data key per record. `shared` when other
    processes add and remove keys too, so a key this process lacks is looked up."""

    where: str  # the memory, for messages
    document_name: str  # where the wrapped master key lives, for messages
    keys_name: str  # where the wrapped data keys live, for messages
    shared: bool

    def document(self) -> bytes | None: ...  # None: the memory is not encrypted
    def blank(self) -> bool: ...  # nothing stored yet, so encryption can still be chosen
    def create(self, document: bytes) -> None: ...  # the first master key (refused when there is one)
    def replace(self, document: bytes) -> None: ...  # the master key wrapped anew (rekey)
    def load(self) -> list[tuple[uuid.UUID, bytes]]: ...  # every (record id, wrapped data key)
    def fetch(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]: ...
    def add(self, entries: Sequence[tuple[uuid.UUID, bytes]]) -> None: ...  # durable before the rows using them
    def remove(self, ids: Sequence[uuid.UUID]) -> None: ...
    # keys of records that no longer exist (`live`: the ids this process holds; a shared store
    # asks the database instead); returns the ids whose keys it removed
    def remove_orphans(self, live: set[uuid.UUID]) -> list[uuid.UUID]: ...


class ApiKeyRows(Protocol):
    """Where the memory's API keys live (security/keys.py): one dict per key, as stored."""

    where: str  # for messages

    def load(self) -> list[dict[str, Any]]: ...
    def locked(self) -> AbstractContextManager[list[dict[str, Any]]]: ...  # the rows, one writer at a time
    def save(self, rows: list[dict[str, Any]]) -> None: ...  # inside `locked`: the rows become these
    def stamp(self) -> Hashable | None: ...  # changes when the rows may have; None: there are none
    def close(self) -> None: ...


class Backend(Protocol):
    @property
    def read(self) -> Tables: ...
    @property
    def changes(self) -> ChangeFeed | None: ...  # None: this process alone writes the database

    def transaction(self) -> AbstractContextManager[Tables]: ...
    def leads(self) -> bool: ...  # whether this process runs the background work (decay, dreams)
    def audit_chain(self) -> AuditChain | None: ...  # None: the audit log is a file in the data directory
    def key_store(self) -> KeyStore: ...  # where an encrypted memory's keys live
    def release_cache(self) -> None: ...  # let go of what a bulk read left cached in this process
    def close(self) -> None: ...
