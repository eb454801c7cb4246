"""The gRPC client: the embedded API's typed methods over CerememoryService.

```python
with GrpcClient("127.0.0.1:8421") as client:
    client.store("the staging DB moved to eu-west-1", store="semantic")
    client.recall("where is the staging database").memories
```
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any, TypeVar

import grpc
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel

from ..api import Call, MemoryAPI
from ..cmp.dispatch import operation
from ..cmp.errors import CMPError, ErrorCode
from ..v1 import cerememory_pb2 as pb
from ..v1 import cerememory_pb2_grpc as pb_grpc
from . import grpc_convert as convert
from .grpc_convert import CHUNK_BYTES, ERROR_KEY, MAX_MESSAGE_BYTES, REQUEST_ID_KEY
from .guard import refuse_plaintext_key

R = TypeVar("R", bound=BaseModel)

# statuses that arrive without a CMP envelope (transport failures) -> the closest CMP code
_TRANSPORT_CODES = {
    grpc.StatusCode.UNAUTHENTICATED: ErrorCode.UNAUTHORIZED,
    grpc.StatusCode.UNIMPLEMENTED: ErrorCode.NOT_IMPLEMENTED,
    grpc.StatusCode.UNAVAILABLE: ErrorCode.SERVER_UNREACHABLE,  # no connection (or it broke)
}


def error_from_rpc(exc: grpc.RpcError, target: str) -> CMPError:
    """The CMPError a failed call carries in `cmp-error`, or one describing the transport failure."""
    for key, value in exc.trailing_metadata() or ():
        if key == ERROR_KEY:
            try:
                return CMPError.from_envelope(json.loads(value))
            except ValueError:
                break
    status, details = exc.code(), exc.details()
    code = _TRANSPORT_CODES.get(status, ErrorCode.INTERNAL_ERROR)
    if code is ErrorCode.SERVER_UNREACHABLE:
        return CMPError(code, f"cannot reach the Cerememory server at {target}: {details}",
                        hint="start it with `cerememory serve --grpc-port`, or check the address (and TLS)",
                        details={"grpc_status": status.name, "url": target})
    return CMPError(code, f"gRPC call to {target} failed: {status.name}: {details}",
                    details={"grpc_status": status.name})


class GrpcClient(MemoryAPI):
    """A remote Cerememory over gRPC, with the same methods as the embedded `Memory`. Without
    `tls_root_cert` the channel is plaintext, so an API key for a host that is not loopback is
    refused unless `insecure=True` (as `Client` does)."""

    def __init__(self, target: str, *, api_key: str | None = None, timeout: float | None = 30,
                 tls_root_cert: bytes | None = None, insecure: bool = False) -> None:
        if tls_root_cert is None and "/" not in target:  # host:port over a plaintext channel
            refuse_plaintext_key(f"http://{target}", api_key, insecure=insecure)
        self.target = target
        self.timeout = timeout
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {api_key}"),) if api_key else ())
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_metadata_size", 64 * 1024)]
        if tls_root_cert is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(root_certificates=tls_root_cert)
            self._channel = grpc.secure_channel(target, credentials, options=options)
        self._stub = pb_grpc.CerememoryServiceStub(self._channel)
        self._methods: dict[str, tuple[MethodDescriptor, Any]] = {}  # per operation, looked up once

    # ------------------------------------------------------------ CMP

    def dispatch(self, op: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a CMP operation on JSON-like data, exactly as `Memory.dispatch` does."""
        reply = self._reply(op, request)
        return reply if isinstance(reply, dict) else convert.from_proto_response(op, reply)

    def _invoke(self, call: Call[R]) -> R:
        """The typed methods: the response model read straight from the proto answer."""
        reply = self._reply(call.op, call.request)
        if isinstance(reply, dict):  # an export, reassembled from its chunks
            return call.response.model_validate(reply)
        return convert.response_model(call.op, reply, call.response)

    def _reply(self, op: str, request: dict[str, Any] | None) -> Message | dict[str, Any]:
        """The proto answer of one call (an export's: its JSON, the archive joined from its chunks)."""
        rpc, call = self._methods.get(op) or self._method(op)
        message = convert.to_proto(op, request)
        metadata = self._call_metadata(request)
        try:
            if rpc.server_streaming:
                return self._export(message, metadata)
            if rpc.client_streaming:
                reply: Message = call(_import_chunks(message), metadata=metadata, timeout=self.timeout)
            else:
                reply = call(message, metadata=metadata, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, self.target) from None
        return reply

    def _method(self, op: str) -> tuple[MethodDescriptor, Any]:
        """The RPC of `op` and the stub's callable for it; unknown operations fail here, as they do embedded."""
        rpc = convert.rpc_method(operation(op))
        self._methods[op] = rpc, getattr(self._stub, rpc.name)
        return self._methods[op]

    def _call_metadata(self, request: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
        header = (request or {}).get("header") or {}
        request_id = header.get("request_id") if isinstance(header, dict) else getattr(header, "request_id", None)
        return self._metadata + (((REQUEST_ID_KEY, str(request_id)),) if request_id else ())

    def _export(self, message: Message, metadata: tuple[tuple[str, str], ...]) -> dict[str, Any]:
        chunks = self._stub.Export(message, metadata=metadata, timeout=self.timeout)
        first: pb.ExportResponse | None = None  # the one server-streaming RPC: the archive in chunks
        data = bytearray()
        for chunk in chunks:
            if first is None and chunk.HasField("metadata"):
                first = chunk.metadata
            data += chunk.data
        response = convert.from_proto_response("lifecycle.export", first or pb.ExportResponse())
        if data:
            response["archive_data"] = base64.b64encode(bytes(data)).decode("ascii")
        return response

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _import_chunks(request: Message) -> Iterator[pb.ImportChunk]:
    """The ImportRequest on the first chunk, its archive_data in 64 KiB pieces."""
    data = request.archive_data
    head = pb.ImportRequest()
    head.CopyFrom(request)
    head.ClearField("archive_data")
    yield pb.ImportChunk(request=head, data=data[:CHUNK_BYTES])
    for start in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
        yield pb.ImportChunk(data=data[start:start + CHUNK_BYTES])
