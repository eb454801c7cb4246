"""Bearer API keys, held only as SHA-256 digests and compared in constant time.

Every key has a stable id that names it in the audit log and the rate limiter: data-dir keys
carry the id they were created with (security/keys.py); a key from `CEREMEMORY_API_KEYS` is
`env-` + the first 8 hex digits of its digest (which reveals nothing usable about a key of any
real length).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

BEARER = "bearer "


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


_digest = digest  # the name earlier callers used


def env_key_id(key: str) -> str:
    return "env-" + digest(key).hex()[:8]


def bearer_token(header: str | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header value, else None."""
    if not header or not header[: len(BEARER)].lower() == BEARER:
        return None
    return header[len(BEARER):].strip() or None


def identify_in(entries: Iterable[tuple[str, bytes]], key: str | None) -> str | None:
    """The id of the entry whose digest is the key's. Every entry is compared (no early exit),
    so timing reveals neither which key matched nor how much of a key was right."""
    given = digest(key or "")
    found: str | None = None
    for key_id, expected in entries:
        if hmac.compare_digest(given, expected) and found is None:
            found = key_id
    return found if key else None


class KeyRing:
    """The keys a server accepts, from a setting or a list."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._entries = [(env_key_id(k), digest(k)) for k in (k.strip() for k in keys) if k]
        if not self._entries:
            raise ValueError("a key ring needs at least one non-blank key")

    @classmethod
    def from_setting(cls, value: str | None) -> KeyRing | None:
        """Keys from a comma-separated setting (`auth.api_keys`, `CEREMEMORY_API_KEYS`)."""
        keys = [k.strip() for k in (value or "").split(",") if k.strip()]
        return cls(keys) if keys else None

    @property
    def entries(self) -> list[tuple[str, bytes]]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def active_ids(self) -> set[str]:
        """The ids of the keys accepted now (a console session ends when its key's id leaves)."""
        return {key_id for key_id, _ in self._entries}

    def identify(self, key: str | None) -> str | None:
        return identify_in(self._entries, key)

    def identify_authorization(self, header: str | None) -> str | None:
        """The key id an `Authorization` header value authenticates, else None."""
        return self.identify(bearer_token(header))

    def check(self, key: str | None) -> bool:
        return self.identify(key) is not None

    def check_authorization(self, header: str | None) -> bool:
        return self.identify_authorization(header) is not None
