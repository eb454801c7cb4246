"""Encryption at rest, with forgetting as a cryptographic erase.

Key hierarchy:
- the passphrase, through Argon2id with a random salt (both recorded beside the wrapped master
  key), gives the key-encryption key (KEK);
- the KEK wraps one random master key; changing the passphrase (``cerememory rekey``) re-wraps
  only the master key, never the records;
- the master key wraps one random data key per record; each record's body and vector are
  sealed with ChaCha20-Poly1305 under its own data key, with the record id and the purpose as
  associated data, so a sealed blob cannot be moved to another record or field;
- a key derived from the master key turns full-text tokens into keyed hashes, so the text
  index holds no plaintext either.

Where the wrapped keys live is the backend's (`storage.base.KeyStore`): files beside an
embedded database (storage/keyfiles.py), tables of a shared PostgreSQL schema, where every
server derives the same master key from the same passphrase (storage/postgres/keys.py).
Forgetting a record removes its wrapped data key; the ciphertext left in old pages and in
backups then opens with no key, except a copy of the keys taken before the forget.
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
from typing import TYPE_CHECKING

from ..cmp.errors import CMPError, ErrorCode
from .archive_crypto import derive_key
from .base import KeyStore
from .kdf import CEILING, DEFAULT_KDF, KdfParams, over_limit, valid_cost
from .keyfiles import KEY_BYTES, KEYFILE, KEYSTORE, NONCE_BYTES, KeyFiles, is_encrypted

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

__all__ = ["BODY", "KEYFILE", "KEYSTORE", "PLAINTEXT", "VECTOR", "Plaintext", "Sealer", "Vault", "is_encrypted"]

FORMAT = 1
_SEALED_VERSION = b"\x01"
BODY, VECTOR = b"body", b"vector"
TOKEN_CACHE = 1 << 18
Row = tuple[uuid.UUID, bytes]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _store(where: Path | KeyStore) -> KeyStore:
    return KeyFiles(where) if isinstance(where, Path) else where


def _wrong_passphrase(store: KeyStore) -> CMPError:
    return CMPError(ErrorCode.UNAUTHORIZED, f"wrong passphrase for the encrypted memory at {store.where}",
                    hint="set CEREMEMORY_PASSPHRASE to the passphrase given to `cerememory init --encrypt`")


def _cipher_of(key: bytes) -> ChaCha20Poly1305:
    """ChaCha20-Poly1305 under `key`; the cipher library is imported by the first memory that is
    encrypted, so opening a plain one (most short commands) never loads it."""
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    return ChaCha20Poly1305(key)


def _invalid_tag() -> type[Exception]:
    """The cipher library's authentication failure (for `except`: evaluated only when one is raised)."""
    from cryptography.exceptions import InvalidTag

    return InvalidTag


class Vault:
    """The unlocked keys of one memory. Thread-safe."""

    def __init__(self, store: KeyStore, master: bytes, keys: dict[uuid.UUID, bytes]) -> None:
        self.store = store
        self._master = _cipher_of(master)
        self._index_key = hmac.new(master, b"cerememory full-text tokens", hashlib.sha256).digest()
        self._keys = keys
        self._ciphers: dict[uuid.UUID, ChaCha20Poly1305] = {}
        self._lock = threading.Lock()
        # vocabularies are Zipfian: a bounded cache spares an HMAC for almost every token
        self.token = functools.lru_cache(maxsize=TOKEN_CACHE)(self._token)

    # ------------------------------------------------------------ life cycle

    @classmethod
    def create(cls, where: Path | KeyStore, passphrase: str, params: KdfParams = DEFAULT_KDF) -> Vault:
        """Set up encryption for a new, empty memory (a data directory, or a database schema)."""
        store = _store(where)
        if not passphrase:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "an empty passphrase cannot protect anything",
                           hint="set CEREMEMORY_PASSPHRASE or answer the prompt")
        if store.document() is not None:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{store.where} is already encrypted",
                           hint="use `cerememory rekey` to change its passphrase")
        if not store.blank():
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{store.where} already holds unencrypted data",
                           hint="encrypt a new memory and move the data with export and import")
        master = os.urandom(KEY_BYTES)
        store.create(cls._wrap_master(passphrase, master, params))
        return cls(store, master, {})

    @staticmethod
    def _wrap_master(passphrase: str, master: bytes, params: KdfParams) -> bytes:
        salt, nonce = os.urandom(16), os.urandom(NONCE_BYTES)
        kek = derive_key(passphrase, salt, params)
        wrapped = _cipher_of(kek).encrypt(nonce, master, b"cerememory master key")
        document = {"format": FORMAT, "kdf": {"algorithm": "argon2id", "salt": _b64(salt), **asdict(params)},
                    "cipher": "chacha20-poly1305", "master_key": {"nonce": _b64(nonce), "wrapped": _b64(wrapped)}}
        return json.dumps(document, indent=2).encode()

    @classmethod
    def unlock(cls, where: Path | KeyStore, passphrase: str | None) -> Vault | None:
        """The vault of an encrypted memory (None when it is not encrypted)."""
        store = _store(where)
        try:
            document = store.document()
        except OSError as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"cannot read {store.document_name}: {exc}",
                           hint="check the file's permissions") from None
        if document is None:
            return None
        if not passphrase:
            raise CMPError(ErrorCode.UNAUTHORIZED, f"{store.where} is encrypted and no passphrase was given",
                           hint="set CEREMEMORY_PASSPHRASE (or pass passphrase= to cerememory.open)")
        master = cls._unwrap_master(store, document, passphrase)
        cipher, keys = _cipher_of(master), {}
        for record_id, wrapped in store.load():
            keys[record_id] = cls._unwrap_key(cipher, store, record_id, wrapped)
        return cls(store, master, keys)

    @staticmethod
    def _unwrap_key(cipher: ChaCha20Poly1305, store: KeyStore, record_id: uuid.UUID, wrapped: bytes) -> bytes:
        try:
            return cipher.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], record_id.bytes)
        except _invalid_tag():
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"the key of {record_id} in {store.keys_name} is damaged",
                           hint=f"restore {store.keys_name} from a backup") from None

    @staticmethod
    def _unwrap_master(store: KeyStore, raw: bytes, passphrase: str) -> bytes:
        try:
            document = json.loads(raw)
            kdf = document["kdf"]
            params = KdfParams(time_cost=int(kdf["time_cost"]), memory_cost_kib=int(kdf["memory_cost_kib"]),
                               parallelism=int(kdf["parallelism"]))
            salt = base64.b64decode(kdf["salt"])
            nonce = base64.b64decode(document["master_key"]["nonce"])
            wrapped = base64.b64decode(document["master_key"]["wrapped"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"the key file {store.document_name} is damaged: {exc}",
                           hint=f"restore {store.document_name} from a backup; without it the data cannot be read"
                           ) from None
        if not valid_cost(params) or over_limit(params, CEILING) is not None:  # never derive an absurd cost
            raise CMPError(ErrorCode.INTERNAL_ERROR, f"the key file {store.document_name} is damaged: its Argon2id "
                           f"cost {params} is out of range", hint=f"restore {store.document_name} from a backup")
        try:
            return _cipher_of(derive_key(passphrase, salt, params)).decrypt(
                nonce, wrapped, b"cerememory master key")
        except _invalid_tag():
            raise _wrong_passphrase(store) from None

    @classmethod
    def rekey(cls, where: Path | KeyStore, old_passphrase: str, new_passphrase: str,
              params: KdfParams = DEFAULT_KDF) -> None:
        """A new passphrase (and salt) for the same master key: no record is touched."""
        store = _store(where)
        document = store.document()
        if document is None:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{store.where} is not encrypted",
                           hint="encryption is chosen when a memory is created: `cerememory init --encrypt`")
        if not new_passphrase:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "the new passphrase is empty",
                           hint="set CEREMEMORY_NEW_PASSPHRASE or answer the prompt")
        master = cls._unwrap_master(store, document, old_passphrase)
        store.replace(cls._wrap_master(new_passphrase, master, params))

    # ------------------------------------------------------------ data keys

    def _wrap(self, record_id: uuid.UUID, key: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._master.encrypt(nonce, key, record_id.bytes)

    def _take(self, entries: Iterable[tuple[uuid.UUID, bytes]]) -> None:
        """Keys other processes made (a shared store), unwrapped into this vault. Caller holds the lock."""
        for record_id, wrapped in entries:
            self._keys[record_id] = self._unwrap_key(self._master, self.store, record_id, wrapped)
            self._ciphers.pop(record_id, None)

    def ensure_keys(self, ids: Iterable[uuid.UUID]) -> None:
        """Give every id without a data key a fresh one, stored durably before the records that
        use it are written. In a shared store, keys another server made are taken as they are,
        and every key of `ids` is written with the records (once: a key already there stays), so
        a transaction that rolled back never leaves a record whose key is only in this process."""
        with self._lock:
            wanted = list(dict.fromkeys(ids))
            missing = [i for i in wanted if i not in self._keys]
            if missing and self.store.shared:
                self._take(self.store.fetch(missing))
                missing = [i for i in missing if i not in self._keys]
            fresh = {i: os.urandom(KEY_BYTES) for i in missing}
            self._keys.update(fresh)
            stored = wanted if self.store.shared else list(fresh)
            if stored:
                try:
                    self.store.add([(i, self._wrap(i, self._keys[i])) for i in stored])
                except BaseException:
                    for record_id in fresh:
                        del self._keys[record_id]
                    raise

    def prefetch(self, ids: Iterable[uuid.UUID]) -> None:
        """Read the keys of `ids` that other processes made, in one query (a shared store)."""
        if self.store.shared:
            with self._lock:
                missing = [i for i in dict.fromkeys(ids) if i not in self._keys]
                if missing:
                    self._take(self.store.fetch(missing))

    def evict(self, ids: Iterable[uuid.UUID]) -> None:
        """Drop keys from memory only: another process forgot their records and erased them."""
        with self._lock:
            for record_id in ids:
                self._keys.pop(record_id, None)
                self._ciphers.pop(record_id, None)

    def destroy(self, ids: Iterable[uuid.UUID]) -> int:
        """Erase the data keys of `ids` from memory and from the store."""
        with self._lock:
            gone = [i for i in dict.fromkeys(ids) if i in self._keys]
            if gone and not self.store.shared:  # a file is rewritten whole: no append may interleave
                self.store.remove(gone)
            for record_id in gone:
                del self._keys[record_id]
                self._ciphers.pop(record_id, None)
        if gone and self.store.shared:  # outside the lock: it waits its turn among the writers
            self.store.remove(gone)
        return len(gone)

    def erase_orphans(self, live: set[uuid.UUID]) -> int:
        """Erase keys of records that no longer exist: a crash between a forget's commit and its
        key erase (or, in a data directory, a write that never committed) leaves such keys behind."""
        with self._lock:
            orphans = self.store.remove_orphans(live)
            for record_id in orphans:
                self._keys.pop(record_id, None)
                self._ciphers.pop(record_id, None)
            return len(orphans)

    def _cipher(self, record_id: uuid.UUID) -> ChaCha20Poly1305:
        cipher = self._ciphers.get(record_id)
        if cipher is None:
            key = self._keys.get(record_id)
            if key is None and self.store.shared:
                self.prefetch([record_id])
                key = self._keys.get(record_id)
            if key is None:
                raise CMPError(ErrorCode.RECORD_NOT_FOUND, f"record {record_id} has no data key (it was forgotten)",
                               details={"record_id": str(record_id)})
            cipher = self._ciphers[record_id] = _cipher_of(key)
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
        except _invalid_tag():
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
    def prefetch(ids: Iterable[uuid.UUID]) -> None:
        return None

    @staticmethod
    def evict(ids: Iterable[uuid.UUID]) -> None:
        return None

    @staticmethod
    def erase_orphans(live: set[uuid.UUID]) -> int:
        return 0


PLAINTEXT = Plaintext()
Sealer = Vault | Plaintext
