"""The web console served by `cerememory serve` at `/ui`: server-rendered pages over the CMP
dispatcher, and the offline API docs at `/docs` and `/redoc` (docs/console.md).

It reads and writes only through `Dispatcher` operations, like every other transport; it never
imports the engine, the stores or storage (tests/test_architecture.py)."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.staticfiles import StaticFiles

from . import apidocs, views
from .app import PREFIX, Console, Dispatch, Keys, Refusals

__all__ = ["Console", "mount"]

STATIC = Path(__file__).parent / "static"


def mount(app: Starlette, dispatcher: Dispatch, keys: Keys | None, *,
          auth_failures: Refusals | None = None) -> Console:
    """Add the console's routes under /ui (and `/` redirecting there), `/docs` and `/redoc` to `app`."""
    console = Console(dispatcher, keys, auth_failures=auth_failures)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="console-static")
    views.install(app, console)
    apidocs.install(app)
    return console
