"""`cm serve`: its arguments; the MCP server itself is cerememory/cm/mcp.py, imported only here."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from .args import Subcommands, positive

if TYPE_CHECKING:
    from .app import Ctx


def register(sub: Subcommands) -> None:
    s = sub.add_parser("serve")
    s.add_argument("--port", type=positive)
    s.add_argument("--host", default=os.environ.get("MCP_HTTP_HOST", "127.0.0.1"))
    s.add_argument("--stdio", action="store_true")
    s.set_defaults(run=cmd_serve, command_name="serve")


def cmd_serve(ctx: Ctx, args: argparse.Namespace) -> int:
    """Runs until stopped; an exit code, not an envelope."""
    from .mcp import serve

    return serve(ctx, port=args.port, host=args.host, stdio=args.stdio)
