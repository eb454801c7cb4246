"""Encryption at rest, with forgetting as a cryptographic erase.

Key hierarchy:
- the passphrase, through Argon2id with a random salt (both recorded in ``keys.json``), gives
  the key-encryption key (KEK);
- the KEK wraps one random master key, also in ``keys.json``; changing the passphrase
  (``cerememory rekey``) re-wraps only the master key, never the records;
- the master key wraps one random data key per record, kept in ``keystore.bin`` beside the
  database, never inside it; each record's body and vector are sealed with ChaCha20-Poly1305
  under its own data key, with the record id and the purpose as associated data, so a sealed
  blob cannot be moved to another record or field;
- a key derived from the master key turns full-text tokens into keyed hashes, so the text
  index holds no plaintext either.

Forgetting a record deletes its data key by rewriting the keystore without it. Old DuckDB
pages and backups of the database then hold ciphertext nobody can open; only a copy of the
keystore taken before the forget (with the passphrase) could.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from ..cmp.errors import CMPError, ErrorCode
from .archive_crypto import CEILING, DEFAULT_KDF, KdfParams, derive_key, over_limit, valid_cost
from .files import write_atomic
from .lock import LOCK_NAME

KEYFILE = "keys.json"
KEYSTORE = "keystore.bin"
FORMAT = 1
KEY_BYTES = 32
NONCE_BYTES = 12
_MAGIC = b"CMKEYS1\n"
_ENTRY = 16 + NONCE_BYTES + KEY_BYTES + 16  # record id, nonce, wrapped key, tag
_SEALED_VERSION = b"\x01"
BODY, VECTOR = b"body", b"vector"
TOKEN_CACHE = 1 << 18
Row = tuple[uuid.UUID, bytes]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _wrong_passphrase() -> CMPError:
    return CMPError(ErrorCode.UNAUTHORIZED, "wrong passphrase for this encrypted data directory",
                    hint="set CEREMEMORY_PASSPHRASE to the passphrase given to `cerememory init --encrypt`")


def is_encrypted(data_dir: Path) -> bool:
    return (data_dir / KEYFILE).exists()


class Vault:
    """The unlocked keys of one data directory. Thread-safe."""

    def __init__(self, data_dir: Path, master: bytes, keys: dict[uuid.UUID, bytes]) -> None:
        self.data_dir = data_dir
        self._master = ChaCha20Poly1305(master)
        self._index_key = hmac.new(master, b"cerememory full-text tokens", hashlib.sha256).digest()
        self._keys = keys
        self._ciphers: dict[uuid.UUID, ChaCha20Poly1305] = {}
        self._lock = threading.Lock()
        # vocabularies are Zipfian: a bounded cache spares an HMAC for almost every token
        self.token = functools.lru_cache(maxsize=TOKEN_CACHE)(self._token)

    # ------------------------------------------------------------ life cycle

    @classmethod
    def create(cls, data_dir: Path, passphrase: str, params: KdfParams = DEFAULT_KDF) -> Vault:
        """Set up encryption for a new, empty data directory."""
        if not passphrase:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "an empty passphrase cannot protect anything",
                           hint="set CEREMEMORY_PASSPHRASE or answer the prompt")
        if is_encrypted(data_dir):
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{data_dir} is already encrypted",
                           hint="use `cerememory rekey` to change its passphrase")
        data_dir.mkdir(parents=True, exist_ok=True)
        if any(p.name != LOCK_NAME for p in data_dir.iterdir()):
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{data_dir} already holds unencrypted data",
                           hint="encrypt a new directory and move the data with export and import")
        master = os.urandom(KEY_BYTES)
        cls._write_keyfile(data_dir, passphrase, master, params)
        write_atomic(data_dir / KEYSTORE, _MAGIC)
        return cls(data_dir, master, {})

    @staticmethod
    def _write_keyfile(data_dir: Path, passphrase: str, master: bytes, params: KdfParams) -> None:
        salt, nonce = os.urandom(16), os.urandom(NONCE_BYTES)
        kek = derive_key(passphrase, salt, params)
        wrapped = ChaCha20Poly1305(kek).encrypt(nonce, master, b"cerememory master key")
        document = {"format": FORMAT, "kdf": {"algorithm": "argon2id", "salt": _b64(salt), **asdict(params)},
                    "cipher": "chacha20-poly1305", "master_key": {"nonce": _b64(nonce), "wrapped": _b64(wrapped)}}
        write_atomic(data_dir / KEYFILE, json.dumps(document, indent=2).encode())

    @classmethod
    def unlock(cls, data_dir: Path, passphrase: str | None) -> Vault | None:
        """The vault of an encrypted directory (None when it is not encrypted)."""
        if not is_encrypted(data_dir):
            return None
        if not passphrase:
            raise CMPError(ErrorCode.UNAUTHORIZED, f"{data_dir} is encrypted and no passphrase was given",
                           hint="set CEREMEMORY_PASSPHRASE (or pass passphrase= to cerememory.open)")
        master = cls._unwrap_master(data_dir, passphrase)
        return cls(data_dir, master, cls._read_keystore(data_dir, master))

    @staticmethod
    def _unwrap_master(data_dir: Path, passphrase: str) -> bytes:
        try:
            document = json.loads((data_dir / KEYFILE).read_text())
            kdf = document["kdf"]
            params = KdfParams(time_cost=int(kdf["time_cost"]), memory_cost_kib=int(kdf["memory_cost_kib"]),
                               parallelism=int(kdf["parallelism"]))
            salt = base64.b64decode(kdf["salt"])
            nonce = base64.b64decode(document["master_key"]["nonce"])
            wrapped = base64.b64decode(document["master_key"]["wrapped"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"the key file {data_dir / KEYFILE} is damaged: {exc}",
                           hint="restore keys.json from a backup; without it the data cannot be read") from None
        if not valid_cost(params) or over_limit(params, CEILING) is not None:  # never derive an absurd cost
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"the key file {data_dir / KEYFILE} is damaged: its Argon2id "
                           f"cost {params} is out of range", hint="restore keys.json from a backup")
        try:
            return ChaCha20Poly1305(derive_key(passphrase, salt, params)).decrypt(
                nonce, wrapped, b"cerememory master key")
        except InvalidTag:
            raise _wrong_passphrase() from None

    @staticmethod
    def _read_keystore(data_dir: Path, master: bytes) -> dict[uuid.UUID, bytes]:
        raw = (data_dir / KEYSTORE).read_bytes() if (data_dir / KEYSTORE).exists() else _MAGIC
        if not raw.startswith(_MAGIC):
            raise CMPError(ErrorCode.INTERNAL_ERROR, "the keystore is damaged (bad header)",
                           hint="restore keystore.bin from a backup")
        cipher, keys = ChaCha20Poly1305(master), {}
        body = raw[len(_MAGIC):]
        whole = len(body) - len(body) % _ENTRY  # a torn final append is ignored: its record never committed
        for offset in range(0, whole, _ENTRY):
            entry = body[offset:offset + _ENTRY]
            record_id = uuid.UUID(bytes=entry[:16])
            try:
                keys[record_id] = cipher.decrypt(entry[16:16 + NONCE_BYTES], entry[16 + NONCE_BYTES:], entry[:16])
            except InvalidTag:
                raise CMPError(ErrorCode.INTERNAL_ERROR, f"the keystore entry of {record_id} is damaged",
                               hint="restore keystore.bin from a backup") from None
        return keys

    @classmethod
    def rekey(cls, data_dir: Path, old_passphrase: str, new_passphrase: str,
              params: KdfParams = DEFAULT_KDF) -> None:
        """A new passphrase (and salt) for the same master key: no record is touched."""
        if not is_encrypted(data_dir):
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{data_dir} is not encrypted",
                           hint="encryption is chosen when a data directory is created: `cerememory init --encrypt`")
        if not new_passphrase:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "the new passphrase is empty",
                           hint="set CEREMEMORY_NEW_PASSPHRASE or answer the prompt")
        master = cls._unwrap_master(data_dir, old_passphrase)
        cls._write_keyfile(data_dir, new_passphrase, master, params)

    # ------------------------------------------------------------ data keys

    def ensure_keys(self, ids: Iterable[uuid.UUID]) -> None:
        """Give every id without a data key a fresh one, appended to the keystore durably before
        the records that use it are written."""
        with self._lock:
            fresh = {i: os.urandom(KEY_BYTES) for i in dict.fromkeys(ids) if i not in self._keys}
            if not fresh:
                return
            out = bytearray()
            for record_id, key in fresh.items():
                nonce = os.urandom(NONCE_BYTES)
                out += record_id.bytes + nonce + self._master.encrypt(nonce, key, record_id.bytes)
            with open(self.data_dir / KEYSTORE, "ab") as f:
                f.write(out)
                f.flush()
                os.fsync(f.fileno())
            self._keys.update(fresh)

    def destroy(self, ids: Iterable[uuid.UUID]) -> int:
        """Erase the data keys of `ids`: the keystore is rewritten without them."""
        with self._lock:
            gone = [i for i in dict.fromkeys(ids) if i in self._keys]
            if not gone:
                return 0
            for record_id in gone:
                del self._keys[record_id]
                self._ciphers.pop(record_id, None)
            out = bytearray(_MAGIC)
            for record_id, key in self._keys.items():
                nonce = os.urandom(NONCE_BYTES)
                out += record_id.bytes + nonce + self._master.encrypt(nonce, key, record_id.bytes)
            write_atomic(self.data_dir / KEYSTORE, bytes(out))
            return len(gone)

    def erase_orphans(self, live: set[uuid.UUID]) -> int:
        """Erase keys of records that no longer exist: a crash between a forget's commit and its
        keystore rewrite (or a write that never committed) leaves such keys behind."""
        with self._lock:
            orphans = [i for i in self._keys if i not in live]
        return self.destroy(orphans)

    def _cipher(self, record_id: uuid.UUID) -> ChaCha20Poly1305:
        cipher = self._ciphers.get(record_id)
        if cipher is None:
            key = self._keys.get(record_id)
            if key is None:
                raise CMPError(ErrorCode.RECORD_NOT_FOUND, f"record {record_id} has no data key (it was forgotten)",
                               details={"record_id": str(record_id)})
            cipher = self._ciphers[record_id] = ChaCha20Poly1305(key)
        return cipher

    def seal(self, record_id: uuid.UUID, data: bytes, purpose: bytes = BODY) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return _SEALED_VERSION + nonce + self._cipher(record_id).encrypt(nonce, data, record_id.bytes + purpose)

    def open(self, record_id: uuid.UUID, sealed: bytes, purpose: bytes = BODY) -> bytes:
        if sealed[:1] != _SEALED_VERSION:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"record {record_id} is not sealed as expected",
                           hint="the database was altered outside Cerememory")
        try:
            return self._cipher(record_id).decrypt(sealed[1:1 + NONCE_BYTES], sealed[1 + NONCE_BYTES:],
                                                   record_id.bytes + purpose)
        except InvalidTag:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"record {record_id} failed authentication",
                           hint="the database was altered outside Cerememory") from None

    def seal_many(self, ids: Sequence[uuid.UUID], blobs: Sequence[bytes], purpose: bytes = BODY) -> list[bytes]:
        self.ensure_keys(ids)
        return [self.seal(i, b, purpose) for i, b in zip(ids, blobs, strict=True)]

    def open_rows(self, rows: Iterable[Row], purpose: bytes = BODY) -> list[Row]:
        return [(i, self.open(i, b, purpose)) for i, b in rows]

    # ------------------------------------------------------------ full-text tokens

    def _token(self, term: str) -> str:
        """A keyed hash of one analysed term: equal terms hash equal, so BM25 is unchanged."""
        digest = hmac.new(self._index_key, term.encode("utf-8"), hashlib.sha256).digest()[:10]
        return base64.b32encode(digest).decode("ascii").lower()


class Plaintext:
    """The sealer of an unencrypted data directory: bytes pass through unchanged."""

    token = None

    @staticmethod
    def seal(record_id: uuid.UUID, data: bytes, purpose: bytes = BODY) -> bytes:
        return data

    @staticmethod
    def open(record_id: uuid.UUID, sealed: bytes, purpose: bytes = BODY) -> bytes:
        return sealed

    @staticmethod
    def seal_many(ids: Sequence[uuid.UUID], blobs: Sequence[bytes], purpose: bytes = BODY) -> list[bytes]:
        return list(blobs)

    @staticmethod
    def open_rows(rows: Iterable[Row], purpose: bytes = BODY) -> list[Row]:
        return list(rows)

    @staticmethod
    def destroy(ids: Iterable[uuid.UUID]) -> int:
        return 0

    @staticmethod
    def erase_orphans(live: set[uuid.UUID]) -> int:
        return 0


PLAINTEXT = Plaintext()
Sealer = Vault | Plaintext
