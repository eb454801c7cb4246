"""Rate limiting: the token bucket with a fake clock, who the client is behind proxies, and 429 /
RESOURCE_EXHAUSTED from real HTTP and gRPC servers."""

from __future__ import annotations

import sys

import grpc
import httpx
import pytest

from cerememory import CMPError, ErrorCode
from cerememory.security.auth import KeyRing
from cerememory.security.ratelimit import RateLimit, TokenBucketLimiter, client_address, parse_networks
from cerememory.transport.grpc_client import GrpcClient
from cerememory.transport.grpc_server import build_grpc_server
from cerememory.transport.http import create_app

from .conftest import ServeProcess, ServerThread, clean_env, free_port


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_with_a_fake_clock():
    clock = FakeClock()
    limiter = TokenBucketLimiter(rate=2, burst=3, clock=clock)
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("a") == pytest.approx(0.5)
    assert limiter.acquire("b") == 0.0  # every client has its own bucket
    clock.now += 0.5
    assert limiter.acquire("a") == 0.0 and limiter.acquire("a") > 0
    clock.now += 100  # refills up to the burst, no further
    assert [limiter.acquire("a") for _ in range(4)][-1] > 0
    with pytest.raises(CMPError) as err:
        limiter.check("a")
    assert err.value.code is ErrorCode.RATE_LIMITED and err.value.retry_after == 1


def test_idle_buckets_are_swept():
    clock = FakeClock()
    limiter = TokenBucketLimiter(rate=1, burst=1, clock=clock)
    limiter.SWEEP_EVERY = 10
    for n in range(9):
        limiter.acquire(f"client-{n}")
    clock.now += 5
    limiter.acquire("last")  # the tenth call sweeps the refilled buckets
    assert len(limiter) == 1  # only the bucket "last" just emptied


def test_client_address_believes_only_trusted_proxies():
    proxies = parse_networks("10.0.0.0/8, 127.0.0.1")
    assert client_address("203.0.113.9", "1.2.3.4", proxies) == "203.0.113.9"  # untrusted peer: spoof ignored
    assert client_address("10.1.1.1", "198.51.100.7", proxies) == "198.51.100.7"
    # the rightmost untrusted hop: the leftmost entries are whatever the client sent
    assert client_address("10.1.1.1", "6.6.6.6, 198.51.100.7, 10.2.2.2", proxies) == "198.51.100.7"
    assert client_address("10.1.1.1", "10.3.3.3", proxies) == "10.1.1.1"
    assert client_address("10.1.1.1", "garbage", proxies) == "10.1.1.1"
    assert client_address("::1", None, proxies) == "::1"
    with pytest.raises(CMPError):
        parse_networks("not-a-network")


class AppServer(ServerThread):
    """ServerThread with uvicorn's X-Forwarded-For rewriting off, as `cerememory serve` runs it
    (uvicorn's default believes the header from 127.0.0.1 and rewrites the client address)."""

    def __init__(self, app) -> None:
        import threading
        import time

        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off", proxy_headers=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "test server did not start"
            time.sleep(0.01)


def _limited_server(mem, *, trusted: str | None = None, burst: int = 2) -> ServerThread:
    limit = RateLimit(TokenBucketLimiter(rate=0.01, burst=burst, clock=FakeClock()), parse_networks(trusted))
    return AppServer(create_app(mem.engine, rate_limit=limit))


def test_http_429_with_retry_after_and_probes_exempt(mem):
    server = _limited_server(mem)
    try:
        with httpx.Client(base_url=server.url) as h:
            assert [h.get("/v1/introspect/stats").status_code for _ in range(2)] == [200, 200]
            limited = h.get("/v1/introspect/stats", headers={"x-request-id": "rl-1"})
            assert limited.status_code == 429
            body = limited.json()
            assert body["code"] == "RATE_LIMITED" and body["request_id"] == "rl-1"
            assert body["retry_after"] >= 1 and limited.headers["retry-after"] == str(body["retry_after"])
            assert "hint" in body["details"]
            # a spoofed X-Forwarded-For from an untrusted peer buys no fresh bucket
            spoofed = h.get("/v1/introspect/stats", headers={"x-forwarded-for": "198.51.100.23"})
            assert spoofed.status_code == 429
            assert all(h.get(p).status_code == 200 for p in ["/health", "/readiness"] * 5)
            assert h.get("/metrics").status_code == 429  # limited like every path but the probes
    finally:
        server.stop()


def test_forwarded_for_is_honoured_from_a_trusted_proxy(mem):
    server = _limited_server(mem, trusted="127.0.0.1", burst=1)
    try:
        with httpx.Client(base_url=server.url) as h:
            for client in ("198.51.100.1", "198.51.100.2", "198.51.100.3"):
                headers = {"x-forwarded-for": client}
                assert h.get("/v1/introspect/stats", headers=headers).status_code == 200
                assert h.get("/v1/introspect/stats", headers=headers).status_code == 429
    finally:
        server.stop()


def test_real_server_answers_429(data_dir, tmp_path):
    port = free_port()
    env = clean_env(tmp_path, CEREMEMORY_RATELIMIT__ENABLED="on", CEREMEMORY_RATELIMIT__RATE="0.05",
                    CEREMEMORY_RATELIMIT__BURST="3")
    served = ServeProcess([sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir),
                           "--port", str(port), "--log-level", "warning"], env, tmp_path / "server.log", port)
    try:
        with httpx.Client(base_url=served.url) as h:
            codes = [h.get("/v1/introspect/stats").status_code for _ in range(5)]
            assert codes[:3] == [200] * 3 and codes[-1] == 429, codes
            spoofed = h.get("/v1/introspect/stats", headers={"x-forwarded-for": "198.51.100.77"})
            assert spoofed.status_code == 429  # no trusted proxies configured: the header is ignored
            limited = h.get("/v1/introspect/stats")
            assert limited.json()["code"] == "RATE_LIMITED" and int(limited.headers["retry-after"]) >= 1
            assert h.get("/health").status_code == 200
    finally:
        assert served.stop() == 0


def test_grpc_resource_exhausted_per_key(mem):
    limit = RateLimit(TokenBucketLimiter(rate=0.01, burst=2, clock=FakeClock()))
    server, port = build_grpc_server(mem.engine, keys=KeyRing(["g-one", "g-two"]), rate_limit=limit)
    server.start()
    target = f"127.0.0.1:{port}"
    try:
        with GrpcClient(target, api_key="g-one", timeout=5) as one, \
                GrpcClient(target, api_key="g-two", timeout=5) as two:
            one.stats()
            one.stats()
            with pytest.raises(CMPError) as err:
                one.stats()
            assert err.value.code is ErrorCode.RATE_LIMITED and err.value.retry_after >= 1
            two.stats()  # another key, another bucket
        channel = grpc.insecure_channel(target)
        from cerememory.v1 import cerememory_pb2 as pb
        from cerememory.v1 import cerememory_pb2_grpc as pb_grpc

        with pytest.raises(grpc.RpcError) as raw:
            pb_grpc.CerememoryServiceStub(channel).Stats(pb.StatsRequest(),
                                                          metadata=(("authorization", "Bearer g-one"),), timeout=5)
        assert raw.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert '"retry_after"' in dict(raw.value.trailing_metadata())["cmp-error"]
        channel.close()
    finally:
        server.stop(None).wait(5)
