"""`cm mark`, `undo`, `forget`, `outcome`, `outcome-apply` and `usage`: their arguments and
handlers. The work is in service_feedback.py, imported only by the command that runs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .args import Subcommands, integer, positive
from .errors import missing

if TYPE_CHECKING:
    from .app import Ctx, Result


def register(sub: Subcommands) -> None:
    s = sub.add_parser("mark")
    s.add_argument("bullet_id")
    s.add_argument("--helpful", action="store_true")
    s.add_argument("--harmful", action="store_true")
    s.add_argument("--reason")
    s.add_argument("--session")
    s.set_defaults(handler=cmd_mark, command_name="mark")
    s = sub.add_parser("undo")
    s.add_argument("bullet_id")
    s.add_argument("--feedback", action="store_true")
    s.add_argument("--hard", action="store_true")
    s.add_argument("--yes", action="store_true")
    s.add_argument("--dry-run", action="store_true")
    s.set_defaults(handler=cmd_undo, command_name="undo")
    s = sub.add_parser("forget")
    s.add_argument("bullet_id")
    s.add_argument("--reason")
    s.add_argument("--invert", action="store_true")
    s.set_defaults(handler=cmd_forget, command_name="forget")

    s = sub.add_parser("outcome")
    s.add_argument("status")
    s.add_argument("rules", nargs="?")
    s.add_argument("--session")
    s.add_argument("--duration", type=integer)
    s.add_argument("--errors", type=integer)
    s.add_argument("--retries", action="store_true")
    s.add_argument("--sentiment")
    s.add_argument("--text")
    s.set_defaults(handler=cmd_outcome, command_name="outcome")
    s = sub.add_parser("outcome-apply")
    s.add_argument("--session")
    s.add_argument("--limit", type=positive)
    s.set_defaults(handler=cmd_outcome_apply, command_name="outcome-apply")

    sub.add_parser("usage").set_defaults(handler=cmd_usage, command_name="usage")


def cmd_mark(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_feedback import mark

    if args.helpful == args.harmful:
        raise missing("Specify exactly one of --helpful or --harmful",
                      recovery=["cm mark <id> --helpful", "cm mark <id> --harmful --reason caused_bug"])
    return mark(ctx, args.bullet_id, "helpful" if args.helpful else "harmful", reason=args.reason,
                session=args.session)


def cmd_undo(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_feedback import undo

    return undo(ctx, args.bullet_id, feedback=args.feedback, hard=args.hard, confirmed=args.yes,
                dry_run=args.dry_run)


def cmd_forget(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_feedback import forget

    return forget(ctx, args.bullet_id, args.reason, invert=args.invert)


def cmd_outcome(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_feedback import record_outcome

    return record_outcome(ctx, args.status, [args.rules or ""], session=args.session, duration=args.duration,
                          errors=args.errors, retries=args.retries, sentiment=args.sentiment, text=args.text)


def cmd_outcome_apply(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_feedback import apply_outcomes

    return apply_outcomes(ctx, session=args.session, limit=args.limit)


def cmd_usage(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_feedback import usage

    return usage(ctx)
