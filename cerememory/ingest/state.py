"""How far each session file has been read, so a rerun ingests only what is new.

Per file: its size, mtime, inode (and the `-wal` beside a SQLite file), a hash of its first
bytes, the byte offset reached, the reader's context at that offset, and short digests of the
turn ids ingested from it. An unchanged signature means the file is not even opened. A file
that shrank, changed inode or whose first bytes differ was rewritten: it is read again from the
start, and the digests keep turns already in the journal from being written twice.

One JSON file per target database (named by a hash of the database's data directory, so the
embedded engine and a server on the same data directory share it), written atomically after
every batch, guarded by an exclusive lock so two ingest runs cannot interleave.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cmp.errors import CMPError, ErrorCode
from ..cmp.messages import MAX_RECALL_LIMIT
from ..storage.files import write_atomic
from .files import open_regular

VERSION = 1
HEAD_BYTES = 4096
DIGEST_CHARS = 16


def digest(key: str) -> str:
    return hashlib.blake2b(key.encode("utf-8", "replace"), digest_size=DIGEST_CHARS // 2).hexdigest()


def head_hash(path: Path, length: int) -> str:
    with open_regular(path) as f:
        return hashlib.sha1(f.read(length)).hexdigest()


@dataclass(frozen=True)
class Signature:
    size: int
    mtime_ns: int
    inode: int
    wal: tuple[int, int] | None

    @classmethod
    def of(cls, path: Path, status: os.stat_result | None = None) -> Signature:
        """`path`'s signature; `status` saves a `stat` when the caller has just made it."""
        st = status or path.stat()
        wal = None
        try:
            w = Path(f"{path}-wal").stat()
            wal = (w.st_size, w.st_mtime_ns)
        except OSError:
            pass
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, wal)

    def as_json(self) -> list:
        return [self.size, self.mtime_ns, self.inode, list(self.wal) if self.wal else None]

    @classmethod
    def from_json(cls, value: Any) -> Signature | None:
        try:
            size, mtime, inode, wal = value
            return cls(int(size), int(mtime), int(inode), tuple(wal) if wal else None)
        except (TypeError, ValueError):
            return None


def state_path(state_dir: str | Path, target: str) -> Path:
    return Path(state_dir) / f"state-{hashlib.sha256(target.encode()).hexdigest()[:16]}.json"


class IngestState:
    """The per-file progress of ingestion into one database."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target
        self.files: dict[str, dict[str, Any]] = {}
        self.inflight: dict[str, Any] | None = None  # a batch being stored: see `begin_batch`
        self._seen: set[str] | None = None
        self._lock_fd: int | None = None
        self.dirty = False
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("version") == VERSION and isinstance(data.get("files"), dict):
                self.files = data["files"]
                self.inflight = data.get("inflight")
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"ingest state {path} is unreadable: {exc}",
                           hint="restore it from a backup; deleting it makes the next run ingest everything "
                                "again (duplicating the journal)") from None

    # ------------------------------------------------------------ locking

    def lock(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CMPError(ErrorCode.DATA_DIR_LOCKED, f"another ingest run is using {self.path}",
                           hint="wait for it, or stop the `cerememory ingest --watch` that holds it") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> IngestState:
        self.lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unlock()

    # ------------------------------------------------------------ per file

    def unchanged(self, path: Path, signature: Signature) -> bool:
        entry = self.files.get(str(path))
        return entry is not None and Signature.from_json(entry.get("sig")) == signature

    def resume(self, path: Path, signature: Signature, incremental: bool) -> tuple[int, dict[str, Any], bool]:
        """(offset, reader context, rewritten) to read `path` from."""
        entry = self.files.get(str(path))
        if entry is None:
            return 0, {}, False
        if not incremental:
            return 0, {}, False  # whole-file formats are re-read; digests skip known turns
        old = Signature.from_json(entry.get("sig"))
        offset = int(entry.get("offset", 0))
        head_len = int(entry.get("head_len", 0))
        same = (old is not None and old.inode == signature.inode and signature.size >= offset
                and head_len <= signature.size and head_hash(path, head_len) == entry.get("head"))
        if same:
            return offset, dict(entry.get("context") or {}), False
        return 0, {}, True

    def advance(self, path: Path, agent: str, signature: Signature, offset: int, context: dict[str, Any]) -> None:
        """Record that `path` was read up to `offset`. A file gone or replaced meanwhile keeps its
        old entry: it is read again next run, and the turn digests keep that from duplicating."""
        head_len = min(HEAD_BYTES, offset or signature.size)
        try:
            head = head_hash(path, head_len)
        except OSError:
            return
        entry = self.files.setdefault(str(path), {"agent": agent, "seen": ""})
        entry.update(agent=agent, sig=signature.as_json(), offset=offset, context=context, head_len=head_len,
                     head=head)
        self.dirty = True

    # ------------------------------------------------------------ turns already ingested

    def seen(self) -> set[str]:
        if self._seen is None:
            self._seen = set()
            for entry in self.files.values():
                text = entry.get("seen") or ""
                self._seen.update(text[i:i + DIGEST_CHARS] for i in range(0, len(text), DIGEST_CHARS))
        return self._seen

    def remember(self, path: Path, agent: str, digests: Iterable[str]) -> None:
        entry = self.files.setdefault(str(path), {"agent": agent, "seen": ""})
        new = list(digests)
        entry["seen"] = (entry.get("seen") or "") + "".join(new)
        self.seen().update(new)
        self.dirty = True

    # ------------------------------------------------------------ a batch in flight

    def begin_batch(self, owners: list[tuple[str, str, str]], sessions: dict[str, list[str]]) -> None:
        """Record, durably, the batch about to be stored: (file, agent, digest) per turn and the
        time range of each session in it. If the process dies before `end_batch`, the next run
        asks the journal which of these turns arrived (`recover_batch`)."""
        self.inflight = {"owners": owners, "sessions": sessions}
        self.dirty = True
        self.save()

    def end_batch(self, owners: Iterable[tuple[str, str, str]]) -> None:
        by_file: dict[tuple[str, str], list[str]] = {}
        for path, agent, key in owners:
            by_file.setdefault((path, agent), []).append(key)
        for (path, agent), keys in by_file.items():
            self.remember(Path(path), agent, keys)
        self.inflight = None
        self.save()

    def recover_batch(self, api: Any) -> int:
        """Settle a batch an earlier run left in flight: the turns the journal holds (found by the
        `ingest_key` in their metadata) are remembered, the others will be read again."""
        if not self.inflight:
            return 0
        present: set[str] = set()
        for session_id, (start, end) in self.inflight["sessions"].items():
            found = api.dispatch("recall.raw_query", {
                "session_id": session_id, "temporal": {"start": start, "end": end}, "limit": MAX_RECALL_LIMIT,
                "include_private_scratch": True, "include_sealed": True,
                "secrecy_levels": ["public", "sensitive", "secret"]})
            present.update(r["metadata"].get("ingest_key") for r in found["records"])
        arrived = [tuple(owner) for owner in self.inflight["owners"] if owner[2] in present]
        self.end_batch(arrived)
        return len(arrived)

    def save(self) -> None:
        if not self.dirty:
            return
        write_atomic(self.path, json.dumps({"version": VERSION, "target": self.target, "files": self.files,
                                            "inflight": self.inflight}, separators=(",", ":")))
        self.dirty = False


def target_of(api: Any) -> str:
    """The database `api` writes to, by its data directory (asked of a server), so that the
    embedded engine and a server on the same directory share one state."""
    data_dir = getattr(api, "data_dir", None)
    if data_dir is None:
        data_dir = api.stats().data_dir or getattr(api, "url", None) or "unknown"
    return str(Path(str(data_dir)).expanduser().resolve()) if not str(data_dir).startswith("http") else str(data_dir)


def open_state(api: Any, state_dir: str | Path) -> IngestState:
    """The (unlocked) ingest state of the database behind `api`; `state_dir` a path or a string."""
    target = target_of(api)
    return IngestState(state_path(state_dir, target), target)
