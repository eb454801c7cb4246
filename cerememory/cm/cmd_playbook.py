"""`cm init`, `starters`, `context`, `history`, `similar`, `playbook …` and the `add` / `rm` / `ls`
shortcuts: their arguments and handlers. The work is in service_context.py (context, history,
similar) and service_playbook.py, imported only by the command that runs."""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .args import Subcommands, number, positive, subcommands

if TYPE_CHECKING:
    from .app import Ctx, Result


def register(sub: Subcommands) -> None:
    s = sub.add_parser("init")
    s.add_argument("-f", "--force", action="store_true")
    s.add_argument("--yes", action="store_true")
    s.add_argument("--repo", action="store_true")
    s.add_argument("--no-interactive", action="store_true")
    s.add_argument("--starter")
    s.set_defaults(handler=cmd_init, command_name="init")
    sub.add_parser("starters").set_defaults(handler=cmd_starters, command_name="starters")

    s = sub.add_parser("context", aliases=["ctx"])
    s.add_argument("task", nargs="+")  # none: missing required argument (exit 1); "": INVALID_INPUT
    s.add_argument("--workspace")
    s.add_argument("--limit", type=positive)
    s.add_argument("--top", type=positive)
    s.add_argument("--history", type=positive)
    s.add_argument("--days", type=positive)
    s.add_argument("--min-score", type=number)
    s.add_argument("--no-history", action="store_true")
    s.add_argument("--format", choices=["markdown", "json", "toon"])
    s.add_argument("--log-context", action="store_true")
    s.add_argument("--session")
    s.add_argument("--stats", action="store_true")
    s.set_defaults(handler=cmd_context, command_name="context")

    s = sub.add_parser("history")
    s.add_argument("query", nargs="*")
    s.add_argument("--days", type=positive)
    s.add_argument("--limit", type=positive)
    s.add_argument("--workspace")
    s.set_defaults(handler=cmd_history, command_name="history")

    s = sub.add_parser("similar")
    s.add_argument("query", nargs="*")
    s.add_argument("--limit", type=positive, default=5)
    s.add_argument("--threshold", type=number, default=0.7)
    s.add_argument("--scope", choices=["global", "workspace", "all"], default="all")
    s.add_argument("--format")
    s.add_argument("--stats", action="store_true")
    s.set_defaults(handler=cmd_similar, command_name="similar")

    pb = subcommands(sub.add_parser("playbook"), "action")
    s = pb.add_parser("list", aliases=["ls"])
    s.add_argument("--category")
    s.add_argument("--format")
    s.add_argument("--stats", action="store_true")
    s.set_defaults(handler=cmd_list, command_name="playbook:list")
    s = pb.add_parser("get")
    s.add_argument("id")
    s.set_defaults(handler=cmd_get, command_name="playbook:get")
    for parent in (pb.add_parser("add"), sub.add_parser("add")):
        parent.add_argument("content", nargs="*")
        parent.add_argument("--category", default="general")
        parent.add_argument("--file")
        parent.add_argument("--session")
        parent.add_argument("--check", action="store_true")
        parent.add_argument("--strict", action="store_true")
        parent.set_defaults(handler=cmd_add, command_name="playbook:add")
    for parent in (pb.add_parser("remove", aliases=["rm"]), sub.add_parser("rm")):
        parent.add_argument("id")
        parent.add_argument("--hard", action="store_true")
        parent.add_argument("--yes", action="store_true")
        parent.add_argument("--dry-run", action="store_true")
        parent.add_argument("--reason", default="Removed via CLI")
        parent.set_defaults(handler=cmd_remove, command_name="playbook:remove")
    s = pb.add_parser("export")
    s.add_argument("--yaml", action="store_true")
    s.add_argument("--all", action="store_true")
    s.add_argument("--output", "-o")
    s.set_defaults(handler=cmd_export, command_name="playbook:export")
    s = pb.add_parser("import")
    s.add_argument("file")
    s.add_argument("--replace", action="store_true")
    s.add_argument("--repo", action="store_true")
    s.set_defaults(handler=cmd_import, command_name="playbook:import")
    s = pb.add_parser("bootstrap")
    s.add_argument("--starter", default="general")
    s.add_argument("--repo", action="store_true")
    s.set_defaults(handler=cmd_bootstrap, command_name="playbook:bootstrap")
    s = sub.add_parser("ls")
    s.add_argument("--category")
    s.set_defaults(handler=cmd_list, command_name="playbook:list")


# ---------------------------------------------------------------- init / starters


def cmd_init(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import init

    return init(ctx, repo=args.repo, force=args.force, yes=args.yes, starter=args.starter)


def cmd_starters(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import starters

    return starters()


def cmd_bootstrap(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import bootstrap

    return bootstrap(ctx, args.starter, repo=args.repo)


# ---------------------------------------------------------------- context / similar / history


def cmd_context(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_context import context

    result = context(ctx, " ".join(args.task), workspace=args.workspace,
                     limit=args.limit if args.limit is not None else args.top, history=args.history,
                     days=args.days, min_score=args.min_score, no_history=args.no_history,
                     log_context=args.log_context, session=args.session)
    if args.format == "markdown" or not ctx.as_json:
        result.human = context_markdown(result.data)
    return result


def context_markdown(data: dict[str, Any]) -> str:
    """`cm context` for a person (and under `--format markdown`)."""
    lines = [f"# Context for: {data['task']}", "", f"## Playbook rules ({len(data['relevantBullets'])})"]
    for b in data["relevantBullets"]:
        lines.append(f"- **{b['id']}** ({b['category']}/{b.get('kind')}, relevance {b['relevanceScore']:.1f}, "
                     f"confidence {b['effectiveScore']:.1f}): {b['content']}")
    if data["antiPatterns"]:
        lines += ["", "## Pitfalls"] + [f"- **{b['id']}**: {b['content']}" for b in data["antiPatterns"]]
    if data["historySnippets"]:
        lines += ["", "## History"] + [f"- {h['source_path']}: {h['snippet']}" for h in data["historySnippets"][:3]]
    if data["deprecatedWarnings"]:
        lines += ["", "## Warnings"] + [f"- {w}" for w in data["deprecatedWarnings"]]
    if data["suggestedCassQueries"]:
        lines += ["", "## Suggested searches"] + [f"- `{q}`" for q in data["suggestedCassQueries"]]
    return "\n".join(lines)


def cmd_history(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_context import history

    return history(ctx, " ".join(args.query), days=args.days, limit=args.limit, workspace=args.workspace)


def cmd_similar(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_context import similar

    return similar(ctx, " ".join(args.query), limit=args.limit, threshold=args.threshold, scope=args.scope)


# ---------------------------------------------------------------- playbook *


def cmd_list(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import list_rules

    return list_rules(ctx, args.category)


def cmd_get(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import get_rule

    return get_rule(ctx, args.id)


def read_error(exc: Exception) -> str:
    """Why a file could not be read, in the reference's (Node's) words:
    `ENOENT: no such file or directory, open 'missing.json'`."""
    code = exc.errno if isinstance(exc, OSError) else None
    if isinstance(exc, OSError) and code is not None and code in errno.errorcode and exc.strerror:
        return f"{errno.errorcode[code]}: {exc.strerror[0].lower()}{exc.strerror[1:]}, open '{exc.filename}'"
    return str(exc)


def cmd_add(ctx: Ctx, args: argparse.Namespace) -> Result:
    """One rule from the arguments, or many from `--file` (a JSON array; `-` reads stdin)."""
    from . import service_playbook as service

    if args.file:
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:  # the reference: a failed entry, exit 0
            return service.add_rules(ctx, None, category=args.category, file=args.file, unread=read_error(exc))
        return service.add_rules(ctx, text, category=args.category, session=args.session, check=args.check,
                                 strict=args.strict)
    return service.add_rule(ctx, " ".join(args.content or []), category=args.category, session=args.session,
                            check=args.check, strict=args.strict)


def cmd_remove(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import remove_rule

    return remove_rule(ctx, args.id, hard=args.hard, confirmed=args.yes, dry_run=args.dry_run, reason=args.reason)


def cmd_export(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import export

    return export(ctx, include_all=args.all, as_yaml=args.yaml, output=args.output)


def cmd_import(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_playbook import import_playbook

    return import_playbook(ctx, args.file, replace=args.replace, repo=args.repo)
