"""A CMP server over a stub engine, for measuring a transport's own cost: recall.query and
encode.store answer responses made once by a real engine (ten memories of a 300-record data
directory; a stored record's id), so the server's CPU per call is the transport's alone
(parsing, validation, metrics, middleware, serialisation) and none of it the engine's.

    python bench/transport_stub.py http 8080     # or: grpc 50051

Run with a source tree first on PYTHONPATH to measure that tree's transport (bench/transports.py
--before does).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = "deploy key rotate monday budget review meeting river mountain lunch pasta team roadmap".split()
RECALL = {"cue": {"text": "deploy key monday"}, "reconsolidate": False}
STORE = {"content": {"blocks": [{"text": "a stub answers this"}]}}


def canned() -> tuple[Any, Any]:
    """A real recall.query response (ten memories) and encode.store response."""
    import cerememory

    with tempfile.TemporaryDirectory() as tmp, cerememory.open(Path(tmp) / "d", semantic="off") as mem:
        rng = random.Random(1)
        mem.store_batch([{"content": {"blocks": [{"text": " ".join(rng.choices(WORDS, k=12))}]}}
                         for _ in range(300)])
        return mem.dispatcher.call("recall.query", RECALL), mem.dispatcher.call("encode.store", STORE)


class Stub:
    """What the dispatcher and the transports need of an engine, answering two operations."""

    audit = None
    data_dir = Path(tempfile.gettempdir())
    background_decay = background_dream = False
    leads = True

    def __init__(self) -> None:
        self.recalled, self.stored = canned()

    def recall_query(self, req: Any) -> Any:
        return self.recalled

    def encode_store(self, req: Any) -> Any:
        return self.stored

    def close(self) -> None:
        pass


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    stub = Stub()
    if kind == "http":
        import uvicorn

        from cerememory.transport.http import create_app

        uvicorn.run(create_app(stub), host="127.0.0.1", port=port, log_level="error", lifespan="off")
    else:
        from cerememory.transport.grpc_server import build_grpc_server

        server, _ = build_grpc_server(stub, port=port)
        server.start()
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
