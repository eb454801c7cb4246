"""Following the session stores: ingest, sleep, repeat, until told to stop. A pass over
unchanged files only stats them, so a short interval costs little."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .engine import Summary, ingest


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM (the previous handlers come back afterwards)."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def watch(api: Any, *, interval: float, stop: threading.Event, on_pass: Callable[[Summary], None],
          **options: Any) -> int:
    """Run `ingest(api, **options)` every `interval` seconds until `stop` is set; returns the
    number of passes. A pass in progress finishes its batch and state before stopping."""
    passes = 0
    while not stop.is_set():
        on_pass(ingest(api, **options))
        passes += 1
        stop.wait(interval)
    return passes
