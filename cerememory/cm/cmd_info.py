"""`cm why`, `top`, `stale`, `stats`, `project`, `quickstart`, `doctor`, `privacy` and `onboard`:
their arguments and handlers. The work is in service_info.py and service_onboard.py, imported
only by the command that runs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .args import Subcommands, integer, positive
from .errors import CmError, invalid

if TYPE_CHECKING:
    from .app import Ctx, Result

SCOPES = ["global", "workspace", "all"]


def register(sub: Subcommands) -> None:
    s = sub.add_parser("why")
    s.add_argument("bullet_id")
    s.add_argument("--verbose", action="store_true")
    s.set_defaults(handler=cmd_why, command_name="why")
    s = sub.add_parser("top")
    s.add_argument("count", nargs="?", type=integer)
    s.add_argument("--scope", choices=SCOPES, default="all")
    s.add_argument("--category")
    s.set_defaults(handler=cmd_top, command_name="top")
    s = sub.add_parser("stale")
    s.add_argument("--days", type=integer, default=90)
    s.add_argument("--scope", choices=SCOPES, default="all")
    s.set_defaults(handler=cmd_stale, command_name="stale")
    s = sub.add_parser("stats")
    s.add_argument("--format")
    s.add_argument("--stats", action="store_true")
    s.set_defaults(handler=cmd_stats, command_name="stats")

    s = sub.add_parser("project")
    s.add_argument("--format", default="agents.md")
    s.add_argument("--output")
    s.add_argument("--force", action="store_true")
    s.add_argument("--per-category", type=positive)
    s.add_argument("--top", type=positive)
    s.add_argument("--no-show-counts", dest="show_counts", action="store_false")
    s.set_defaults(handler=cmd_project, command_name="project")
    sub.add_parser("quickstart").set_defaults(handler=cmd_quickstart, command_name="quickstart")
    s = sub.add_parser("doctor", aliases=["dr"])
    s.add_argument("--fix", action="store_true")
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--force", action="store_true")
    s.add_argument("--no-interactive", action="store_true")
    s.add_argument("--format")
    s.set_defaults(handler=cmd_doctor, command_name="doctor")

    s = sub.add_parser("privacy")
    s.add_argument("action", choices=["status", "enable", "disable", "allow", "deny"])
    s.add_argument("agents", nargs="*")
    s.add_argument("--days", type=positive, default=365)
    s.add_argument("--never", action="store_true")
    s.set_defaults(handler=cmd_privacy, command_name="privacy:{action}")
    s = sub.add_parser("onboard")
    s.add_argument("action", choices=["status", "gaps", "sample", "read", "prompt", "guided", "mark-done", "reset"])
    s.add_argument("path", nargs="?")
    s.add_argument("--limit", type=positive)
    s.add_argument("--days", type=positive)
    s.add_argument("--fill-gaps", action="store_true")
    s.add_argument("--include-processed", action="store_true")
    s.add_argument("--workspace")
    s.add_argument("--agent")
    s.add_argument("--template", action="store_true")
    s.add_argument("--yes", action="store_true")
    s.set_defaults(handler=cmd_onboard, command_name="onboard:{action}")


def cmd_why(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_info import why

    result = why(ctx, args.bullet_id, verbose=args.verbose)
    if not ctx.as_json:
        from .human_pages import why as page

        result.human = page(result.data, verbose=args.verbose)
    return result


def cmd_top(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_info import top

    return top(ctx, args.count, scope=args.scope, category=args.category)


def cmd_stale(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_info import stale

    return stale(ctx, args.days, scope=args.scope)


def cmd_stats(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_info import stats

    return stats(ctx)


def cmd_project(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_info import project

    return project(ctx, args.format, output=args.output, force=args.force, per_category=args.per_category or args.top,
                   show_counts=args.show_counts)


def cmd_quickstart(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_info import quickstart

    return quickstart()


def cmd_doctor(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_info import doctor

    return doctor(ctx, fix=args.fix, force=args.force)


def cmd_privacy(ctx: Ctx, args: argparse.Namespace) -> Result:
    """Status, or one audited change of the cross-agent settings."""
    from .service_info import change_privacy, privacy_status

    if args.action == "status":
        return privacy_status(ctx, args.days)
    return change_privacy(ctx, args.action, args.agents, never=args.never)


def cmd_onboard(ctx: Ctx, args: argparse.Namespace) -> Result:
    from . import service_onboard as onboard

    action = args.action
    if action in ("status", "gaps"):
        return onboard.status(ctx)
    if action == "sample":
        return onboard.sample(ctx, days=args.days, limit=args.limit, fill_gaps=args.fill_gaps,
                              include_processed=args.include_processed)
    if action == "read":
        if not args.path:
            raise CmError("MISSING_REQUIRED", "onboard read needs a session id or file path")
        return onboard.read(ctx, args.path, template=args.template)
    if action == "prompt":
        return onboard.prompt(ctx)
    if action == "guided":
        return onboard.guided(ctx)
    if action == "mark-done":
        if not args.path:
            raise CmError("MISSING_REQUIRED", "onboard mark-done needs a session id or path")
        return onboard.mark_done(args.path)
    if action == "reset":
        if not args.yes:  # as the reference, even with --json (it prompts only on a terminal)
            raise CmError("MISSING_REQUIRED", "Confirmation required to reset onboarding progress",
                          hint="Re-run with --yes", details={"missing": "confirmation"})
        return onboard.reset()
    raise invalid(f"Unknown onboard action {action!r} (onboard:{action})")
