"""The one place records become bytes: msgpack blobs (the hook for at-rest encryption)."""

from __future__ import annotations

import struct
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import msgpack
import numpy as np
from pydantic import BaseModel

_UUID = 1
_DATETIME = 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

M = TypeVar("M", bound=BaseModel)


def _default(obj: Any) -> Any:
    if isinstance(obj, uuid.UUID):
        return msgpack.ExtType(_UUID, obj.bytes)
    if isinstance(obj, datetime):
        ts = obj if obj.tzinfo else obj.replace(tzinfo=UTC)
        micros = (ts - _EPOCH) // timedelta(microseconds=1)
        return msgpack.ExtType(_DATETIME, struct.pack(">q", micros))
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _UUID:
        return uuid.UUID(bytes=data)
    if code == _DATETIME:
        return _EPOCH + timedelta(microseconds=struct.unpack(">q", data)[0])
    return msgpack.ExtType(code, data)


def blobs_of_rows(matrix: np.ndarray) -> list[bytes]:
    """Each row of a float32 matrix as its raw bytes (a vector's stored form, unencrypted): the rows viewed
    as one fixed-size void item each, turned into bytes by numpy's C loop (a third of the time
    of a Python `tobytes` per row)."""
    rows = np.ascontiguousarray(matrix, dtype=np.float32)
    blobs: list[bytes] = rows.view(f"V{rows.shape[1] * 4}").ravel().tolist()
    return blobs


_packers = threading.local()


def pack(value: Any) -> bytes:
    """Python values (dicts, lists, bytes, UUIDs, datetimes) to msgpack, by this thread's own
    packer: making one (as `msgpack.packb` does every call) costs three times what packing a
    small body does. A packer that raised is empty again for the next value."""
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(default=_default, use_bin_type=True)
    packed: bytes = packer.pack(value)
    return packed


class CodecError(ValueError):
    """Bytes that are not a body this codec wrote (damaged or altered)."""


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
    except (ValueError, TypeError, struct.error, msgpack.UnpackException) as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise CodecError(f"not a stored body ({detail})") from exc


def pack_model(model: BaseModel, *, include: set[str] | None = None, exclude: Any = None) -> bytes:
    return pack(model.model_dump(mode="python", include=include, exclude=exclude, exclude_none=True))


def unpack_model(cls: type[M], data: bytes, **extra: Any) -> M:
    values = unpack(data)
    values.update(extra)
    return cls.model_validate(values)
