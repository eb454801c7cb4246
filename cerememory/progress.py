"""How long work (an import, an export, a reindex) reports how far it got."""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[int, int | None], None]  # (done, total or None while unknown)
