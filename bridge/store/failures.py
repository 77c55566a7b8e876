"""Database failures translated into the bridge's own errors, at the boundary, with a retry verdict."""

from __future__ import annotations

import re
from typing import Final

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, OperationalError

from bridge.errors import (
    DatabaseLoginError,
    DatabaseTlsError,
    NotMigratedError,
    OutboxError,
    StoreError,
    TransientStoreError,
)

# SQLSTATE codes (PostgreSQL, and ODBC for SQL Server) that mean "try again": the connection broke,
# the server is starting or stopping, or the transaction lost a serialization or deadlock race.
# A lock timeout (55P03, SQL Server error 1222) is here too: the lock belongs to another transaction
# (DDL, VACUUM FULL, a LOCK TABLE, a writer still holding its row), which ends, and then the very same
# statement goes through; nothing in the statement itself makes it wait again.
_TRANSIENT_SQLSTATES: Final = frozenset(
    {"40001", "40P01", "55P03", "57014", "57P01", "57P02", "57P03", "53300", "08S01", "HYT00", "HYT01"}
)
_TRANSIENT_SQLSTATE_CLASSES: Final = ("08",)
# Message fragments for drivers that give no SQLSTATE (sqlite3) or bury it (pyodbc's "(1205)").
_TRANSIENT_MESSAGES: Final = ("database is locked", "database is busy", "deadlock victim", "(1205)")
#: SQL Server's "Lock request time out period exceeded" comes with the catch-all SQLSTATE HY000.
_LOCK_TIMEOUT_MESSAGES: Final = ("(1222)", "lock request time out period exceeded")
# A statement timeout is not transient, unlike a lock timeout: the statement ran out of time doing its
# own work (the read of a whole batch, a slow plan), and run again it runs out again, so retrying only
# hides a bridge that never moves. PostgreSQL reports it as 57014 "canceling statement due to statement
# timeout", SQL Server's ODBC driver as HYT00 "Query timeout expired" (HYT00 is also its login timeout,
# which is transient: the server did not answer). 57014 is also a cancel someone asked for
# (pg_cancel_backend, "due to user request"): a one-off, retried.
_STATEMENT_TIMEOUTS: Final = (("57014", "statement timeout"), ("HYT00", "query timeout"))
_STATEMENT_TIMEOUT_FIX: Final = (
    "A statement that ran out of time runs out again, so the bridge does not retry it: raise the timeout "
    "for the bridge's database login (PostgreSQL: ALTER ROLE <role> SET statement_timeout = '60s'; SQL "
    "Server: the driver's query timeout), or read smaller batches (BRIDGE_READ_BATCH_SIZE), then restart"
)

# A table or column the bridge needs is not there: the database was never migrated, or is at an older
# revision. SQLite reports it as an OperationalError ("no such table"), which would otherwise read as
# transient and be retried forever. PostgreSQL: undefined table / column; SQL Server (ODBC): invalid
# object name / column name.
_MISSING_SCHEMA_SQLSTATES: Final = frozenset({"42P01", "42703", "42S02", "42S22"})
_MISSING_SCHEMA_MESSAGES: Final = ("no such table", "no such column", "invalid object name")
MIGRATE_FIX: Final = (
    "Run `outbox-bridge migrate` against this database (OUTBOX_DB_URL), or have a DBA apply the DDL of "
    "`outbox-bridge migrate --sql`, then start again"
)


def sqlstate(exc: DBAPIError) -> str | None:
    """The SQLSTATE the driver reported, if it reports one (psycopg and pyodbc do, sqlite3 does not)."""
    orig = exc.orig
    code = getattr(orig, "sqlstate", None)
    if isinstance(code, str):
        return code
    args = getattr(orig, "args", ())
    # pyodbc puts the SQLSTATE first in the exception's args.
    if args and isinstance(args[0], str) and len(args[0]) == 5:
        return args[0]
    return None


def is_transient(exc: DBAPIError) -> bool:
    """True when retrying the same work on a new transaction may succeed."""
    if exc.connection_invalidated:
        return True
    if is_statement_timeout(exc) or is_missing_schema(exc):
        return False
    code = sqlstate(exc)
    message = str(exc.orig).lower()
    if any(part in message for part in _LOCK_TIMEOUT_MESSAGES):
        return True
    if code is not None:
        return code in _TRANSIENT_SQLSTATES or code.startswith(_TRANSIENT_SQLSTATE_CLASSES)
    return isinstance(exc, OperationalError) or any(part in message for part in _TRANSIENT_MESSAGES)


def is_statement_timeout(exc: DBAPIError) -> bool:
    """True when the server or driver cancelled the statement for running past its time limit."""
    code = sqlstate(exc)
    message = str(exc.orig).lower()
    return any(code == timeout_code and words in message for timeout_code, words in _STATEMENT_TIMEOUTS)


def is_permission_denied(exc: DBAPIError) -> bool:
    """True when the login lacks a privilege for the statement (PostgreSQL 42501, SQL Server error 229)."""
    message = str(exc.orig).lower()
    return sqlstate(exc) == "42501" or "permission denied" in message or "(229)" in message


def is_missing_schema(exc: DBAPIError) -> bool:
    """True when the statement named a table or column the database does not have (not migrated)."""
    message = str(exc.orig).lower()
    return sqlstate(exc) in _MISSING_SCHEMA_SQLSTATES or any(part in message for part in _MISSING_SCHEMA_MESSAGES)


def store_error(exc: DBAPIError, doing: str) -> StoreError:
    """A `StoreError` (`TransientStoreError`, `NotMigratedError`) saying what failed and what to do;
    raise it `from exc`."""
    reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
    if is_missing_schema(exc):
        return NotMigratedError(f"{doing} failed: {reason}. The outbox database is not migrated. {MIGRATE_FIX}")
    if is_transient(exc):
        return TransientStoreError(
            f"{doing} failed: {reason}. The database is unreachable, restarting or busy; retry, and check "
            "the server and the network if it persists"
        )
    if is_statement_timeout(exc):
        return StoreError(f"{doing} failed: {reason}. {_STATEMENT_TIMEOUT_FIX}")
    return StoreError(f"{doing} failed: {reason}")


# ---------------------------------------------------------------------------------- refused connections

# Neither psycopg nor pyodbc gives a SQLSTATE for a refused connection every time (psycopg has none at
# connect), so the server's own words decide. PostgreSQL says "password authentication failed" for an
# unknown user too, on purpose: a client cannot tell the two apart.
_LOGIN_REFUSED: Final = (
    "password authentication failed", "authentication failed for user", "no pg_hba.conf entry",
    "permission denied for database", "login failed for user", "(18456)",
)
_ROLE_MISSING: Final = re.compile(r'role "[^"]*" does not exist')
_TLS_REFUSED: Final = (
    "certificate verify failed", "does not match host name", "root certificate file", "could not read root certificate",
    "server does not support ssl", "certificate chain was issued by an authority that is not trusted",
    "server certificate", "could not load private key", "could not open certificate file",
)
# libpq puts where it connected before the server's words; the message names the host by itself.
_CONNECT_PREFIX: Final = re.compile(r'^(connection failed: )?(connection to server at "[^"]*"(, port \d+)? failed: )?'
                                    r"(FATAL:\s+)?")


def _reason(exc: DBAPIError, url: URL) -> str:
    first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
    reason = _CONNECT_PREFIX.sub("", first).strip()
    return reason.replace(url.password, "***") if url.password else reason


def _where(url: URL) -> str:
    host = url.host or "localhost"
    return f"{host}:{url.port}" if url.port else host


def refused_connection(exc: DBAPIError, url: URL) -> OutboxError | None:
    """A login or TLS failure as `DatabaseLoginError` / `DatabaseTlsError`, naming the user, the host and the
    fix (never the password); None for any other failure."""
    message = str(exc.orig).lower()
    user, where, reason = url.username or "(none)", _where(url), _reason(exc, url)
    if any(part in message for part in _TLS_REFUSED):
        root = url.query.get("sslrootcert")
        if url.get_backend_name() == "mssql":
            fix = ("trust the CA that signed the server's certificate in this machine's store (or fix the "
                   "certificate), and name the host as the certificate does; TrustServerCertificate=yes only for "
                   "development")
        else:
            fix = (f"sslrootcert (now {root or 'unset: ~/.postgresql/root.crt'}) must be the CA that signed the "
                   f"server's certificate, and that certificate must name the host {url.host or 'localhost'}: fix "
                   "OUTBOX_DB_URL, e.g. ?sslmode=verify-full&sslrootcert=/path/to/ca.crt, or the server's certificate")
        return DatabaseTlsError(
            f"TLS to the database at {where} failed for user {user!r}: {reason}. {fix}. Not retried: fix it, "
            "then start again"
        )
    if any(part in message for part in _LOGIN_REFUSED) or _ROLE_MISSING.search(message):
        return DatabaseLoginError(
            f"the database at {where} refused the login of user {user!r}: {reason}. Check the user and the password "
            "in OUTBOX_DB_URL (a wrong password and an unknown user look the same from here); if both are right, "
            "the DBA must create the role and let it connect (`outbox-bridge grants --sql`; PostgreSQL: pg_hba.conf). "
            "Not retried: fix it, then start again"
        )
    return None
