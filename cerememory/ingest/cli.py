"""`cerememory ingest`: one pass (a progress bar per agent, then a table or `--json`), or
`--watch` to keep following the session stores until SIGINT / SIGTERM."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cmp.errors import CMPError, ErrorCode
from ..wording import count
from .names import AGENTS

if TYPE_CHECKING:
    from .engine import Summary

COLUMNS = {"files": "files", "files_read": "read", "sessions": "sess", "turns_ingested": "new",
           "turns_duplicate": "known", "turns_skipped": "skip", "turns_older": "old",
           "turns_redacted": "redact", "turns_truncated": "cut"}  # turn counts, except files and sessions


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", action="append", metavar="NAME",
                   help=f"only this agent (repeatable): {', '.join(AGENTS)}")
    p.add_argument("--path", action="append", metavar="P",
                   help="read these session files or directories instead of the default locations (repeatable)")
    p.add_argument("--since", help="only turns at or after this date (ISO 8601); older ones are passed over")
    p.add_argument("--dry-run", action="store_true", help="read and count, write nothing")
    p.add_argument("--watch", action="store_true", help="keep following the session stores (stop with Ctrl-C)")
    p.add_argument("--interval", type=float, help="seconds between --watch passes (default ingest.interval_seconds)")


def parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"--since: expected an ISO 8601 date, got {value!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def state_dir(config: Any) -> Path:
    return Path(config["ingest.state_dir"]) if config["ingest.state_dir"] else config.data_dir.parent / "ingest"


def run(mem: Any, args: argparse.Namespace, out: Any, config: Any) -> dict:
    """The summary of one pass, or (with --watch) of every pass until a signal stops it."""
    from .engine import IngestSettings, ingest
    from .state import open_state
    from .watch import stop_on_signals, watch

    options: dict[str, Any] = {"agents": args.agent, "paths": args.path, "since": parse_since(args.since),
                               "dry_run": args.dry_run, "settings": IngestSettings.from_config(config)}
    interval = args.interval if args.interval is not None else config["ingest.interval_seconds"]
    if interval <= 0:
        raise CMPError(ErrorCode.VALIDATION_ERROR, "--interval must be positive")
    with open_state(mem, state_dir(config)) as state:
        if not args.watch:
            return ingest(mem, state=state, progress=out.progress, **options).to_dict()
        totals: dict[str, Any] = {}

        def on_pass(summary: Summary) -> None:
            data = summary.to_dict()
            _accumulate(totals, data)
            if data["total"]["turns_ingested"] or data["total"]["errors"]:
                _announce(out, data)

        with stop_on_signals() as stop:
            passes = watch(mem, interval=interval, stop=stop, on_pass=on_pass, state=state, **options)
        totals["passes"] = passes
        return totals


def _accumulate(totals: dict[str, Any], data: dict[str, Any]) -> None:
    if not totals:
        totals.update(json.loads(json.dumps(data)))
        return
    totals["seconds"] = round(totals["seconds"] + data["seconds"], 3)
    for agent, part in data["agents"].items():
        into = totals["agents"].setdefault(agent, {k: [] if isinstance(v, list) else 0 for k, v in part.items()})
        for key, value in part.items():
            into[key] = into[key] + value if key != "files" else value
    for key, value in data["total"].items():
        totals["total"][key] = totals["total"][key] + value if key != "files" else value


def _announce(out: Any, data: dict[str, Any]) -> None:
    """One line per pass that found something: JSON on stdout with --json, else on stderr."""
    if out.as_json:
        sys.stdout.write(json.dumps({"event": "pass", **data}, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return
    parts = [f"{a} {s['turns_ingested']}" for a, s in data["agents"].items() if s["turns_ingested"]]
    stamp = datetime.now().strftime("%H:%M:%S")
    print(f"{stamp} ingested {count(data['total']['turns_ingested'], 'turn')} ({', '.join(parts) or 'none'})",
          file=sys.stderr, flush=True)
    for error in data["total"]["errors"]:
        print(f"  error: {error}", file=sys.stderr, flush=True)


def render(console: Any, result: dict) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    verb = "would ingest" if result["dry_run"] else "ingested"
    passes = f" in {result['passes']} passes" if "passes" in result else ""
    table = Table(title=f"{verb} {count(result['total']['turns_ingested'], 'turn')}{passes}")
    table.add_column("agent", no_wrap=True, min_width=11)
    for label in COLUMNS.values():
        table.add_column(label, justify="right", min_width=len(label))
    for agent, part in result["agents"].items():
        table.add_row(agent, *(str(part[c]) for c in COLUMNS))
    table.add_row(*(Text(str(v), style="bold") for v in ["total", *(result["total"][c] for c in COLUMNS)]))
    console.print(table)
    for error in result["total"]["errors"]:
        console.print(f"[red]error[/] {escape(error)}", markup=True)
    for skipped in result["total"]["skipped_lines"]:
        console.print(f"[yellow]skipped[/] {skipped['count']} unusable line(s) in {escape(skipped['file'])}",
                      markup=True)
    if result["denied_agents"]:
        console.print(f"[dim]not ingested (privacy settings): {escape(', '.join(result['denied_agents']))}[/]",
                      markup=True)
    console.print(f"[dim]state: {escape(str(result['state_path']))}[/]", markup=True)
