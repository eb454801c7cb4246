"""API keys kept in the data directory (`cerememory keys create|list|revoke`).

The file `api_keys.json` (mode 0600, replaced atomically) holds for each key its id, name,
creation and revocation times, a short display prefix and the SHA-256 digest of the key, never
the key. SHA-256 rather than a password hash such as Argon2: a key is 32 random bytes, so there
is nothing to brute-force, and the digest must be checked on every request, where Argon2's
deliberate cost (tens of milliseconds) would be paid per call.

A serving process re-reads the file when it changes, so a revoked key stops working at once and
a new key works without a restart (as long as the server started with keys).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..cmp.errors import CMPError, ErrorCode
from ..storage.files import write_atomic
from ..storage.full import is_disk_full, storage_full
from .auth import KeyRing, bearer_token, digest, identify_in

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


class KeyStore:
    """The data directory's key file: create, list, revoke, and the active digests."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.path = self.data_dir / KEYS_FILE

    # ------------------------------------------------------------ file access

    def load(self) -> list[StoredKey]:
        if not self.path.exists():
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [StoredKey(**entry) for entry in data["keys"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"cannot read the key file {self.path}: {exc}",
                           hint="restore it from a backup, or move it away and create new keys") from None

    def _save(self, keys: list[StoredKey]) -> None:
        body = json.dumps({"version": 1, "keys": [asdict(k) for k in keys]}, indent=2) + "\n"
        try:
            write_atomic(self.path, body)
        except OSError as exc:
            if is_disk_full(exc):
                raise storage_full(self.path) from exc
            raise

    @contextmanager
    def _locked(self) -> Iterator[list[StoredKey]]:
        """Read-modify-write under an exclusive lock, so two CLI calls never lose a key."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / f".{KEYS_FILE}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.load()
        finally:
            os.close(fd)  # releases the lock

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
        self._stamp: tuple[int, int, int] | None = None
        self._stored: list[tuple[str, bytes]] = []
        self._refresh()

    @classmethod
    def load(cls, data_dir: str | Path, setting: str | None) -> ServerKeys | None:
        """None when neither the setting nor the data dir has a key (the server runs open)."""
        keys = cls(KeyRing.from_setting(setting), KeyStore(data_dir))
        return keys if len(keys) else None

    def _refresh(self) -> None:
        if self.store is None:
            return
        try:
            st = os.stat(self.store.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = (0, 0, 0)
        if stamp == self._stamp:
            return
        with self._lock:
            if stamp != self._stamp:
                self._stored = self.store.active_entries() if stamp != (0, 0, 0) else []
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
