"""CMP errors: the one exception type, its codes, and their HTTP and gRPC statuses.

Every failure that reaches a client is a `CMPError` carrying the envelope
`{code, message, details, retry_after, request_id}`. The tables below are the single
source for the status mappings that the HTTP and gRPC transports use. Every code is raised
somewhere it applies (tests/test_operations.py checks it), and a client that meets a code it does
not know (from a newer or older server) reads it as INTERNAL_ERROR.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError as PydanticValidationError


class ErrorCode(StrEnum):
    RECORD_NOT_FOUND = "RECORD_NOT_FOUND"
    STORE_INVALID = "STORE_INVALID"
    CONTENT_TOO_LARGE = "CONTENT_TOO_LARGE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    MODALITY_UNSUPPORTED = "MODALITY_UNSUPPORTED"
    WORKING_MEMORY_FULL = "WORKING_MEMORY_FULL"
    CONSOLIDATION_IN_PROGRESS = "CONSOLIDATION_IN_PROGRESS"
    EXPORT_FAILED = "EXPORT_FAILED"
    IMPORT_CONFLICT = "IMPORT_CONFLICT"
    FORGET_UNCONFIRMED = "FORGET_UNCONFIRMED"
    VERSION_MISMATCH = "VERSION_MISMATCH"
    UNAUTHORIZED = "UNAUTHORIZED"
    RATE_LIMITED = "RATE_LIMITED"
    HOST_NOT_ALLOWED = "HOST_NOT_ALLOWED"
    ORIGIN_NOT_ALLOWED = "ORIGIN_NOT_ALLOWED"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND"
    DATA_DIR_LOCKED = "DATA_DIR_LOCKED"
    AUDIT_BROKEN = "AUDIT_BROKEN"
    STORAGE_FULL = "STORAGE_FULL"
    NOT_IMPLEMENTED = "NOT_IMPLEMENTED"
    SERVER_UNREACHABLE = "SERVER_UNREACHABLE"
    INTERNAL_ERROR = "INTERNAL_ERROR"


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.RECORD_NOT_FOUND: 404,
    ErrorCode.STORE_INVALID: 400,
    ErrorCode.CONTENT_TOO_LARGE: 413,
    ErrorCode.VALIDATION_ERROR: 400,
    ErrorCode.MODALITY_UNSUPPORTED: 400,
    ErrorCode.WORKING_MEMORY_FULL: 503,
    ErrorCode.CONSOLIDATION_IN_PROGRESS: 503,
    ErrorCode.EXPORT_FAILED: 500,
    ErrorCode.IMPORT_CONFLICT: 409,
    ErrorCode.FORGET_UNCONFIRMED: 400,
    ErrorCode.VERSION_MISMATCH: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.HOST_NOT_ALLOWED: 421,
    ErrorCode.ORIGIN_NOT_ALLOWED: 403,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.ROUTE_NOT_FOUND: 404,
    ErrorCode.DATA_DIR_LOCKED: 409,
    ErrorCode.AUDIT_BROKEN: 500,
    ErrorCode.STORAGE_FULL: 507,
    ErrorCode.NOT_IMPLEMENTED: 501,
    ErrorCode.SERVER_UNREACHABLE: 503,
    ErrorCode.INTERNAL_ERROR: 500,
}

WHEN: dict[ErrorCode, str] = {
    ErrorCode.RECORD_NOT_FOUND: "a record id names nothing stored (inspect, update, associate, forget, associations)",
    ErrorCode.STORE_INVALID: "a store name is not one of the five stores",
    ErrorCode.CONTENT_TOO_LARGE: "a block exceeds its modality limit (1 MiB text, 10 MiB image, 50 MiB audio or video)",
    ErrorCode.VALIDATION_ERROR: "a request is malformed: the message names the field",
    ErrorCode.MODALITY_UNSUPPORTED: "a recall cue uses a modality no configured backend can search (image, audio)",
    ErrorCode.WORKING_MEMORY_FULL: "one request puts more records into working memory than it holds",
    ErrorCode.CONSOLIDATION_IN_PROGRESS: "another consolidation is running (retry_after is set)",
    ErrorCode.EXPORT_FAILED: "an archive could not be written",
    ErrorCode.IMPORT_CONFLICT: "an archive is damaged, of an unknown version, or conflicts with stored records",
    ErrorCode.FORGET_UNCONFIRMED: "lifecycle.forget was sent without confirm: true",
    ErrorCode.VERSION_MISMATCH: "the request header names a CMP major version this server does not speak",
    ErrorCode.UNAUTHORIZED: "a bearer key is missing or wrong",
    ErrorCode.RATE_LIMITED: "a client exceeded its request rate (retry_after is set)",
    ErrorCode.HOST_NOT_ALLOWED: "an HTTP request names a host this server does not answer to (DNS rebinding)",
    ErrorCode.ORIGIN_NOT_ALLOWED: "a browser sent a request from a web origin that is not allowed (cross-site)",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "an HTTP request body is not declared `Content-Type: application/json`",
    ErrorCode.METHOD_NOT_ALLOWED: "an HTTP route does not take this method (`Allow` lists the ones it takes)",
    ErrorCode.ROUTE_NOT_FOUND: "an HTTP path names no route (`/docs` lists them)",
    ErrorCode.DATA_DIR_LOCKED: "another process owns the data directory; the details name its pid and URL",
    ErrorCode.AUDIT_BROKEN: "the audit log's hash chain is broken (start-up refuses; details name the first bad line)",
    ErrorCode.STORAGE_FULL: "the disk of the data directory is full or over quota; reads go on, and writes work "
                            "again once space is freed, without a restart",
    ErrorCode.NOT_IMPLEMENTED: "the operation exists in CMP but this server does not offer it yet",
    ErrorCode.SERVER_UNREACHABLE: "a client (`Client`, `GrpcClient`, `LightClient`, `--server-url`, the "
                                  "`cerememory mcp` proxy) cannot connect to the server or lost the connection; "
                                  "raised by the client, never sent by a server",
    ErrorCode.INTERNAL_ERROR: "a bug or an I/O failure; the server log has the details",
}

# gRPC status names (grpc.StatusCode members); kept as strings so this module needs no grpc.
GRPC_STATUS: dict[ErrorCode, str] = {
    ErrorCode.RECORD_NOT_FOUND: "NOT_FOUND",
    ErrorCode.STORE_INVALID: "INVALID_ARGUMENT",
    ErrorCode.CONTENT_TOO_LARGE: "INVALID_ARGUMENT",
    ErrorCode.VALIDATION_ERROR: "INVALID_ARGUMENT",
    ErrorCode.MODALITY_UNSUPPORTED: "INVALID_ARGUMENT",
    ErrorCode.WORKING_MEMORY_FULL: "RESOURCE_EXHAUSTED",
    ErrorCode.CONSOLIDATION_IN_PROGRESS: "UNAVAILABLE",
    ErrorCode.EXPORT_FAILED: "INTERNAL",
    ErrorCode.IMPORT_CONFLICT: "ALREADY_EXISTS",
    ErrorCode.FORGET_UNCONFIRMED: "FAILED_PRECONDITION",
    ErrorCode.VERSION_MISMATCH: "FAILED_PRECONDITION",
    ErrorCode.UNAUTHORIZED: "UNAUTHENTICATED",
    ErrorCode.RATE_LIMITED: "RESOURCE_EXHAUSTED",
    ErrorCode.HOST_NOT_ALLOWED: "PERMISSION_DENIED",
    ErrorCode.ORIGIN_NOT_ALLOWED: "PERMISSION_DENIED",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "INVALID_ARGUMENT",
    ErrorCode.METHOD_NOT_ALLOWED: "UNIMPLEMENTED",
    ErrorCode.ROUTE_NOT_FOUND: "UNIMPLEMENTED",
    ErrorCode.DATA_DIR_LOCKED: "FAILED_PRECONDITION",
    ErrorCode.AUDIT_BROKEN: "DATA_LOSS",
    ErrorCode.STORAGE_FULL: "RESOURCE_EXHAUSTED",
    ErrorCode.NOT_IMPLEMENTED: "UNIMPLEMENTED",
    ErrorCode.SERVER_UNREACHABLE: "UNAVAILABLE",
    ErrorCode.INTERNAL_ERROR: "INTERNAL",
}


class CMPError(Exception):
    """The one error type of the protocol; raised by the engine, rendered by every transport.

    `hint` says what to do about it and travels in `details.hint`. Constructed with a code that
    has a class of its own below (`RecordNotFoundError`, ...), it is an instance of that class, so
    `except cerememory.RecordNotFoundError` works as with the reference SDK; such a class may also
    be raised with the message alone, as there (`RecordNotFoundError("gone")`).
    """

    def __new__(cls, code: ErrorCode | str, *args: Any, **kwargs: Any) -> CMPError:
        if cls is CMPError:
            cls = _BY_CODE.get(ErrorCode(code), CMPError)
        error: CMPError = super().__new__(cls, code, *args, **kwargs)
        return error

    def __init__(
        self,
        code: ErrorCode | str,
        message: str | None = None,
        *,
        hint: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        request_id: str | None = None,
    ) -> None:
        if message is None:  # the reference SDK's form: the class names the code
            code, message = _CODE_OF.get(type(self), ErrorCode.INTERNAL_ERROR), str(code)
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.details = dict(details or {})
        if hint:
            self.details["hint"] = hint
        self.retry_after = retry_after
        self.request_id = request_id

    @property
    def hint(self) -> str | None:
        return self.details.get("hint")

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]

    @property
    def status_code(self) -> int:
        """The HTTP status of the code (the reference SDK's name for it)."""
        return HTTP_STATUS[self.code]

    @property
    def grpc_status(self) -> str:
        return GRPC_STATUS[self.code]

    def envelope(self) -> dict[str, Any]:
        return {
            "code": self.code.value,
            "message": self.message,
            "details": self.details or None,
            "retry_after": self.retry_after,
            "request_id": self.request_id,
        }

    @classmethod
    def from_envelope(cls, envelope: dict[str, Any]) -> CMPError:
        details = dict(envelope.get("details") or {})
        try:
            code = ErrorCode(envelope.get("code", "INTERNAL_ERROR"))
        except ValueError:
            code = ErrorCode.INTERNAL_ERROR
        return cls(
            code,
            str(envelope.get("message", "")),
            details=details,
            retry_after=envelope.get("retry_after"),
            request_id=envelope.get("request_id"),
        )

    def __repr__(self) -> str:
        return f"CMPError({self.code.value}, {self.message!r})"


# One subclass per code a client may want to catch on its own, named as the reference Python SDK
# names them (DECAY_ENGINE_BUSY does not exist here: its class is never raised).


class ValidationError(CMPError):
    """VALIDATION_ERROR."""


class StoreInvalidError(CMPError):
    """STORE_INVALID."""


class ModalityUnsupportedError(CMPError):
    """MODALITY_UNSUPPORTED."""


class ForgetUnconfirmedError(CMPError):
    """FORGET_UNCONFIRMED."""


class VersionMismatchError(CMPError):
    """VERSION_MISMATCH."""


class UnauthorizedError(CMPError):
    """UNAUTHORIZED."""


class RecordNotFoundError(CMPError):
    """RECORD_NOT_FOUND."""


class ConsolidationInProgressError(CMPError):
    """CONSOLIDATION_IN_PROGRESS."""


class ImportConflictError(CMPError):
    """IMPORT_CONFLICT."""


class ContentTooLargeError(CMPError):
    """CONTENT_TOO_LARGE."""


class WorkingMemoryFullError(CMPError):
    """WORKING_MEMORY_FULL."""


class RateLimitedError(CMPError):
    """RATE_LIMITED."""


class InternalError(CMPError):
    """INTERNAL_ERROR."""


class ExportFailedError(CMPError):
    """EXPORT_FAILED."""


class DecayEngineBusyError(CMPError):
    """The reference SDK's DECAY_ENGINE_BUSY; decay here never blocks, so it is never raised."""


class ServerUnreachableError(CMPError):
    """SERVER_UNREACHABLE (the reference SDK's ConnectionError and TimeoutError)."""


_BY_CODE: dict[ErrorCode, type[CMPError]] = {
    ErrorCode.VALIDATION_ERROR: ValidationError,
    ErrorCode.STORE_INVALID: StoreInvalidError,
    ErrorCode.MODALITY_UNSUPPORTED: ModalityUnsupportedError,
    ErrorCode.FORGET_UNCONFIRMED: ForgetUnconfirmedError,
    ErrorCode.VERSION_MISMATCH: VersionMismatchError,
    ErrorCode.UNAUTHORIZED: UnauthorizedError,
    ErrorCode.RECORD_NOT_FOUND: RecordNotFoundError,
    ErrorCode.CONSOLIDATION_IN_PROGRESS: ConsolidationInProgressError,
    ErrorCode.IMPORT_CONFLICT: ImportConflictError,
    ErrorCode.CONTENT_TOO_LARGE: ContentTooLargeError,
    ErrorCode.WORKING_MEMORY_FULL: WorkingMemoryFullError,
    ErrorCode.RATE_LIMITED: RateLimitedError,
    ErrorCode.INTERNAL_ERROR: InternalError,
    ErrorCode.EXPORT_FAILED: ExportFailedError,
    ErrorCode.SERVER_UNREACHABLE: ServerUnreachableError,
}
_CODE_OF: dict[type[CMPError], ErrorCode] = {cls: code for code, cls in _BY_CODE.items()}


def not_found(record_id: object, what: str = "record") -> CMPError:
    return CMPError(
        ErrorCode.RECORD_NOT_FOUND,
        f"{what} {record_id} does not exist",
        hint="it may have been forgotten; `cerememory recall` lists what is stored",
        details={"record_id": str(record_id)},
    )


# pydantic error types that deserve a more specific CMP code than VALIDATION_ERROR
_SPECIFIC_CODES = {"content_too_large": ErrorCode.CONTENT_TOO_LARGE}
_STORE_FIELDS = {"store", "stores", "scope"}
# pydantic error types whose fix is the same whatever the field
_HINTS = {"vector_encoding": "embedding_f32 is a vector (embeddings_f32 a batch's, row after row) as little-endian "
                             "float32 values, base64 in JSON "
                             "(numpy: base64.b64encode(v.astype('<f4').tobytes())); or give the numbers in embedding"}


def _location(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not str(part).startswith(("function-", "union[")) and part not in ("str", "bytes"):
            text = str(part).encode("utf-8", "backslashreplace").decode("utf-8")  # a key may be the bad text
            out += f".{text}" if out else text
    return out or "request"


def from_validation_error(exc: PydanticValidationError, *, op: str | None = None) -> CMPError:
    """Turn pydantic's report into one CMP error that names the first offending field."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    field = _location(tuple(first.get("loc", ())))
    code = _SPECIFIC_CODES.get(first["type"], ErrorCode.VALIDATION_ERROR)
    leaf = next((p for p in reversed(first.get("loc", ())) if isinstance(p, str)), "")
    if first["type"] == "enum" and leaf in _STORE_FIELDS:
        code = ErrorCode.STORE_INVALID
    message = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif first["type"] == "missing":
        message = "field required"
    prefix = f"{op}: " if op else ""
    hint = _HINTS.get(first["type"])
    if code is ErrorCode.STORE_INVALID:
        hint = "stores are episodic, semantic, procedural, emotional, working"
    elif code is ErrorCode.CONTENT_TOO_LARGE:
        hint = "split the content into several records or store a reference to it"
    return CMPError(
        code,
        f"{prefix}{field}: {message}",
        hint=hint,
        details={
            "field": field,
            "errors": [
                {"field": _location(tuple(e.get("loc", ()))), "type": e["type"], "message": e["msg"]}
                for e in errors[:10]
            ],
        },
    )
