"""Caller vectors in the compact form, `embedding_f32` (little-endian float32; base64 in JSON,
bytes in gRPC and in process, a numpy row in process): the same stored vectors as the list of
floats through every real interface, and hostile input refused with a CMP error, nothing stored."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

import cerememory
from cerememory import CMPError
from cerememory.api import Calls
from cerememory.transport.grpc_client import GrpcClient
from cerememory.transport.grpc_server import build_grpc_server
from cerememory.transport.http import create_app
from cerememory.v1 import cerememory_pb2 as pb
from cerememory.v1 import cerememory_pb2_grpc as pb_grpc

from .conftest import ServerThread

DIM = 24
ROWS = np.random.default_rng(16).standard_normal((40, DIM)).astype(np.float32)
QUERIES = [ROWS[i] + np.float32(0.05) for i in (0, 13, 39)]


def b64(vector: Any) -> str:
    return base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode("ascii")


def records(form: str) -> list[dict[str, Any]]:
    """The same forty records, each vector given in `form`."""
    out = []
    for i, row in enumerate(ROWS):
        vector: dict[str, Any] = {
            "floats": {"embedding": row.tolist()}, "array": {"embedding_f32": row},
            "float64 array": {"embedding_f32": row.astype(np.float64)},
            "bytes": {"embedding_f32": row.astype("<f4").tobytes()}, "base64": {"embedding_f32": b64(row)},
        }[form]
        out.append({"content": {"blocks": [{"text": f"note {i}", **vector}]}})
    return out


def hits(api: Any) -> list[list[tuple[str, float]]]:
    """What recall by each query vector answers: the texts and their cosines, best first (the
    cosine alone: the fused score moves with each record's age)."""
    out = []
    for query in QUERIES:
        answer = api.recall(embedding=query.tolist(), limit=5, reconsolidate=False)
        out.append([(hit.record.content.blocks[0].text, hit.score_breakdown.vector) for hit in answer.memories])
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[list[tuple[str, float]]]:
    """Recall over the records stored with lists of floats, embedded."""
    with cerememory.open(tmp_path_factory.mktemp("floats") / "d", semantic="off") as mem:
        mem.store_batch(records("floats"))
        found = hits(mem)
    assert [row[0][0] for row in found] == ["note 0", "note 13", "note 39"]
    assert all(cosine is not None for row in found for _, cosine in row)
    return found


HOSTILE: list[tuple[str, Any, str]] = [
    ("not base64", "not base64!", "not valid base64"),
    ("a length not a multiple of 4", base64.b64encode(b"\x00" * 7).decode(), "not a whole number of float32"),
    ("no bytes", "", "not a whole number of float32"),
    ("NaN", b64([1.0, math.nan, 0.0]), "finite numbers"),
    ("infinity", b64([1.0, math.inf]), "finite numbers"),
    ("a number", 12, "base64 text"),
]


def refused(error: dict[str, Any], field: str, says: str) -> None:
    assert error["code"] == "VALIDATION_ERROR", error
    assert error["details"]["field"] == field
    assert says in error["message"]
    assert "float32" in error["details"]["hint"]


# ---------------------------------------------------------------- in process


@pytest.mark.parametrize("form", ["array", "float64 array", "bytes", "base64"])
def test_embedded_forms_store_the_vectors_floats_store(form: str, mem: cerememory.Memory,
                                                       reference: list[list[tuple[str, float]]]) -> None:
    mem.store_batch(records(form))
    assert hits(mem) == reference


def test_store_sends_a_numpy_embedding_in_the_compact_form(mem: cerememory.Memory) -> None:
    assert Calls.store("x", embedding=ROWS[0]).request["content"]["blocks"][0].keys() \
        == {"modality", "text", "embedding_f32"}
    kept = mem.store("the row", embedding=ROWS[7]).record_id
    assert mem.recall(embedding=ROWS[7].tolist(), limit=1).memories[0].record.id == kept


def test_the_vector_is_not_kept_in_the_record(mem: cerememory.Memory) -> None:
    kept = mem.store_batch(records("bytes")[:1]).results[0].record_id
    block = mem.inspect(kept).content.blocks[0]
    assert block.embedding is None and block.embedding_f32 is None


@pytest.mark.parametrize("vector", [np.zeros((2, DIM), np.float32), np.array(["a", "b"])], ids=["2-D", "text"])
def test_an_array_that_is_no_vector_is_refused(vector: np.ndarray, mem: cerememory.Memory) -> None:
    with pytest.raises(CMPError) as err:
        mem.store_batch([{"content": {"blocks": [{"text": "x", "embedding_f32": vector}]}}])
    refused(err.value.envelope(), "records[0].content.blocks[0].embedding_f32", "1-D and real")


def test_a_float64_beyond_float32_is_refused_not_stored_as_infinity(mem: cerememory.Memory) -> None:
    with pytest.raises(CMPError) as err:
        mem.store("x", embedding=np.array([1e300, 1.0]))
    refused(err.value.envelope(), "content.blocks[0].embedding_f32", "finite numbers")
    assert mem.stats().total_records == 0


# ---------------------------------------------------------------- HTTP


def post(server: ServerThread, path: str, body: bytes) -> httpx.Response:
    return httpx.post(server.url + path, content=body, headers={"content-type": "application/json"}, timeout=30)


def test_http_base64_stores_the_vectors_floats_store(http_server: ServerThread, mem: cerememory.Memory,
                                                     reference: list[list[tuple[str, float]]]) -> None:
    answer = post(http_server, "/v1/encode/batch", json.dumps({"records": records("base64")}).encode())
    assert answer.status_code == 200, answer.text
    assert hits(mem) == reference


def test_the_python_client_sends_numpy_rows_as_base64(client: cerememory.Client, mem: cerememory.Memory,
                                                      reference: list[list[tuple[str, float]]]) -> None:
    client.store_batch(records("array"))
    assert hits(client) == reference


@pytest.mark.parametrize("name,value,says", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_http_hostile_vectors_are_refused_and_nothing_is_stored(name: str, value: Any, says: str,
                                                                 http_server: ServerThread,
                                                                 mem: cerememory.Memory) -> None:
    good = records("base64")[:3]
    bad = {"content": {"blocks": [{"text": "bad", "embedding_f32": value}]}}
    answer = post(http_server, "/v1/encode/batch", json.dumps({"records": [*good, bad]}).encode())
    assert answer.status_code == 400, answer.text
    refused(answer.json(), "records[3].content.blocks[0].embedding_f32", says)
    assert mem.stats().total_records == 0


def test_http_both_forms_in_one_block_are_refused(http_server: ServerThread, mem: cerememory.Memory) -> None:
    body = {"content": {"blocks": [{"text": "x", "embedding": [1.0, 0.0], "embedding_f32": b64([1.0, 0.0])}]}}
    answer = post(http_server, "/v1/encode", json.dumps(body).encode())
    assert answer.status_code == 400
    assert answer.json()["message"].endswith("give either embedding or embedding_f32, not both")
    assert mem.stats().total_records == 0


def test_http_a_vector_beyond_the_body_limit_is_refused(mem: cerememory.Memory) -> None:
    server = ServerThread(app=create_app(mem.engine, body_limit=1024 * 1024))
    try:
        huge = {"content": {"blocks": [{"text": "x", "embedding_f32": b64(np.ones(300_000))}]}}
        answer = post(server, "/v1/encode", json.dumps(huge).encode())
    finally:
        server.stop()
    assert answer.status_code == 413 and answer.json()["code"] == "CONTENT_TOO_LARGE"
    assert mem.stats().total_records == 0


# ---------------------------------------------------------------- gRPC


@pytest.fixture
def grpc_target(mem: cerememory.Memory) -> Iterator[str]:
    server, port = build_grpc_server(mem.engine)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait(10)


def test_grpc_bytes_store_the_vectors_floats_store(grpc_target: str, mem: cerememory.Memory,
                                                   reference: list[list[tuple[str, float]]]) -> None:
    with GrpcClient(grpc_target, timeout=30) as client:
        client.store_batch(records("array"))
        assert hits(client) == reference


@pytest.mark.parametrize("name,value,says", [h for h in HOSTILE if isinstance(h[1], str) and h[0] != "not base64"],
                         ids=[h[0] for h in HOSTILE if isinstance(h[1], str) and h[0] != "not base64"])
def test_grpc_hostile_vectors_are_refused_and_nothing_is_stored(name: str, value: str, says: str, grpc_target: str,
                                                                mem: cerememory.Memory) -> None:
    good = [pb.EncodeStoreRequest(content=pb.MemoryContent(blocks=[pb.ContentBlock(
        text=f"note {i}", embedding_f32=ROWS[i].astype("<f4").tobytes())])) for i in range(3)]
    bad = pb.EncodeStoreRequest(content=pb.MemoryContent(blocks=[pb.ContentBlock(
        text="bad", embedding_f32=base64.b64decode(value))]))
    with grpc.insecure_channel(grpc_target) as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.CerememoryServiceStub(channel).EncodeBatch(pb.EncodeBatchRequest(records=[*good, bad]), timeout=30)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    envelope = json.loads(dict(err.value.trailing_metadata())["cmp-error"])
    refused(envelope, "records[3].content.blocks[0].embedding_f32", says)
    assert mem.stats().total_records == 0


# ---------------------------------------------------------------- a batch's vectors as one matrix


def texts() -> list[dict[str, Any]]:
    """The same forty records, without vectors (they travel as `embeddings_f32`)."""
    return [{"content": {"blocks": [{"text": f"note {i}"}]}} for i in range(len(ROWS))]


MATRIX_FORMS = {"array": ROWS, "float64 array": ROWS.astype(np.float64), "bytes": ROWS.astype("<f4").tobytes(),
                "base64": b64(ROWS)}


def batch(rows: Any, n: int = len(ROWS), dim: int | None = DIM) -> dict[str, Any]:
    """An encode.batch request of the first `n` records of `texts()` with `rows` as their matrix."""
    return {"records": texts()[:n], "embeddings_f32": rows, **({"embedding_dim": dim} if dim else {})}


def hostile_matrices() -> list[tuple[str, Any, str]]:
    """Matrices `embeddings_f32` refuses for `texts()[:3]`, and what the refusal says."""
    nan = ROWS[:3].copy()
    nan[1, 5] = math.nan
    return [("a row short", b64(ROWS[:2]), "not 3 rows (one per record) of 24 float32 values"),
            ("a NaN", b64(nan), "finite numbers"),
            ("not base64", "not base64!", "not valid base64"),
            ("no bytes", "", "not a whole number of float32"),
            ("a 1-D array", ROWS[0], "2-D and real")]


@pytest.mark.parametrize("form", MATRIX_FORMS)
def test_embedded_a_matrix_stores_the_vectors_floats_store(form: str, mem: cerememory.Memory,
                                                           reference: list[list[tuple[str, float]]]) -> None:
    mem.dispatch("encode.batch", batch(MATRIX_FORMS[form], dim=None if "array" in form else DIM))
    assert hits(mem) == reference


@pytest.mark.parametrize("name,value,says", hostile_matrices(), ids=[h[0] for h in hostile_matrices()])
def test_embedded_hostile_matrices_are_refused_and_nothing_is_stored(name: str, value: Any, says: str,
                                                                     mem: cerememory.Memory) -> None:
    with pytest.raises(CMPError) as err:
        mem.dispatch("encode.batch", batch(value, 3))
    refused(err.value.envelope(), "embeddings_f32", says)
    assert mem.stats().total_records == 0


@pytest.mark.parametrize("rows", [ROWS[0], ROWS[:2]], ids=["1-D", "a row short"])
def test_store_batch_refuses_an_array_that_is_not_the_records_rows(rows: np.ndarray, mem: cerememory.Memory) -> None:
    with pytest.raises(CMPError) as err:
        mem.store_batch(texts()[:3], embeddings=rows)
    assert err.value.envelope()["details"]["field"] == "embeddings_f32"
    assert mem.stats().total_records == 0


def test_bytes_without_their_row_length_are_refused(mem: cerememory.Memory) -> None:
    with pytest.raises(CMPError) as err:
        mem.dispatch("encode.batch", batch(b64(ROWS[:3]), 3, dim=None))
    refused(err.value.envelope(), "embeddings_f32", "needs embedding_dim")
    assert mem.stats().total_records == 0


def test_a_record_with_a_vector_of_its_own_beside_a_matrix_is_refused(mem: cerememory.Memory) -> None:
    mixed = [*texts()[:2], records("array")[2]]
    with pytest.raises(CMPError) as err:
        mem.store_batch(mixed, embeddings=ROWS[:3])
    refused(err.value.envelope(), "embeddings_f32", "records[2] carries a vector of its own")
    assert mem.stats().total_records == 0


def test_http_a_base64_matrix_stores_the_vectors_floats_store(http_server: ServerThread, mem: cerememory.Memory,
                                                              reference: list[list[tuple[str, float]]]) -> None:
    answer = post(http_server, "/v1/encode/batch", json.dumps(batch(b64(ROWS))).encode())
    assert answer.status_code == 200, answer.text
    assert hits(mem) == reference


def test_the_python_client_sends_a_matrix_as_base64(client: cerememory.Client, mem: cerememory.Memory,
                                                    reference: list[list[tuple[str, float]]]) -> None:
    client.store_batch(texts(), embeddings=ROWS)
    assert hits(client) == reference


@pytest.mark.parametrize("name,value,says", hostile_matrices()[:4], ids=[h[0] for h in hostile_matrices()[:4]])
def test_http_hostile_matrices_are_refused_and_nothing_is_stored(name: str, value: str, says: str,
                                                                 http_server: ServerThread,
                                                                 mem: cerememory.Memory) -> None:
    answer = post(http_server, "/v1/encode/batch", json.dumps(batch(value, 3)).encode())
    assert answer.status_code == 400, answer.text
    refused(answer.json(), "embeddings_f32", says)
    assert mem.stats().total_records == 0


def test_grpc_a_matrix_stores_the_vectors_floats_store(grpc_target: str, mem: cerememory.Memory,
                                                       reference: list[list[tuple[str, float]]]) -> None:
    with GrpcClient(grpc_target, timeout=30) as client:
        client.store_batch(texts(), embeddings=ROWS)
        assert hits(client) == reference


@pytest.mark.parametrize("name,value,says", hostile_matrices()[:2], ids=[h[0] for h in hostile_matrices()[:2]])
def test_grpc_hostile_matrices_are_refused_and_nothing_is_stored(name: str, value: str, says: str, grpc_target: str,
                                                                 mem: cerememory.Memory) -> None:
    plain = [pb.EncodeStoreRequest(content=pb.MemoryContent(blocks=[pb.ContentBlock(text=f"note {i}")]))
             for i in range(3)]
    request = pb.EncodeBatchRequest(records=plain, embeddings_f32=base64.b64decode(value), embedding_dim=DIM)
    with grpc.insecure_channel(grpc_target) as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.CerememoryServiceStub(channel).EncodeBatch(request, timeout=30)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    refused(json.loads(dict(err.value.trailing_metadata())["cmp-error"]), "embeddings_f32", says)
    assert mem.stats().total_records == 0


# ---------------------------------------------------------------- the docs


def test_the_docs_example_runs_against_a_server(http_server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "cmp.md").read_text()
    section = text[text.index("### Vectors in compact form"):]
    start = section.index("```python\n") + len("```python\n")
    code = section[start:section.index("\n```", start)].replace('"http://127.0.0.1:8420"', repr(http_server.url))
    exec(compile(code, "docs/cmp.md", "exec"), {})
    assert capsys.readouterr().out == "note 7\n"
