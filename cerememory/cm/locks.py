"""File locks for the files cm shares with other cm processes (and with the reference's cm):
`.cass/playbook.yaml`, `traumas.jsonl`, `blocked.log`, the onboarding state, JSONL logs.

The reference's scheme, so both tools respect each other: the lock is the directory
`<file>.lock.d`, made atomically by `mkdir`, holding `pid` and `owner` files; 20 retries 100 ms
apart; a lock untouched for 30 s is stale and taken over; only its owner removes it.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import CmError

RETRIES = 20
DELAY = 0.1
STALE_SECONDS = 30.0


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold `path`'s lock for a read-modify-write or an append; LOCK_ACQUISITION_FAILED (exit 4)
    when another process keeps it for the whole retry window."""
    lock = path.with_name(path.name + ".lock.d")
    lock.parent.mkdir(parents=True, exist_ok=True)
    owner = uuid.uuid4().hex
    for _ in range(RETRIES + 1):
        try:
            lock.mkdir()
        except FileExistsError:
            if _stale(lock):
                shutil.rmtree(lock, ignore_errors=True)
                continue
            time.sleep(DELAY)
            continue
        (lock / "pid").write_text(str(os.getpid()))
        (lock / "owner").write_text(owner)
        break
    else:
        raise CmError("LOCK_ACQUISITION_FAILED", f"{path} is locked by another cm process",
                      recovery=["Retry in a moment", f"If no cm process is running, remove {lock}"],
                      details={"lock": str(lock)})
    try:
        yield
    finally:
        try:
            if (lock / "owner").read_text() == owner:
                shutil.rmtree(lock, ignore_errors=True)
        except OSError:
            pass  # taken over as stale meanwhile: no longer ours to remove


def _stale(lock: Path) -> bool:
    try:
        return time.time() - lock.stat().st_mtime > STALE_SECONDS
    except OSError:
        return False  # released between mkdir and stat: just retry
