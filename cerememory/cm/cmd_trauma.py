"""`cm trauma …` and `cm guard`: their arguments and handlers. The work is in
service_trauma.py, imported only by the command that runs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .args import Subcommands, positive
from .errors import invalid, missing

if TYPE_CHECKING:
    from .app import Ctx, Result


def register(sub: Subcommands) -> None:
    s = sub.add_parser("trauma")
    s.add_argument("action", choices=["list", "ls", "add", "heal", "remove", "rm", "import", "scan"])
    s.add_argument("value", nargs="?")
    s.add_argument("--severity", default="CRITICAL")
    s.add_argument("--scope")
    s.add_argument("--message")
    s.add_argument("--force", action="store_true")
    s.add_argument("--yes", action="store_true")
    s.add_argument("--days", type=positive)
    s.set_defaults(handler=cmd_trauma, command_name="trauma {action}", error_command="trauma")
    s = sub.add_parser("guard")
    s.add_argument("--install", action="store_true")
    s.add_argument("--git", action="store_true")
    s.add_argument("--status", action="store_true")
    s.set_defaults(handler=cmd_guard, command_name="guard")


def cmd_trauma(ctx: Ctx, args: argparse.Namespace) -> Result:
    from . import service_trauma as service

    action = args.action
    if action in ("list", "ls"):
        return service.list_traumas()
    if action == "add":
        if not args.value:
            raise missing("trauma add needs a regex pattern")
        return service.add(args.value, severity=args.severity, scope=args.scope, message=args.message)
    if action == "heal":
        if not args.value:
            raise missing("trauma heal needs an id")
        return service.heal(args.value, args.scope)
    if action in ("remove", "rm"):
        if not args.value:
            raise missing("trauma remove needs an id")
        if not args.force:
            raise missing("trauma remove deletes the entry; confirm with --force")
        return service.remove(args.value, args.scope)
    if action == "import":
        if not args.value:
            raise missing("trauma import needs a file")
        return service.import_file(args.value, severity=args.severity, scope=args.scope, message=args.message)
    if action == "scan":
        return service.scan(ctx, args.value, days=args.days)
    raise invalid(f"Unknown trauma action {action!r}")


def cmd_guard(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_trauma import guard

    return guard(ctx, install=args.install, git=args.git, status=args.status)
