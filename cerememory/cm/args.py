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
from collections.abc import Iterable
from typing import Any, Protocol

from .errors import CmError, invalid
from .helptext import COMMANDS, EPILOG, option_help


class Parser(argparse.ArgumentParser):
    """A usage error is an INVALID_INPUT envelope under --json (text on stderr otherwise). An
    unknown command, subcommand or flag and a missing argument exit 1, in the reference's
    (commander's) words; a value the command cannot take exits 2, as the reference's own
    checks of values did. Help texts come from helptext.py: each command's line in the list
    and each option's, unless its declaration gives one."""

    def error(self, message: str) -> None:  # type: ignore[override]
        text, exit_code = usage_message(message)
        raise invalid(text, recovery=[f"{self.prog} --help"], exit_code=exit_code,
                      details={"usage": f"{self.prog}: {message}"})

    @property
    def command(self) -> str:
        """This parser's command as helptext.py names it: '' for cm, 'similar', 'playbook add'."""
        return self.prog.removeprefix("cm").strip()

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if action.help is None and action.dest != "help":
            names = action.option_strings or [action.dest]
            action.help = next((text for name in names if (text := option_help(self.command, name))), None)
        return action

    def add_subparsers(self, **kwargs: Any) -> Any:
        subparsers = super().add_subparsers(**kwargs)
        add_parser = subparsers.add_parser

        def described(name: str, **options: Any) -> argparse.ArgumentParser:
            text = COMMANDS.get(f"{self.command} {name}".strip())
            if text:
                options.setdefault("help", text)
                options.setdefault("description", text)
            options.setdefault("epilog", EPILOG)
            return add_parser(name, **options)

        setattr(subparsers, "add_parser", described)  # noqa: B010 (an instance's method, replaced)
        return subparsers


def usage_message(message: str) -> tuple[str, int]:
    """(argparse's complaint in commander's words, the reference's exit code for it)."""
    choice = re.match(r"argument (?:command|COMMAND|action|\S+_command): invalid choice: '?([^' ]*)'?", message)
    if choice:
        return f"unknown command '{choice.group(1)}'", 1
    extra = re.match(r"unrecognized arguments: (\S+)", message)
    if extra:
        word = extra.group(1)
        return (f"unknown option '{word}'" if word.startswith("-") else f"too many arguments: '{word}'"), 1
    required = re.match(r"the following arguments are required: ([^,]+)", message)
    if required:
        name = re.sub(r"_(\w)", lambda m: m.group(1).upper(), required.group(1).strip())  # bullet_id: bulletId
        return f"missing required argument '{name}'", 1
    return message, 2


def usage_text(error: CmError, commands: Iterable[str]) -> str | None:
    """A usage error (exit 1) as commander prints it on stderr: `error: …`, and for the program's
    own unknown command a suggestion and `(add --help for additional information)`; None for
    any other error."""
    usage = (error.details or {}).get("usage")
    if error.code != "INVALID_INPUT" or error.exit_code != 1 or not isinstance(usage, str):
        return None
    lines = [f"error: {error.message}"]
    unknown = re.fullmatch(r"unknown command '(.*)'", error.message)
    if unknown and usage.startswith("cm: "):
        close = similar_words(unknown.group(1), commands)
        if close:
            lines.append(f"(Did you mean {close[0]}?)" if len(close) == 1 else
                         f"(Did you mean one of {', '.join(close)}?)")
        lines.append("(add --help for additional information)")
    return "\n".join(lines)


def similar_words(word: str, candidates: Iterable[str]) -> list[str]:
    """Commander's suggestions: the candidates nearest by edit distance (at most 3, and sharing
    more than 40% of the longer word), sorted."""
    best, found = 3, list[str]()
    for candidate in candidates:
        if len(candidate) <= 1:
            continue
        distance = _edit_distance(word, candidate)
        longest = max(len(word), len(candidate))
        if (longest - distance) / longest <= 0.4 or distance > best:
            continue
        if distance < best:
            best, found = distance, []
        found.append(candidate)
    return sorted(found)


def _edit_distance(a: str, b: str) -> int:
    """Damerau-Levenshtein (optimal string alignment) distance."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


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
