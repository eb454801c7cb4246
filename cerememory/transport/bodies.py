"""Request bodies read within a limit, for every HTTP route that reads one."""

from __future__ import annotations

from starlette.requests import Request


async def read_within(request: Request, limit: int) -> bytes | None:
    """The request's body, or None as soon as it passes `limit` bytes: a body sent in chunks
    without a Content-Length is never held whole before it is found too large."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
