"""What every cmd_<group>.py needs to declare its commands: the parser class (a usage error is
an INVALID_INPUT envelope, exit 2), the argument types, and the subcommand table it adds to.

A command's parser carries its handler as a function reference,
`parser.set_defaults(handler=cmd_x, command_name="x")`: `cm` runs `handler(ctx, args)`, a
`Result`, and reports `command_name` in the envelope (`{action}` in it stands for the command's
action argument, `privacy:{action}`). A command that runs until stopped sets `run=` instead and
returns an exit code, with no envelope (`cm serve`)."""

from __future__ import annotations

import argparse
import re
from typing import Any, Protocol

from .errors import invalid


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise invalid(f"{self.prog}: {message}", recovery=[f"{self.prog} --help"])


class Subcommands(Protocol):
    """What `add_subparsers()` returns, as a register(sub) function uses it."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def subcommands(parser: argparse.ArgumentParser, dest: str) -> Subcommands:
    return parser.add_subparsers(dest=dest, parser_class=Parser)


def integer(value: str) -> int:
    if not re.fullmatch(r"-?\d+", value.strip()):
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}")
    return int(value)


def positive(value: str) -> int:
    number = integer(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
