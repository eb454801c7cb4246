"""Server logs on stderr: uvicorn's text lines, or (`serve --log-format json`) one JSON object
per line for log shippers, with the request fields (request_id, op, status, duration_ms, key_id,
client, transport) as top-level keys."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

# attributes every LogRecord has; anything else came in through `extra=` and is a field
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
# uvicorn attaches a terminal-coloured copy of some messages: log shippers want the plain one only
_TERMINAL_ONLY = {"color_message"}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _ANSI.sub("", record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _TERMINAL_ONLY and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(log_format: str, level: str) -> dict[str, Any]:
    """Set up the root logger; returns the uvicorn.Config arguments that go with it."""
    if log_format != "json":
        return {}
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # our access log (transport/middleware.py) replaces uvicorn's text one
    return {"log_config": None, "access_log": False}
