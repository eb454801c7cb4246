"""The web console at scale: how long each page takes at 100k records.

A data directory of N curated records (default 100k, with meta-memory and some associations)
and a raw journal, served by a real `cerememory serve` on loopback; each console page is fetched
`--repeats` times in turn and timed from the client (loopback HTTP included, so the figures are
an upper bound on the server's time). Target: every page within 300 ms.

    python bench/console.py             # 100k records: ~5-10 minutes on 2 cores, most of it populating
    python bench/console.py --quick     # 10k records

Writes bench/results/console.md and console.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    LoadMonitor,
    clean_env,
    env_line,
    environment,
    md_table,
    ms_stats,
    now,
    verdict,
)

WORDS = ("deploy key rotate monday budget review meeting river mountain lunch pasta team roadmap "
         "release incident database migration latency cache token schema index vector memory agent "
         "alice bob carol dave tokyo berlin lisbon paris q3 q4 sprint retro design").split()
TARGET_MS = 300.0


def populate(data_dir: Path, records: int, raw: int, seed: int = 11) -> str:
    """Fill `data_dir`; returns the id of a record with associations (for the record page)."""
    import cerememory

    rng = random.Random(seed)
    with cerememory.open(data_dir, semantic="off") as mem:
        for start in range(0, records, 1000):
            batch = [{"content": {"blocks": [{"text": " ".join(rng.choices(WORDS, k=rng.randint(8, 30)))}]},
                      "store": rng.choice(["episodic", "semantic", "procedural"]),
                      "meta": {"intent": " ".join(rng.choices(WORDS, k=5))}}
                     for _ in range(start, min(start + 1000, records))]
            mem.dispatch("encode.batch", {"records": batch, "infer_associations": start == 0})
        for start in range(0, raw, 1000):
            mem.store_raw_batch([{"session_id": f"s{n % 50}", "content": {"blocks": [{"text": " ".join(
                rng.choices(WORDS, k=20))}]}} for n in range(start, min(start + 1000, raw))])
        graph = mem.dispatch("recall.graph", {"limit_nodes": 1})
        return str(graph["nodes"][0]["id"]) if graph["nodes"] else str(
            mem.dispatch("recall.list", {"store": "episodic", "limit": 1})["records"][0]["id"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(data_dir: Path, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env.update(CEREMEMORY_CONFIG=str(work / "none.toml"), CEREMEMORY_EMBED__SEMANTIC="off",
               PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.Popen([sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir),
                             "--port", str(port), "--log-level", "warning"], env=env,
                            stdout=subprocess.DEVNULL, stderr=(work / "server.log").open("wb"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readiness", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"server did not start: {(work / 'server.log').read_text()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--raw", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="10k records, 2k journal records")
    parser.add_argument("--data-dir", type=Path, help="populate this directory once and reuse it on later runs")
    args = parser.parse_args()
    if args.quick:
        args.records, args.raw = 10_000, 2_000
    clean_env()
    import httpx

    info = environment()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = args.data_dir or work / "data"
        started = now()
        reused = data.exists()
        if reused:
            import cerememory

            with cerememory.open(data, semantic="off") as mem:
                graph = mem.dispatch("recall.graph", {"limit_nodes": 1})
                record_id = str(graph["nodes"][0]["id"])
        else:
            record_id = populate(data, args.records, args.raw)
        populate_s = now() - started
        proc, url = serve(data, work)
        try:
            with httpx.Client(base_url=url, timeout=60) as browser:
                first_page = browser.get("/ui/store/episodic").text
                cursor = first_page.split("cursor=", 1)[1].split('"', 1)[0] if "cursor=" in first_page else ""
                pages = {
                    "overview": "/ui/",
                    "search": "/ui/search?q=deploy+key+monday",
                    "search perfect, semantic store, last week":
                        "/ui/search?q=roadmap&mode=perfect&store=semantic&days=7",
                    "search, 100 hits": "/ui/search?q=lunch&limit=100",
                    "store listing": "/ui/store/episodic",
                    "store listing, next page": f"/ui/store/episodic?cursor={cursor}",
                    "record (with fidelity curve)": f"/ui/record/{record_id}",
                    "journal (sessions by agent and workspace)": "/ui/journal",
                    "journal, one session": "/ui/journal?session=s7",
                    "journal search": "/ui/journal?q=budget",
                    "evolution": "/ui/evolution",
                    "recent memories (overview panel)": "/ui/recent",
                    "playbook": "/ui/playbook",
                    "audit": "/ui/audit",
                    "audit, chain verified": "/ui/audit?verify=1",
                }
                for path in pages.values():  # warm up
                    assert browser.get(path).status_code == 200, path
                monitor = LoadMonitor()
                timings: dict[str, list[float]] = {name: [] for name in pages}
                for _ in range(args.repeats):
                    for name, path in pages.items():
                        t0 = now()
                        answer = browser.get(path)
                        timings[name].append(now() - t0)
                        assert answer.status_code == 200, (path, answer.status_code)
                others = monitor.others_cores()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    results = {name: ms_stats(seconds) for name, seconds in timings.items()}
    rows = [(name, r["p50_ms"], r["p95_ms"], verdict(r["p95_ms"] <= TARGET_MS)) for name, r in results.items()]
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "console.json").write_text(json.dumps(
        {"records": args.records, "raw": args.raw, "repeats": args.repeats, "populate_seconds": populate_s,
         "pages": results, "other_cores_busy": others, "environment": info}, indent=2) + "\n")
    report = "\n".join([
        "# The web console at scale", "",
        f"{args.records:,} curated records and {args.raw:,} raw journal records; each page fetched "
        f"{args.repeats} times over loopback HTTP (client-side time, so an upper bound on the server's). "
        f"Target: p95 ≤ {TARGET_MS:.0f} ms.", "",
        md_table(["page", "p50 ms", "p95 ms", f"≤ {TARGET_MS:.0f} ms"], rows), "",
        ("The data directory was populated by an earlier run (--data-dir)." if reused else
         f"Populating took {populate_s:.0f} s.") + f" Other processes kept {others:.2f} cores busy meanwhile.", "",
        f"Environment: {env_line(info)}", ""])
    (RESULTS_DIR / "console.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
