"""Bearer API keys, held only as SHA-256 digests and compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

BEARER = "bearer "


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeyRing:
    """The keys a server accepts. Every check compares against every key (no early exit), so
    timing reveals neither which key matched nor how much of a key was right."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [_digest(k) for k in (k.strip() for k in keys) if k]
        if not self._digests:
            raise ValueError("a key ring needs at least one non-blank key")

    @classmethod
    def from_setting(cls, value: str | None) -> KeyRing | None:
        """Keys from a comma-separated setting (`auth.api_keys`, `CEREMEMORY_API_KEYS`)."""
        keys = [k.strip() for k in (value or "").split(",") if k.strip()]
        return cls(keys) if keys else None

    def __len__(self) -> int:
        return len(self._digests)

    def check(self, key: str | None) -> bool:
        given = _digest(key or "")
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(given, digest)
        return matched and key is not None

    def check_authorization(self, header: str | None) -> bool:
        """An `Authorization: Bearer <key>` header value."""
        if not header or not header[: len(BEARER)].lower() == BEARER:
            return self.check(None)
        return self.check(header[len(BEARER):].strip())
