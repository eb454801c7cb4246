"""Background upkeep for a serving process: a decay tick every `interval` seconds, and a dream
tick every `dream.background_interval_secs` when `dream.background_enabled` is on.

Ticks run through the serving process's `Dispatcher` like any client call (transport
"scheduler"), so they reach the audit log and the metrics. The scheduler sets the engine's
`background_decay` / `background_dream` flags, which `introspect.stats` reports. The first tick
runs one interval after start (opening a data directory stays fast). A failing tick is logged and
retried at the next interval; the scheduler never takes the server down.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..cmp.context import bound
from ..cmp.dispatch import Dispatcher
from ..cmp.handler import CMPHandler
from ..cmp.messages import DecayTickRequest, DreamTickRequest
from ..dream.settings import DreamSettings
from ..shutdown import close_at_exit

log = logging.getLogger("cerememory.scheduler")


class Scheduler:
    def __init__(self, target: Dispatcher | CMPHandler, *, decay_interval: float) -> None:
        self.dispatcher = Dispatcher.of(target)
        self.engine = self.dispatcher.engine
        self.decay_interval = decay_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dream_thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self, op: str, request: Any) -> Any | None:
        """Run one tick, unless another server sharing the database runs the background work."""
        if not self.engine.leads:
            return None
        with bound(transport="scheduler", request_id=None, key_id=None, client=None):
            return self.dispatcher.call(op, request)

    def start(self) -> None:
        close_at_exit(self)  # a process that exits without stop() still joins the ticks first
        self._start_dream()
        if self.decay_interval <= 0 or self.running:
            return
        self._thread = threading.Thread(target=self._loop, name="cerememory-scheduler", daemon=True)
        self._thread.start()
        self.engine.background_decay = True

    def _loop(self) -> None:
        while not self._stop.wait(self.decay_interval):
            try:
                result = self._run("lifecycle.decay_tick", DecayTickRequest())
                if result is not None:
                    log.info("decay tick: %s", result.model_dump())
            except Exception:
                log.exception("background decay tick failed; retrying in %ss", self.decay_interval)

    def _start_dream(self) -> None:
        settings = self.engine.options.dream
        if not settings.background_enabled or self._dream_thread is not None:
            return
        self._dream_thread = threading.Thread(target=self._dream_loop, args=(settings,),
                                              name="cerememory-dream", daemon=True)
        self._dream_thread.start()
        self.engine.background_dream = True

    def _dream_loop(self, settings: DreamSettings) -> None:
        request = DreamTickRequest(max_groups=settings.background_max_groups)
        while not self._stop.wait(settings.background_interval_secs):
            try:
                result = self._run("lifecycle.dream_tick", request)
                if result is not None:
                    log.info("dream tick: %s groups, %s raw records", result.groups_processed,
                         result.raw_records_processed)
            except Exception:
                log.exception("background dream tick failed; retrying in %ss", settings.background_interval_secs)

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop both loops, waiting up to `timeout` seconds for a tick in progress (a dream tick
        stops after its current group once the engine closes)."""
        self._stop.set()
        for thread in (self._thread, self._dream_thread):
            if thread is not None:
                thread.join(timeout)
        self.engine.background_decay = False
        self.engine.background_dream = False

    def close(self) -> None:
        """At interpreter exit: stop, and wait for the ticks however long they take."""
        self.stop(timeout=None)
