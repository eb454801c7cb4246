"""API keys kept with the memory (`cerememory keys create|list|revoke`).

The file `api_keys.json` in the data directory (mode 0600, replaced atomically), or the table
`api_keys` of a memory shared over PostgreSQL, holds for each key its id, name,
creation and revocation times, a short display prefix and the SHA-256 digest of the key, never
the key. SHA-256 rather than a password hash such as Argon2: a key is 32 random bytes, so there
is nothing to brute-force, and the digest must be checked on every request, where Argon2's
deliberate cost (tens of milliseconds) would be paid per call.

A serving process re-reads the file when it changes (the table at most once a second), so a
revoked key stops working at once and a new key works without a restart (as long as the
server started with keys).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cmp.errors import CMPError, ErrorCode
from ..storage.files import write_atomic
from ..storage.full import is_disk_full, storage_full
from ..storage.modes import private_dir
from .auth import KeyRing, bearer_token, digest, identify_in

if TYPE_CHECKING:
    from ..storage.backends import StorageSettings
    from ..storage.base import ApiKeyRows

KEYS_FILE = "api_keys.json"
KEY_PREFIX = "cmk_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class StoredKey:
    id: str
    name: str | None
    created_at: str
    sha256: str
    prefix: str
    revoked_at: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def public(self) -> dict[str, Any]:
        """Everything but the digest."""
        return {k: v for k, v in asdict(self).items() if k != "sha256"}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _bad(message: str, hint: str | None = None, **details: Any) -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, message, hint=hint, details=details or None)


class KeyFile:
    """The data directory's `api_keys.json`: its rows, read-modify-write under a file lock."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.path = self.data_dir / KEYS_FILE
        self.where = str(self.path)

    def load(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        try:
            return list(json.loads(self.path.read_text(encoding="utf-8"))["keys"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"cannot read the key file {self.path}: {exc}",
                           hint="restore it from a backup, or move it away and create new keys") from None

    def save(self, rows: list[dict[str, Any]]) -> None:
        body = json.dumps({"version": 1, "keys": rows}, indent=2) + "\n"
        try:
            write_atomic(self.path, body)
        except OSError as exc:
            if is_disk_full(exc):
                raise storage_full(self.path) from exc
            raise

    @contextmanager
    def locked(self) -> Iterator[list[dict[str, Any]]]:
        """The rows under an exclusive lock, so two CLI calls never lose a key."""
        private_dir(self.data_dir)
        fd = os.open(self.data_dir / f".{KEYS_FILE}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.load()
        finally:
            os.close(fd)  # releases the lock

    def stamp(self) -> Hashable | None:
        """Changes whenever the file does; None when there is no file."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def close(self) -> None:
        return None


class KeyStore:
    """The memory's API keys: create, list, revoke, and the active digests. They live in the
    data directory (`KeyFile`), or, for a memory shared over PostgreSQL, in its schema, so a key
    created against one server works on every server and a revocation reaches them all."""

    def __init__(self, data_dir: str | Path, rows: ApiKeyRows | None = None) -> None:
        self.rows: ApiKeyRows = rows if rows is not None else KeyFile(data_dir)
        self.where = self.rows.where

    @classmethod
    def of(cls, data_dir: str | Path, storage: StorageSettings | None = None) -> KeyStore:
        """The key store of the memory these settings name."""
        if storage is not None and storage.backend == "postgres":
            from ..storage.backends import open_api_keys

            return cls(data_dir, open_api_keys(storage))
        return cls(data_dir)

    def load(self) -> list[StoredKey]:
        try:
            return [StoredKey(**row) for row in self.rows.load()]
        except TypeError as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"cannot read the keys in {self.where}: {exc}",
                           hint="restore them from a backup, or move them away and create new keys") from None

    def _save(self, keys: list[StoredKey]) -> None:
        self.rows.save([asdict(k) for k in keys])

    @contextmanager
    def _locked(self) -> Iterator[list[StoredKey]]:
        """Read-modify-write, one writer at a time."""
        with self.rows.locked() as rows:
            yield [StoredKey(**row) for row in rows]

    def close(self) -> None:
        self.rows.close()

    # ------------------------------------------------------------ operations

    def create(self, name: str | None = None) -> tuple[StoredKey, str]:
        """A new key: the stored entry and the key itself (shown once, never stored)."""
        if name is not None and not _NAME.match(name):
            raise _bad(f"key name {name!r}: use 1-64 letters, digits, '.', '_' or '-'",
                       hint="e.g. --name ci-runner")
        with self._locked() as keys:
            if name is not None and any(k.active and k.name == name for k in keys):
                raise _bad(f"an active key is already named {name!r}",
                           hint="choose another --name, or revoke the old key first")
            taken = {k.id for k in keys}
            key_id = "key-" + secrets.token_hex(4)
            while key_id in taken:
                key_id = "key-" + secrets.token_hex(4)
            secret = KEY_PREFIX + secrets.token_urlsafe(32)
            entry = StoredKey(id=key_id, name=name, created_at=_now(), sha256=digest(secret).hex(),
                              prefix=secret[:8])
            self._save([*keys, entry])
        return entry, secret

    def revoke(self, ref: str) -> StoredKey:
        """Revoke the active key with id or name `ref`."""
        with self._locked() as keys:
            match = next((k for k in keys if k.active and k.id == ref), None) or \
                next((k for k in keys if k.active and k.name == ref), None)
            if match is None:
                raise _bad(f"no active key has the id or name {ref!r}",
                           hint="`cerememory keys list` shows the keys", key=ref)
            match.revoked_at = _now()
            self._save(keys)
        return match

    def active_entries(self) -> list[tuple[str, bytes]]:
        return [(k.id, bytes.fromhex(k.sha256)) for k in self.load() if k.active]


class ServerKeys:
    """What a server accepts: the setting's keys plus the data dir's active keys, re-read when
    the key file changes. Duck-compatible with `KeyRing` for the transports."""

    def __init__(self, ring: KeyRing | None, store: KeyStore | None) -> None:
        self.ring = ring
        self.store = store
        self._lock = threading.Lock()
        self._stamp: Hashable | None = None
        self._stored: list[tuple[str, bytes]] = []
        self._refresh()

    @classmethod
    def load(cls, data_dir: str | Path, setting: str | None,
             storage: StorageSettings | None = None) -> ServerKeys | None:
        """None when neither the setting nor the memory has a key (the server runs open)."""
        store = KeyStore.of(data_dir, storage)
        keys = cls(KeyRing.from_setting(setting), store)
        if len(keys):
            return keys
        store.close()
        return None

    def _refresh(self) -> None:
        if self.store is None:
            return
        stamp = self.store.rows.stamp()
        if stamp == self._stamp:
            return
        with self._lock:
            if stamp != self._stamp:
                self._stored = self.store.active_entries() if stamp is not None else []
                self._stamp = stamp

    def entries(self) -> list[tuple[str, bytes]]:
        self._refresh()
        return (self.ring.entries if self.ring else []) + self._stored

    def __len__(self) -> int:
        return len(self.entries())

    def active_ids(self) -> set[str]:
        """The ids of the keys accepted now: a revoked key's id leaves at once."""
        return {key_id for key_id, _ in self.entries()}

    def identify_authorization(self, header: str | None) -> str | None:
        return identify_in(self.entries(), bearer_token(header))

    def check_authorization(self, header: str | None) -> bool:
        return self.identify_authorization(header) is not None
