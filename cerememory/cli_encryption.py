"""`cerememory init [--encrypt]` and `cerememory rekey`: create a data directory, encrypted or
not, and change the passphrase of an encrypted one (see storage/crypto.py)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .cmp.errors import CMPError, ErrorCode
from .storage.backends import open_key_store
from .storage.base import KeyStore
from .storage.crypto import Vault
from .storage.lock import DataDirLock

PASSPHRASE_ENV = "CEREMEMORY_PASSPHRASE"
NEW_PASSPHRASE_ENV = "CEREMEMORY_NEW_PASSPHRASE"


def prompt_passphrase(env: str, label: str, *, confirm: bool) -> str:
    """A passphrase from `env`, else asked on the terminal (twice when it is a new one)."""
    value = os.environ.get(env)
    if value:
        return value
    if not sys.stdin.isatty():
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"the {label} is needed and there is no terminal to ask on",
                       hint=f"set {env}")
    first = _ask(f"{label}: ")
    if not first:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"the {label} must not be empty", hint="run the command again")
    if confirm and _ask(f"{label} again: ") != first:
        raise CMPError(ErrorCode.VALIDATION_ERROR, "the two passphrases differ; nothing was written",
                       hint="run the command again")
    return first


def _ask(prompt: str) -> str:
    """One line from the terminal without echo; end of input (Ctrl-D) is a clear refusal."""
    try:
        return getpass.getpass(prompt)
    except EOFError:
        print(file=sys.stderr)
        raise CMPError(ErrorCode.VALIDATION_ERROR, "no passphrase was given (end of input); nothing was written",
                       hint="run the command again and type the passphrase, or set it in the environment") from None


def run_init(args: argparse.Namespace, config: Any, out: Any) -> int:
    from .api import open_config

    data_dir = config.data_dir.expanduser().resolve()
    passphrase = config.passphrase()
    if args.encrypt:  # asked before anything is created, so a refusal leaves nothing behind
        passphrase = passphrase or prompt_passphrase(PASSPHRASE_ENV, "new passphrase", confirm=True)
    from .storage.modes import private_dir

    private_dir(data_dir)
    with _keys(config, data_dir) as store:
        if args.encrypt:
            Vault.create(store, passphrase)
        encrypted, key_file = store.document() is not None, store.document_name
    with open_config(config, passphrase=passphrase) as mem:
        records = mem.stats().total_records
    _report(out, {"data_dir": str(data_dir), "encrypted": encrypted, "records": records,
                  "key_file": key_file if encrypted else None},
            f"{'encrypted ' if encrypted else ''}{'memory' if _shared(config) else 'data directory'} ready "
            f"at {store.where}")
    return 0


def run_rekey(args: argparse.Namespace, config: Any, out: Any) -> int:
    data_dir = config.data_dir.expanduser().resolve()
    with _keys(config, data_dir) as store:
        old = config.passphrase() or prompt_passphrase(PASSPHRASE_ENV, "current passphrase",
                                                                   confirm=False)
        Vault.rekey(store, old, prompt_passphrase(NEW_PASSPHRASE_ENV, "new passphrase", confirm=True))
    _report(out, {"data_dir": str(data_dir), "rekeyed": True}, "passphrase changed; no record was re-encrypted")
    return 0


def _shared(config: Any) -> bool:
    return bool(config["storage.backend"] == "postgres")


@contextmanager
def _keys(config: Any, data_dir: Path) -> Iterator[KeyStore]:
    """The memory's key store: a data directory's under its lock (no server may hold it); a shared
    memory's while its servers run, since they keep the master key they unwrapped."""
    settings = config.storage_settings()
    if _shared(config):
        with open_key_store(settings, data_dir) as store:
            yield store
        return
    with DataDirLock(data_dir), open_key_store(settings, data_dir) as store:
        yield store


def _report(out: Any, result: dict, message: str) -> None:
    if out.as_json:
        out.json(result)
    else:
        out.console().print(message)
