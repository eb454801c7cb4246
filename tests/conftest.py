"""Shared fixtures: a clean environment per test, an embedded engine on a temporary data
directory, and a runner for the `cerememory` CLI as a real subprocess."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import cerememory

# Property tests run on a small shared machine with both cores often busy: no example may fail
# for being slow to make or to run (wall-clock checks), and the examples are the same every run.
settings.register_profile("cerememory", deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cerememory")


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No user config or CEREMEMORY_* variable leaks into a test."""
    for key in list(os.environ):
        if key.startswith("CEREMEMORY_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("CEREMEMORY_CONFIG", str(tmp_path / "no-config.toml"))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def mem(data_dir: Path) -> Iterator[cerememory.Memory]:
    """An embedded engine with keyword search only (fast, deterministic)."""
    with cerememory.open(data_dir, semantic="off") as memory:
        yield memory


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A real PostgreSQL server shared by the run (tests/pg.py)."""
    from . import pg

    return pg.server_url()


@pytest.fixture
def pg_namespace(postgres_url: str) -> Iterator[str]:
    """A schema of its own for one test, dropped afterwards."""
    from . import pg

    namespace = pg.new_namespace()
    yield namespace
    pg.drop_namespace(postgres_url, namespace)


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def cli(data_dir: Path, tmp_path: Path):
    """Run `python -m cerememory ...` against the test's data directory."""

    def run(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None,
            data: Path | None = None) -> CliResult:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
        environ.update({
            "CEREMEMORY_DATA_DIR": str(data or data_dir),
            "CEREMEMORY_CONFIG": str(tmp_path / "no-config.toml"),
            "CEREMEMORY_EMBED__SEMANTIC": "off",
        })
        environ.update(env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "cerememory", *args],
            input=input.encode() if isinstance(input, str) else input,
            capture_output=True, env=environ, timeout=120,
        )
        return CliResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode())

    return run


PORT_BLOCK = 1000  # ports per test worker, from FIRST_PORT up
FIRST_PORT = 20000
_next_port = itertools.count()


def free_port() -> int:
    """A free loopback port from this worker's own block, below the kernel's ephemeral range. A
    port the kernel picks (binding port 0) may be handed out again as the source port of any
    outgoing connection before the server binds it, and another worker never picks from this
    block. Where the ephemeral range starts too low for the blocks, the kernel picks."""
    import socket

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = FIRST_PORT + PORT_BLOCK * (int(worker) if worker.isdigit() else 0)
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) \
        if Path("/proc/sys/net/ipv4/ip_local_port_range").exists() else 0
    for _ in range(PORT_BLOCK if start + PORT_BLOCK <= ephemeral_low else 0):
        port = start + next(_next_port) % PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """A real uvicorn server on loopback, in a thread of the test process, over one engine."""

    def __init__(self, engine: Any = None, *, app: Any = None) -> None:
        import threading

        import uvicorn

        from cerememory.transport.http import create_app

        self.engine = engine
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app or create_app(engine), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        import time

        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class Retargetable:
    """A handler that forwards every attribute to the engine of the test running now, so that one
    server, started once, serves each test's own fresh engine (tests stay independent)."""

    def __init__(self) -> None:
        self.engine: Any = None

    def __getattr__(self, name: str) -> Any:
        if self.engine is None:
            raise AttributeError(name)
        return getattr(self.engine, name)

    def encode_store_each(self, calls: Any) -> Any:
        """Declared, not forwarded: the dispatcher asks at its start, before any engine is here,
        which operations its engine can take together (as the real one can)."""
        return self.engine.encode_store_each(calls)


@pytest.fixture(scope="session")
def _session_http() -> Iterator[tuple[ServerThread, Retargetable]]:
    target = Retargetable()
    server = ServerThread(target)
    yield server, target
    server.stop()


@pytest.fixture
def http_server(mem, _session_http) -> Iterator[ServerThread]:
    """A real HTTP server (started once per session) over this test's `mem`."""
    server, target = _session_http
    target.engine = mem.engine
    try:
        yield server
    finally:
        target.engine = None


@pytest.fixture
def client(http_server):
    from cerememory.transport.client import Client

    with Client(http_server.url) as c:
        yield c


def clean_env(workdir: Path, **extra: str) -> dict[str, str]:
    """The environment of a child process: no CEREMEMORY_* from the caller, no user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env.update(CEREMEMORY_CONFIG=str(workdir / "none.toml"), CEREMEMORY_EMBED__SEMANTIC="off", **extra)
    return env


class ServeProcess:
    """A real server process (`cerememory serve`, or the container entry point), ready to use."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path, port: int) -> None:
        import time

        import httpx

        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + 120  # a loaded machine starts a server slowly; a healthy one is quick
        while True:
            try:
                if httpx.get(f"{self.url}/readiness", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start: {log_path.read_text()}")
            time.sleep(0.1)

    @classmethod
    def serve(cls, data_dir: Path, workdir: Path, *args: str, **env: str) -> ServeProcess:
        port = free_port()
        command = [sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir),
                   "--port", str(port), "--log-level", "warning", *args]
        return cls(command, clean_env(workdir, **env), workdir / "server.log", port)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        code = self.proc.wait(timeout=60)
        self._log.close()
        return code


class Clock:
    """An injectable clock (seconds since the epoch) that tests move instead of sleeping."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()
