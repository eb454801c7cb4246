"""`cerememory recall` against a running server, whole process, two source trees side by side.

    python bench/cli_start.py --before /tmp/base --rounds 3

One `cerememory serve` of this checkout over 1,000 records; then, each round, `--runs` whole
processes of `cerememory recall "<cue>"` from the tree given as `--before`, from this checkout
and a bare `python -c pass`, interleaved run by run, so all see the same machine load. The CLI
finds the server through the data directory's lock file, as a user's command does. Every process
runs in a scratch directory: `python -m` puts the working directory first on the path, and run
from a checkout every way would import that checkout. Both trees are byte-compiled first (a CLI
that compiles its modules on every start measures the compiler).
Reports wall-clock p50 and CPU (user + system) p50 per process, and the ratios within each round.
With `--instructions`, each way also runs once under valgrind (callgrind) and the report gives the
instructions it executed: a count the other processes on a shared machine do not disturb.
Writes bench/results/cli_start.md and cli_start.json.
"""

from __future__ import annotations

import compileall
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_DIR, RESULTS_DIR, ab_parser, clean_env, median_ratio, pick  # noqa: E402

CUE = "rotating the deploy key"


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(command: list[str], env: dict[str, str], cwd: Path) -> int:
    """Instructions one whole process executes, counted by valgrind."""
    run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command], env=env,
                         cwd=cwd, check=True, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise SystemExit(f"valgrind gave no count: {run.stderr[-500:]}")
    return int(found.group(1))


def serve(data_dir: Path, port: int) -> subprocess.Popen:
    """A server of this checkout over 1,000 records, ready when this returns."""
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    subprocess.run([sys.executable, "-c", f"""
import cerememory
with cerememory.open({str(data_dir)!r}, semantic="off") as mem:
    mem.store_batch([{{"content": {{"blocks": [{{"text": f"note {{i}}: rotating the deploy key, step {{i % 7}}"}}]}}}}
                     for i in range(1000)])
"""], env=env, check=True)
    server = subprocess.Popen([sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir),
                               "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import urllib.request

    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readiness", timeout=1).read()
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not become ready")


def main() -> None:
    parser = ab_parser(__doc__, rounds=3)
    parser.add_argument("--runs", type=int, default=15, help="processes per tree and round")
    parser.add_argument("--port", type=int, default=18721)
    parser.add_argument("--instructions", action="store_true", help="also count instructions under valgrind")
    args = parser.parse_args()
    clean_env()
    trees = {"before": args.before.resolve(), "after": REPO_DIR}
    for tree in trees.values():
        compileall.compile_dir(tree / "cerememory", quiet=1)
    work = Path(tempfile.mkdtemp(prefix="cerememory-cli-start-"))
    server = serve(work / "data", args.port)
    commands = {label: [sys.executable, "-m", "cerememory", "recall", CUE, "--data-dir", str(work / "data")]
                for label in trees}
    commands["python -c pass"] = [sys.executable, "-c", "pass"]
    envs = {label: {**os.environ, "PYTHONPATH": str(tree)} for label, tree in trees.items()}
    envs["python -c pass"] = dict(os.environ)
    rows: list[dict] = []
    try:
        for r in range(args.rounds):
            samples: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
            load = os.getloadavg()[0]
            for _ in range(args.runs):
                for label, command in commands.items():
                    samples[label].append(timed(command, envs[label], work))
            for label, pairs in samples.items():
                walls, cpus = sorted(p[0] for p in pairs), sorted(p[1] for p in pairs)
                rows.append({"round": r, "way": label, "load1": load, "wall_p50_ms": 1000 * walls[len(walls) // 2],
                             "cpu_p50_ms": 1000 * cpus[len(cpus) // 2]})
                print(json.dumps(rows[-1]), flush=True)
        counts = {label: instructions(command, envs[label], work) for label, command in commands.items()} \
            if args.instructions else {}
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    lines = ["# `cerememory recall` against a server: whole process, before and after", "",
             f"`bench/cli_start.py --before <tree> --rounds {args.rounds} --runs {args.runs}`: a server of this "
             "checkout over 1,000 records (semantic off); the CLI finds it through the data directory's lock. "
             f"{args.runs} processes per way and round, the ways interleaved run by run; 1-minute load average of "
             f"the {os.cpu_count()}-core machine at the start of each round in the last column.", "",
             "| round | way | wall p50 ms | CPU p50 ms | wall / before | CPU / before | load |",
             "|---|---|---|---|---|---|---|"]
    for r in range(args.rounds):
        before = pick(rows, round=r, way="before")
        for label in commands:
            x = pick(rows, round=r, way=label)
            lines.append(f"| {r + 1} | {label} | {x['wall_p50_ms']:.0f} | {x['cpu_p50_ms']:.0f} | "
                         f"{x['wall_p50_ms'] / before['wall_p50_ms']:.2f}× | "
                         f"{x['cpu_p50_ms'] / before['cpu_p50_ms']:.2f}× | {x['load1']:.1f} |")
    wall, cpu = (median_ratio(rows, metric, {"way": "after"}, {"way": "before"})
                 for metric in ("wall_p50_ms", "cpu_p50_ms"))
    lines.append(f"| median over rounds | after | | | {wall:.2f}× | {cpu:.2f}× | |")
    if counts:
        lines += ["", "Instructions one process executes (valgrind `--tool=callgrind`, one run of each way):", "",
                  "| way | instructions | / before |", "|---|---|---|"]
        lines += [f"| {label} | {n / 1e6:.0f}M | {n / counts['before']:.2f}× |" for label, n in counts.items()]
        rows.append({"instructions": counts})
    RESULTS_DIR.joinpath("cli_start.md").write_text("\n".join(lines) + "\n")
    RESULTS_DIR.joinpath("cli_start.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
