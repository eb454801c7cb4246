"""`cm ingest`: its arguments and handler. The work is in service_ingest.py, imported only when
the command runs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .args import Subcommands

if TYPE_CHECKING:
    from .app import Ctx, Result


def register(sub: Subcommands) -> None:
    s = sub.add_parser("ingest")
    s.add_argument("--agent", action="append", metavar="NAME")
    s.add_argument("--path", action="append", metavar="P")
    s.add_argument("--since")
    s.add_argument("--dry-run", action="store_true")
    s.set_defaults(handler=cmd_ingest, command_name="ingest")


def cmd_ingest(ctx: Ctx, args: argparse.Namespace) -> Result:
    from .service_ingest import ingest_sessions

    return ingest_sessions(ctx, agents=args.agent, paths=args.path, since=args.since, dry_run=args.dry_run)
