"""encode.store over HTTP with the bundled embedder on (the default when it is installed), two
source trees side by side in one run.

    python bench/store_embed_ab.py --before /tmp/base --rounds 3

Each round starts a server (`cerememory serve`, semantic search on, all-MiniLM-L6-v2) of the tree
given as `--before` and then one of this checkout, each over a fresh data directory, so both see
the same machine load. Against each: one client storing 40 sentences one after another (p50),
then 32 client processes storing 10 each at once (calls per second, p50, the server's CPU per
call, all its threads). Every store embeds its text, so this measures what concurrent agents
feel on a default install: the embedding, not the write, is most of a store's cost.
Writes bench/results/store_embed_ab.md and store_embed_ab.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS_DIR, ab_parser, env_line, environment, md_table, median_ratio  # noqa: E402
from transports import concurrent, cpu_seconds, start_server, wait_quiet  # noqa: E402

CLIENTS, PER_CLIENT, LONE = 32, 10, 40


def measure(tree: Path) -> dict:
    """One server of `tree`: a lone client's p50, then 32 clients at once."""
    with tempfile.TemporaryDirectory() as tmp:
        server, target = start_server(Path(tmp) / "served", tree, semantic="on")
        try:
            concurrent("http", target, "encode.store", 2, 5, tree)  # loads the model
            wait_quiet(server.pid)
            lone = concurrent("http", target, "encode.store", 1, LONE, tree)
            wait_quiet(server.pid)
            load, cpu = os.getloadavg()[0], cpu_seconds(server.pid)
            many = concurrent("http", target, "encode.store", CLIENTS, PER_CLIENT, tree)
            server_cpu = (cpu_seconds(server.pid) - cpu) / (CLIENTS * (PER_CLIENT + 3)) * 1000  # 3 warm-up calls
        finally:
            server.terminate()
            server.wait(timeout=60)
    return {"lone_p50_ms": lone["p50_ms"], "per_s": many["throughput"], "p50_ms": many["p50_ms"],
            "server_cpu_ms": server_cpu, "load1": load}


def main() -> None:
    args = ab_parser(__doc__, rounds=3).parse_args()
    after = Path(__file__).resolve().parent.parent
    rows = []
    for round_ in range(args.rounds):
        for label, tree in (("before", args.before.resolve()), ("after", after)):
            rows.append({"round": round_, "tree": label, **measure(tree)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "store_embed_ab.json").write_text(json.dumps(rows, indent=2))
    table = [[r["round"] + 1, r["tree"], f"{r['lone_p50_ms']:.1f}", f"{r['per_s']:.0f}", f"{r['p50_ms']:.0f}",
              f"{r['server_cpu_ms']:.1f}", f"{r['load1']:.1f}"] for r in rows]
    before, after_ = {"tree": "before"}, {"tree": "after"}
    lines = [
        "# encode.store with the embedder on, before and after, side by side", "",
        f"`python bench/store_embed_ab.py --rounds {args.rounds}`; {env_line(environment())}.", "",
        f"A server per tree and round, semantic search on (the bundled all-MiniLM-L6-v2, numpy); one client "
        f"storing {LONE} sentences, then {CLIENTS} client processes storing {PER_CLIENT} each at once. The "
        "clients share the 2 cores with the server; the load column is the 1-minute load average before "
        "the 32 clients start.", "",
        md_table(["round", "tree", "lone p50 ms", f"{CLIENTS} clients calls/s", "p50 ms", "server CPU ms/call",
                  "load"], table), "",
        f"Median over the rounds, after / before: {CLIENTS} clients' calls/s "
        f"{median_ratio(rows, 'per_s', after_, before):.2f}×, server CPU per call "
        f"{median_ratio(rows, 'server_cpu_ms', after_, before):.2f}×, lone p50 "
        f"{median_ratio(rows, 'lone_p50_ms', after_, before):.2f}×.",
    ]
    (RESULTS_DIR / "store_embed_ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
