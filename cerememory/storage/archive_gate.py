"""One archive import at a time in a process.

An import holds the whole archive, its decrypted copy and its parsed records in memory, and an
encrypted one first runs Argon2id with up to `archive.import_max_kdf_memory_kib` of memory: a
few at once could exhaust a small server. A second import waits up to
`archive.import_wait_seconds` for the first, then is told to come back (RATE_LIMITED with
`retry_after`), which the HTTP client (and so the CLI with `--server-url`) does by itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..cmp.errors import CMPError, ErrorCode

RETRY_AFTER_SECONDS = 5


class ImportGate:
    def __init__(self) -> None:
        self._lock = threading.Lock()

    @contextmanager
    def slot(self, wait_seconds: float) -> Iterator[None]:
        """Hold the one import slot; CMPError(RATE_LIMITED) if it stays taken for `wait_seconds`."""
        taken = self._lock.acquire(timeout=wait_seconds) if wait_seconds > 0 else self._lock.acquire(False)
        if not taken:
            raise CMPError(ErrorCode.RATE_LIMITED, "lifecycle.import: another import is running; this server "
                           "imports one archive at a time",
                           hint="retry in a few seconds, or raise archive.import_wait_seconds to wait longer",
                           details={"reason": "import_in_progress", "setting": "archive.import_wait_seconds"},
                           retry_after=RETRY_AFTER_SECONDS)
        try:
            yield
        finally:
            self._lock.release()


IMPORTS = ImportGate()
