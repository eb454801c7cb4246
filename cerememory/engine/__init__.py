"""The engine: one data directory and every CMP operation over it, built from parts.

`Engine` (facade.py) is the façade; `EngineCore` (core.py) the shared state and read-only
questions; `Writer` (writer.py) the one write path; encode, recall, listing, consolidate,
dreams, lifecycle, introspect, archive and indexes one part each. docs/architecture.md draws it.
"""

from __future__ import annotations

from ..progress import ProgressFn
from .facade import Engine
from .options import EngineOptions

__all__ = ["Engine", "EngineOptions", "ProgressFn"]
