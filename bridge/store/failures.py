"""Database failures translated into the bridge's own errors, at the boundary, with a retry verdict."""

from __future__ import annotations

from typing import Final

from sqlalchemy.exc import DBAPIError, OperationalError

from bridge.errors import StoreError, TransientStoreError

# SQLSTATE codes (PostgreSQL, and ODBC for SQL Server) that mean "try again": the connection broke,
# the server is starting or stopping, or the transaction lost a serialization or deadlock race.
_TRANSIENT_SQLSTATES: Final = frozenset(
    {"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "08S01", "HYT00", "HYT01"}
)
_TRANSIENT_SQLSTATE_CLASSES: Final = ("08",)
# Message fragments for drivers that give no SQLSTATE (sqlite3) or bury it (pyodbc's "(1205)").
_TRANSIENT_MESSAGES: Final = ("database is locked", "database is busy", "deadlock victim", "(1205)")


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
    code = sqlstate(exc)
    if code is not None:
        return code in _TRANSIENT_SQLSTATES or code.startswith(_TRANSIENT_SQLSTATE_CLASSES)
    message = str(exc.orig).lower()
    return isinstance(exc, OperationalError) or any(part in message for part in _TRANSIENT_MESSAGES)


def store_error(exc: DBAPIError, doing: str) -> StoreError:
    """A `StoreError` (or `TransientStoreError`) saying what failed and what to do; raise it `from exc`."""
    reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
    if is_transient(exc):
        return TransientStoreError(
            f"{doing} failed: {reason}. The database is unreachable, restarting or busy; retry, and check "
            "the server and the network if it persists"
        )
    return StoreError(f"{doing} failed: {reason}")
