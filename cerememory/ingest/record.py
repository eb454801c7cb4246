"""A turn as a journal record the journal always accepts, whatever its session file held.

Records are stored in batches, and one the journal refuses fails its whole batch, and so the
run, on every rerun. So every string is made encodable (a lone surrogate from a JSON escape or
a file name that is not UTF-8 becomes U+FFFD), ids are kept within the journal's id limit (a
longer one keeps its head and gains a hash of the whole, so it stays unique and stable), and
metadata stays flat: strings capped, anything else the log put there written as compact JSON.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

from ..limits import MAX_ID_CHARS
from .turns import Turn, as_json, scrub, truncate

MAX_META_CHARS = 4096  # a path, a model name, a title: far below the metadata size limit
_HASH_CHARS = 16


def bounded_id(value: str) -> str:
    """`value` if it fits the journal's ids, else its head, `~` and a hash of all of it."""
    value = scrub(value)
    if len(value) <= MAX_ID_CHARS:
        return value
    mark = hashlib.blake2b(value.encode("utf-8"), digest_size=_HASH_CHARS // 2).hexdigest()
    return f"{value[:MAX_ID_CHARS - _HASH_CHARS - 1]}~{mark}"


def _meta_value(value: Any) -> Any:
    if value is None or (isinstance(value, bool | int | float) and abs(value) < 2**53):
        return value
    text = value if isinstance(value, str) else as_json(value)
    return truncate(scrub(text), MAX_META_CHARS)[0]


def journal_record(turn: Turn, text: str, created_at: datetime, metadata: dict[str, Any]) -> dict[str, Any]:
    """The `encode.batch_raw` record of `turn` with its final (redacted, capped) `text`;
    `metadata` adds to what the turn itself says (agent, workspace, tool, index, line...)."""
    meta = {"agent": turn.agent, "workspace": turn.workspace, "tool": turn.tool, "turn_index": turn.index,
            "line": turn.line, **metadata, **turn.extra}
    return {"session_id": bounded_id(turn.session_id), "turn_id": bounded_id(turn.turn_id), "source": turn.source,
            "speaker": turn.speaker, "created_at": created_at.isoformat(),
            "content": {"blocks": [{"modality": "text", "text": scrub(text)}]},
            "metadata": {scrub(str(k)): _meta_value(v) for k, v in meta.items() if v is not None}}


def shown(path: Path) -> str:
    """`path` as text that can be printed and stored (not UTF-8 bytes as U+FFFD)."""
    return scrub(str(path))
