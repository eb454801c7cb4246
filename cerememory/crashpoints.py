"""Named points where a crash-recovery test freezes this process, to `kill -9` it exactly there.

`CEREMEMORY_CRASH_AT=<point>[:<n>]` makes the process stop itself with SIGSTOP the n-th time
(default: the first) it reaches `<point>`, after writing `cerememory: stopped at <point>` to
stderr; the test waits for the stop and sends SIGKILL, so no timing decides where the kill lands.
Unset (always, outside such tests), `reached()` is one environment lookup.

Points: `consolidate.merged` (the merges committed, promotions not begun), `consolidate.promoted`
(the promotions committed), `dream.group_writing` (inside a group's transaction, before its
commit), `dream.group_committed` (a group committed, its outcome not yet reported).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import Counter

ENV = "CEREMEMORY_CRASH_AT"
_seen: Counter[str] = Counter()
_lock = threading.Lock()


def reached(point: str) -> None:
    """Stop here if the environment names this point (and this is its n-th time)."""
    wanted = os.environ.get(ENV)
    if not wanted or not wanted.startswith(point):
        return
    name, _, nth = wanted.partition(":")
    if name != point:
        return
    with _lock:
        _seen[point] += 1
        if _seen[point] != (int(nth) if nth.isdigit() else 1):
            return
    sys.stderr.write(f"cerememory: stopped at {point}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSTOP)
