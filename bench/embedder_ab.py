"""encode.store and recall.query over HTTP with the bundled embedder on (the default when it is
installed), two source trees side by side in one run.

    python bench/embedder_ab.py --before /tmp/base --rounds 3

Each round starts a server (`cerememory serve`, semantic search on, all-MiniLM-L6-v2) of the tree
given as `--before` and then one of this checkout, each over a fresh data directory, so both see
the same machine load. Against each: one client storing 40 sentences one after another (p50),
32 client processes storing 10 each at once, then 8 client processes recalling 25 times each
at once (calls per second, p50, the server's CPU per call, all its threads). Every store embeds
its text and every recall its query, so this measures what concurrent agents feel on a default
install: the embedding, not the write or the search, is most of a call's cost.
Writes bench/results/embedder_ab.md and embedder_ab.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS_DIR, ab_parser, env_line, environment, md_table, median_ratio, pick, pyplot  # noqa: E402
from transports import concurrent, served_calls, start_server, wait_quiet  # noqa: E402

CLIENTS, PER_CLIENT, LONE = 32, 10, 40
READERS, PER_READER = 8, 25


def at_once(server: subprocess.Popen, target: dict, tree: Path, op: str, clients: int, per: int) -> dict:
    """`clients` processes calling `op` `per` times each at once: calls/s, p50, the server's CPU
    per call and the load average before they start."""
    wait_quiet(server.pid)
    stats = served_calls(server.pid, "http", target, op, clients, per, tree)
    return {"per_s": stats["throughput"], "p50_ms": stats["p50_ms"], "server_cpu_ms": stats["server_cpu_ms"],
            "load1": stats["load1"]}


def measure(tree: Path) -> dict:
    """One server of `tree`: a lone storing client's p50, then 32 storing clients at once, then
    8 recalling clients at once."""
    with tempfile.TemporaryDirectory() as tmp:
        server, target = start_server(Path(tmp) / "served", tree, semantic="on")
        try:
            concurrent("http", target, "encode.store", 2, 5, tree)  # loads the model
            wait_quiet(server.pid)
            lone = concurrent("http", target, "encode.store", 1, LONE, tree)
            stores = at_once(server, target, tree, "encode.store", CLIENTS, PER_CLIENT)
            recalls = at_once(server, target, tree, "recall.query", READERS, PER_READER)
        finally:
            server.terminate()
            server.wait(timeout=60)
    return {"lone_p50_ms": lone["p50_ms"], **{f"store_{k}": v for k, v in stores.items()},
            **{f"recall_{k}": v for k, v in recalls.items()}}


def main() -> None:
    args = ab_parser(__doc__, rounds=3).parse_args()
    after = Path(__file__).resolve().parent.parent
    rows = []
    for round_ in range(args.rounds):
        for label, tree in (("before", args.before.resolve()), ("after", after)):
            rows.append({"round": round_, "tree": label, **measure(tree)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "embedder_ab.json").write_text(json.dumps(rows, indent=2))
    report(rows, args.rounds)


def plot(rows: list[dict]) -> None:
    """Calls per second before and after, storing and recalling, round by round."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5))
    for ax, (op, title) in zip(axes, (("store", f"{CLIENTS} clients storing"),
                                      ("recall", f"{READERS} clients recalling")), strict=True):
        rounds = sorted({r["round"] for r in rows})
        for offset, tree in ((-0.2, "before"), (0.2, "after")):
            ax.bar([r + 1 + offset for r in rounds], [pick(rows, round=r, tree=tree)[f"{op}_per_s"] for r in rounds],
                   width=0.4, label=tree)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_ylabel("calls per second")
        ax.set_xticks([r + 1 for r in rounds])
        ax.set_ylim(top=1.3 * max(r[f"{op}_per_s"] for r in rows))
        ax.legend(loc="upper left", ncols=2)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("HTTP with the embedder on, before and after")
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "embedder_ab.png", dpi=110)


def report(rows: list[dict], rounds: int) -> None:
    """bench/results/embedder_ab.md and its plot, from the rows of a run."""
    plot(rows)
    table = [[r["round"] + 1, r["tree"], f"{r['lone_p50_ms']:.1f}",
              *(f"{r[f'{op}_{k}']:{fmt}}" for op in ("store", "recall")
                for k, fmt in (("per_s", ".0f"), ("p50_ms", ".0f"), ("server_cpu_ms", ".1f"), ("load1", ".1f")))]
             for r in rows]
    before, after_ = {"tree": "before"}, {"tree": "after"}

    def ratio(metric: str) -> str:
        return f"{median_ratio(rows, metric, after_, before):.2f}×"

    lines = [
        "# encode.store and recall.query with the embedder on, before and after, side by side", "",
        f"`python bench/embedder_ab.py --rounds {rounds}`; {env_line(environment())}.", "",
        f"A server per tree and round, semantic search on (the bundled all-MiniLM-L6-v2, numpy): one client "
        f"storing {LONE} sentences, then {CLIENTS} client processes storing {PER_CLIENT} each at once, then "
        f"{READERS} client processes recalling {PER_READER} times each at once. The clients share the 2 cores "
        "with the server; each load column is the 1-minute load average before those clients start.", "",
        md_table(["round", "tree", "lone store p50 ms",
                  *(f"{n} {h}" for n in (f"{CLIENTS} storing:", f"{READERS} recalling:")
                    for h in ("calls/s", "p50 ms", "server CPU ms/call", "load"))], table), "",
        f"Median over the rounds, after / before: {CLIENTS} storing clients' calls/s {ratio('store_per_s')}, "
        f"server CPU per store {ratio('store_server_cpu_ms')}; {READERS} recalling clients' calls/s "
        f"{ratio('recall_per_s')}, server CPU per recall {ratio('recall_server_cpu_ms')}; lone store p50 "
        f"{ratio('lone_p50_ms')}.", "",
        "![calls per second](embedder_ab.png)",
    ]
    (RESULTS_DIR / "embedder_ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
