"""Archive encryption: a passphrase-derived key and a stream of authenticated chunks.

The key comes from Argon2id with a random 16-byte salt per archive; the salt and the cost
parameters travel in the archive's plaintext preamble, so any archive can be opened later with
only its passphrase (a reader refuses a cost above its `KdfLimits` before deriving anything).
The payload is cut into chunks sealed with ChaCha20-Poly1305; each chunk's associated data
binds the preamble, the chunk's index and whether it is the last one, so a dropped, reordered,
truncated or appended chunk fails authentication instead of importing part of an archive. One
key per archive makes the counter nonce safe.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from typing import TYPE_CHECKING, Any

from ..cmp.errors import CMPError, ErrorCode
from ..env_names import env_name
from .kdf import DEFAULT_KDF, DEFAULT_LIMITS, LIMIT_SETTINGS, KdfLimits, KdfParams, over_limit, valid_cost

if TYPE_CHECKING:
    from .archive_format import Sink

CIPHER = "chacha20-poly1305"
KDF = "argon2id"
SALT_BYTES = 16
KEY_BYTES = 32
TAG_BYTES = 16
CHUNK_BYTES = 1024 * 1024  # plaintext per chunk: large enough to be fast, small enough to stream
_FRAME = struct.Struct(">I")
_KEY_CHECK_LABEL = b"cerememory archive key check v3"

MAX_CHUNK_BYTES = 16 * 1024 * 1024  # the largest chunk a reader buffers


def _damaged(message: str, reason: str, hint: str | None = None) -> CMPError:
    return CMPError(ErrorCode.IMPORT_CONFLICT, message, details={"reason": reason},
                    hint=hint or "the archive was altered or cut short; export it again")


def _too_costly(name: str, value: int, limit: int) -> CMPError:
    setting = LIMIT_SETTINGS[name]
    env = env_name(setting)
    return CMPError(ErrorCode.IMPORT_CONFLICT,
                    f"encryption.{name}: the archive asks for an Argon2id {name} of {value}; this server "
                    f"accepts at most {limit}",
                    hint=f"if you trust this archive, raise {setting} (env {env}); or export it again "
                         "with the default cost",
                    details={"reason": "kdf_cost", "field": f"encryption.{name}", "value": value,
                             "limit": limit, "setting": setting})


def derive_key(passphrase: str, salt: bytes, params: KdfParams) -> bytes:
    """The archive key: Argon2id over the passphrase and this archive's own salt."""
    from argon2.low_level import Type, hash_secret_raw

    return hash_secret_raw(passphrase.encode("utf-8"), salt, time_cost=params.time_cost,
                           memory_cost=params.memory_cost_kib, parallelism=params.parallelism,
                           hash_len=KEY_BYTES, type=Type.ID)


def key_check(key: bytes) -> str:
    """A value that tells a wrong passphrase apart from a damaged chunk (reveals nothing of the key)."""
    return hmac.new(key, _KEY_CHECK_LABEL, hashlib.sha256).hexdigest()


def _nonce(index: int) -> bytes:
    return b"\0\0\0\0" + struct.pack(">Q", index)


def _aad(preamble_digest: bytes, index: int, final: bool) -> bytes:
    return preamble_digest + struct.pack(">QB", index, 1 if final else 0)


def new_encryption(passphrase: str, params: KdfParams = DEFAULT_KDF) -> tuple[dict[str, Any], bytes]:
    """Fresh parameters for one archive (its preamble's `encryption` object) and its key."""
    salt = os.urandom(SALT_BYTES)
    key = derive_key(passphrase, salt, params)
    info = {"cipher": CIPHER, "kdf": KDF, "salt": base64.b64encode(salt).decode("ascii"),
            "time_cost": params.time_cost, "memory_cost_kib": params.memory_cost_kib,
            "parallelism": params.parallelism, "chunk_bytes": CHUNK_BYTES, "key_check": key_check(key)}
    return info, key


class SealingWriter:
    """A write-only stream that seals what it is given into length-prefixed chunks on `out`."""

    def __init__(self, out: Sink, key: bytes, preamble: bytes, chunk_bytes: int = CHUNK_BYTES) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        self._out = out
        self._aead = ChaCha20Poly1305(key)
        self._digest = hashlib.sha256(preamble).digest()
        self._chunk = chunk_bytes
        self._buffer = bytearray()
        self._index = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        self._buffer += data
        while len(self._buffer) > self._chunk:  # keep at least one byte back for the final chunk
            self._emit(bytes(self._buffer[:self._chunk]), final=False)
            del self._buffer[:self._chunk]
        return len(data)

    def _emit(self, plain: bytes, *, final: bool) -> None:
        sealed = self._aead.encrypt(_nonce(self._index), plain, _aad(self._digest, self._index, final))
        self._out.write(_FRAME.pack(len(sealed)) + sealed)
        self._index += 1

    def close(self) -> None:
        """Seal the rest as the final chunk (possibly empty): a reader needs it to accept the archive."""
        if not self.closed:
            self._emit(bytes(self._buffer), final=True)
            self._buffer.clear()
            self.closed = True


def read_params(info: Any, limits: KdfLimits = DEFAULT_LIMITS) -> tuple[bytes, KdfParams, int, str]:
    """(salt, KDF parameters, chunk size, key check) from a preamble; refuses a cost above `limits`
    before anything is derived."""
    try:
        if info.get("cipher") != CIPHER or info.get("kdf") != KDF:
            raise _damaged(f"unsupported archive encryption {info.get('kdf')}/{info.get('cipher')}",
                           "encryption_unsupported", hint=f"this build reads {KDF} + {CIPHER} archives")
        salt = base64.b64decode(info["salt"], validate=True)
        params = KdfParams(int(info["time_cost"]), int(info["memory_cost_kib"]), int(info["parallelism"]))
        chunk, check = int(info["chunk_bytes"]), str(info["key_check"])
    except CMPError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError):
        raise _damaged("the archive's encryption parameters are damaged", "preamble") from None
    if (len(salt) != SALT_BYTES or not 1 <= chunk <= MAX_CHUNK_BYTES or not valid_cost(params)):
        raise _damaged("the archive's encryption parameters are out of range", "preamble")
    refused = over_limit(params, limits)
    if refused is not None:
        raise _too_costly(*refused)
    return salt, params, chunk, check


def open_sealed(body: memoryview, key: bytes, preamble: bytes, chunk_bytes: int) -> bytes:
    """Authenticate and decrypt every chunk; raise before returning anything if one fails."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    aead = ChaCha20Poly1305(key)
    digest = hashlib.sha256(preamble).digest()
    plain = bytearray()
    pos, index, limit = 0, 0, chunk_bytes + TAG_BYTES
    while True:
        if pos == len(body):
            raise _damaged("the encrypted archive is truncated: its final chunk is missing", "truncated")
        if pos + _FRAME.size > len(body):
            raise _damaged(f"the encrypted archive is truncated inside chunk {index}", "truncated")
        (size,) = _FRAME.unpack_from(body, pos)
        if not TAG_BYTES <= size <= limit:
            raise _damaged(f"chunk {index} of the encrypted archive has an impossible length", "tampered")
        end = pos + _FRAME.size + size
        if end > len(body):
            raise _damaged(f"the encrypted archive is truncated inside chunk {index}", "truncated")
        sealed = bytes(body[pos + _FRAME.size:end])
        final = end == len(body)
        try:
            plain += aead.decrypt(_nonce(index), sealed, _aad(digest, index, final))
        except InvalidTag:
            try:  # a valid final chunk followed by more bytes: data was appended
                aead.decrypt(_nonce(index), sealed, _aad(digest, index, not final))
            except InvalidTag:
                raise _damaged(f"chunk {index} of the encrypted archive failed authentication",
                               "tampered") from None
            raise _damaged("the encrypted archive has data after its final chunk" if not final else
                           "the encrypted archive is truncated: its final chunk is missing",
                           "tampered" if not final else "truncated") from None
        pos, index = end, index + 1
        if final:
            return bytes(plain)
