"""Subparsers that build only the command being run.

A CLI run does one command, and declaring every command's options costs more than parsing the
line; `cerememory` and `cm` both build the chosen command's parser alone (and all of them when
no command has that name, so the error lists every one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Unused:
    """Stands in for the parser of a command this run does not use: every call on it does nothing."""

    def __getattr__(self, name: str) -> Callable[..., Unused]:
        return lambda *args, **kwargs: self


class OnlyWanted:
    """argparse's subparsers action, building only `wanted` (a name or an alias) when it is given."""

    def __init__(self, action: Any, wanted: str | None) -> None:
        self.action, self.wanted, self.built = action, wanted, False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.wanted is not None and self.wanted not in (name, *kwargs.get("aliases", ())):
            return Unused()
        self.built = True
        return self.action.add_parser(name, **kwargs)
