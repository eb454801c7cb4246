"""The `cm` command: program-level flags, the parser (each cmd_<group>.py registers its own
commands and their handlers), dispatch, envelopes and exit codes.

stdout carries only the JSON envelope under `--json`; diagnostics go to stderr. Usage errors
are INVALID_INPUT envelopes under --json (the reference printed plain text), with its exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from ..subcommands import OnlyWanted
from . import cmd_feedback, cmd_info, cmd_ingest, cmd_playbook, cmd_reflect, cmd_serve, cmd_trauma
from .app import Ctx, Result, emit, error_envelope, render_human, success_envelope
from .args import Parser, usage_text
from .errors import from_exception, invalid

GROUPS = (cmd_playbook, cmd_ingest, cmd_feedback, cmd_info, cmd_reflect, cmd_trauma, cmd_serve)
# the order `cm --help` and an invalid command's message list the commands in (aliases follow
# their command; a command missing here comes last)
LISTED = ("init", "starters", "context", "history", "ingest", "similar", "playbook", "add", "rm", "ls", "mark",
          "undo", "forget", "why", "top", "stale", "stats", "outcome", "outcome-apply", "reflect", "validate",
          "audit", "project", "quickstart", "usage", "doctor", "privacy", "onboard", "trauma", "guard", "serve")
ACTION_NAMES = {"ls": "list", "rm": "remove"}


def build_parser(wanted: str | None = None) -> argparse.ArgumentParser:
    """cm's parser; with `wanted`, a command name, only that command is declared (the whole
    parser when no command has that name, so the error lists them all)."""
    from .helptext import GLOBAL_OPTIONS

    p = Parser(prog="cm", usage="cm [global options] COMMAND [arguments]",
               description="Procedural memory for coding agents, stored in Cerememory.",
               epilog="cm COMMAND --help describes a command's arguments and options.")
    p.add_argument("--version", action="store_true", help="print cm's version")
    p.add_argument("--info", action="store_true", help="cm's version, files, environment and dependencies")
    shown = p.add_argument_group("global options (anywhere on the line)")
    for flag, short, value, text in GLOBAL_OPTIONS:  # split_globals takes them off the line; listed for --help
        names = [f for f in (flag, short) if f]
        if value:
            shown.add_argument(*names, metavar=value, dest=f"global_{flag[2:]}", help=text)
        else:
            shown.add_argument(*names, action="store_true", dest=f"global_{flag[2:]}", help=text)
    p.set_defaults(handler=None, run=None, command_name=None)
    sub = p.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND", prog="cm")
    only = OnlyWanted(sub, wanted)
    for group in GROUPS:
        group.register(only)
    if wanted is not None and not only.built:
        return build_parser()
    _in_listed_order(sub.choices)
    lines = getattr(sub, "_choices_actions", None)  # argparse's command lines of `cm --help`: the same order
    if isinstance(lines, list):
        lines.sort(key=lambda line: LISTED.index(line.dest) if line.dest in LISTED else len(LISTED))
    return p


def _in_listed_order(choices: Any) -> None:
    rank = {id(choices[name]): n for n, name in enumerate(LISTED) if name in choices}
    ordered = sorted(choices.items(), key=lambda item: rank.get(id(item[1]), len(LISTED)))  # stable: aliases follow
    choices.clear()
    choices.update(ordered)


def command_name(args: argparse.Namespace) -> str:
    """The name the envelope reports: the command's own (whatever alias was typed), with its
    action where it takes one (`playbook:list`, `privacy:status`, `trauma list`)."""
    action = getattr(args, "action", None)
    if isinstance(action, str):
        action = ACTION_NAMES.get(action, action)
    return str(args.command_name).format(action=action)


@dataclass
class Globals:
    """The program-level flags, which may appear anywhere on the line."""

    json: bool = False
    server_url: str | None = None
    stats: bool = False
    output: str = "human"
    verbose: bool = False
    no_emoji: bool = False
    insecure: bool = False  # --insecure: an API key may travel over plain http:// to another machine
    colour: bool | None = None  # --color / --no-color; None: a terminal without NO_COLOR


def split_globals(argv: list[str], env: Mapping[str, str]) -> tuple[list[str], Globals]:
    """(the command's arguments, the program-level flags: --json/-j, --server-url, --insecure,
    --no-color, --verbose, --no-emoji…). CASS_MEMORY_VERBOSE / CASS_MEMORY_NO_EMOJI in `env` count as
    --verbose / --no-emoji."""
    flags = Globals(stats=bool(env.get("TOON_STATS")), verbose=bool(env.get("CASS_MEMORY_VERBOSE")),
                    no_emoji=bool(env.get("CASS_MEMORY_NO_EMOJI")))
    rest: list[str] = []
    it = iter(range(len(argv)))
    skip = False
    for i in it:
        arg = argv[i]
        if skip:
            skip = False
            continue
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg in ("--json", "-j"):
            flags.json = True
        elif arg == "--server-url" and i + 1 < len(argv):
            flags.server_url = argv[i + 1]
            skip = True
        elif arg.startswith("--server-url="):
            flags.server_url = arg.split("=", 1)[1]
        elif arg in ("--no-color", "--color", "--verbose", "--emoji"):
            if arg == "--verbose":
                flags.verbose = True
            elif arg != "--emoji":
                flags.colour = arg == "--color"
        elif arg == "--no-emoji":
            flags.no_emoji = True
        elif arg == "--insecure":
            flags.insecure = True
        elif arg == "--width" and i + 1 < len(argv):
            skip = True
        else:
            rest.append(arg)
    if "--stats" in rest:
        flags.stats = True
    flags.output = output_format(rest, flags.json, env)
    flags.json = flags.output in ("json", "toon")
    if rest[:1] != ["project"] and "--format" in rest[:-1]:  # an output format every command takes
        at = rest.index("--format")
        if rest[at + 1] in ("json", "toon"):
            del rest[at:at + 2]
    return rest, flags


def output_format(rest: list[str], json_flag: bool, env: Mapping[str, str]) -> str:
    """json, toon or human, chosen as the reference does: `--format json|toon` first, then
    `--json`, then any other explicit `--format` (not JSON), then CM_OUTPUT_FORMAT or
    TOON_DEFAULT_FORMAT."""
    explicit = rest[rest.index("--format") + 1] if "--format" in rest[:-1] else None
    if explicit in ("json", "toon"):
        return explicit
    if json_flag:
        return "json"
    if explicit is not None:
        return "human"
    for name in ("CM_OUTPUT_FORMAT", "TOON_DEFAULT_FORMAT"):
        if env.get(name) in ("json", "toon"):
            return env[name]
    return "human"


def _text(arg: str) -> str:
    """An argument as valid text: bytes that were not UTF-8 (kept by Python as lone surrogates)
    become U+FFFD, so they cannot fail later in JSON or in a CMP request."""
    return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def main(argv: list[str] | None = None) -> int:
    argv = [_text(a) for a in (sys.argv[1:] if argv is None else argv)]
    rest, flags = split_globals(argv, os.environ)
    ctx: Ctx | None = None
    command = failing = rest[0] if rest else "cm"
    try:
        parser = build_parser(rest[0] if rest and not rest[0].startswith("-") else None)
        if "--info" in rest:  # as the reference: before any parsing, whatever else is on the line
            rest = ["--info"]
        if rest == ["onboard"] and not flags.json:  # as the reference: the group's help, on stderr, exit 1
            with contextlib.redirect_stdout(sys.stderr), contextlib.suppress(SystemExit):
                parser.parse_args(["onboard", "--help"])
            return 1
        args = parser.parse_args(rest)
        if args.version:
            from . import CM_VERSION

            print(CM_VERSION)
            return 0
        if args.info:
            from .service_info import info

            args.command, args.command_name, args.handler = "info", "info", lambda ctx, _: info(ctx)
        if not args.command:
            parser.print_help(sys.stderr)
            raise invalid("No command given", recovery=["cm quickstart", "cm --help"])
        if args.command == "playbook" and not args.action:
            raise invalid("playbook needs an action: list, get, add, remove, export, import, bootstrap")
        command = command_name(args)
        failing = getattr(args, "error_command", None) or command  # the name the reference's errors carry
        if flags.verbose and getattr(args, "verbose", None) is False:  # why/validate take --verbose as their own
            args.verbose = True
        as_json = flags.json and not (command == "context" and getattr(args, "format", None) == "markdown")
        ctx = Ctx(as_json=as_json, server_url=flags.server_url, verbose=flags.verbose, no_emoji=flags.no_emoji,
                  insecure=flags.insecure)
        if not as_json:
            from .human_style import use_colour, use_emoji

            use_colour(flags.colour)
            use_emoji(not flags.no_emoji)
        if args.run is not None:  # a command that runs until stopped (serve): an exit code, no envelope
            code: int = args.run(ctx, args)
            return code
        result: Result = args.handler(ctx, args)
        if ctx.as_json:
            emit(success_envelope(ctx, command, result), flags.output, flags.stats)
        else:
            print(render_human(command, result))
        if ctx.storage_notice:
            print(f"cm: {ctx.storage_notice}", file=sys.stderr)
        return result.exit_code
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every failure becomes an envelope with a category exit code
        error = from_exception(exc)
        if flags.json:
            emit(error_envelope(ctx, failing, error), flags.output, flags.stats)
        else:
            print(usage_text(error, (*LISTED, "help")) or error.human(), file=sys.stderr)
        if flags.verbose and error.code == "INTERNAL_ERROR":
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        return error.exit_code
    finally:
        if ctx is not None:
            ctx.close()


def run() -> NoReturn:
    """The `cm` program: `main()`, then straight out. cm runs once per agent hook, so it skips
    what a long-lived interpreter needs: plugin discovery by pydantic (none is installed for
    cm's models) and the teardown of every imported module at exit. Storage is closed by then
    (`main` closes its context), and stdout and stderr are flushed first."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, or a closed stream: nothing to keep
            code = code or 1
    os._exit(code)


if __name__ == "__main__":
    run()
