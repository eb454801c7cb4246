"""gRPC server models side by side: grpcio's threaded server against grpc.aio, over one real engine.

Each server runs the same small handler over a real `cerememory.open` data directory: the request's
bytes parsed, the dispatcher called, the answer converted (no key gate, metrics or access log, so
that the server model is all that differs). The models:

- `threaded`: grpcio's threaded server (40 workers), as Cerememory served before it moved to
  grpc.aio; every call runs on a worker thread, which wakes to answer it.
- `aio-worker`: grpc.aio on uvloop; reads run on a worker thread (`offload.run_in_worker`), and
  the stores that arrive together go to one worker as one set (`offload.Gathering`, as HTTP does).
- `aio-inline`: the same, with reads run on the event loop's own thread, as Cerememory serves now.

Workloads, each from client processes on the same 2 cores: recall.query from 1 client and from 8
over 10,000 records, and encode.store from 32 (each server over a fresh directory). The models
alternate within each round, so all see the same load.

    python bench/grpc_servers.py --rounds 2

Writes bench/results/grpc_servers.md, .json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, clean_env, env_line, environment, md_table, pyplot  # noqa: E402
from bench.transports import (  # noqa: E402
    free_port,
    load,
    make_client,
    served_calls,
    wait_for_port,
    wait_quiet,
)

MODELS = ("threaded", "aio-worker", "aio-inline")
WORKLOADS = (("recall.query", 1, 800), ("recall.query", 8, 150), ("encode.store", 32, 100))  # op, clients, calls each
RECORDS = 10_000
OPS = ("encode.store", "encode.batch", "recall.query")
READS = frozenset({"recall.query"})  # the rest write
THREADED_WORKERS = 40  # as its threaded server had, so that 32 writers are all in flight at once


def serve(model: str, data_dir: Path, port: int) -> None:
    """Serve OPS from a real engine over `data_dir` on `port` with the server `model`, until killed."""
    import grpc

    import cerememory
    from cerememory.cmp.operations import operation
    from cerememory.transport import grpc_convert as convert

    dispatcher = cerememory.open(data_dir, semantic="off").dispatcher

    def parsed(op: str, data: bytes) -> dict[str, Any]:
        return convert.from_proto_request(op, convert.request_class(op).FromString(data))

    def handlers(rpc_of: Any) -> Any:
        methods = {convert.rpc_method(operation(op)).name: grpc.unary_unary_rpc_method_handler(
            rpc_of(op), response_serializer=convert.response_class(op).SerializeToString) for op in OPS}
        return (grpc.method_handlers_generic_handler(convert.SERVICE_NAME, methods),)

    options = [("grpc.so_reuseport", 0)]
    if model == "threaded":
        from concurrent import futures

        def threaded_rpc(op: str) -> Any:
            return lambda data, _context: convert.to_proto_response(op, dispatcher.call(op, parsed(op, data)))

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=THREADED_WORKERS), options=options)
        server.add_generic_rpc_handlers(handlers(threaded_rpc))
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        server.wait_for_termination()
        return

    import uvloop

    from cerememory.transport.offload import Gathering, run_in_worker

    gatherings = {op: Gathering(dispatcher, op) for op in OPS}

    def aio_rpc(op: str) -> Any:
        async def rpc(data: bytes, _context: Any) -> Any:
            body = parsed(op, data)
            if dispatcher.gathers(op):
                result = await gatherings[op].call(body)
            elif op in READS and model == "aio-inline":
                result = dispatcher.call(op, body)
            else:
                result = await run_in_worker(dispatcher.call, op, body)
            return convert.to_proto_response(op, result)

        return rpc

    async def main() -> None:
        aio_server = grpc.aio.server(options=options)
        aio_server.add_generic_rpc_handlers(handlers(aio_rpc))
        aio_server.add_insecure_port(f"127.0.0.1:{port}")
        await aio_server.start()
        await aio_server.wait_for_termination()

    uvloop.install()
    asyncio.run(main())


def start(model: str, data_dir: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "serve", model, str(data_dir), str(port)])
    wait_for_port(port)
    return proc, {"grpc": f"127.0.0.1:{port}"}


def measure(model: str, op: str, clients: int, per_client: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, target = start(model, Path(tmp) / "served")
        try:
            if op == "recall.query":
                with make_client("grpc", target) as client:
                    load(client, RECORDS)
                wait_quiet(proc.pid)  # the warm-up after the load is not the calls'
            stats = served_calls(proc.pid, "grpc", target, op, clients, per_client)
        finally:
            proc.kill()
            proc.wait()
    return {"model": model, "op": op, "clients": clients, **stats}


def report(rows: list[dict], args: argparse.Namespace) -> None:
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "grpc_servers.json").write_text(json.dumps(rows, indent=2))
    table, ratios = [], {}
    for op, clients, _ in WORKLOADS:
        base = [r for r in rows if r["op"] == op and r["clients"] == clients and r["model"] == "threaded"]
        for model in MODELS:
            runs = [r for r in rows if r["op"] == op and r["clients"] == clients and r["model"] == model]
            ratio = median(r["throughput"] / b["throughput"] for r, b in zip(runs, base, strict=True))
            ratios[(op, clients, model)] = ratio
            table.append([op, clients, model, median(r["throughput"] for r in runs), ratio,
                          median(r["p50_ms"] for r in runs), median(r["server_cpu_ms"] for r in runs),
                          median(r["client_cpu_ms"] for r in runs),
                          f"{min(r['load1'] for r in runs):.1f}–{max(r['load1'] for r in runs):.1f}"])
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(MODELS)
    for i, model in enumerate(MODELS):
        ax.bar([w + i * width for w in range(len(WORKLOADS))],
               [ratios[(op, clients, model)] for op, clients, _ in WORKLOADS], width, label=model)
    ax.set_xticks([w + width for w in range(len(WORKLOADS))],
                  [f"{op}\n{clients} client{'s' if clients > 1 else ''}" for op, clients, _ in WORKLOADS])
    ax.axhline(1.0, color="grey", linestyle="--")
    ax.set_ylabel("calls/s / threaded (median of rounds)")
    ax.set_title("gRPC server models over one engine")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "grpc_servers.png", dpi=110)
    lines = [
        "# gRPC server models side by side", "",
        f"`bench/grpc_servers.py --rounds {args.rounds}` — {env_line(environment())}", "",
        "Each model serves the same small handler (parse, dispatcher, convert; no key gate, metrics or "
        "access log) over a real engine, in a fresh process per run; the models alternate within each "
        "round. threaded: grpcio's threaded server with Cerememory's 40 workers. aio-worker: grpc.aio on "
        "uvloop, reads on a worker thread, the stores that arrive together handed to one worker as a set "
        "(as HTTP does). aio-inline: the same with reads on the event loop's thread. Clients are separate "
        f"processes on the same 2 cores; recall.query runs over {RECORDS:,} records. Each figure is the "
        "median over the rounds; the ratio is the median of each round's ratio to the threaded server; "
        "the server's CPU is per call, all its threads.", "",
        md_table(["operation", "clients", "model", "calls/s", "× threaded", "p50 ms", "server CPU ms/call",
                  "client CPU ms/call", "1-min load"], table), "",
        "![throughput](grpc_servers.png)",
    ]
    (RESULTS_DIR / "grpc_servers.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "serve":
        serve(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    clean_env()
    rows = []
    for round_ in range(args.rounds):
        for op, clients, per_client in WORKLOADS:
            for model in MODELS:
                row = {"round": round_, **measure(model, op, clients, per_client)}
                rows.append(row)
                print(f"round {round_ + 1} {op} x{clients} {model:10} {row['throughput']:.0f}/s  "
                      f"p50 {row['p50_ms']:.1f} ms  server CPU {row['server_cpu_ms']:.2f} ms/call  "
                      f"client CPU {row['client_cpu_ms']:.2f} ms/call  load {row['load1']:.1f}", file=sys.stderr)
    report(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
