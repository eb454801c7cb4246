"""The `cm` command: argument parsing, dispatch, envelopes and exit codes.

stdout carries only the JSON envelope under `--json`; diagnostics go to stderr. Usage errors
are INVALID_INPUT (exit 2) envelopes too — the reference printed plain text and exited 1 (gap 21).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .app import Ctx, Result, emit, error_envelope, render_human, success_envelope
from .errors import from_exception, invalid

ALIASES = {"ctx": "context", "dr": "doctor", "ref": "reflect", "ls": "playbook:list", "add": "playbook:add",
           "rm": "playbook:remove"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise invalid(f"{self.prog}: {message}", recovery=[f"{self.prog} --help"])


def _int(value: str) -> int:
    if not re.fullmatch(r"-?\d+", value.strip()):
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}")
    return int(value)


def _positive(value: str) -> int:
    number = _int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cm", description="Procedural memory for coding agents, stored in Cerememory.")
    p.add_argument("--version", action="store_true")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    def cmd(name: str, *aliases: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, aliases=list(aliases), **kw)

    s = cmd("init")
    s.add_argument("-f", "--force", action="store_true")
    s.add_argument("--yes", action="store_true")
    s.add_argument("--repo", action="store_true")
    s.add_argument("--no-interactive", action="store_true")
    s.add_argument("--starter")
    cmd("starters")

    s = cmd("context", "ctx")
    s.add_argument("task", nargs="*")
    s.add_argument("--workspace")
    s.add_argument("--limit", type=_positive)
    s.add_argument("--top", type=_positive)
    s.add_argument("--history", type=_positive)
    s.add_argument("--days", type=_positive)
    s.add_argument("--min-score", type=_float)
    s.add_argument("--no-history", action="store_true")
    s.add_argument("--format", choices=["markdown", "json", "toon"])
    s.add_argument("--log-context", action="store_true")
    s.add_argument("--session")
    s.add_argument("--stats", action="store_true")

    s = cmd("history")
    s.add_argument("query", nargs="*")
    s.add_argument("--days", type=_positive)
    s.add_argument("--limit", type=_positive)
    s.add_argument("--workspace")

    s = cmd("ingest")
    s.add_argument("--agent", action="append", metavar="NAME")
    s.add_argument("--path", action="append", metavar="P")
    s.add_argument("--since")
    s.add_argument("--dry-run", action="store_true")

    s = cmd("similar")
    s.add_argument("query", nargs="*")
    s.add_argument("--limit", type=_positive, default=5)
    s.add_argument("--threshold", type=_float, default=0.7)
    s.add_argument("--scope", choices=["global", "workspace", "all"], default="all")
    s.add_argument("--format")
    s.add_argument("--stats", action="store_true")

    pb = cmd("playbook").add_subparsers(dest="action", parser_class=_Parser)
    s = pb.add_parser("list", aliases=["ls"])
    s.add_argument("--category")
    s.add_argument("--format")
    s.add_argument("--stats", action="store_true")
    s = pb.add_parser("get")
    s.add_argument("id")
    for parent in (pb.add_parser("add"), cmd("add")):
        parent.add_argument("content", nargs="*")
        parent.add_argument("--category", default="general")
        parent.add_argument("--file")
        parent.add_argument("--session")
        parent.add_argument("--check", action="store_true")
        parent.add_argument("--strict", action="store_true")
    for parent in (pb.add_parser("remove", aliases=["rm"]), cmd("rm")):
        parent.add_argument("id")
        parent.add_argument("--hard", action="store_true")
        parent.add_argument("--yes", action="store_true")
        parent.add_argument("--dry-run", action="store_true")
        parent.add_argument("--reason", default="Removed via CLI")
    s = pb.add_parser("export")
    s.add_argument("--yaml", action="store_true")
    s.add_argument("--all", action="store_true")
    s.add_argument("--output", "-o")
    s = pb.add_parser("import")
    s.add_argument("file")
    s.add_argument("--replace", action="store_true")
    s.add_argument("--repo", action="store_true")
    s = pb.add_parser("bootstrap")
    s.add_argument("--starter", default="general")
    s.add_argument("--repo", action="store_true")
    s = cmd("ls")
    s.add_argument("--category")

    s = cmd("mark")
    s.add_argument("bullet_id")
    s.add_argument("--helpful", action="store_true")
    s.add_argument("--harmful", action="store_true")
    s.add_argument("--reason")
    s.add_argument("--session")
    s = cmd("undo")
    s.add_argument("bullet_id")
    s.add_argument("--feedback", action="store_true")
    s.add_argument("--hard", action="store_true")
    s.add_argument("--yes", action="store_true")
    s.add_argument("--dry-run", action="store_true")
    s = cmd("forget")
    s.add_argument("bullet_id")
    s.add_argument("--reason")
    s.add_argument("--invert", action="store_true")
    s = cmd("why")
    s.add_argument("bullet_id")
    s.add_argument("--verbose", action="store_true")
    s = cmd("top")
    s.add_argument("count", nargs="?", type=_int)
    s.add_argument("--scope", choices=["global", "workspace", "all"], default="all")
    s.add_argument("--category")
    s = cmd("stale")
    s.add_argument("--days", type=_int, default=90)
    s.add_argument("--scope", choices=["global", "workspace", "all"], default="all")
    s = cmd("stats")
    s.add_argument("--format")
    s.add_argument("--stats", action="store_true")

    s = cmd("outcome")
    s.add_argument("status")
    s.add_argument("rules", nargs="?")
    s.add_argument("--session")
    s.add_argument("--duration", type=_int)
    s.add_argument("--errors", type=_int)
    s.add_argument("--retries", action="store_true")
    s.add_argument("--sentiment")
    s.add_argument("--text")
    s = cmd("outcome-apply")
    s.add_argument("--session")
    s.add_argument("--limit", type=_positive)

    s = cmd("reflect", "ref")
    s.add_argument("--days", type=_positive)
    s.add_argument("--max-sessions", type=_positive)
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--workspace")
    s.add_argument("--session")
    s = cmd("validate")
    s.add_argument("rule", nargs="*")
    s.add_argument("--verbose", action="store_true")
    s = cmd("audit")
    s.add_argument("--days", type=_positive)
    s.add_argument("--trauma", action="store_true")

    s = cmd("project")
    s.add_argument("--format", default="agents.md")
    s.add_argument("--output")
    s.add_argument("--force", action="store_true")
    s.add_argument("--per-category", type=_positive)
    s.add_argument("--top", type=_positive)
    s.add_argument("--no-show-counts", dest="show_counts", action="store_false")
    cmd("quickstart")
    cmd("usage")
    s = cmd("doctor", "dr")
    s.add_argument("--fix", action="store_true")
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--force", action="store_true")
    s.add_argument("--no-interactive", action="store_true")
    s.add_argument("--format")

    s = cmd("privacy")
    s.add_argument("action", choices=["status", "enable", "disable", "allow", "deny"])
    s.add_argument("agents", nargs="*")
    s.add_argument("--days", type=_positive, default=365)
    s = cmd("onboard")
    s.add_argument("action", choices=["status", "gaps", "sample", "read", "prompt", "guided", "mark-done", "reset"])
    s.add_argument("path", nargs="?")
    s.add_argument("--limit", type=_positive)
    s.add_argument("--days", type=_positive)
    s.add_argument("--fill-gaps", action="store_true")
    s.add_argument("--include-processed", action="store_true")
    s.add_argument("--workspace")
    s.add_argument("--agent")
    s.add_argument("--template", action="store_true")
    s.add_argument("--yes", action="store_true")

    s = cmd("trauma")
    s.add_argument("action", choices=["list", "ls", "add", "heal", "remove", "rm", "import", "scan"])
    s.add_argument("value", nargs="?")
    s.add_argument("--severity", default="CRITICAL")
    s.add_argument("--scope")
    s.add_argument("--message")
    s.add_argument("--force", action="store_true")
    s.add_argument("--yes", action="store_true")
    s.add_argument("--days", type=_positive)
    s = cmd("guard")
    s.add_argument("--install", action="store_true")
    s.add_argument("--git", action="store_true")
    s.add_argument("--status", action="store_true")

    s = cmd("serve")
    s.add_argument("--port", type=_positive)
    s.add_argument("--host", default=os.environ.get("MCP_HTTP_HOST", "127.0.0.1"))
    s.add_argument("--stdio", action="store_true")
    return p


# command -> "module:function"; only the module of the command that runs is imported
HANDLERS: dict[str, str] = {
    "init": "cmd_playbook:cmd_init", "starters": "cmd_playbook:cmd_starters",
    "context": "cmd_playbook:cmd_context", "similar": "cmd_playbook:cmd_similar",
    "history": "cmd_playbook:cmd_history",
    "playbook:list": "cmd_playbook:cmd_list", "playbook:get": "cmd_playbook:cmd_get",
    "playbook:add": "cmd_playbook:cmd_add", "playbook:remove": "cmd_playbook:cmd_remove",
    "playbook:export": "cmd_playbook:cmd_export", "playbook:import": "cmd_playbook:cmd_import",
    "playbook:bootstrap": "cli:_bootstrap",
    "mark": "cmd_feedback:cmd_mark", "undo": "cmd_feedback:cmd_undo", "forget": "cmd_feedback:cmd_forget",
    "outcome": "cmd_feedback:cmd_outcome", "outcome-apply": "cmd_feedback:cmd_outcome_apply",
    "usage": "cmd_feedback:cmd_usage",
    "why": "cmd_info:cmd_why", "top": "cmd_info:cmd_top", "stale": "cmd_info:cmd_stale",
    "stats": "cmd_info:cmd_stats", "project": "cmd_info:cmd_project", "quickstart": "cmd_info:cmd_quickstart",
    "doctor": "cmd_info:cmd_doctor", "privacy": "cmd_info:cmd_privacy", "onboard": "cmd_info:cmd_onboard",
    "ingest": "cmd_ingest:cmd_ingest",
    "reflect": "cmd_reflect:cmd_reflect", "validate": "cmd_reflect:cmd_validate", "audit": "cmd_reflect:cmd_audit",
    "trauma": "cmd_trauma:cmd_trauma", "guard": "cmd_trauma:cmd_guard",
}


def handler(command: str) -> Callable[[Ctx, Any], Result]:
    from importlib import import_module

    module, function = HANDLERS[command].split(":")
    return getattr(import_module(f".{module}", __package__), function)


def _bootstrap(ctx: Ctx, args: Any) -> Result:
    """Seed the playbook: a starter (default general) into the global or repo layer."""
    from .cmd_playbook import _apply_starter

    return Result({"starter": _apply_starter(ctx, args.starter, "repo" if args.repo else "global")})


def command_name(args: argparse.Namespace) -> str:
    command = ALIASES.get(args.command, args.command)
    if command == "playbook":
        action = {"ls": "list", "rm": "remove"}.get(args.action, args.action)
        return f"playbook:{action}"
    if command in ("privacy", "onboard"):
        return f"{command}:{args.action}"
    if command == "trauma":
        return f"trauma {({'ls': 'list', 'rm': 'remove'}).get(args.action, args.action)}"
    return command


def _split_globals(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Program-level flags may appear anywhere: --json/-j, --server-url, --no-color, --no-emoji…"""
    flags: dict[str, Any] = {"json": False, "server_url": None, "stats": bool(os.environ.get("TOON_STATS"))}
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
            flags["json"] = True
        elif arg == "--server-url" and i + 1 < len(argv):
            flags["server_url"] = argv[i + 1]
            skip = True
        elif arg.startswith("--server-url="):
            flags["server_url"] = arg.split("=", 1)[1]
        elif arg in ("--no-color", "--color", "--verbose", "--emoji"):
            if arg == "--verbose":
                os.environ["CASS_MEMORY_VERBOSE"] = "1"
        elif arg == "--no-emoji":
            os.environ["CASS_MEMORY_NO_EMOJI"] = "1"
        elif arg == "--width" and i + 1 < len(argv):
            skip = True
        else:
            rest.append(arg)
    if "--stats" in rest:
        flags["stats"] = True
    flags["output"] = output_format(rest, flags["json"], os.environ)
    flags["json"] = flags["output"] in ("json", "toon")
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
    rest, flags = _split_globals(argv)
    ctx: Ctx | None = None
    command = rest[0] if rest else "cm"
    try:
        parser = build_parser()
        args = parser.parse_args(rest)
        if args.version:
            from . import CM_VERSION

            print(CM_VERSION)
            return 0
        if not args.command:
            parser.print_help(sys.stderr)
            raise invalid("No command given", recovery=["cm quickstart", "cm --help"])
        if args.command == "playbook" and not args.action:
            raise invalid("playbook needs an action: list, get, add, remove, export, import, bootstrap")
        command = command_name(args)
        as_json = flags["json"] and not (command == "context" and getattr(args, "format", None) == "markdown")
        ctx = Ctx(as_json=as_json, server_url=flags["server_url"])
        if command == "serve":
            from .mcp import serve

            return serve(ctx, args)
        key = command.split(" ")[0] if command.startswith("trauma") else command
        key = key if key in HANDLERS else command.split(":")[0]
        result = handler(key)(ctx, args)
        if ctx.as_json:
            emit(success_envelope(ctx, command, result), flags["output"], flags["stats"])
        else:
            print(render_human(command, result))
        if ctx._backend is not None and ctx._backend.notice:
            print(f"cm: {ctx._backend.notice}", file=sys.stderr)
        return result.exit_code
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every failure becomes an envelope with a category exit code
        error = from_exception(exc)
        if flags["json"]:
            emit(error_envelope(ctx, command, error), flags["output"], flags["stats"])
        else:
            print(f"cm: error: {error.message}", file=sys.stderr)
            for line in error.recovery:
                print(f"  Recovery: {line}", file=sys.stderr)
            if error.hint:
                print(f"  Hint: {error.hint}", file=sys.stderr)
        if os.environ.get("CASS_MEMORY_VERBOSE") and error.code == "INTERNAL_ERROR":
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        return error.exit_code
    finally:
        if ctx is not None:
            ctx.close()


if __name__ == "__main__":
    sys.exit(main())
