"""Dream settings the engine carries (filled from the `dream.*` settings)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_CHARS = 1200  # characters of one summary


@dataclass(frozen=True)
class DreamSettings:
    background_enabled: bool = True
    background_interval_secs: float = 86_400.0
    background_max_groups: int = 50
    summary_max_chars: int = DEFAULT_MAX_CHARS
