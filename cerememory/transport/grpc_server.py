"""The gRPC server: CerememoryService over the one CMP dispatcher, plus health and reflection.

The servicer is built from the operation table (cmp/operations.py): each operation's `rpc` is a
method. Each RPC converts its proto request to CMP JSON, runs it through the `Dispatcher` and
writes the response model straight into its proto message, so gRPC clients get exactly what the
embedded API and HTTP get. A
CMPError becomes the gRPC status of `GRPC_STATUS` with the CMP envelope as JSON in trailing
metadata `cmp-error`.

The methods take their requests as bytes and parse them in the handler: grpcio answers a
request its deserializer rejects with a bare INTERNAL, so a malformed or too deeply nested
message would get neither INVALID_ARGUMENT nor the envelope.

The server is grpc.aio's, on an event loop thread of its own, and runs each call where HTTP's
would run it (offload.Calls): a quick read on the loop's thread, the stores that arrive together
on one worker as one set. grpcio's threaded server, which it replaced, woke a worker thread for
every call and handed the call, its message and its status across threads: against it, 32
storing clients were answered 1.24-1.67 times as often, 8 recalling ones 1.02-1.29 times
(docs/operations.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc  # type: ignore[import-untyped]

from ..cmp.context import CallContext, bound, client_request_id
from ..cmp.dispatch import OPERATIONS, Dispatcher, Operation, internal_error
from ..cmp.errors import CMPError, ErrorCode
from ..cmp.handler import CMPHandler
from ..security.auth import KeyRing
from ..security.keys import ServerKeys
from ..security.ratelimit import FailedAuthLimit, RateLimit, unauthorized
from ..v1 import cerememory_pb2 as pb
from . import grpc_convert as convert
from .grpc_convert import CHUNK_BYTES, ERROR_KEY, MAX_MESSAGE_BYTES, REQUEST_ID_KEY
from .metrics import metered
from .middleware import access_log
from .offload import Calls

log = logging.getLogger(__name__)

MAX_IMPORT_BYTES = 256 * 1024 * 1024  # the largest archive Import reassembles
MAX_ENVELOPE_CHARS = 7000  # gRPC clients refuse metadata over 8 KiB by default
MAX_PROTO_DEPTH = 100  # protobuf's own parse limit on message nesting


# ---------------------------------------------------------------- errors and metadata


def _request_id(context: grpc.aio.ServicerContext) -> str | None:
    """`x-request-id` from the call's metadata, when it is fit to be logged (`client_request_id`)."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY and value:
            return client_request_id(str(value))
    return None


def _header_request_id(request: dict[str, Any]) -> str | None:
    """The request's header.request_id, for a call whose metadata gave none."""
    header = request.get("header") or {}
    given = header.get("request_id")
    return client_request_id(given) if isinstance(given, str) else None


def _envelope_json(error: CMPError) -> str:
    text = json.dumps(error.envelope(), default=str)
    if len(text) > MAX_ENVELOPE_CHARS:  # keep the code, message and hint; drop the long lists
        details = {k: v for k, v in error.details.items() if k in ("field", "hint")}
        text = json.dumps({**error.envelope(), "details": details or None}, default=str)
    return text


async def _abort(context: grpc.aio.ServicerContext, error: CMPError, request_id: str | None,
                 status: grpc.StatusCode | None = None) -> NoReturn:
    """End the call with the error's gRPC status and its envelope in trailing metadata."""
    if error.request_id is None:
        error.request_id = request_id
    trailing = [(ERROR_KEY, _envelope_json(error))]
    if request_id:
        trailing.append((REQUEST_ID_KEY, request_id))
    await context.abort(status or grpc.StatusCode[error.grpc_status], error.message, tuple(trailing))
    raise AssertionError("unreachable: abort raises")


def _as_cmp_error(exc: Exception, op: str) -> CMPError:
    if isinstance(exc, CMPError):
        return exc
    log.exception("gRPC %s failed", op)
    return internal_error(op, exc)


class _Gate:
    """What every call passes before it reaches the dispatcher: the bearer key (a KeyRing or
    ServerKeys) and the rate limit; `denied` counts the refusals."""

    def __init__(self, keys: KeyRing | ServerKeys | None = None, rate_limit: RateLimit | None = None,
                 denied: Callable[[str, str], None] | None = None,
                 auth_failures: FailedAuthLimit | None = None) -> None:
        self.keys, self.rate_limit, self.denied, self.auth_failures = keys, rate_limit, denied, auth_failures

    def auth_failure(self, peer: str | None, forwarded_for: str | None) -> CMPError:
        if self.auth_failures is None:
            return unauthorized()
        return self.auth_failures.refuse(self.auth_failures.address(peer, forwarded_for))


def _metadata(context: grpc.aio.ServicerContext, name: str) -> str | None:
    return next((str(v) for k, v in context.invocation_metadata() or () if k == name), None)


def _peer_address(peer: str | None) -> str | None:
    """`ipv4:127.0.0.1:5000` / `ipv6:[::1]:5000` -> the address; other peers as they are."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]").replace("%25", "%")
    return peer


class _Guard:
    """Per call: the request id, the bearer key check, the rate limit, the call context for the
    dispatcher, the error translation and the access log line."""

    def __init__(self, context: grpc.aio.ServicerContext, op: str, gate: _Gate) -> None:
        self.context, self.op, self.request_id = context, op, _request_id(context)
        self.started = time.perf_counter()
        self.gate = gate
        self.key_id: str | None = None
        self.address = _peer_address(context.peer())

    async def admit(self) -> None:
        """Echo the request id, then check the bearer key and the rate limit: a refusal raises
        its CMPError, counted as denied."""
        if self.request_id:
            await self.context.send_initial_metadata(((REQUEST_ID_KEY, self.request_id),))
        gate = self.gate
        try:
            if gate.keys is not None:
                self.key_id = gate.keys.identify_authorization(_metadata(self.context, "authorization"))
                if self.key_id is None:
                    raise gate.auth_failure(self.address, _metadata(self.context, "x-forwarded-for"))
            if gate.rate_limit is not None:
                self.address = gate.rate_limit.address(self.address, _metadata(self.context, "x-forwarded-for"))
                gate.rate_limit.check(self.key_id, self.address)
        except CMPError as exc:
            if gate.denied is not None:
                gate.denied("grpc", exc.code.value)
            raise

    def bound(self) -> AbstractContextManager[CallContext]:
        return bound(transport="grpc", request_id=self.request_id, key_id=self.key_id, client=self.address)

    async def fail(self, exc: Exception, status: grpc.StatusCode | None = None) -> NoReturn:
        error = _as_cmp_error(exc, self.op)
        self.log(error.code.value)
        await _abort(self.context, error, self.request_id, status)

    def log(self, status: str = "OK") -> None:
        if access_log.isEnabledFor(logging.INFO):
            access_log.info("gRPC %s %s", self.op, status, extra={
                "transport": "grpc", "request_id": self.request_id, "op": self.op, "status": status,
                "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
                "key_id": self.key_id, "client": self.address})


# ---------------------------------------------------------------- the service


def _parse_request(message: type[Message], data: bytes, op: str) -> Message:
    """`data` as a `message`; bytes protobuf cannot parse are the client's VALIDATION_ERROR."""
    try:
        return message.FromString(data)
    except (DecodeError, RecursionError) as exc:
        name = message.DESCRIPTOR.full_name
        if isinstance(exc, RecursionError) or "MaxDepth" in str(exc):
            reason = f"it nests deeper than protobuf parses ({MAX_PROTO_DEPTH} levels)"
            hint = "flatten the free-form JSON fields (metadata, spatial, ...)"
        else:
            reason = "the wire format is corrupt"
            hint = f"send a serialized {name}, as the generated stubs do"
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"{op}: the request is not a valid {name}: {reason}",
                       hint=hint, details={"message_type": name}) from None


Handler = Callable[[Any, grpc.aio.ServicerContext], Any]


def _unary(calls: Calls, op: Operation, gate: _Gate) -> Handler:
    message = convert.request_class(op.name)

    async def rpc(data: bytes, context: grpc.aio.ServicerContext) -> Message:
        guard = _Guard(context, op.name, gate)
        try:
            await guard.admit()
            request = convert.from_proto_request(op.name, _parse_request(message, data, op.name))
            if guard.request_id is None:
                guard.request_id = _header_request_id(request)
            with guard.bound():
                response = convert.to_proto_response(op.name, await calls.run(op, request))
            guard.log()
            return response
        except Exception as exc:  # every failure leaves as a CMP envelope
            await guard.fail(exc)

    return rpc


def _export(calls: Calls, op: Operation, gate: _Gate) -> Handler:

    async def rpc(data: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ExportChunk]:
        guard = _Guard(context, op.name, gate)
        try:
            await guard.admit()
            request = convert.from_proto_request(op.name, _parse_request(convert.request_class(op.name), data, op.name))
            with guard.bound():
                archive = convert.to_proto_response(op.name, await calls.run(op, request))
            guard.log()
        except Exception as exc:
            await guard.fail(exc)
        data = archive.archive_data if archive.HasField("archive_data") else b""
        archive.ClearField("archive_data")
        pieces = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        for n, piece in enumerate(pieces):
            yield pb.ExportChunk(data=piece, is_last=n == len(pieces) - 1, metadata=archive if n == 0 else None)

    return rpc


def _import(calls: Calls, op: Operation, gate: _Gate) -> Handler:

    async def rpc(chunks: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Message:
        guard = _Guard(context, op.name, gate)
        try:
            await guard.admit()
            request, archive = await _reassemble(chunks)
            data = convert.from_proto_request(op.name, request)
            if archive:
                data["archive_data"] = archive  # raw bytes: the models accept them as they are
            with guard.bound():
                response = convert.to_proto_response(op.name, await calls.run(op, data))
            guard.log()
            return response
        except _TooLarge as exc:
            await guard.fail(exc.error, grpc.StatusCode.RESOURCE_EXHAUSTED)
        except Exception as exc:
            await guard.fail(exc)

    return rpc


class _TooLarge(Exception):
    def __init__(self, error: CMPError) -> None:
        super().__init__(error.message)
        self.error = error


async def _reassemble(chunks: AsyncIterator[bytes]) -> tuple[pb.ImportRequest, bytes]:
    """The ImportRequest of the first chunk and the archive of all chunks, within the cap.

    A client that goes away mid-stream may end it as if it were whole (grpc.aio reads the end
    of a cancelled stream as its end): the archive is then cut short, and the import refuses
    it, as it lacks its footer."""
    request: pb.ImportRequest | None = None
    archive = bytearray()
    async for data in chunks:
        chunk = _parse_request(pb.ImportChunk, data, "lifecycle.import")
        if chunk.HasField("request"):
            if request is not None:
                raise CMPError(ErrorCode.VALIDATION_ERROR, "lifecycle.import: request: sent twice",
                               hint="send the ImportRequest on the first chunk only")
            request = chunk.request
            archive += request.archive_data
        archive += chunk.data
        if len(archive) > MAX_IMPORT_BYTES:
            raise _TooLarge(CMPError(
                ErrorCode.CONTENT_TOO_LARGE,
                f"lifecycle.import: archive_data exceeds {MAX_IMPORT_BYTES} bytes",
                hint="import the stores in several smaller archives",
                details={"field": "archive_data", "limit": MAX_IMPORT_BYTES}))
    request = request or pb.ImportRequest()
    request.ClearField("archive_data")
    return request, bytes(archive)


def _method_handlers(calls: Calls, gate: _Gate) -> dict[str, grpc.RpcMethodHandler]:
    """CerememoryService's methods, each running its CMP operation (the `rpc` the operation
    table declares) where `calls` puts it. The proto says which stream: the archive of Export
    leaves in chunks, the archive of Import arrives in chunks."""
    methods: dict[str, grpc.RpcMethodHandler] = {}
    for op in OPERATIONS.values():
        rpc = convert.rpc_method(op)
        if rpc.server_streaming:
            methods[rpc.name] = grpc.unary_stream_rpc_method_handler(
                _export(calls, op, gate), response_serializer=pb.ExportChunk.SerializeToString)
        elif rpc.client_streaming:
            methods[rpc.name] = grpc.stream_unary_rpc_method_handler(
                _import(calls, op, gate),
                response_serializer=convert.response_class(op.name).SerializeToString)
        else:
            methods[rpc.name] = grpc.unary_unary_rpc_method_handler(
                _unary(calls, op, gate),
                response_serializer=convert.response_class(op.name).SerializeToString)
    declared = {method.name for method in convert.SERVICE.methods}
    if set(methods) != declared:
        raise RuntimeError(f"CerememoryService and the CMP operations differ: {sorted(declared ^ set(methods))}")
    return methods


# ---------------------------------------------------------------- the server


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class GrpcServer:
    """A grpc.aio server on an event loop thread of its own, started and stopped from any thread
    as grpcio's threaded server is: the serving process runs HTTP's loop on its main thread."""

    def __init__(self, server: grpc.aio.Server, loop: asyncio.AbstractEventLoop, closed: threading.Event) -> None:
        self._server, self._loop, self._closed = server, loop, closed
        self._stopping = False

    def start(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.start(), self._loop).result()

    def stop(self, grace: float | None) -> threading.Event:
        """Refuse new calls, give those under way `grace` seconds (None: cancel them now), then
        end the loop: the event is set once it has."""
        if not self._stopping:
            self._stopping = True
            asyncio.run_coroutine_threadsafe(self._stop(grace), self._loop)
        return self._closed

    async def _stop(self, grace: float | None) -> None:
        try:
            await self._server.stop(grace)
        finally:
            asyncio.get_running_loop().stop()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # as uvicorn picks it: a faster loop where it is installed
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run_loop(loop: asyncio.AbstractEventLoop, closed: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()
        closed.set()


class _GenericOnly:
    """The server as the generated `add_*_to_server` functions see it: they add their methods
    both as a generic handler and as registered methods, and here only the generic handler is
    kept. grpc.aio keeps a pending future per registered method and waits on all of them anew
    for every call that arrives: with every method registered, that was about 34 futures of
    Python work on the loop per call."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        """Not registered: the generic handler serves them."""


async def _bind(methods: dict[str, grpc.RpcMethodHandler], address: str,
                tls: tuple[bytes, bytes] | None) -> tuple[grpc.aio.Server, int]:
    """On the server's loop: the server with CerememoryService, health and reflection, bound."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                      ("grpc.so_reuseport", 0)])  # a second server on the same port must fail
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(convert.SERVICE_NAME, methods),))

    health_servicer = health.aio.HealthServicer()
    for service in ("", convert.SERVICE_NAME):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, _GenericOnly(server))
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(reflection.aio.ReflectionServicer(
        (convert.SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME)), _GenericOnly(server))

    if tls is None:
        bound_port = server.add_insecure_port(address)
    else:
        cert_chain, private_key = tls
        bound_port = server.add_secure_port(address, grpc.ssl_server_credentials([(private_key, cert_chain)]))
    if not bound_port:
        raise OSError(f"cannot bind the gRPC server to {address}")
    return server, bound_port


def build_grpc_server(target: Dispatcher | CMPHandler, *, host: str = "127.0.0.1", port: int = 0,
                      tls: tuple[bytes, bytes] | None = None,
                      keys: KeyRing | ServerKeys | None = None,
                      rate_limit: RateLimit | None = None,
                      auth_failures: FailedAuthLimit | None = None) -> tuple[GrpcServer, int]:
    """A ready (not yet started) server running CMP through `target` (the serving process's
    Dispatcher; an engine gets a Dispatcher of its own), and the port it bound.

    `tls` is (certificate chain PEM, private key PEM); without it the port is plaintext.
    With `keys`, CerememoryService calls need `authorization: Bearer <key>` (health and
    reflection stay open for probes).
    """
    dispatcher, metrics = metered(target)
    methods = _method_handlers(Calls(dispatcher), _Gate(keys, rate_limit, metrics.denied, auth_failures))
    loop, closed = _new_loop(), threading.Event()
    threading.Thread(target=_run_loop, args=(loop, closed), name="cerememory-grpc", daemon=True).start()
    try:
        server, bound_port = asyncio.run_coroutine_threadsafe(_bind(methods, _address(host, port), tls), loop).result()
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        closed.wait()
        raise
    return GrpcServer(server, loop, closed), bound_port
