"""Fast writes and thin transports: every target, before beside after, from one run.

    python bench/targets.py --before /tmp/base [--rounds 2] [--n 100000]

Runs, one after another, the side-by-side benchmarks that measure the targets (each alternates
the `--before` tree and this checkout in fresh processes, so both see the same machine load,
and writes its own report in results/), then gathers their figures into one table:
store_ab.py (one embedded store), transports.py --before (32 store clients over HTTP and gRPC,
recall from 1 and 8 clients over 10k records, the embedded recall the added time is counted
from), cli_start.py (the recall CLI against a server), encode_ab.py --kinds vec_f32 (a batch
with caller vectors at N records), open_ab.py (opening N records: time to the first query, RSS)
and vector_threads.py (vector search under the engine's BLAS thread policy against numpy's
default pinned to one thread). `cm context` against the original cm needs the original
installed: its row is read from results/cm_original.json as its own run left it.
Each figure is the median over the rounds, with the lowest and highest round beside it (how
much the machine moved the figure). Writes results/targets.md and targets.json.

    python bench/targets.py --report-only    # the table again from the reports in results/
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_parser, env_line, environment  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

Rows = list[dict]


def run(script: str, *args: str) -> None:
    """One of the side-by-side benchmarks, its output passed through."""
    print(f"--- bench/{script} {' '.join(args)}", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, str(HERE / script), *args], check=True, stdout=sys.stderr)


def rows_of(name: str) -> Rows:
    return json.loads((RESULTS / f"{name}.json").read_text())


def each_round(rows: Rows, metric: str, **key: object) -> list[float]:
    """`metric` of the rows matching `key`: one value a round."""
    return [r[metric] for r in rows if all(r.get(k) == v for k, v in key.items())]


def added(rows: Rows, transport: str, tree: str) -> list[float]:
    """recall.query p50 from one client over `transport`, less the embedded p50 of its round."""
    embedded = {r["round"]: r["p50_ms"] for r in rows if r["transport"] == "embedded"}
    return [r["p50_ms"] - embedded[r["round"]] for r in rows
            if r["op"] == "recall.query" and r["clients"] == 1 and r["transport"] == transport
            and r["tree"] == tree and not r.get("stub")]


# (measure, unit, target, whether the value meets it, source, a tree's values (a round each) from the rows)
Target = tuple[str, str, str, Callable[[float], bool], str, Callable[[Rows, str], list[float]]]


def targets(n: int) -> list[Target]:
    def transport_rate(transport: str, op: str, clients: int) -> Callable[[Rows, str], list[float]]:
        return lambda rows, tree: each_round(rows, "throughput", op=op, clients=clients, transport=transport,
                                             tree=tree)

    return [
        ("encode.store, embedded, 1 client, p50", "ms", "≤ 2", lambda v: v <= 2, "store_ab",
         lambda rows, tree: each_round(rows, "p50_ms", tree=tree)),
        ("encode.store over HTTP, 32 clients", "calls/s", "≥ 1,000", lambda v: v >= 1000, "transports_ab",
         transport_rate("http", "encode.store", 32)),
        ("encode.store over gRPC, 32 clients", "calls/s", "≥ 1,000", lambda v: v >= 1000, "transports_ab",
         transport_rate("grpc", "encode.store", 32)),
        ("recall.query over HTTP, p50 added over embedded", "ms", "≤ 1", lambda v: v <= 1, "transports_ab",
         lambda rows, tree: added(rows, "http", tree)),
        ("recall.query over gRPC, p50 added over embedded", "ms", "≤ 1", lambda v: v <= 1, "transports_ab",
         lambda rows, tree: added(rows, "grpc", tree)),
        ("recall.query over gRPC, 8 clients, 10k records", "calls/s", "≥ 700", lambda v: v >= 700,
         "transports_ab", transport_rate("grpc", "recall.query", 8)),
        ("`cerememory recall` against a server, whole process, p50", "ms", "≤ 150", lambda v: v <= 150,
         "cli_start", lambda rows, tree: each_round(rows, "wall_p50_ms", way=tree)),
        (f"encode.batch with caller vectors, {n:,} records", "records/s", "≥ 20,000", lambda v: v >= 20_000,
         "encode_ab_f32", lambda rows, tree: each_round(rows, "records_per_s", tree=tree)),
        (f"open → first query, {n:,} records", "s", "≤ 0.5", lambda v: v <= 0.5, "open_ab",
         lambda rows, tree: each_round(rows, "open_to_first_query_s", tree=tree)),
        (f"RSS right after open, {n:,} records", "MiB", "≤ 300", lambda v: v <= 300, "open_ab",
         lambda rows, tree: each_round(rows, "rss_after_open_mb", tree=tree)),
        ("vector p50, default BLAS threads / pinned to 1", "×", "≤ 1.0 (± 5%, the rounds' spread)",
         lambda v: v <= 1.05, "vector_threads",
         lambda rows, tree: [
             next(r for r in rows if r["round"] == k and r["way"].startswith(f"{tree}, default"))["p50_ms"]
             / next(r for r in rows if r["round"] == k and r["way"] == "before, pinned to 1")["p50_ms"]
             for k in sorted({r["round"] for r in rows})]),
    ]


def cm_row() -> list[str] | None:
    """`cm context` embedded against the original, as results/cm_original.json has it."""
    path = RESULTS / "cm_original.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    ratio = dict(report["commands"])["context"]["embedded_ratio"]
    return ["`cm context` embedded, whole process, / the original cm", "×", "", f"{ratio:.2f}", "", "≤ 1.0",
            "met" if ratio <= 1.0 else "MISSED", "cm_original (its own run, not repeated here)"]


def spread(values: list[float]) -> str:
    """The median of a tree's rounds, with the lowest and highest round when they differ."""
    middle, low, high = statistics.median(values), min(values), max(values)
    return f"{middle:,.2f}" if low == high else f"{middle:,.2f} ({low:,.2f}–{high:,.2f})"


def report(facts: dict) -> tuple[list[str], list[dict]]:
    """The lines of targets.md and the figures of targets.json of a run (`facts`: its arguments,
    machine and load), from the reports in results/."""
    table: list[list[str]] = []
    figures: list[dict] = []
    for measure, unit, target, met, source, value in targets(facts["n"]):
        rows = rows_of(source)
        was, now = value(rows, "before"), value(rows, "after")
        middle = statistics.median(now)
        figures.append({"measure": measure, "unit": unit, "before": statistics.median(was), "after": middle,
                        "before_rounds": was, "after_rounds": now, "target": target, "met": met(middle),
                        "source": source})
        table.append([measure, unit, spread(was), spread(now), f"{middle / statistics.median(was):.2f}×", target,
                      "met" if met(middle) else "MISSED", source])
    if (cm := cm_row()) is not None:
        table.append(cm)
    return ["# Fast writes and thin transports: the targets, before and after", "",
            f"`bench/targets.py --before <tree> --rounds {facts['rounds']} --n {facts['n']}` — "
            f"{env_line(facts['environment'])}; 1-minute load average {facts['load_at_start']:.1f} at the start, then "
            "as each source report gives it (the benchmarks' own client processes are most of it).", "",
            "Each row is the median over the rounds of a benchmark that alternates the two trees in fresh "
            "processes (its report, in results/, is named in the last column), with the lowest and the highest "
            "round in brackets. On this 2-core machine the servers, their clients and the benchmark share the "
            "cores: read the ratios beside the values.", "",
            "| measure | unit | before | after | after / before | target | result | source |",
            "|---|---|---|---|---|---|---|---|",
            *("| " + " | ".join(row) + " |" for row in table)], figures


def main() -> None:
    parser = ab_parser(__doc__, rounds=2, before_required=False)
    parser.add_argument("--report-only", action="store_true",
                        help="write targets.md again from the reports in results/, without running anything")
    args = parser.parse_args()
    if args.report_only:
        facts = json.loads(RESULTS.joinpath("targets.json").read_text())
        facts.pop("figures")
    else:
        if args.before is None:
            parser.error("--before is needed to run the benchmarks")
        before, rounds, n = str(args.before.resolve()), str(args.rounds), str(args.n)
        facts = {"rounds": args.rounds, "n": args.n, "load_at_start": os.getloadavg()[0]}
        run("store_ab.py", "--before", before, "--n", "5000", "--rounds", rounds)
        run("transports.py", "--before", before, "--rounds", rounds)
        run("cli_start.py", "--before", before, "--rounds", rounds, "--runs", "9")
        run("encode_ab.py", "--before", before, "--n", n, "--rounds", rounds, "--kinds", "vec_f32")
        run("open_ab.py", "--before", before, "--n", n, "--rounds", rounds)
        run("vector_threads.py", "--before", before, "--n", n, "--rounds", rounds)
        facts["environment"] = environment()
    lines, figures = report(facts)
    RESULTS.joinpath("targets.md").write_text("\n".join(lines) + "\n")
    RESULTS.joinpath("targets.json").write_text(json.dumps({**facts, "figures": figures}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
