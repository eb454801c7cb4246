"""The server's CPU per recall.query of two source trees, over gRPC and HTTP, in alternating blocks.

    python bench/recall_cpu_ab.py --before /tmp/base --rounds 6

A real `cerememory serve` of each tree over its own copy of the same 10k records (semantic off)
runs throughout; one client of this checkout per transport calls them in turn, a block of
`--calls` recalls (3 words, reconsolidate=False) to one server, then to the other, so both see
the same load. Figures are each server's CPU (all threads) per recall in its block, and the
client's CPU per recall. HTTP is the control when only gRPC code changed: its ratio shows what
the machine's noise alone does. Writes bench/results/recall_cpu_ab.md and .json.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO_DIR, RESULTS_DIR, ab_parser, env_line, environment  # noqa: E402
from bench.transports import cpu_seconds, load, make_client, run_op, start_server, wait_quiet  # noqa: E402

RECORDS = 10_000


def main() -> None:
    parser = ab_parser(__doc__, rounds=6)
    parser.add_argument("--calls", type=int, default=300, help="recalls per block")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": REPO_DIR}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        servers = {label: start_server(Path(tmp) / label, tree) for label, tree in trees.items()}
        try:
            for _, target in servers.values():
                with make_client("http", target) as client:
                    load(client, RECORDS)
            for server, _ in servers.values():
                wait_quiet(server.pid)
            clients = {(kind, label): make_client(kind, target) for label, (_, target) in servers.items()
                       for kind in ("grpc", "http")}
            rng = random.Random(3)
            for client in clients.values():
                for _ in range(50):
                    run_op(client, "recall.query", rng)
            for round_ in range(args.rounds):
                for kind in ("grpc", "http"):
                    for label in (("before", "after") if round_ % 2 == 0 else ("after", "before")):
                        server, _ = servers[label]
                        client, load1 = clients[kind, label], os.getloadavg()[0]
                        latencies = []
                        mine, theirs = time.process_time(), cpu_seconds(server.pid)
                        for _ in range(args.calls):
                            began = time.perf_counter()
                            run_op(client, "recall.query", rng)
                            latencies.append(time.perf_counter() - began)
                        rows.append({"round": round_, "transport": kind, "tree": label, "load1": load1,
                                     "server_cpu_ms": (cpu_seconds(server.pid) - theirs) / args.calls * 1000,
                                     "client_cpu_ms": (time.process_time() - mine) / args.calls * 1000,
                                     "p50_ms": statistics.median(latencies) * 1000})
                        print(json.dumps(rows[-1]), flush=True)
            for client in clients.values():
                client.close()
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(timeout=60)
    write(rows, args)


def write(rows: list[dict], args) -> None:
    def of(kind: str, label: str, key: str) -> list[float]:
        return [r[key] for r in rows if r["transport"] == kind and r["tree"] == label]

    lines = ["# Server CPU per recall, before and after, alternating", "",
             f"`bench/recall_cpu_ab.py --before <tree> --rounds {args.rounds} --calls {args.calls}` — "
             f"{env_line(environment())}", "",
             f"Both trees' servers run at once over {RECORDS:,} records each; one client of this checkout per "
             "transport calls them in alternating blocks of recalls. Per block: the server's CPU per recall (all "
             "its threads), the client's, the p50, and the 1-minute load average. Medians over the blocks, and the "
             "median of the per-round ratios.", "",
             "| transport | before server CPU ms | after server CPU ms | after / before | before client CPU ms | "
             "after client CPU ms | before p50 ms | after p50 ms | load |", "|---|---|---|---|---|---|---|---|---|"]
    for kind in ("grpc", "http"):
        ratios = [a["server_cpu_ms"] / b["server_cpu_ms"] for b, a in zip(
            [r for r in rows if r["transport"] == kind and r["tree"] == "before"],
            [r for r in rows if r["transport"] == kind and r["tree"] == "after"], strict=True)]
        med = {key: {label: statistics.median(of(kind, label, key)) for label in ("before", "after")}
               for key in ("server_cpu_ms", "client_cpu_ms", "p50_ms")}
        loads = [r["load1"] for r in rows if r["transport"] == kind]
        lines.append(f"| {kind} | {med['server_cpu_ms']['before']:.2f} | {med['server_cpu_ms']['after']:.2f} | "
                     f"{statistics.median(ratios):.2f}× | {med['client_cpu_ms']['before']:.2f} | "
                     f"{med['client_cpu_ms']['after']:.2f} | {med['p50_ms']['before']:.2f} | "
                     f"{med['p50_ms']['after']:.2f} | {min(loads):.1f}-{max(loads):.1f} |")
    lines += ["", "| round | transport | tree | server CPU ms | client CPU ms | p50 ms | load |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['round'] + 1} | {r['transport']} | {r['tree']} | {r['server_cpu_ms']:.2f} | "
              f"{r['client_cpu_ms']:.2f} | {r['p50_ms']:.2f} | {r['load1']:.1f} |" for r in rows]
    RESULTS_DIR.joinpath("recall_cpu_ab.md").write_text("\n".join(lines) + "\n")
    RESULTS_DIR.joinpath("recall_cpu_ab.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
