"""A client reads a server's answer as an answer (`ANSWER_CONTEXT`): content blocks take their
text as it comes, without the checks a request's content gets. What it reads is what the
request checks would have made of the same bytes, for every kind of block."""

from __future__ import annotations

import base64
import json

import numpy as np

import cerememory
from cerememory.cmp import messages as m
from cerememory.model import ANSWER_CONTEXT

BLOCKS = [
    {"text": "plain text, üñíçødé and 😀"},
    {"modality": "structured", "text": json.dumps({"deploy": {"key": "rotates", "on": ["monday"]}})},
    {"modality": "image", "format": "image/png", "data": base64.b64encode(bytes(range(256))).decode()},
    {"text": "with a vector", "embedding_f32": base64.b64encode(np.ones(4, "<f4").tobytes()).decode()},
]


def test_an_answer_reads_as_the_request_checks_read_it(mem, http_server):
    for block in BLOCKS:
        mem.dispatch("encode.store", {"content": {"blocks": [block, {"text": "harbour"}]}})
    answer = mem.dispatcher.call("recall.query", {"cue": {"text": "harbour"}, "recall_mode": "perfect",
                                                  "reconsolidate": False, "limit": 10})
    data = answer.__pydantic_serializer__.to_json(answer)  # as the server writes it
    checked = m.RecallQueryResponse.model_validate_json(data)
    assert m.RecallQueryResponse.model_validate_json(data, context=ANSWER_CONTEXT) == checked
    assert len(checked.memories) == len(BLOCKS)

    with cerememory.Client(http_server.url, retries=0) as client:  # the client reads answers so
        over_http = client.recall("harbour", mode="perfect", reconsolidate=False, limit=10)
    assert contents(over_http) == contents(checked.memories)


def contents(memories: list[m.RecalledMemory]) -> dict:
    """Each memory's content, which decay leaves as it is (a record's fidelity moves with the
    clock between two recalls)."""
    return {r.record.id: r.record.content for r in memories}
