"""What the archive operations of one data directory may do (the `archive.*` settings).

An import accepts a bounded key-derivation cost and waits a bounded time for another import to
finish; an export written on the server's own disk (the MCP `export` tool over /mcp) goes only
into one directory, so a client can neither fill nor overwrite files elsewhere on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .kdf import KdfLimits

EXPORTS = "exports"


@dataclass(frozen=True)
class ArchiveSettings:
    kdf_limits: KdfLimits = field(default_factory=KdfLimits)
    import_wait_seconds: float = 5.0
    export_dir: str | None = None

    def export_root(self, data_dir: Path) -> Path:
        """Where server-side exports go: the configured directory, else `exports/` in the data dir."""
        return Path(self.export_dir).expanduser() if self.export_dir else Path(data_dir) / EXPORTS
