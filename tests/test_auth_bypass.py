"""Bypass attempts against a keyed `cerememory serve` (a real process, HTTP and gRPC): credentials
that are almost right, path and method tricks that could slip past the public-path exemption,
state carried on a keep-alive connection, metadata variants, and a key revoked while serving.
Every attempt is refused, reads nothing and writes nothing.

A refusal is 401 (UNAUTHENTICATED on gRPC), or 429 once the failed-authentication budget of
127.0.0.1 is spent; a path trick may also end in 404 or 405 (it reached no route). HTTP goes
through `http.client`, which sends a path exactly as written (httpx would normalise `..`).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from cerememory.security.keys import KeyStore
from cerememory.transport.client import Client
from cerememory.transport.grpc_client import GrpcClient
from cerememory.v1 import cerememory_pb2 as pb
from cerememory.v1 import cerememory_pb2_grpc as pb_grpc

from .conftest import ServeProcess, free_port

pytestmark = pytest.mark.xdist_group("keyed-server")  # one worker builds its module fixture once

ENV_KEY = "env-key-0123456789abcdef0123456789abcdef"
CANARY = "zqxbypasscanary"
REFUSED = {401, 429}
STATS = "/v1/introspect/stats"


@dataclass
class Keyed:
    server: ServeProcess
    data_dir: Path
    grpc_target: str
    stored_key: str  # a key from the data directory's key file
    stored_key_id: str

    @property
    def port(self) -> int:
        return int(self.server.url.rsplit(":", 1)[1])

    def total_records(self) -> int:
        with Client(self.server.url, api_key=ENV_KEY, retries=0) as client:
            return client.stats().total_records


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    workdir = tmp_path_factory.mktemp("keyed")
    data_dir = workdir / "data"
    entry, stored_key = KeyStore(data_dir).create(name="live")
    grpc_port = free_port()
    server = ServeProcess.serve(data_dir, workdir, "--grpc-port", str(grpc_port), CEREMEMORY_API_KEYS=ENV_KEY)
    keyed = Keyed(server, data_dir, f"127.0.0.1:{grpc_port}", stored_key, entry.id)
    try:
        with Client(server.url, api_key=ENV_KEY, retries=0) as client:
            client.store(f"the {CANARY} lives here")
        yield keyed
    finally:
        server.stop()


# ---------------------------------------------------------------- HTTP


def _http(port: int, method: str, target: str, headers: dict[str, str] | None = None,
          body: dict[str, Any] | None = None, connection: http.client.HTTPConnection | None = None,
          ) -> tuple[int, bytes]:
    """One request with the target sent verbatim; (status, body)."""
    conn = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps(body).encode() if body is not None else None
    sent = dict(headers or {})
    if data is not None:
        sent["content-type"] = "application/json"
    conn.request(method, target, body=data, headers=sent)
    response = conn.getresponse()
    answer = response.read()
    if connection is None:
        conn.close()
    return response.status, answer


def _credentials(key: str, key_id: str) -> list[tuple[str, dict[str, str]]]:
    """Authorization headers that are not the key: (label, headers)."""
    return [
        ("none", {}),
        ("basic scheme", {"authorization": "Basic " + base64.b64encode(f"user:{key}".encode()).decode()}),
        ("token scheme", {"authorization": f"Token {key}"}),
        ("no scheme", {"authorization": key}),
        ("scheme glued to key", {"authorization": f"Bearer{key}"}),
        ("bearer colon", {"authorization": f"Bearer: {key}"}),
        ("empty bearer", {"authorization": "Bearer"}),
        ("blank bearer", {"authorization": "Bearer    "}),
        ("key upper-cased", {"authorization": f"Bearer {key.upper()}"}),
        ("key swapped case", {"authorization": f"Bearer {key.swapcase()}"}),
        ("space inside key", {"authorization": f"Bearer {key[:8]} {key[8:]}"}),
        ("tab inside key", {"authorization": f"Bearer {key[:8]}\t{key[8:]}"}),
        ("key short by one", {"authorization": f"Bearer {key[:-1]}"}),
        ("key plus one", {"authorization": f"Bearer {key}x"}),
        ("two keys", {"authorization": f"Bearer {key} {key}"}),
        ("key's sha256", {"authorization": f"Bearer {hashlib.sha256(key.encode()).hexdigest()}"}),
        ("key id", {"authorization": f"Bearer {key_id}"}),
        ("key's display prefix", {"authorization": f"Bearer {key[:8]}"}),
        ("key in proxy header", {"proxy-authorization": f"Bearer {key}"}),
        ("key in x-authorization", {"x-authorization": f"Bearer {key}"}),
    ]


PRIVATE_CALLS = [
    ("GET", STATS, None),
    ("POST", "/v1/recall/query", {"cue": {"text": CANARY}}),
    ("POST", "/v1/encode", {"content": {"blocks": [{"text": f"forged {CANARY}"}]}}),
    ("DELETE", "/v1/lifecycle/forget", {"confirm": True, "store": "episodic"}),
    ("POST", "/v1/admin/reindex", None),
    ("GET", "/metrics", None),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
]


def test_near_miss_credentials_are_refused_on_every_private_route(keyed: Keyed):
    before = keyed.total_records()
    for label, headers in _credentials(keyed.stored_key, keyed.stored_key_id):
        for method, path, body in PRIVATE_CALLS:
            status, answer = _http(keyed.port, method, path, headers, body)
            assert status in REFUSED, (label, method, path, status, answer)
            assert CANARY.encode() not in answer
            assert json.loads(answer)["code"] in ("UNAUTHORIZED", "RATE_LIMITED")
    assert keyed.total_records() == before  # no forged write, no forget


PATH_TRICKS = [
    "//v1/introspect/stats",
    "/v1/../v1/introspect/stats",
    "/health/../v1/introspect/stats",
    "/readiness/..//v1/introspect/stats",
    "/v1/%2e%2e/v1/introspect/stats",
    "/health/%2e%2e/v1/introspect/stats",
    "/health/%2E%2E/v1/introspect/stats",
    "/%2e/v1/introspect/stats",
    "/health%2f..%2fv1%2fintrospect%2fstats",
    "/openapi.json/../v1/introspect/stats",
    "/docs/../v1/introspect/stats",
    "/v1/introspect/stats/",
    "/v1/introspect/stats?path=/health",
    "/v1/introspect/stats;/health",
    "/v1/introspect/stats%00/health",
    "/V1/introspect/stats",
    "/v1/./introspect/stats",
    "/v1/introspect/./stats",
    "/mcp/",
    "/mcp/../v1/introspect/stats",
]


def test_path_tricks_do_not_reach_a_private_route(keyed: Keyed):
    for path in PATH_TRICKS:
        status, answer = _http(keyed.port, "GET", path)
        assert status in REFUSED | {400, 404, 405}, (path, status, answer)
        assert b"total_records" not in answer and CANARY.encode() not in answer, path
    absolute = f"http://127.0.0.1:{keyed.port}{STATS}"  # the absolute form of a request target
    status, answer = _http(keyed.port, "GET", absolute)
    assert status in REFUSED | {400, 404}, (status, answer)
    assert b"total_records" not in answer


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "PATCH", "PUT", "CONNECT"])
def test_other_methods_on_a_private_route_are_refused(keyed: Keyed, method: str):
    for path in (STATS, "/v1/encode", "/v1/recall/query"):
        headers = {"origin": keyed.server.url, "access-control-request-method": "POST"} if method == "OPTIONS" else {}
        status, answer = _http(keyed.port, method, path, headers)
        assert status in REFUSED | {400, 404, 405}, (method, path, status)
        assert b"total_records" not in answer and CANARY.encode() not in answer
    status, _ = _http(keyed.port, "POST", STATS, {"x-http-method-override": "GET"}, {})
    assert status in REFUSED | {405}


def test_a_key_sent_to_a_public_path_does_not_carry_over_the_connection(keyed: Keyed):
    conn = http.client.HTTPConnection("127.0.0.1", keyed.port, timeout=30)
    try:
        authorization = {"authorization": f"Bearer {ENV_KEY}"}
        assert _http(keyed.port, "GET", "/health", authorization, connection=conn)[0] == 200
        assert _http(keyed.port, "GET", STATS, connection=conn)[0] in REFUSED
        assert _http(keyed.port, "GET", STATS, authorization, connection=conn)[0] == 200
        assert _http(keyed.port, "GET", STATS, connection=conn)[0] in REFUSED  # nor does a private one
    finally:
        conn.close()


def test_the_right_keys_are_accepted(keyed: Keyed):
    """The counterpart of every refusal above: both kinds of key work, in any scheme case."""
    for authorization in (f"Bearer {ENV_KEY}", f"bearer {keyed.stored_key}", f"BEARER {keyed.stored_key}"):
        status, answer = _http(keyed.port, "POST", "/v1/recall/query", {"authorization": authorization},
                               {"cue": {"text": CANARY}})
        assert status == 200 and CANARY.encode() in answer, authorization
    with GrpcClient(keyed.grpc_target, api_key=keyed.stored_key, timeout=30) as client:
        assert client.recall(CANARY).memories[0].record.content.blocks[0].text == f"the {CANARY} lives here"


# ---------------------------------------------------------------- gRPC


def _grpc_metadata(key: str, key_id: str) -> list[tuple[str, tuple[tuple[str, Any], ...]]]:
    """Call metadata that is not the key: (label, metadata)."""
    variants = [(label, tuple(headers.items())) for label, headers in _credentials(key, key_id)
                if "\t" not in headers.get("authorization", "")]  # gRPC refuses a tab before sending
    return variants + [
        ("key in x-api-key", (("x-api-key", key),)),
        ("key in api-key", (("api-key", key),)),
        ("key as binary metadata", (("authorization-bin", f"Bearer {key}".encode()),)),
        ("wrong key before the right one", (("authorization", "Bearer wrong"), ("authorization", f"Bearer {key}"))),
    ]


def test_grpc_metadata_variants_are_unauthenticated(keyed: Keyed):
    before = keyed.total_records()
    store = pb.EncodeStoreRequest(content=pb.MemoryContent(blocks=[pb.ContentBlock(text=f"forged {CANARY}")]))
    with grpc.insecure_channel(keyed.grpc_target) as channel:
        stub = pb_grpc.CerememoryServiceStub(channel)
        calls = [
            lambda md: stub.Stats(pb.StatsRequest(), metadata=md, timeout=30),
            lambda md: stub.RecallQuery(pb.RecallQueryRequest(cue=pb.RecallCue(text=CANARY)), metadata=md, timeout=30),
            lambda md: stub.EncodeStore(store, metadata=md, timeout=30),
            lambda md: stub.Forget(pb.ForgetRequest(confirm=True), metadata=md, timeout=30),
            lambda md: list(stub.Export(pb.ExportRequest(), metadata=md, timeout=30)),
            lambda md: stub.Import(iter([pb.ImportChunk(data=b"x")]), metadata=md, timeout=30),
            # unparseable bytes are refused for the key before they are parsed
            lambda md: channel.unary_unary(f"/{pb.DESCRIPTOR.services_by_name['CerememoryService'].full_name}"
                                           "/EncodeStore")(b"\xff" * 11, metadata=md, timeout=30),
        ]
        for label, metadata in _grpc_metadata(keyed.stored_key, keyed.stored_key_id):
            for n, call in enumerate(calls):
                with pytest.raises(grpc.RpcError) as err:
                    call(metadata)
                assert err.value.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED), \
                    (label, n, err.value.code(), err.value.details())
                envelope = json.loads(dict(err.value.trailing_metadata())["cmp-error"])
                assert envelope["code"] in ("UNAUTHORIZED", "RATE_LIMITED"), (label, n)
    assert keyed.total_records() == before


# ---------------------------------------------------------------- revocation


def test_a_key_revoked_while_serving_stops_working_at_once(keyed: Keyed):
    store = KeyStore(keyed.data_dir)
    _, doomed = store.create(name="doomed")  # picked up without a restart
    authorization = {"authorization": f"Bearer {doomed}"}
    assert _http(keyed.port, "GET", STATS, authorization)[0] == 200
    with GrpcClient(keyed.grpc_target, api_key=doomed, timeout=30) as client:
        assert client.stats().total_records >= 1
    store.revoke("doomed")
    status, answer = _http(keyed.port, "GET", STATS, authorization)
    assert status in REFUSED and b"total_records" not in answer
    with grpc.insecure_channel(keyed.grpc_target) as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.CerememoryServiceStub(channel).Stats(pb.StatsRequest(), metadata=tuple(authorization.items()),
                                                     timeout=30)
    assert err.value.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert _http(keyed.port, "GET", STATS, {"authorization": f"Bearer {keyed.stored_key}"})[0] == 200
