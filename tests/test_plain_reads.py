"""Reads answered in plain JSON for an embedded caller (cmp/plain.py, `Listing.list_plain`, an
empty journal's `recall.raw_query`): the
same answer as the model path, the simple request shapes recognised, everything else (an invalid
request included) left to the model path and its errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cerememory
from cerememory.cmp.errors import CMPError
from cerememory.cmp.plain import list_request, raw_request


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data_dir: Path = tmp_path_factory.mktemp("plain") / "data"
    with cerememory.open(data_dir, semantic="off") as memory:
        for n in range(7):
            memory.dispatch("encode.store", {
                "content": {"blocks": [{"modality": "text", "text": f"rule {n}: pin the build é{n}"}]},
                "store": "procedural",
                "metadata": {"cm_kind": "bullet" if n % 2 else "playbook", "n": n, "tags": ["a", {"b": [n]}],
                             "nested": {"deep": {"deeper": None}}, "flag": n == 3}})
        memory.dispatch("encode.store", {"content": {"blocks": [{"modality": "text", "text": "an episode"}]},
                                         "store": "episodic"})
        yield memory


REQUESTS: list[dict[str, Any]] = [
    {"store": "procedural"},
    {"store": "procedural", "limit": 5000},
    {"store": "procedural", "limit": 3},
    {"store": "procedural", "metadata": {"cm_kind": "bullet"}},
    {"store": "procedural", "metadata": {"flag": True}},
    {"store": "procedural", "metadata": {"n": 3}},
    {"store": "procedural", "fields": ["metadata"]},
    {"store": "procedural", "fields": []},
    {"store": "procedural", "similar_to": "pin the build"},
    {"store": "episodic", "limit": 1, "fields": ["metadata"]},
    {"store": "semantic"},
]


@pytest.mark.parametrize("request_", REQUESTS, ids=[str(r) for r in REQUESTS])
def test_the_plain_answer_is_the_model_answer(mem: Any, request_: dict[str, Any]) -> None:
    assert list_request(request_) is not None
    plain = mem.dispatcher.dispatch("recall.list", request_, plain=True)
    assert plain == mem.dispatcher.dispatch("recall.list", request_)


def test_pages_follow_one_another_the_same_way(mem: Any) -> None:
    plain, model = [], []
    for out, use_plain in ((plain, True), (model, False)):
        request: dict[str, Any] = {"store": "procedural", "limit": 2}
        while True:
            page = mem.dispatcher.dispatch("recall.list", request, plain=use_plain)
            out.extend(r["id"] for r in page["records"])
            if not page["next_cursor"]:
                break
            request["cursor"] = page["next_cursor"]
    assert plain == model and len(plain) == 7


@pytest.mark.parametrize("request_", [
    {"store": "procedural", "limit": 0},
    {"store": "procedural", "limit": 5001},
    {"store": "procedural", "limit": True},
    {"store": "procedural", "limit": "10"},
    {"store": "nowhere"},
    {"store": "procedural", "metadata": {"tags": ["a"]}},
    {"store": "procedural", "metadata": {"x": float("nan")}},
    {"store": "procedural", "unknown": 1},
    {"store": "procedural", "cursor": "not a cursor"},
])
def test_invalid_requests_get_the_model_paths_error(mem: Any, request_: dict[str, Any]) -> None:
    with pytest.raises(CMPError) as plain:
        mem.dispatch("recall.list", request_)
    with pytest.raises(CMPError) as model:
        mem.dispatcher.dispatch("recall.list", request_)
    assert (plain.value.code, plain.value.message) == (model.value.code, model.value.message)


@pytest.mark.parametrize("request_", [
    {"store": "working"},
    {"store": "procedural", "fields": ["content"]},
    {"store": "procedural", "fields": ["text", "fidelity"]},
    {"store": "procedural", "header": {"protocol": "cmp", "version": "1.0"}},
    {"store": "procedural", "similar_to": "pin ☃"},
])
def test_other_shapes_go_the_model_path(mem: Any, request_: dict[str, Any]) -> None:
    assert list_request(request_) is None
    assert mem.dispatch("recall.list", request_) == mem.dispatcher.dispatch("recall.list", request_)


RAW_REQUESTS: list[dict[str, Any]] = [
    {"query": "pin the build", "limit": 50},
    {"limit": 1, "include_private_scratch": True, "include_sealed": True,
     "secrecy_levels": ["public", "sensitive", "secret"]},
    {"session_id": "s-1", "limit": 5},
    {},
]


@pytest.mark.parametrize("request_", RAW_REQUESTS, ids=[str(r) for r in RAW_REQUESTS])
def test_an_empty_journal_answers_plainly(mem: Any, request_: dict[str, Any]) -> None:
    assert raw_request(request_) is not None
    plain = mem.dispatcher.dispatch("recall.raw_query", request_, plain=True)
    assert plain == mem.dispatcher.dispatch("recall.raw_query", request_) == {
        "records": [], "total_candidates": 0, "undecodable_ids": []}


def test_a_journal_with_records_goes_the_model_path(tmp_path: Path) -> None:
    with cerememory.open(tmp_path / "data", semantic="off") as memory:
        memory.dispatch("encode.store_raw", {"session_id": "s-1", "source": "tool_io", "speaker": "tool",
                                             "content": {"blocks": [{"modality": "text", "text": "pin the build"}]}})
        for request in RAW_REQUESTS:
            answer = memory.dispatch("recall.raw_query", request)
            assert answer == memory.dispatcher.dispatch("recall.raw_query", request)
        assert memory.dispatch("recall.raw_query", {"query": "pin the build", "limit": 5})["records"]


@pytest.mark.parametrize("request_", [
    {"limit": 0},
    {"limit": True},
    {"include_sealed": 1},
    {"secrecy_levels": ["top"]},
    {"session_id": "x" * 300},
    {"unknown": 1},
    {"temporal": {"start": "yesterday", "end": "today"}},
])
def test_invalid_raw_queries_get_the_model_paths_error(mem: Any, request_: dict[str, Any]) -> None:
    assert raw_request(request_) is None
    with pytest.raises(CMPError) as plain:
        mem.dispatch("recall.raw_query", request_)
    with pytest.raises(CMPError) as model:
        mem.dispatcher.dispatch("recall.raw_query", request_)
    assert (plain.value.code, plain.value.message) == (model.value.code, model.value.message)
