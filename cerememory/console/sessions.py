"""Console sessions: a random id in an HttpOnly, SameSite=Strict cookie, everything else on the
server.

A session holds the id of the API key it was opened with (never the key), its CSRF token and
when it ends. Every visitor gets one on the first page, signed in or not, so that even the
sign-in form carries a CSRF token; signing in replaces it with a new id (no session fixation).
Sessions live in memory: a restart signs everyone out, which is what a restart of a local
server should do.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

COOKIE = "cerememory_console"
LIFETIME_SECONDS = 12 * 3600
MAX_SESSIONS = 10_000


@dataclass
class Session:
    id: str
    key_id: str | None  # the API key it signed in with; None before sign-in (or on an open server)
    signed_in: bool
    expires: float
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def csrf_matches(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(self.csrf.encode(), (given or "").encode())


class Sessions:
    """The open sessions, oldest evicted first past `limit`."""

    def __init__(self, *, lifetime: float = LIFETIME_SECONDS, limit: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lifetime = lifetime
        self.limit = limit
        self.clock = clock
        self._open: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, *, key_id: str | None, signed_in: bool) -> Session:
        session = Session(secrets.token_urlsafe(32), key_id, signed_in, self.clock() + self.lifetime)
        with self._lock:
            self._open[session.id] = session
            while len(self._open) > self.limit:
                self._open.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            session = self._open.get(session_id)
            if session is not None and session.expires <= self.clock():
                del self._open[session_id]
                return None
            return session

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._open.pop(session_id or "", None)
