"""Transport overhead: encode.store, encode.batch and recall.query embedded, over HTTP and over gRPC.

The server is a real `cerememory serve` subprocess (HTTP + gRPC) on loopback; the embedded
engine runs in this process on its own copy of the same data. Concurrent clients are separate
processes, so client-side Python does not share one GIL.

    python bench/transports.py            # ~5 minutes
    python bench/transports.py --quick    # ~1 minute
    python bench/transports.py --before /tmp/before --rounds 2   # side by side with an earlier tree
    python bench/transports.py --before /tmp/before --ops recall.query --rounds 1

Writes bench/results/transports.md, transports.json and transports_latency.png; with --before,
transports_ab.md and .json, which also measure each tree's transport alone over a stub engine
and, beneath it, the bare HTTP and gRPC stacks answering the same bytes (bench/transport_stub.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import threading
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
    pyplot,
    verdict,
)

WORDS = ("deploy key rotate monday budget review meeting river mountain lunch pasta team roadmap "
         "release incident database migration latency cache token schema index vector memory agent "
         "alice bob carol dave tokyo berlin lisbon paris q3 q4 sprint retro design").split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=12))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_client(kind: str, target: dict):
    if kind.startswith("bare-"):  # the stack alone (bench/transport_stub.py)
        from bench.transport_stub import BareClient

        return BareClient(kind.removeprefix("bare-"), target[kind.removeprefix("bare-")])
    if kind == "http":
        from cerememory.transport.client import Client

        return Client(target["http"], retries=0)
    from cerememory.transport.grpc_client import GrpcClient

    return GrpcClient(target["grpc"])


def run_op(client, op: str, rng: random.Random) -> None:
    if op == "encode.store":
        client.store(sentence(rng))
    elif op == "encode.batch":
        client.store_batch([{"content": {"blocks": [{"text": sentence(rng)}]}} for _ in range(100)])
    else:
        client.recall(" ".join(rng.choices(WORDS, k=3)), reconsolidate=False)


def worker(kind: str, target: dict, op: str, count: int, seed: int, start_at: float, queue,
           tree: str | None = None) -> None:
    """One client process: wait for the common start, run `count` calls, report latencies and
    when each call ended (wall clock, shared by the processes); with `tree`, the client is that
    source tree's."""
    if tree is not None:
        sys.path.insert(0, tree)
    rng = random.Random(seed)
    client = make_client(kind, target)
    for _ in range(WARM_UP):
        run_op(client, op, rng)
    while time.time() < start_at:
        time.sleep(0.001)
    latencies, ends = [], []
    began, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        t = time.perf_counter()
        run_op(client, op, rng)
        latencies.append(time.perf_counter() - t)
        ends.append(time.time())
    queue.put((latencies, time.perf_counter() - began, time.process_time() - cpu, ends))
    client.close()


def steady_rate(ends: list[list[float]], start_at: float) -> float:
    """Calls a second while every client was calling: from the common start until the first
    client made its last call. After that fewer clients call (the slowest alone at the very
    end), so a rate over all calls to the slowest one's last counts a stretch of fewer clients."""
    first_done = min(e[-1] for e in ends)
    return sum(1 for e in ends for t in e if t <= first_done) / (first_done - start_at)


WARM_UP = 3  # calls each client process makes before its measured ones


def concurrent(kind: str, target: dict, op: str, clients: int, per_client: int, tree: Path | None = None,
               server: int | None = None) -> dict:
    """`clients` client processes making `per_client` calls each, from a common start; with the
    pid `server`, also the cores that process and the whole machine kept busy while they called
    (`server_cores`, `machine_cores`): what bounds the rate."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 3.0 + 0.3 * clients
    procs = [ctx.Process(target=worker, args=(kind, target, op, per_client, 1000 + i, start_at, queue,
                                              None if tree is None else str(tree)))
             for i in range(clients)]
    for p in procs:
        p.start()
    began: dict[str, tuple[float, float, LoadMonitor]] = {}
    if server is not None:  # marked as the clients start their measured calls
        marker = threading.Timer(max(0.0, start_at - time.time()), lambda: began.setdefault(
            "at", (time.perf_counter(), cpu_seconds(server), LoadMonitor())))
        marker.start()
    results = [queue.get(timeout=600) for _ in procs]
    busy: dict[str, float] = {}
    if server is not None:
        marker.join()
        wall, cpu, machine = began["at"]
        busy = {"server_cores": (cpu_seconds(server) - cpu) / (time.perf_counter() - wall),
                "machine_cores": machine.all_cores()}
    for p in procs:
        p.join()
    latencies = [x for lat, _, _, _ in results for x in lat]
    stats = ms_stats(latencies)
    stats["throughput"] = steady_rate([ends for _, _, _, ends in results], start_at)
    stats["throughput_all"] = len(latencies) / max(w for _, w, _, _ in results)  # to the slowest one's last
    stats["client_cpu_ms"] = sum(c for _, _, c, _ in results) / len(latencies) * 1000  # a client's CPU per call
    return {**stats, **busy}


def served_calls(pid: int, kind: str, target: dict, op: str, clients: int, per_client: int,
                 tree: Path | None = None) -> dict:
    """`concurrent(...)` against the server process `pid`, with the load average before the calls
    (`load1`), the server's CPU per call (`server_cpu_ms`, the clients' warm-up calls counted) and
    the cores it and the machine kept busy meanwhile."""
    load1, cpu = os.getloadavg()[0], cpu_seconds(pid)
    stats = concurrent(kind, target, op, clients, per_client, tree, server=pid)
    stats["server_cpu_ms"] = (cpu_seconds(pid) - cpu) / (clients * (per_client + WARM_UP)) * 1000
    return {"load1": load1, **stats}


def embedded(mem, op: str, count: int) -> dict:
    rng = random.Random(7)
    for _ in range(3):
        run_op(mem, op, rng)
    latencies = []
    began = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        run_op(mem, op, rng)
        latencies.append(time.perf_counter() - t)
    stats = ms_stats(latencies)
    stats["throughput"] = count / (time.perf_counter() - began)
    return stats


def load(client_or_mem, n: int) -> None:
    rng = random.Random(1)
    for start in range(0, n, 1000):
        client_or_mem.store_batch([{"content": {"blocks": [{"text": sentence(rng)}]}}
                                   for _ in range(min(1000, n - start))])


def start_server(data_dir: Path, tree: Path | None = None, hide: Path | None = None,
                 semantic: str = "off") -> tuple[subprocess.Popen, dict]:
    """`cerememory serve` over `data_dir`, from the source tree `tree` (default: this checkout),
    with semantic search `semantic` (off: no embedder); the modules stubbed out in the directory
    `hide` fail to import in it."""
    port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (hide, tree) if p is not None)
    env.update(CEREMEMORY_EMBED__SEMANTIC=semantic, CEREMEMORY_CONFIG=str(data_dir / "none.toml"))
    # `python -m` puts the working directory first on the path: run in the tree that is served
    proc = subprocess.Popen([sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir),
                             "--port", str(port), "--grpc-port", str(grpc_port), "--log-level", "error"],
                            env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/readiness", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return proc, {"http": url, "grpc": f"127.0.0.1:{grpc_port}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--before", type=Path, help="compare encode.store with many clients against the server "
                        "of this earlier source tree, side by side (writes transports_ab.md)")
    parser.add_argument("--clients", type=int, default=32, help="clients of the --before comparison")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the --before comparison")
    parser.add_argument("--calls", type=int, default=3200, help="calls of each many-client run of the --before "
                        "comparison, shared out over its clients (at least 20 each); a short run is mostly its "
                        "clients' start and its slowest client's end")
    parser.add_argument("--ops", type=lambda text: [n for n in text.split(",") if n],
                        default=sorted({op for op, _ in AB_OPS}), help="operations of the --before comparison, "
                        "e.g. recall.query")
    parser.add_argument("--before-without", type=lambda text: [n for n in text.split(",") if n], default=[],
                        help="modules the --before server runs without, e.g. uvloop,httptools")
    args = parser.parse_args()
    args.load_at_start = os.getloadavg()[0]  # how busy the machine was before this run's own work
    clean_env()
    if args.before is not None:
        return compare(args)
    calls = 100 if args.quick else 400
    levels = [1, 8] if args.quick else [1, 8, 32]
    ops = ["encode.store", "encode.batch", "recall.query"]
    import cerememory

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        server, target = start_server(Path(tmp) / "served")
        try:
            with make_client("http", target) as client:
                load(client, args.records)
            with cerememory.open(Path(tmp) / "embedded", semantic="off") as mem:
                load(mem, args.records)
                base = {op: embedded(mem, op, calls if op != "encode.batch" else calls // 10) for op in ops}
            for op in ops:
                rows.append({"op": op, "transport": "embedded", "clients": 1, **base[op]})
                for kind in ("http", "grpc"):
                    for clients in levels:
                        per = max(calls // clients, 20) if op != "encode.batch" else max(calls // 10 // clients, 5)
                        stats = concurrent(kind, target, op, clients, per)
                        rows.append({"op": op, "transport": kind, "clients": clients, **stats})
                        print(f"{op:13} {kind:5} x{clients:<2} p50 {stats['p50_ms']:.2f} ms  "
                              f"p95 {stats['p95_ms']:.2f} ms  {stats['throughput']:.0f}/s", file=sys.stderr)
        finally:
            server.terminate()
            server.wait(timeout=60)
    write_report(rows, args, base)
    return 0


def wait_quiet(pid: int, limit: float = 30.0) -> float:
    """Wait until the process `pid` uses under 5% of a core over a second (the engine's warm-up
    and index merges after a load are done), at most `limit` seconds; the seconds waited."""
    began = time.perf_counter()
    while time.perf_counter() - began < limit:
        used = cpu_seconds(pid)
        time.sleep(1.0)
        if cpu_seconds(pid) - used < 0.05:
            break
    return time.perf_counter() - began


def start_stub(kind: str, tree: Path) -> tuple[subprocess.Popen, dict]:
    """bench/transport_stub.py serving `kind` with the transports of the source tree `tree`."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env["PYTHONPATH"] = str(tree)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "transport_stub.py"), kind,
                             str(port)], env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port)
    return proc, {"http": f"http://127.0.0.1:{port}", "grpc": f"127.0.0.1:{port}"}


def wait_for_port(port: int, seconds: float = 120.0) -> None:
    """Until something listens on the loopback `port` (a server starting), at most `seconds`."""
    import socket

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)


def commit_counts(url: str) -> tuple[float, float] | None:
    """The server's group commits so far and the stores and batches they committed (its
    /metrics), or None for a tree that does not count them."""
    import httpx

    found = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("cerememory_write_commits_total", "cerememory_writes_committed_total"):
            found[name] = float(value)
    if len(found) < 2:
        return None
    return found["cerememory_write_commits_total"], found["cerememory_writes_committed_total"]


def writes_per_commit(before: tuple[float, float], url: str) -> float | None:
    """How many writes shared a commit since `before` (`commit_counts` of the server at `url`)."""
    after = commit_counts(url)
    if after is None or after[0] == before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def row_of(rows: list[dict], round_: int, op: str, kind: str, tree: str, *, clients: int | None = None,
           stub: bool = False) -> dict:
    """The run of one round, operation, transport and tree (before, after or bare) of `clients` clients."""
    return next(r for r in rows if r["round"] == round_ and r["op"] == op and r["transport"] == kind
                and r["tree"] == tree and bool(r.get("stub")) == stub and (clients is None or r["clients"] == clients))


def pair(rows: list[dict], round_: int, op: str, kind: str, *, clients: int | None = None,
         stub: bool = False) -> tuple[dict, dict]:
    """The before and the after run of one round, operation and transport (of `clients` clients)."""
    return (row_of(rows, round_, op, kind, "before", clients=clients, stub=stub),
            row_of(rows, round_, op, kind, "after", clients=clients, stub=stub))


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hidden_modules(names: list[str], where: Path) -> Path | None:
    """A directory whose stubs make `names` fail to import (for a before tree run without them)."""
    if not names:
        return None
    where.mkdir(parents=True, exist_ok=True)
    for name in names:
        (where / f"{name}.py").write_text('raise ImportError("left out of this run")\n')
    return where


AB_OPS = (("encode.store", None), ("recall.query", 1), ("recall.query", 8))  # clients: None = --clients
STUB_OPS = ("encode.store", "recall.query")  # one client against a stub engine: the transport alone
STUB_CALLS = 1000


def embedded_recall(records: int) -> float:
    """p50 in ms of recall.query on this checkout's engine, in process, over `records` records."""
    import cerememory

    with tempfile.TemporaryDirectory() as tmp, cerememory.open(Path(tmp) / "embedded", semantic="off") as mem:
        load(mem, records)
        return float(embedded(mem, "recall.query", 400)["p50_ms"])


def one_client_of(kind: str, tree: Path, op: str) -> dict:
    """`op` from one client process against bench/transport_stub.py serving `kind` (a transport
    over the stub engine, or a bare stack) from `tree`: its latency and both sides' CPU per call."""
    server, target = start_stub(kind, tree)
    try:
        return served_calls(server.pid, kind, target, op, 1, STUB_CALLS, tree)
    finally:
        server.terminate()
        server.wait(timeout=60)


def compare(args: argparse.Namespace) -> int:
    """encode.store from `--clients` client processes and recall.query from 1 and from 8 (over
    `--records` records) against a server of `--before` and one of this checkout, each called by
    its own tree's client, alternating (before, after) per transport and round on the same machine
    load; with the server's and a client's CPU per call."""
    after = Path(__file__).resolve().parent.parent
    rows: list[dict] = []
    embedded_p50: dict[int, float] = {}  # per round: this checkout's embedded recall.query p50, in ms
    with tempfile.TemporaryDirectory() as stubs:
        hide = hidden_modules(args.before_without, Path(stubs))
        for round_ in range(args.rounds):
            if "recall.query" in args.ops:
                embedded_p50[round_] = embedded_recall(args.records)
                print(f"round {round_ + 1} recall.query embedded p50 {embedded_p50[round_]:.2f} ms", file=sys.stderr)
            for op, op_clients in AB_OPS:
                if op not in args.ops:
                    continue
                clients = op_clients or args.clients
                per = max(args.calls // clients, 20)
                for kind in ("http", "grpc"):
                    for label, tree, hidden in (("before", args.before.resolve(), hide), ("after", after, None)):
                        with tempfile.TemporaryDirectory() as tmp:
                            server, target = start_server(Path(tmp) / "served", tree, hidden)
                            try:
                                if op == "recall.query":
                                    with make_client("http", target) as client:
                                        load(client, args.records)
                                    wait_quiet(server.pid)  # the warm-up after the load is not the calls'
                                counted = commit_counts(target["http"]) if op == "encode.store" else None
                                stats = served_calls(server.pid, kind, target, op, clients, per, tree)
                                if counted is not None:
                                    stats["writes_per_commit"] = writes_per_commit(counted, target["http"])
                            finally:
                                server.terminate()
                                server.wait(timeout=60)
                        rows.append({"round": round_, "op": op, "clients": clients, "transport": kind, "tree": label,
                                     **stats})
                        print(f"round {round_ + 1} {op} x{clients} {kind:5} {label:6} p50 {stats['p50_ms']:.1f} ms  "
                              f"{stats['throughput']:.0f}/s  server CPU {stats['server_cpu_ms']:.2f} ms/call  "
                              f"client CPU {stats['client_cpu_ms']:.2f} ms/call  load {stats['load1']:.1f}",
                              file=sys.stderr)
            for op in [name for name in STUB_OPS if name in args.ops]:
                for kind in ("http", "grpc"):
                    for label, tree, served in (("before", args.before.resolve(), kind), ("after", after, kind),
                                                ("bare", after, f"bare-{kind}")):
                        stats = one_client_of(served, tree, op)
                        rows.append({"round": round_, "op": op, "clients": 1, "transport": kind, "tree": label,
                                     "stub": True, **stats})
                        print(f"round {round_ + 1} stub {op} {kind:5} {label:6} p50 {stats['p50_ms']:.2f} ms  "
                              f"server CPU {stats['server_cpu_ms']:.2f} ms/call  "
                              f"client CPU {stats['client_cpu_ms']:.2f} ms/call  load {stats['load1']:.1f}",
                              file=sys.stderr)
    RESULTS_DIR.mkdir(exist_ok=True)
    rows += [{"round": round_, "op": "recall.query", "clients": 1, "transport": "embedded", "tree": "after",
              "p50_ms": p50} for round_, p50 in embedded_p50.items()]
    (RESULTS_DIR / "transports_ab.json").write_text(json.dumps(rows, indent=2))
    flags = f" --before-without {','.join(args.before_without)}" if args.before_without else ""
    if sorted(args.ops) != sorted({op for op, _ in AB_OPS}):
        flags += f" --ops {','.join(args.ops)}"
    lines = ["# Many clients, before and after, side by side", "",
             f"`bench/transports.py --before <tree>{flags} --clients {args.clients} --calls {args.calls} "
             f"--rounds {args.rounds}` — "
             f"{env_line(environment())}", "",
             "A real `cerememory serve` (HTTP + gRPC) of each source tree over a fresh data directory, called by "
             "client processes of the same tree on the same 2 cores; before and after alternate per operation, "
             "transport and round so "
             "both see the same load. The server's CPU per call (all its threads, over the calls of the run) "
             "moves far less with other work than throughput does; a client's CPU per call (the mean over its "
             "processes) is what the clients take from the same cores. The 1-minute load average is given for each "
             "run; the clients themselves are most of it. Before recall.query is measured, the server is left to "
             "finish the work a load of records sets off (the engine's warm-up, index merges: up to 30 s, until it "
             "uses under 5% of a core), so its CPU per call is the calls' own. Calls/s is the rate while every "
             "client was calling: the calls made from the common start until the first client made its last."
             + (f" The before server ran without {', '.join(args.before_without)}." if args.before_without else ""), "",
             "| round | operation | clients | transport | before calls/s | after calls/s | after / before "
             "| before p50 ms | after p50 ms | before server CPU ms/call | after server CPU ms/call "
             "| before client CPU ms/call | after client CPU ms/call | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    added: list[str] = []
    bounds: list[str] = []
    for round_ in range(args.rounds):
        for op, op_clients in AB_OPS:
            if op not in args.ops:
                continue
            for kind in ("http", "grpc"):
                b, a = pair(rows, round_, op, kind, clients=op_clients or args.clients)
                bounds.append(f"| {round_ + 1} | {op} | {a['clients']} | {kind} | {b['server_cores']:.2f} | "
                              f"{a['server_cores']:.2f} | {b['machine_cores']:.2f} | {a['machine_cores']:.2f} | "
                              f"{b['throughput_all']:,.0f} | {a['throughput_all']:,.0f} |")
                lines.append(f"| {round_ + 1} | {op} | {a['clients']} | {kind} | {b['throughput']:,.0f} | "
                             f"{a['throughput']:,.0f} | {a['throughput'] / b['throughput']:.2f}× | {b['p50_ms']:.1f} | "
                             f"{a['p50_ms']:.1f} | {b['server_cpu_ms']:.2f} | {a['server_cpu_ms']:.2f} | "
                             f"{b['client_cpu_ms']:.2f} | {a['client_cpu_ms']:.2f} | "
                             f"{b['load1']:.1f} / {a['load1']:.1f} |")
                if op == "recall.query" and a["clients"] == 1 and round_ in embedded_p50:
                    base = embedded_p50[round_]
                    added.append(f"| {round_ + 1} | {kind} | {base:.2f} | {b['p50_ms'] - base:.2f} | "
                                 f"{a['p50_ms'] - base:.2f} |")
    if added:
        lines += ["", "recall.query from one client: p50 added over the embedded engine (this checkout's, in the "
                  "benchmark process over its own copy of the same records, measured at the start of the round; "
                  "target ≤ 1 ms)", "",
                  "| round | transport | embedded p50 ms | before added ms | after added ms |", "|---|---|---|---|---|",
                  *added]
    lines += ["", "What bounds each run: the cores the server process kept busy while the clients called (its threads "
              "share one interpreter lock, so one core is about as much as its Python can use), and the cores the "
              "whole machine kept busy (of its 2, shared with the clients). The last two columns are the rate "
              "over all the run's calls, to the slowest client's last: it counts the end of the run, when fewer "
              "clients are left calling (the calls/s above count only the stretch when all of them call)", "",
              "| round | operation | clients | transport | before server cores | after server cores "
              "| before machine cores | after machine cores | before calls/s, all calls | after calls/s, all calls |",
              "|---|---|---|---|---|---|---|---|---|---|", *bounds]
    grouped = []
    for round_ in range(args.rounds):
        for kind in ("http", "grpc") if "encode.store" in args.ops else ():
            b, a = pair(rows, round_, "encode.store", kind)
            grouped.append(f"| {round_ + 1} | {kind} | " + " | ".join(
                "—" if r.get("writes_per_commit") is None else f"{r['writes_per_commit']:.1f}" for r in (b, a)) + " |")
    if grouped:
        lines += ["", f"encode.store from {args.clients} clients: stores per commit (group commit), from the server's "
                  "`cerememory_writes_committed_total` / `cerememory_write_commits_total` over the run, warm-up "
                  "included (— where the tree does not count them)", "",
                  "| round | transport | before | after |", "|---|---|---|---|", *grouped]
    stub_lines = []
    for round_ in range(args.rounds):
        for op in [name for name in STUB_OPS if name in args.ops]:
            for kind in ("http", "grpc"):
                b, a = pair(rows, round_, op, kind, stub=True)
                stub_lines.append(f"| {round_ + 1} | {op} | {kind} | {b['p50_ms']:.2f} | {a['p50_ms']:.2f} | "
                                  f"{b['server_cpu_ms']:.2f} | {a['server_cpu_ms']:.2f} | "
                                  f"{a['server_cpu_ms'] / b['server_cpu_ms']:.2f}× | "
                                  f"{b['load1']:.1f} / {a['load1']:.1f} |")
    lines += ["", f"The transport alone: each tree's HTTP or gRPC server over a stub engine (bench/transport_stub.py: "
              f"recall.query answers ten memories made once by a real engine, encode.store a record id), "
              f"{STUB_CALLS} calls from one client process of the same tree. The server's CPU per call is then "
              "the transport's own: parsing, validation, middleware, metrics, serialisation.", "",
              "| round | operation | transport | before p50 ms | after p50 ms | before server CPU ms/call "
              "| after server CPU ms/call | after / before | load |", "|---|---|---|---|---|---|---|---|---|",
              *stub_lines]
    bare_lines = []
    for round_ in range(args.rounds):
        for op in [name for name in STUB_OPS if name in args.ops]:
            for kind in ("http", "grpc"):
                a, bare = (row_of(rows, round_, op, kind, tree, stub=True) for tree in ("after", "bare"))
                bare_lines.append(
                    f"| {round_ + 1} | {op} | {kind} | {bare['p50_ms']:.2f} | {a['p50_ms']:.2f} | "
                    f"{bare['server_cpu_ms']:.2f} | {a['server_cpu_ms']:.2f} | "
                    f"{a['server_cpu_ms'] - bare['server_cpu_ms']:.2f} | {bare['client_cpu_ms']:.2f} | "
                    f"{a['client_cpu_ms']:.2f} | {a['client_cpu_ms'] - bare['client_cpu_ms']:.2f} | "
                    f"{bare['load1']:.1f} |")
    lines += ["", "The stacks alone, beneath the after tree's transport: a bare server (bench/transport_stub.py "
              "bare-http: uvicorn with an ASGI app of a few lines; bare-grpc: grpc.aio on uvloop with "
              "Cerememory's options) sends the same answer's bytes, made once, to a bare client "
              "(http.client over one keep-alive connection; a grpcio channel) that sends fixed request bytes and "
              "leaves the answer unparsed. What the transport adds on each side is the difference (the typed "
              "client's column includes reading the answer into its models).", "",
              "| round | operation | transport | bare p50 ms | transport p50 ms | bare server CPU ms/call "
              "| transport server CPU ms/call | added | bare client CPU ms/call | typed client CPU ms/call | added "
              "| load |", "|---|---|---|---|---|---|---|---|---|---|---|---|", *bare_lines]
    (RESULTS_DIR / "transports_ab.md").write_text("\n".join(lines) + "\n")
    return 0


def write_report(rows: list[dict], args: argparse.Namespace, base: dict) -> None:
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "transports.json").write_text(json.dumps(rows, indent=2))
    table = []
    for r in rows:
        overhead = r["p50_ms"] - base[r["op"]]["p50_ms"]
        table.append([r["op"], r["transport"], r["clients"], r["p50_ms"], r["p95_ms"],
                      overhead if r["transport"] != "embedded" else float("nan"), r["throughput"]])
    single = [r for r in rows if r["clients"] == 1 and r["transport"] != "embedded" and r["op"] != "encode.batch"]
    recall8 = next((r for r in rows if r["op"] == "recall.query" and r["transport"] == "grpc" and r["clients"] == 8),
                   None)
    targets = [[f"{r['op']} over {r['transport']}: p50 added over embedded",
                f"{r['p50_ms'] - base[r['op']]['p50_ms']:.2f} ms", "≤ 1 ms",
                verdict(r["p50_ms"] - base[r["op"]]["p50_ms"] <= 1.0)] for r in single]
    if recall8:
        targets.append([f"recall.query/s over gRPC, 8 clients, {args.records:,} records",
                        f"{recall8['throughput']:,.0f}/s", "≥ 700/s", verdict(recall8["throughput"] >= 700)])
    text = [
        "# Transport overhead",
        "",
        f"`bench/transports.py{' --quick' if args.quick else ''}` — {env_line(environment())}",
        "",
        f"A real `cerememory serve` subprocess (HTTP + gRPC, loopback) over {args.records:,} records; the embedded "
        "engine in the benchmark process over its own copy of the same data. Concurrent clients are separate "
        "processes. encode.batch sends 100 records per call; recall.query is a 3-word text query, "
        "reconsolidate=False. Calls/s of concurrent clients is the rate while every client was calling (until "
        "the first made its last call). On this 2-core machine the server and its clients share the cores; the "
        f"1-minute load average was {args.load_at_start:.2f} when the run started.",
        "",
        "## Targets",
        "",
        md_table(["measure", "value", "target", "result"], targets),
        "",
        "## Latency and throughput",
        "",
        md_table(["operation", "transport", "clients", "p50 ms", "p95 ms", "p50 added ms", "calls/s"], table),
        "",
        "![latency](transports_latency.png)",
        "",
    ]
    (RESULTS_DIR / "transports.md").write_text("\n".join(text))
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, op in zip(axes, ["encode.store", "encode.batch", "recall.query"], strict=True):
        for kind in ("http", "grpc"):
            pts = [(r["clients"], r["p50_ms"]) for r in rows if r["op"] == op and r["transport"] == kind]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=kind)
        ax.axhline(base[op]["p50_ms"], color="grey", linestyle="--", label="embedded")
        ax.set_xscale("log", base=2)
        ax.set_title(op)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("p50 ms")
        ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "transports_latency.png", dpi=110)


if __name__ == "__main__":
    sys.exit(main())
