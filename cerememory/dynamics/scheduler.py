"""Background upkeep for a serving process: a decay tick every `interval` seconds.

The first tick runs one interval after start (opening a data directory stays fast). A failing
tick is logged and retried at the next interval; the scheduler never takes the server down.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("cerememory.scheduler")


class Scheduler:
    def __init__(self, engine: Any, *, decay_interval: float) -> None:
        self.engine = engine
        self.decay_interval = decay_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.decay_interval <= 0 or self.running:
            return
        self._thread = threading.Thread(target=self._loop, name="cerememory-scheduler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.decay_interval):
            try:
                result = self.engine.lifecycle_decay_tick()
                log.info("decay tick: %s", result.model_dump())
            except Exception:
                log.exception("background decay tick failed; retrying in %ss", self.decay_interval)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
