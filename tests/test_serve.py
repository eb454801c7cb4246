"""`cerememory serve` as a real process: remote CLI, ownership, clean shutdown under load."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import cerememory
from cerememory import CMPError
from cerememory.transport.client import Client

from .conftest import ServeProcess, free_port


@pytest.fixture
def server(data_dir, tmp_path):
    grpc_port = free_port()
    served = ServeProcess.serve(data_dir, tmp_path, "--grpc-port", str(grpc_port))
    served.grpc_target = f"127.0.0.1:{grpc_port}"
    yield served
    served.stop()


def test_cli_talks_to_the_server_and_the_owner_is_named(server, cli):
    stored = cli("store", "remote note about otters", "--server-url", server.url, "--json")
    assert stored.code == 0, stored.stderr
    via_env = cli("recall", "otters", "--json", env={"CEREMEMORY_SERVER_URL": server.url})
    assert via_env.json()["memories"][0]["record"]["id"] == stored.json()["record_id"]
    found = cli("stats", "--json")  # no --server-url: the data directory's lock names the server
    assert found.code == 0, found.stderr
    assert found.json()["total_records"] == 1
    assert cli("reindex", "--server-url", server.url, "--json").json() == {"records": 1, "journal": 0}


def test_one_engine_behind_http_and_grpc(server):
    from cerememory.transport.grpc_client import GrpcClient

    with GrpcClient(server.grpc_target) as grpc_client, Client(server.url) as http_client:
        rid = grpc_client.store("written over gRPC, read over HTTP").record_id
        assert http_client.recall("gRPC").memories[0].record.id == rid
        assert grpc_client.stats().total_records == http_client.stats().total_records == 1


def test_sigterm_under_load_loses_no_acknowledged_write(server, data_dir):
    acknowledged: dict[str, list[str]] = {"http": [], "grpc": []}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        from cerememory.transport.grpc_client import GrpcClient

        # half the writers over HTTP, half over gRPC: both servers drain before the engine closes
        transport = "http" if n % 2 else "grpc"
        client = Client(server.url, timeout=10, retries=0) if n % 2 else GrpcClient(server.grpc_target, timeout=10)
        with client:
            i = 0
            while not stop.is_set():
                try:
                    rid = client.store(f"writer {n} entry {i}").record_id
                except CMPError:
                    return  # the server is going away
                with lock:
                    acknowledged[transport].append(str(rid))
                i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while min(map(len, acknowledged.values())) <= 10 and time.monotonic() < deadline:  # under load, however slow
        time.sleep(0.05)
    server.proc.send_signal(signal.SIGTERM)
    assert server.stop() == 0
    stop.set()
    for t in threads:
        t.join()
    assert min(map(len, acknowledged.values())) > 10
    with cerememory.open(data_dir, semantic="off") as mem:  # released, and every write is there
        stored = mem.engine.core.records.heads
        assert all(cerememory.model.uuid.UUID(rid) in stored for rids in acknowledged.values() for rid in rids)


def test_serve_refuses_a_busy_port(cli, server):
    port = server.url.rsplit(":", 1)[1]
    result = cli("serve", "--port", port, "--json", data=None)
    assert result.code in (2, 4)  # the port or the data directory is taken
