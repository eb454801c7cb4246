"""`cm reflect`, `validate` and `audit`: their arguments and handlers. The work is in
service_reflect.py, imported only by the command that runs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .args import Subcommands, positive

if TYPE_CHECKING:
    from .app import Ctx, Result


def register(sub: Subcommands) -> None:
    s = sub.add_parser("reflect", aliases=["ref"])
    s.add_argument("--days", type=positive)
    s.add_argument("--max-sessions", type=positive)
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--workspace")
    s.add_argument("--session")
    s.set_defaults(handler=cmd_reflect, command_name="reflect")
    s = sub.add_parser("validate")
    s.add_argument("rule", nargs="*")
    s.add_argument("--verbose", action="store_true")
    s.set_defaults(handler=cmd_validate, command_name="validate")
    s = sub.add_parser("audit")
    s.add_argument("--days", type=positive)
    s.add_argument("--trauma", action="store_true")
    s.set_defaults(handler=cmd_audit, command_name="audit")


def cmd_reflect(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_reflect import reflect

    return reflect(ctx, days=args.days, max_sessions=args.max_sessions, dry_run=args.dry_run, session=args.session)


def cmd_validate(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_reflect import validate

    return validate(ctx, " ".join(args.rule))


def cmd_audit(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_reflect import audit

    result = audit(ctx, days=args.days, trauma=args.trauma)
    if not ctx.as_json:
        from .human_pages import audit as page

        result.human = page(result.data, days=args.days or 7)
    return result
