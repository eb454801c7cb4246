"""`cerememory migrate-schema`: bring a shared PostgreSQL schema up to this release, or (with
`--check`) report what would change without changing anything. Servers also migrate on start;
this command lets an operator do it, or check it, before rolling servers out."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..cmp.errors import CMPError, ErrorCode

EXIT_PENDING = 1  # `--check` found migrations to apply


def add_parsers(sub: Any, common: Callable[..., None]) -> None:
    p = sub.add_parser("migrate-schema", help="Create or migrate the PostgreSQL schema of storage.backend = postgres.",
                       description="Create or migrate the PostgreSQL schema named by storage.namespace. "
                                   "With --check: report pending migrations, change nothing, exit 1 if any.")
    common(p, remote=False)
    p.add_argument("--check", action="store_true", help="report only; exit 1 when migrations are pending")


def run_migrate_schema(args: argparse.Namespace, config: Any, out: Any) -> int:
    if config["storage.backend"] != "postgres":
        raise CMPError(ErrorCode.VALIDATION_ERROR, "migrate-schema applies to storage.backend = postgres",
                       hint="the embedded backend migrates its file when it is opened")
    from .postgres.database import Database

    db = Database(config["storage.postgres_url"] or "", config["storage.namespace"], migrate=False)
    try:
        steps = db.pending_migrations() if args.check else db.migrate()
    finally:
        db.close()
    result = {"namespace": db.schema, "database": db.where, "check": args.check,
              "pending" if args.check else "applied": [{"version": v, "name": n} for v, n in steps]}
    if out.as_json:
        out.json(result)
    elif not steps:
        out.console().print(f"schema {db.schema} in {db.where} is up to date")
    else:
        verb = "would apply" if args.check else "applied"
        for version, name in steps:
            out.console().print(f"{verb} migration {version}: {name}")
    return EXIT_PENDING if args.check and steps else 0
