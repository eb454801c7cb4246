"""A CMP server over a stub engine, for measuring a transport's own cost: recall.query and
encode.store answer responses made once by a real engine (ten memories of a 300-record data
directory; a stored record's id), so the server's CPU per call is the transport's alone
(parsing, validation, metrics, middleware, serialisation) and none of it the engine's.

    python bench/transport_stub.py http 8080     # or: grpc 50051
    python bench/transport_stub.py bare-http 8080     # or: bare-grpc 50051

Run with a source tree first on PYTHONPATH to measure that tree's transport (bench/transports.py
--before does).

The bare servers are the stacks alone, for the floor under a transport: uvicorn with an ASGI
app of a few lines, or grpc.aio on uvloop with the options Cerememory's server has,
each sending the answer's bytes the real server sends (made once) with no parsing, validation or
conversion. `BareClient` is the client side of the same: the request's bytes sent as they are.
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


def answer_bytes(kind: str) -> dict[str, bytes]:
    """The bytes the real `kind` server sends for each canned response, keyed by what a bare
    server is asked for: the operation's HTTP path, or its gRPC method."""
    from cerememory.cmp.operations import operation
    from cerememory.transport import grpc_convert as convert

    recalled, stored = canned()
    out = {}
    for op, response in (("recall.query", recalled), ("encode.store", stored)):
        if kind == "http":
            out[operation(op).http.path] = response.__pydantic_serializer__.to_json(response)
        else:
            out[grpc_method(op)] = convert.to_proto_response(op, response).SerializeToString()
    return out


def grpc_method(op: str) -> str:
    from cerememory.cmp.operations import operation
    from cerememory.transport import grpc_convert as convert

    return f"/{convert.SERVICE_NAME}/{convert.rpc_method(operation(op)).name}"


def serve_bare_http(port: int) -> None:
    import uvicorn

    answers = answer_bytes("http")

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        body = answers.get(scope["path"], b"{}")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")


def serve_bare_grpc(port: int) -> None:
    import asyncio

    import grpc
    import uvloop

    from cerememory.transport.grpc_convert import MAX_MESSAGE_BYTES, SERVICE_NAME

    def answering(body: bytes) -> Any:
        async def rpc(_data: bytes, _context: Any) -> bytes:
            return body
        return rpc

    async def run() -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)])
        handlers = {method.rsplit("/", 1)[1]: grpc.unary_unary_rpc_method_handler(answering(body))
                    for method, body in answer_bytes("grpc").items()}  # bytes in, bytes out: no (de)serializer
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    uvloop.install()
    asyncio.run(run())


class BareClient:
    """The client side of the stack alone: each operation's request bytes, made once, sent over
    one keep-alive connection (http.client) or channel (grpcio); the answer's bytes are read and
    left unparsed. `store` and `recall` stand for the typed client's methods."""

    def __init__(self, kind: str, target: str) -> None:
        from cerememory.transport import grpc_convert as convert

        self.kind = kind
        requests = {"recall.query": RECALL, "encode.store": STORE}
        if kind == "http":
            import http.client
            import json
            from urllib.parse import urlsplit

            from cerememory.cmp.operations import operation

            self.connection = http.client.HTTPConnection(urlsplit(target).netloc)
            self.bodies = {op: (operation(op).http.path, json.dumps(request).encode())
                           for op, request in requests.items()}
        else:
            import grpc

            self.channel = grpc.insecure_channel(target)
            self.calls = {op: (self.channel.unary_unary(grpc_method(op), _registered_method=True),
                               convert.to_proto(op, request).SerializeToString())
                          for op, request in requests.items()}

    def _call(self, op: str) -> bytes:
        if self.kind == "http":
            path, body = self.bodies[op]
            self.connection.request("POST", path, body, {"content-type": "application/json"})
            answer: bytes = self.connection.getresponse().read()
            return answer
        call, request = self.calls[op]
        reply: bytes = call(request, timeout=30)
        return reply

    def store(self, *_: Any, **__: Any) -> bytes:
        return self._call("encode.store")

    def recall(self, *_: Any, **__: Any) -> bytes:
        return self._call("recall.query")

    def close(self) -> None:
        (self.connection if self.kind == "http" else self.channel).close()


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind.startswith("bare-"):
        (serve_bare_http if kind == "bare-http" else serve_bare_grpc)(port)
        return
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
