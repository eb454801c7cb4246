"""Embedding backends against real parts: the bundled MiniLM model and a real HTTP stub
server on 127.0.0.1 that speaks both the OpenAI and the Ollama embeddings APIs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cerememory.embed import (
    EmbeddingUnavailable,
    EmbedSettings,
    LocalEmbedder,
    local_embedder_available,
    make_embedder,
)
from cerememory.embed.base import Embedder, is_loopback_url, normalise_rows
from cerememory.embed.http import HttpEmbedder, endpoint_url

REPO_ROOT = Path(__file__).resolve().parents[2]
STUB_DIM = 8

needs_local = pytest.mark.skipif(
    not local_embedder_available(), reason="the 'embed' extra is not installed"
)


# --------------------------------------------------------------------------- stub server


def fake_vector(text: str, dim: int = STUB_DIM) -> list[float]:
    """Deterministic, deliberately un-normalised vector for ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i] - 127.5) / 10.0 for i in range(dim)]


def expected_rows(texts: list[str]) -> np.ndarray:
    return normalise_rows(np.array([fake_vector(t) for t in texts]))


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class StubState:
    # Each scripted reply is (status, headers, payload) and is used for one request,
    # before falling back to correct answers. payload may be a callable of the body.
    script: list[tuple[int, dict[str, str], Any]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)


class StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StubServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw)
        state = self.server.state
        state.requests.append(Request(self.path, dict(self.headers.items()), body))
        if state.script:
            status, headers, payload = state.script.pop(0)
            if callable(payload):
                payload = payload(body)
        else:
            status, headers, payload = self._correct_answer(body)
        self._send(status, headers, payload)

    def _correct_answer(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        texts = body["input"]
        if self.path == "/v1/embeddings":
            data = [
                {"object": "embedding", "index": i, "embedding": fake_vector(t)}
                for i, t in enumerate(texts)
            ]
            data.reverse()  # the index field, not the list order, defines the order
            return 200, {}, {"object": "list", "data": data, "model": body["model"]}
        if self.path == "/api/embed":
            return 200, {}, {"model": body["model"], "embeddings": [fake_vector(t) for t in texts]}
        return 404, {}, {"error": f"no route {self.path}"}

    def _send(self, status: int, headers: dict[str, str], payload: Any) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.state = StubState()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def stub_server() -> Iterator[StubServer]:
    server = StubServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def stub(stub_server: StubServer) -> StubServer:
    stub_server.state = StubState()
    return stub_server


@pytest.fixture
def make_http(stub: StubServer) -> Iterator[Any]:
    made: list[HttpEmbedder] = []

    def factory(kind: str = "openai", **kwargs: Any) -> HttpEmbedder:
        url = kwargs.pop("url", stub.url)
        embedder = HttpEmbedder(url, kwargs.pop("model", "test-model"), kind=kind, **kwargs)
        made.append(embedder)
        return embedder

    yield factory
    for embedder in made:
        embedder.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- base helpers


def test_normalise_rows_unit_rows_zero_rows_stay_zero() -> None:
    out = normalise_rows([[3.0, 4.0], [0.0, 0.0], [1e300, 1e300]])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0], [0.6, 0.8], rtol=1e-6)
    assert not out[1].any()
    np.testing.assert_allclose(np.linalg.norm(out[2]), 1.0, rtol=1e-6)
    np.testing.assert_allclose(normalise_rows(np.array([0.0, 2.0])), [0.0, 1.0])
    assert normalise_rows(np.zeros((0, 5))).shape == (0, 5)
    with pytest.raises(ValueError):
        normalise_rows([[np.nan, 1.0]])


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:11434", True),
        ("http://127.1.2.3", True),
        ("http://localhost:8080/v1", True),
        ("http://[::1]:8080", True),
        ("https://api.openai.com", False),
        ("http://10.0.0.5:11434", False),
        ("http://localhost.example.com", False),
        ("not a url", False),
        (None, False),
    ],
)
def test_is_loopback_url(url: str | None, loopback: bool) -> None:
    assert is_loopback_url(url) is loopback


# --------------------------------------------------------------------------- local backend


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


@needs_local
def test_local_is_lazy_and_knows_its_dimension(local: LocalEmbedder) -> None:
    fresh = LocalEmbedder("sentence-transformers/all-MiniLM-L6-v2")
    assert not fresh.loaded
    assert fresh.dimension == 384
    assert fresh.name == "local:all-MiniLM-L6-v2"
    assert fresh.offline is True
    assert isinstance(fresh, Embedder)


@needs_local
def test_local_embeds_meaningfully(local: LocalEmbedder) -> None:
    texts = [
        "The cat sat on the mat.",
        "A kitten is sitting on a rug.",
        "Quarterly revenue grew by twelve percent.",
    ]
    vectors = local.embed(texts)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar = float(vectors[0] @ vectors[1])
    unrelated = float(vectors[0] @ vectors[2])
    assert similar > unrelated + 0.3
    assert local.dimension == 384
    assert local.loaded


@needs_local
def test_local_batches_share_the_model_and_empty_input(local: LocalEmbedder) -> None:
    small_batches = LocalEmbedder(batch_size=2)
    texts = [f"note number {i} about {topic}" for i, topic in enumerate("abcde")]
    np.testing.assert_allclose(small_batches.embed(texts), local.embed(texts), atol=1e-4)
    assert small_batches.loaded and local.loaded
    empty = local.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    with pytest.raises(TypeError):
        local.embed("a bare string")  # type: ignore[arg-type]


@needs_local
def test_local_concurrent_embeds(local: LocalEmbedder) -> None:
    texts = ["alpha beta", "gamma delta", "epsilon"]
    reference = local.embed(texts)
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(lambda: LocalEmbedder().embed(texts)) for _ in range(4)]
        results = [future.result() for future in futures]  # re-raises any thread's error
    for result in results:
        np.testing.assert_allclose(result, reference, atol=1e-5)


def test_opening_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from cerememory.embed import EmbedSettings, make_embedder\n"
        "embedder, reason = make_embedder(EmbedSettings())\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- http backend


def test_endpoint_url_does_not_double_segments() -> None:
    assert (
        endpoint_url("https://api.openai.com", "openai") == "https://api.openai.com/v1/embeddings"
    )
    assert endpoint_url("https://api.openai.com/v1/", "openai") == (
        "https://api.openai.com/v1/embeddings"
    )
    assert endpoint_url("http://h/v1/embeddings", "openai") == "http://h/v1/embeddings"
    assert endpoint_url("http://127.0.0.1:11434", "ollama") == "http://127.0.0.1:11434/api/embed"
    assert endpoint_url("http://127.0.0.1:11434/api", "ollama") == (
        "http://127.0.0.1:11434/api/embed"
    )


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_http_embeds_in_batches(kind: str, stub: StubServer, make_http: Any) -> None:
    embedder = make_http(kind, batch_size=2)
    assert embedder.name == f"http:{kind}:test-model"
    assert embedder.offline is True
    assert embedder.dimension is None
    texts = ["one", "two", "three", "four", "five"]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected_rows(texts), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert embedder.dimension == STUB_DIM
    path = "/v1/embeddings" if kind == "openai" else "/api/embed"
    assert [r.path for r in stub.state.requests] == [path] * 3
    assert [r.body["input"] for r in stub.state.requests] == [
        ["one", "two"],
        ["three", "four"],
        ["five"],
    ]
    assert all(r.body["model"] == "test-model" for r in stub.state.requests)
    assert embedder.embed([]).shape == (0, STUB_DIM)
    assert len(stub.state.requests) == 3  # empty input makes no request


def test_http_sends_bearer_key_and_accepts_v1_base(stub: StubServer, make_http: Any) -> None:
    embedder = make_http(url=stub.url + "/v1/", api_key="sk-test")
    embedder.embed(["hello"])
    request = stub.state.requests[0]
    assert request.path == "/v1/embeddings"
    assert request.headers["Authorization"] == "Bearer sk-test"
    make_http().embed(["hello"])
    assert "Authorization" not in stub.state.requests[1].headers


def test_http_retries_after_503(stub: StubServer, make_http: Any) -> None:
    stub.state.script.append((503, {}, {"error": "warming up"}))
    started = time.monotonic()
    vectors = make_http().embed(["retry me"])
    assert time.monotonic() - started >= 0.15  # backed off before the second attempt
    np.testing.assert_allclose(vectors, expected_rows(["retry me"]), rtol=1e-6)
    assert len(stub.state.requests) == 2


def test_http_honours_retry_after_on_429(stub: StubServer, make_http: Any) -> None:
    stub.state.script.append((429, {"Retry-After": "1"}, {"error": {"message": "slow down"}}))
    started = time.monotonic()
    make_http("ollama").embed(["x"])
    assert time.monotonic() - started >= 0.9
    assert len(stub.state.requests) == 2


def test_http_gives_up_after_three_5xx(stub: StubServer, make_http: Any) -> None:
    stub.state.script.extend([(500, {}, {"error": {"message": "kaput"}})] * 3)
    with pytest.raises(EmbeddingUnavailable) as info:
        make_http().embed(["x"])
    assert "500" in str(info.value) and "kaput" in str(info.value)
    assert info.value.hint
    assert info.value.unreachable  # no answer to these texts: not worth asking text by text
    assert len(stub.state.requests) == 3


def test_http_400_names_status_and_server_message(stub: StubServer, make_http: Any) -> None:
    error = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens",
            "type": "invalid_request_error",
        }
    }
    stub.state.script.append((400, {}, error))
    with pytest.raises(EmbeddingUnavailable) as info:
        make_http().embed(["far too long"])
    assert "400" in str(info.value)
    assert "maximum context length" in str(info.value)
    assert not info.value.unreachable  # an answer about these texts: others may embed alone
    assert len(stub.state.requests) == 1  # client errors are not retried


def test_http_ollama_missing_model_hint(stub: StubServer, make_http: Any) -> None:
    stub.state.script.append((404, {}, {"error": 'model "nomic-embed-text" not found'}))
    with pytest.raises(EmbeddingUnavailable) as info:
        make_http("ollama", model="nomic-embed-text").embed(["x"])
    assert "404" in str(info.value) and "not found" in str(info.value)
    assert "ollama pull nomic-embed-text" in info.value.hint


def test_http_unreachable_server_retries_then_fails(make_http: Any) -> None:
    embedder = make_http(url=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(EmbeddingUnavailable) as info:
        embedder.embed(["x"])
    assert time.monotonic() - started >= 0.5  # 0.2 s + 0.4 s of backoff
    assert "3 attempts" in str(info.value)
    assert info.value.hint
    assert info.value.unreachable


@pytest.mark.parametrize(
    ("kind", "payload", "complaint"),
    [
        ("ollama", {"embeddings": [[float("nan"), 1.0], [1.0, 2.0]]}, "NaN"),
        ("ollama", {"embeddings": [[1.0, 2.0]]}, "1 embeddings for 2 texts"),
        ("ollama", {"embeddings": [[1.0, 2.0], [1.0, 2.0, 3.0]]}, "different lengths"),
        ("ollama", {"embeddings": [[1.0, "x"], [1.0, 2.0]]}, "other than numbers"),
        ("openai", {"data": [{"index": 0, "embedding": [1.0, 2.0]}]}, "1 embeddings for 2"),
        (
            "openai",
            {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]},
            "twice",
        ),
        ("openai", {"result": []}, "no 'data' list"),
        ("openai", b"<html>not json</html>", "invalid JSON"),
    ],
)
def test_http_rejects_bad_responses(
    kind: str, payload: Any, complaint: str, stub: StubServer, make_http: Any
) -> None:
    stub.state.script.append((200, {}, payload))
    with pytest.raises(EmbeddingUnavailable) as info:
        make_http(kind).embed(["a", "b"])
    assert complaint in str(info.value)


def test_http_rejects_dimension_change(stub: StubServer, make_http: Any) -> None:
    embedder = make_http("ollama")
    embedder.embed(["a"])
    stub.state.script.append((200, {}, {"embeddings": [[1.0, 2.0, 3.0]]}))
    with pytest.raises(EmbeddingUnavailable, match="dimension changed from 8 to 3"):
        embedder.embed(["b"])


def test_http_rejects_bad_url() -> None:
    with pytest.raises(EmbeddingUnavailable) as info:
        HttpEmbedder("127.0.0.1:11434", "m")
    assert "http://" in info.value.hint


# --------------------------------------------------------------------------- make_embedder


def test_make_embedder_off() -> None:
    assert make_embedder(EmbedSettings(semantic="off")) == (
        None,
        "semantic search is off (semantic = off)",
    )
    embedder, reason = make_embedder(EmbedSettings(semantic="on", backend="none"))
    assert embedder is None and reason and "off" in reason


@needs_local
def test_make_embedder_auto_local() -> None:
    embedder, reason = make_embedder(EmbedSettings())
    assert reason is None
    assert isinstance(embedder, LocalEmbedder)
    assert embedder.offline and embedder.name == "local:all-MiniLM-L6-v2"
    assert not embedder.loaded  # choosing a backend never loads the model


def test_make_embedder_local_unknown_model() -> None:
    embedder, reason = make_embedder(EmbedSettings(model="no-such-model-anywhere"))
    assert embedder is None and reason and reason.startswith("semantic search is off:")
    with pytest.raises(EmbeddingUnavailable) as info:
        make_embedder(EmbedSettings(semantic="on", model="no-such-model-anywhere"))
    assert info.value.hint


def test_make_embedder_auto_http(stub: StubServer) -> None:
    for url in (stub.url, "http://localhost:11434", "http://[::1]:11434"):
        embedder, reason = make_embedder(
            EmbedSettings(backend="http", http_url=url, http_kind="ollama", model="all-minilm")
        )
        assert reason is None and isinstance(embedder, HttpEmbedder)
        assert embedder.offline and embedder.name == "http:ollama:all-minilm"
        embedder.close()
    assert stub.state.requests == []  # choosing a backend contacts nothing

    remote = EmbedSettings(
        backend="http",
        http_url="https://api.openai.com",
        model="text-embedding-3-small",
        http_api_key="sk-secret",
    )
    embedder, reason = make_embedder(remote)
    assert embedder is None and reason and "loopback" in reason
    assert "sk-secret" not in repr(remote)

    embedder, reason = make_embedder(dataclasses.replace(remote, semantic="on"))
    assert reason is None and isinstance(embedder, HttpEmbedder)
    assert embedder.name == "http:openai:text-embedding-3-small" and not embedder.offline
    embedder.close()


def test_make_embedder_http_without_url() -> None:
    embedder, reason = make_embedder(EmbedSettings(backend="http"))
    assert embedder is None and reason and "http_url" in reason
    with pytest.raises(EmbeddingUnavailable) as info:
        make_embedder(EmbedSettings(semantic="on", backend="http"))
    assert "http_url" in str(info.value) and info.value.hint


def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        EmbedSettings(semantic="maybe")
    with pytest.raises(ValueError):
        EmbedSettings(backend="cloud")
    with pytest.raises(ValueError):
        EmbedSettings(http_kind="cohere")
    with pytest.raises(ValueError):
        EmbedSettings(batch_size=0)
