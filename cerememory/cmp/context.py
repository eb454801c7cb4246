"""Who is calling: the transport, the API key id, the request id and the client of the CMP call
running in this thread or task.

Transports bind a `CallContext` around the work they hand to the dispatcher; the dispatcher and
the audit log read it, so no operation signature carries caller details. Context variables follow
the call into the worker thread (`run_in_threadpool` and transport/offload.py copy the context) and stay out of other
calls running at the same time.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class CallContext:
    transport: str = "embedded"  # http, grpc, mcp, cli, scheduler, embedded
    request_id: str | None = None
    key_id: str | None = None  # the API key that authenticated the call, if any
    client: str | None = None  # the client address the rate limiter keyed on


EMBEDDED = CallContext()
_current: ContextVar[CallContext] = ContextVar("cerememory_call", default=EMBEDDED)
_touched: ContextVar[list[uuid.UUID] | None] = ContextVar("cerememory_touched", default=None)


REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:\-]{1,64}")


def client_request_id(given: str | None) -> str | None:
    """A client's request id as logged and audited, or None when it is unfit: ids are written in
    clear to the audit log and the server log (even in an encrypted data directory), so only a
    short token of letters, digits and `._:-` is kept; the transport then makes its own."""
    if given and REQUEST_ID_PATTERN.fullmatch(given):
        return given
    return None


def current() -> CallContext:
    return _current.get()


@contextmanager
def bound(**fields: str | None) -> Iterator[CallContext]:
    """Run the body with the current context updated by `fields` (transport, request_id, ...)."""
    changes: dict[str, Any] = dict(fields)
    context = replace(_current.get(), **changes)
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def note_records(ids: Iterable[uuid.UUID]) -> None:
    """Called by the engine for records an operation changed that its response does not name
    (forget by store or time range, consolidation, dream, import), so the audit log lists them."""
    touched = _touched.get()
    if touched is not None:
        touched.extend(ids)


@contextmanager
def collecting() -> Iterator[list[uuid.UUID]]:
    """Collect the ids `note_records` reports while the body runs."""
    touched: list[uuid.UUID] = []
    token = _touched.set(touched)
    try:
        yield touched
    finally:
        _touched.reset(token)
