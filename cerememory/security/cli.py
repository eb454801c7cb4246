"""The security commands of `cerememory`: `keys create|list|revoke` and `audit-verify`.

Neither opens the engine, so both work while a server owns the data directory: the key file
has its own lock and the audit log is appended under `flock`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..cmp.errors import CMPError, ErrorCode

if TYPE_CHECKING:  # the parsers are built for every command; these load only when one runs
    from .audit import AuditLog, Verification

AddCommon = Callable[..., None]


def add_parsers(sub: Any, common: AddCommon, parser_class: type[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keys", help="Create, list and revoke the API keys kept in the data dir.",
                       description="Create, list and revoke the API keys kept in the data dir "
                                   "(stored as SHA-256 digests in api_keys.json, mode 0600).")
    keys = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True, parser_class=parser_class)
    create = keys.add_parser("create", help="Create a key and print it once.")
    common(create, remote=False)
    create.add_argument("--name", help="a label for the key (letters, digits, '.', '_', '-')")
    common(keys.add_parser("list", help="Every key: id, name, prefix, created, revoked."), remote=False)
    revoke = keys.add_parser("revoke", help="Revoke a key by id or name (a running server stops accepting it).")
    common(revoke, remote=False)
    revoke.add_argument("key", help="the key's id (key-...) or name")

    p = sub.add_parser("audit-verify", help="Check the audit log's hash chain; names the first bad line.",
                       description="Check the audit log's hash chain (every line's hash, sequence and "
                                   "link to the line before it). Exit 0 when intact, 6 when broken.")
    common(p, remote=False)


def _audit(config: Any) -> AuditLog | None:
    from .audit import AUDIT_FILE, AuditLog

    if not config["audit.enabled"]:
        return None
    from ..storage.backends import open_audit_chain

    chain = open_audit_chain(config.storage_settings())
    if chain is not None:  # a shared memory's one chain, in its database
        return AuditLog(chain)
    from ..storage.modes import private_dir

    private_dir(config.data_dir)
    return AuditLog(config.data_dir / AUDIT_FILE)


def _log_key_event(config: Any, op: str, key: Any) -> None:
    log = _audit(config)
    if log is None:
        return
    try:
        log.append(op, transport="cli", summary={"key_id": key.id, "name": key.name})
    finally:
        log.close()


def _open_server_note(data_dir: Any) -> str | None:
    """What to tell someone who just created a key while a server that started without any serves
    this data directory: such a server runs open and stays open until it is restarted (a server
    that started with keys re-reads the key file by itself)."""
    import httpx

    from ..storage.lock import owning_server

    url = owning_server(data_dir)
    if url is None:
        return None
    try:
        open_now = httpx.get(f"{url}/v1/introspect/stats", timeout=5).status_code == 200
    except httpx.HTTPError:
        return None
    if not open_now:
        return None
    return (f"the server at {url} started without keys and stays open to anyone who can reach it until it is "
            "restarted; restart it for this key to be required")


def run_keys(args: argparse.Namespace, config: Any, out: Any) -> int:
    from .keys import KeyStore

    store = KeyStore.of(config.data_dir, config.storage_settings())
    if args.keys_command == "create":
        entry, secret = store.create(args.name)
        _log_key_event(config, "keys.create", entry)
        note = _open_server_note(config.data_dir)
        if out.as_json:
            out.json({**entry.public(), "key": secret, **({"note": note} if note else {})})
        else:
            print(secret)
            out.console(stderr=True).print(
                f"created {entry.id}{f' ({entry.name})' if entry.name else ''}; this is the only time "
                "the key is shown: store it now", style="dim")
            if note:
                out.console(stderr=True).print(note, style="yellow")
        return 0
    if args.keys_command == "revoke":
        entry = store.revoke(args.key)
        _log_key_event(config, "keys.revoke", entry)
        if out.as_json:
            out.json(entry.public())
        else:
            out.console().print(f"revoked {entry.id}{f' ({entry.name})' if entry.name else ''}")
        return 0
    keys = [k.public() for k in store.load()]
    if out.as_json:
        out.json({"keys": keys})
        return 0
    from rich.table import Table

    table = Table(title=f"{sum(1 for k in keys if not k['revoked_at'])} active keys in {store.where}")
    for column in ("id", "name", "prefix", "created", "revoked"):
        table.add_column(column)
    for k in keys:
        table.add_row(k["id"], k["name"] or "", k["prefix"] + "…", k["created_at"], k["revoked_at"] or "")
    out.console().print(table)
    return 0


def _verify(config: Any) -> Verification:
    """The audit log of the configured memory: the data directory's file, or the database's table."""
    if config["storage.backend"] != "postgres":
        from .audit import AUDIT_FILE, verify

        return verify(config.data_dir / AUDIT_FILE)
    from ..storage.postgres import audit_of

    return audit_of(config["storage.postgres_url"] or "", config["storage.namespace"])


def run_audit_verify(args: argparse.Namespace, config: Any, out: Any) -> int:
    report = _verify(config)
    aside = sorted(p.name for p in config.data_dir.glob("audit.broken-*.jsonl")) if config.data_dir.exists() else []
    result = {**report.as_dict(), "broken_logs_kept": aside}
    if out.as_json:
        out.json(result)
    elif report.ok:
        out.console().print(f"audit log intact: {report.entries} entries, head {report.head} "
                            f"({report.seconds:.2f} s)")
        for name in aside:
            out.console().print(f"an earlier broken log was kept aside: {name}", style="dim")
    else:
        error = CMPError(ErrorCode.AUDIT_BROKEN,
                         f"{report.path} line {report.first_bad_line}: {report.reason}",
                         hint=f"the {report.entries} entries before it are intact (head {report.head})")
        out.error(error)
    return 0 if report.ok else 6
