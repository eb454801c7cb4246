"""A daily token and cost allowance, persisted in a small JSON file so that restarts do not reset it.

The day is the UTC calendar day. The check happens before a call (so a spent budget costs
nothing more) and the usage is recorded after it, from the provider's own token counts.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

from ..storage.files import write_atomic
from .providers import Usage


class BudgetExhausted(RuntimeError):
    pass


class DailyBudget:
    def __init__(self, path: Path | None, *, max_tokens: int = 0, max_cost_usd: float = 0.0,
                 usd_per_million_tokens: float = 0.0) -> None:
        self.path = path
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.usd_per_million = usd_per_million_tokens
        self._lock = threading.Lock()
        self._state = self._load()

    @staticmethod
    def _today() -> str:
        return datetime.now(UTC).date().isoformat()

    def _load(self) -> dict:
        blank = {"day": self._today(), "tokens": 0, "cost_usd": 0.0, "calls": 0}
        if self.path is None or not self.path.exists():
            return blank
        try:
            state = json.loads(self.path.read_text())
            return state if state.get("day") == blank["day"] else blank
        except (OSError, ValueError):
            return blank

    def _roll(self) -> None:
        if self._state.get("day") != self._today():
            self._state = {"day": self._today(), "tokens": 0, "cost_usd": 0.0, "calls": 0}

    def used(self) -> dict:
        with self._lock:
            self._roll()
            return dict(self._state)

    def check(self) -> None:
        """Raise `BudgetExhausted` when today's allowance is spent."""
        with self._lock:
            self._roll()
            if self.max_tokens and self._state["tokens"] >= self.max_tokens:
                raise BudgetExhausted(f"daily token budget spent ({self._state['tokens']} of {self.max_tokens})")
            if self.max_cost_usd and self._state["cost_usd"] >= self.max_cost_usd:
                raise BudgetExhausted(f"daily cost budget spent (${self._state['cost_usd']:.4f} of "
                                      f"${self.max_cost_usd:.4f})")

    def record(self, usage: Usage) -> None:
        with self._lock:
            self._roll()
            self._state["tokens"] += usage.total
            self._state["cost_usd"] += usage.total * self.usd_per_million / 1_000_000
            self._state["calls"] += 1
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        write_atomic(self.path, json.dumps(self._state))
