"""CMA archives, independent of any engine: what an export request may ask, the output it
writes to, and reading a whole archive back (decrypt, authenticate, parse, check).

The operations themselves are the engine's (`engine/archive.py`). The format is in
`archive_format`, the cryptography in `archive_crypto`, the file rules in `archive_paths`,
what an import may cost in `archive_settings` and `archive_gate`; docs/archives.md is the
user's view.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import BinaryIO

from ..cmp import messages as m
from ..cmp.errors import CMPError, ErrorCode
from ..model import StoreType
from ..progress import ProgressFn
from . import archive_crypto as crypto
from . import archive_format as fmt

# The largest archive held in memory: an import's archive_data, an export returned as bytes.
# It matches the gRPC import cap; over HTTP the 64 MiB JSON body limit allows ~48 MiB of
# base64-encoded archive. The CLI's embedded export streams to disk and has no limit.
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
FORMATS = ("cma", "jsonl")


def invalid(message: str, field_name: str, hint: str | None = None) -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, message, hint=hint, details={"field": field_name})


def too_large(what: str) -> CMPError:
    return CMPError(ErrorCode.CONTENT_TOO_LARGE, f"{what} exceeds {MAX_ARCHIVE_BYTES} bytes",
                    hint="export fewer stores at a time, or use `cerememory export` on the server's "
                         "machine, which streams to disk",
                    details={"field": "archive_data", "limit": MAX_ARCHIVE_BYTES})


class FileSink:
    """Counts and hashes the bytes that reach the output, and enforces a size cap."""

    def __init__(self, out: BinaryIO, limit: int | None) -> None:
        self.out, self.limit = out, limit
        self.size = 0
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.limit is not None and self.size > self.limit:
            raise too_large("the archive")
        self.sha.update(data)
        return self.out.write(data) or len(data)


def check_export(req: m.ExportRequest) -> list[StoreType]:
    if req.format.lower() not in FORMATS:
        raise invalid(f"lifecycle.export: format: {req.format!r} is not supported", "format",
                   hint="use cma (jsonl is accepted as an alias)")
    if req.encrypt and not req.encryption_key:
        raise invalid("lifecycle.export: encryption_key: required when encrypt is true", "encryption_key",
                   hint="give a passphrase (CLI: CEREMEMORY_ARCHIVE_PASSPHRASE or the prompt)")
    if req.encryption_key and not req.encrypt:
        raise invalid("lifecycle.export: encryption_key given but encrypt is false", "encrypt",
                   hint="set encrypt: true to encrypt the archive, or drop the key")
    return list(dict.fromkeys(req.stores)) if req.stores else list(StoreType)


def is_encrypted(data: bytes) -> bool:
    """Whether an archive needs a passphrase (reads only its first line)."""
    head, _ = fmt.first_line(data)
    return head.get("kind") == "encrypted"


def read_archive(data: bytes, passphrase: str | None, *, progress: ProgressFn | None = None,
                 limits: crypto.KdfLimits = crypto.DEFAULT_LIMITS) -> fmt.ParsedArchive:
    """Decrypt (when sealed), authenticate and parse a whole archive; raises on any problem,
    and on a key-derivation cost above `limits` before deriving anything."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise too_large("archive_data")
    head, start = fmt.first_line(data)
    if head.get("kind") != "encrypted":
        return fmt.parse(data, progress=progress)
    if not passphrase:
        raise invalid("lifecycle.import: decryption_key: this archive is encrypted", "decryption_key",
                   hint="give its passphrase (CLI: CEREMEMORY_ARCHIVE_PASSPHRASE or the prompt)")
    salt, params, chunk, check = crypto.read_params(head.get("encryption") or {}, limits)
    key = crypto.derive_key(passphrase, salt, params)
    if not hmac.compare_digest(crypto.key_check(key), check):
        raise fmt.damaged("wrong passphrase for this encrypted archive", "wrong_key",
                          hint="check the passphrase the archive was exported with")
    plain = crypto.open_sealed(memoryview(data)[start:], key, bytes(memoryview(data)[:start]), chunk)
    archive = fmt.parse(plain, progress=progress)
    if archive.header.get("archive_id") != head.get("archive_id"):
        raise fmt.damaged("the encrypted archive's preamble and content do not belong together", "tampered")
    return archive
