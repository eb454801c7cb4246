"""The exception names of the reference Python SDK (`cerememory.errors`), bound to this package's
classes: `CerememoryError` is `CMPError`, and each code's class is the one `CMPError(code, ...)`
makes. The SDK's `ConnectionError` and `TimeoutError` are SERVER_UNREACHABLE here."""

from __future__ import annotations

from .cmp.errors import (
    CMPError,
    ConsolidationInProgressError,
    ContentTooLargeError,
    DecayEngineBusyError,
    ExportFailedError,
    ForgetUnconfirmedError,
    ImportConflictError,
    InternalError,
    ModalityUnsupportedError,
    RateLimitedError,
    RecordNotFoundError,
    ServerUnreachableError,
    StoreInvalidError,
    UnauthorizedError,
    ValidationError,
    VersionMismatchError,
    WorkingMemoryFullError,
)

CerememoryError = CMPError
ConnectionError = ServerUnreachableError  # noqa: A001 - the reference SDK's name
TimeoutError = ServerUnreachableError  # noqa: A001 - the reference SDK's name

__all__ = [
    "CerememoryError", "ConnectionError", "ConsolidationInProgressError", "ContentTooLargeError",
    "DecayEngineBusyError", "ExportFailedError", "ForgetUnconfirmedError", "ImportConflictError", "InternalError",
    "ModalityUnsupportedError", "RateLimitedError", "RecordNotFoundError", "ServerUnreachableError",
    "StoreInvalidError", "TimeoutError", "UnauthorizedError", "ValidationError", "VersionMismatchError",
    "WorkingMemoryFullError",
]
