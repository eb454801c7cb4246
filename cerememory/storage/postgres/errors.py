"""PostgreSQL's errors as CMP errors, in one place.

A refused connection, a dropped one or a server shutting down is `StorageUnavailable`: the
request failed on the machine, not on its content, and the next one reconnects. A wrong URL or
password is the operator's to fix and says which setting. The server's own message can quote
stored values, so it goes to the log, never to the client.
"""

from __future__ import annotations

import logging
import re

import psycopg

from ...cmp.errors import CMPError, ErrorCode
from ..base import StorageUnavailable

log = logging.getLogger("cerememory.storage")

_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
_AUTH = ("password authentication failed", "no password supplied", "authentication failed", "role \"")
URL_HINT = ("set storage.postgres_url (or CEREMEMORY_STORAGE__POSTGRES_URL) to "
            "postgresql://user@host:port/dbname")


def redact(url: str) -> str:
    """A connection URL fit for a message: the password replaced by ***."""
    return _PASSWORD.sub(r"\1***@", url)


def connect_error(exc: psycopg.Error, url: str) -> CMPError:
    """Why a connection to `url` could not be made, with what to change."""
    text = str(exc)
    where = redact(url)
    if isinstance(exc, psycopg.ProgrammingError):
        return CMPError(ErrorCode.VALIDATION_ERROR, f"storage.postgres_url is not a PostgreSQL URL ({where})",
                        hint=URL_HINT)
    if any(marker in text for marker in _AUTH):
        return StorageUnavailable(f"PostgreSQL refused the credentials for {where}",
                                  hint="check the user and password in storage.postgres_url, "
                                       "or PGPASSWORD / PGPASSFILE")
    if "does not exist" in text and "database" in text:
        return CMPError(ErrorCode.VALIDATION_ERROR, f"the database named in {where} does not exist",
                        hint="create it (createdb) or name an existing one in storage.postgres_url")
    log.warning("connecting to %s failed: %s", where, text.strip())
    return StorageUnavailable(f"cannot connect to PostgreSQL at {where}",
                              hint="is the server running and reachable? the server log has PostgreSQL's message")


def translate(exc: psycopg.Error) -> CMPError:
    """The CMP error a failed statement or transaction is reported as (nothing was changed)."""
    log.warning("PostgreSQL failed: %s: %s", type(exc).__name__, str(exc).strip())
    if isinstance(exc, psycopg.OperationalError | psycopg.errors.AdminShutdown | psycopg.InterfaceError):
        return StorageUnavailable("the connection to PostgreSQL failed; nothing was changed",
                                  hint="retry: the server reconnects at the next request")
    if isinstance(exc, psycopg.errors.DiskFull):
        return CMPError(ErrorCode.STORAGE_FULL, "PostgreSQL is out of disk space; nothing was changed",
                        hint="free space on the database server, then retry")
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return CMPError(ErrorCode.INTERNAL_ERROR, "another server changed the same rows; nothing was changed",
                        hint="retry the operation")
    return CMPError(ErrorCode.INTERNAL_ERROR, f"PostgreSQL refused an operation ({type(exc).__name__}); "
                    "nothing was changed", hint="the server log has PostgreSQL's message")
