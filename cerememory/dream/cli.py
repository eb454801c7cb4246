"""`cerememory dream-tick`: plan with a dry run, then dream one group per request so that a
progress bar can follow along, embedded or against a server; prints a table or JSON."""

from __future__ import annotations

import argparse
from typing import Any

from ..wording import count

SUMS = ("groups_processed", "raw_records_processed", "episodic_summaries_created", "semantic_nodes_created",
        "llm_fallbacks")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--session", "--session-id", dest="session", help="only this session's journal")
    p.add_argument("--dry-run", action="store_true", help="report the groups, write nothing")
    p.add_argument("--max-groups", type=int, default=10, help="topic groups to process (default 10)")
    p.add_argument("--no-promote", action="store_true", help="write episodic summaries only, no semantic facts")
    p.add_argument("--include-private-scratch", action="store_true",
                   help="also consume private scratchpads (counted, never quoted)")
    p.add_argument("--include-sealed", action="store_true", help="also consume sealed records (counted, never quoted)")
    p.add_argument("--secrecy-levels", help="comma-separated levels to consume (default public,sensitive); "
                                            "secret records are counted, never quoted")


def request(args: argparse.Namespace) -> dict[str, Any]:
    levels = [v.strip() for v in args.secrecy_levels.split(",") if v.strip()] if args.secrecy_levels else None
    body: dict[str, Any] = {"session_id": args.session, "include_private_scratch": args.include_private_scratch,
                            "include_sealed": args.include_sealed, "promote_semantic": not args.no_promote,
                            "secrecy_levels": levels, "max_groups": args.max_groups}
    return {k: v for k, v in body.items() if v is not None}


def run(mem: Any, args: argparse.Namespace, out: Any) -> dict:
    """The aggregated DreamTickResponse of the whole run."""
    base = request(args)
    plan = mem.dispatch("lifecycle.dream_tick", {**base, "dry_run": True})
    if args.dry_run or plan["groups_processed"] == 0:
        return plan if args.dry_run else mem.dispatch("lifecycle.dream_tick", base)
    result: dict[str, Any] = {**{k: 0 for k in SUMS}, "dry_run": False, "groups_pending": plan["groups_pending"],
                              "groups": [], "groups_failed": [], "groups_skipped": plan["groups_skipped"]}
    with out.progress("dreaming", plan["groups_processed"]) as advance:
        for _ in range(plan["groups_processed"]):
            step = mem.dispatch("lifecycle.dream_tick", {**base, "max_groups": 1})
            for key in SUMS:
                result[key] += step[key]
            result["groups"].extend(step["groups"])
            result["groups_failed"].extend(step["groups_failed"])
            result["groups_pending"] = step["groups_pending"]
            if not step["groups_processed"] and not step["groups_failed"]:
                break
            advance(1)
    return result


def render(console: Any, result: dict) -> None:
    from rich.table import Table

    verb = "would dream" if result["dry_run"] else "dreamed"
    table = Table(title=f"{verb} {count(result['groups_processed'], 'topic group')} "
                        f"({count(result['raw_records_processed'], 'raw record')})")
    for column in ("session", "topic", "from", "to", "records", "normal", "redacted", "summariser", "summary"):
        table.add_column(column, overflow="fold" if column == "summary" else "ellipsis")
    for g in result["groups"]:
        summariser = g.get("summariser") or "-"
        if g.get("llm_fallback_reason"):
            summariser += f" (LLM failed: {g['llm_fallback_reason']})"
        table.add_row(g["session_id"], g["topic_hint"] + ("" if g["topic_inferred"] else " (explicit)"),
                      g["range_start"][:16], g["range_end"][11:16], str(g["raw_record_count"]),
                      str(g["normal_records"]), str(g["redacted_total"]), summariser,
                      g.get("headline") or g.get("episodic_summary_id") or "")
    console.print(table)
    console.print(f"{count(result['episodic_summaries_created'], 'episodic summary', 'episodic summaries')}, "
                  f"{count(result['semantic_nodes_created'], 'semantic fact')}"
                  f"{' would be' if result['dry_run'] else ''} created; "
                  f"{count(result['groups_pending'], 'group')} left for a later tick")
    for f in result.get("groups_failed", []):
        console.print(f"failed, skipped until its raw records change: session {f['session_id']}, topic "
                      f"{f['topic_hint']} ({count(f['raw_record_count'], 'raw record')}): {f['code']}: {f['reason']}",
                      markup=False)
    if result.get("groups_skipped"):
        console.print(f"{count(result['groups_skipped'], 'group')} skipped: they failed before and their raw records "
                      "have not changed")
