"""One completion over HTTP, whatever the provider: timeouts, retries with backoff, a daily budget.

Every failure surfaces as `LLMError` with a short `reason` a response can report, so callers
can fall back to a deterministic path instead of failing the operation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx

from .budget import BudgetExhausted, DailyBudget
from .providers import FORMATS, LLMError, MalformedReply, Usage
from .settings import LLMSettings

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
MAX_RETRY_AFTER = 30.0


class LLMClient:
    """`complete(system, prompt) -> (text, usage)` against the configured provider."""

    def __init__(self, settings: LLMSettings, *, budget_path: Path | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if settings.provider not in FORMATS:
            raise ValueError(f"unknown LLM provider {settings.provider!r}; expected one of {', '.join(FORMATS)}")
        self.settings = settings
        self.name = f"{settings.provider}:{settings.effective_model}"
        self.budget = DailyBudget(budget_path, max_tokens=settings.daily_token_budget,
                                  max_cost_usd=settings.daily_cost_budget_usd,
                                  usd_per_million_tokens=settings.usd_per_million_tokens)
        self._sleep = sleep
        self._http = httpx.Client(timeout=httpx.Timeout(settings.timeout_secs))

    def close(self) -> None:
        self._http.close()

    def complete(self, system: str, prompt: str) -> tuple[str, Usage]:
        try:
            self.budget.check()
        except BudgetExhausted as exc:
            raise LLMError(str(exc)) from None
        build, read = FORMATS[self.settings.provider]
        call = build(self.settings, system, prompt)
        attempts = self.settings.max_retries + 1
        last = "no attempt made"
        for attempt in range(attempts):
            wait = self.settings.backoff_secs * (2 ** attempt)
            try:
                reply = self._http.post(call.url, headers=call.headers, json=call.body)
            except httpx.TimeoutException:
                last = f"timed out after {self.settings.timeout_secs:g}s"
            except httpx.HTTPError as exc:
                last = f"request failed: {type(exc).__name__}"
            else:
                if reply.status_code < 300:
                    try:
                        text, usage = read(reply.json())
                    except (MalformedReply, ValueError) as exc:
                        raise LLMError(f"malformed reply: {exc}") from None
                    self.budget.record(usage)
                    return text, usage
                last = f"HTTP {reply.status_code}"
                if reply.status_code not in RETRY_STATUS:
                    raise LLMError(last)
                wait = max(wait, _retry_after(reply))
            if attempt + 1 < attempts:
                self._sleep(wait)
        raise LLMError(f"{last} ({attempts} attempts)")


def _retry_after(reply: httpx.Response) -> float:
    try:
        return min(float(reply.headers.get("retry-after", 0)), MAX_RETRY_AFTER)
    except ValueError:
        return 0.0
