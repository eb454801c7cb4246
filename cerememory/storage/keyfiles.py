"""The keys of an encrypted data directory, in two files beside the database, never inside it:
`keys.json` (the master key wrapped by the passphrase) and `keystore.bin` (the wrapped data
keys, appended to and rewritten without a forgotten record's key). A backup of the database
alone therefore holds no key at all."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from ..cmp.errors import CMPError, ErrorCode
from .files import write_atomic
from .lock import LOCK_NAME
from .modes import private_dir

KEYFILE = "keys.json"
KEYSTORE = "keystore.bin"
NONCE_BYTES = 12
KEY_BYTES = 32
MAGIC = b"CMKEYS1\n"
WRAPPED = NONCE_BYTES + KEY_BYTES + 16  # nonce, wrapped key, tag
ENTRY = 16 + WRAPPED  # record id first


def is_encrypted(data_dir: Path) -> bool:
    return (data_dir / KEYFILE).exists()


class KeyFiles:
    """`storage.base.KeyStore` over the two files of one data directory."""

    shared = False

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.where = str(data_dir)
        self.document_name = str(data_dir / KEYFILE)
        self.keys_name = str(data_dir / KEYSTORE)

    def document(self) -> bytes | None:
        path = self.data_dir / KEYFILE
        return path.read_bytes() if path.exists() else None

    def blank(self) -> bool:
        return not self.data_dir.exists() or all(p.name == LOCK_NAME for p in self.data_dir.iterdir())

    def create(self, document: bytes) -> None:
        private_dir(self.data_dir)
        write_atomic(self.data_dir / KEYFILE, document)
        write_atomic(self.data_dir / KEYSTORE, MAGIC)

    def replace(self, document: bytes) -> None:
        write_atomic(self.data_dir / KEYFILE, document)

    def load(self) -> list[tuple[uuid.UUID, bytes]]:
        path = self.data_dir / KEYSTORE
        raw = path.read_bytes() if path.exists() else MAGIC
        if not raw.startswith(MAGIC):
            raise CMPError(ErrorCode.INTERNAL_ERROR, "the keystore is damaged (bad header)",
                           hint=f"restore {KEYSTORE} from a backup")
        body = raw[len(MAGIC):]
        whole = len(body) - len(body) % ENTRY  # a torn final append is ignored: its record never committed
        return [(uuid.UUID(bytes=body[o:o + 16]), body[o + 16:o + ENTRY]) for o in range(0, whole, ENTRY)]

    def fetch(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]:
        return []  # this process holds every key of its data directory

    def add(self, entries: Sequence[tuple[uuid.UUID, bytes]]) -> None:
        with open(self.data_dir / KEYSTORE, "ab") as f:
            f.write(b"".join(record_id.bytes + wrapped for record_id, wrapped in entries))
            f.flush()
            os.fsync(f.fileno())

    def remove(self, ids: Sequence[uuid.UUID]) -> None:
        gone = set(ids)
        self._rewrite([(i, w) for i, w in self.load() if i not in gone])

    def remove_orphans(self, live: set[uuid.UUID]) -> list[uuid.UUID]:
        entries = self.load()
        orphans = [i for i, _ in entries if i not in live]
        if orphans:
            self._rewrite([(i, w) for i, w in entries if i in live])
        return orphans

    def _rewrite(self, entries: Sequence[tuple[uuid.UUID, bytes]]) -> None:
        write_atomic(self.data_dir / KEYSTORE, MAGIC + b"".join(i.bytes + w for i, w in entries))
