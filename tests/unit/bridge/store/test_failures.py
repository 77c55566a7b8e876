"""Driver errors become StoreError or TransientStoreError, with a retry verdict and a readable message."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError

from bridge.errors import (
    ConfigurationError,
    DatabaseLoginError,
    DatabaseTlsError,
    NotMigratedError,
    StoreError,
    TransientStoreError,
)
from bridge.store.failures import is_transient, refused_connection, sqlstate, store_error

pytestmark = pytest.mark.unit


class PsycopgLike(Exception):
    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def wrap(kind: type[DBAPIError], orig: BaseException, invalidated: bool = False) -> DBAPIError:
    return kind("SELECT 1", {}, orig, connection_invalidated=invalidated)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (wrap(OperationalError, PsycopgLike("deadlock detected", "40P01")), True),
        (wrap(OperationalError, PsycopgLike("could not serialize access", "40001")), True),
        (wrap(OperationalError, PsycopgLike("terminating connection due to administrator command", "57P01")), True),
        (wrap(OperationalError, PsycopgLike("connection failure", "08006")), True),
        (wrap(OperationalError, PsycopgLike("connection refused", None)), True),
        (wrap(OperationalError, Exception("database is locked")), True),
        (wrap(DBAPIError, Exception("08S01", "[08S01] Communication link failure")), True),
        (wrap(DBAPIError, Exception("40001", "[40001] Transaction (Process ID 51) was deadlocked")), True),
        (wrap(DBAPIError, Exception("anything"), invalidated=True), True),
        (wrap(IntegrityError, PsycopgLike("duplicate key value violates unique constraint", "23505")), False),
        (wrap(ProgrammingError, PsycopgLike('relation "domain_events" does not exist', "42P01")), False),
        (wrap(OperationalError, PsycopgLike("canceling statement due to statement timeout", "57014")), False),
        (wrap(OperationalError, PsycopgLike("canceling statement due to user request", "57014")), True),
        (wrap(OperationalError, PsycopgLike("canceling statement due to lock timeout", "55P03")), True),
        (wrap(DBAPIError, Exception("HYT00", "[HYT00] [Microsoft][ODBC Driver 18 for SQL Server]Query timeout "
                                              "expired (0) (SQLExecDirectW)")), False),
        (wrap(DBAPIError, Exception("HYT00", "[HYT00] [Microsoft][ODBC Driver 18 for SQL Server]Login timeout "
                                              "expired (0) (SQLDriverConnect)")), True),
        (wrap(DBAPIError, Exception("HY000", "[HY000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Lock "
                                              "request time out period exceeded. (1222) (SQLExecDirectW)")), True),
    ],
)
def test_is_transient_retries_only_what_a_new_attempt_can_fix(error: DBAPIError, transient: bool) -> None:
    assert is_transient(error) is transient
    translated = store_error(error, "reading domain_events after seq 7")
    assert isinstance(translated, TransientStoreError) is transient
    assert isinstance(translated, StoreError)
    assert str(translated).startswith("reading domain_events after seq 7 failed: ")


def test_sqlstate_comes_from_psycopg_or_from_pyodbc_args() -> None:
    assert sqlstate(wrap(OperationalError, PsycopgLike("x", "40P01"))) == "40P01"
    assert sqlstate(wrap(OperationalError, Exception("HYT00", "[HYT00] Login timeout expired"))) == "HYT00"
    assert sqlstate(wrap(OperationalError, Exception("no code here"))) is None


def test_the_message_keeps_the_first_line_of_the_driver_error() -> None:
    error = wrap(
        IntegrityError, PsycopgLike("violates not-null constraint\nDETAIL: Failing row contains (...)", "23502")
    )
    assert (
        str(store_error(error, "appending 1 event(s)")) == "appending 1 event(s) failed: violates not-null constraint"
    )


@pytest.mark.parametrize(
    "error",
    [
        wrap(OperationalError, PsycopgLike("canceling statement due to statement timeout", "57014")),
        wrap(DBAPIError, Exception("HYT00", "[HYT00] [Microsoft][ODBC Driver 18 for SQL Server]Query timeout expired")),
    ],
)
def test_a_statement_timeout_stops_with_the_setting_to_change_because_a_retry_times_out_again(
    error: DBAPIError,
) -> None:
    translated = store_error(error, "reading domain_events after seq 7")
    assert not isinstance(translated, TransientStoreError)
    assert "statement_timeout" in str(translated) and "BRIDGE_READ_BATCH_SIZE" in str(translated)


# ------------------------------------------------------------------------------- refused connections

URL = make_url("postgresql+psycopg://relay:hunter2@db.example:5432/app?sslmode=verify-full&sslrootcert=/etc/ca.crt")


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ('connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  password authentication '
         'failed for user "relay"', DatabaseLoginError),
        ('connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  role "relay" does not '
         "exist", DatabaseLoginError),
        ('FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "relay", database "app", no encryption',
         DatabaseLoginError),
        ("[28000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Login failed for user 'relay'. (18456)",
         DatabaseLoginError),
        ('connection failed: connection to server at "10.0.0.5", port 5432 failed: SSL error: certificate verify '
         "failed", DatabaseTlsError),
        ('server certificate for "db.internal" does not match host name "db.example"', DatabaseTlsError),
        ("[08001] [Microsoft][ODBC Driver 18 for SQL Server]SSL Provider: [error:0A000086:SSL routines::certificate "
         "verify failed:unable to get local issuer certificate]", DatabaseTlsError),
        ('connection failed: connection to server at "10.0.0.5", port 5432 failed: Connection refused', None),
        ("SSL SYSCALL error: EOF detected", None),
        ("terminating connection due to administrator command", None),
    ],
)
def test_a_refused_login_or_tls_failure_is_its_own_error_and_a_network_failure_is_not(
    message: str, kind: type[Exception] | None
) -> None:
    refused = refused_connection(wrap(OperationalError, PsycopgLike(message, None)), URL)
    if kind is None:
        assert refused is None
        return
    assert isinstance(refused, kind) and not isinstance(refused, TransientStoreError)
    text = str(refused)
    assert "db.example:5432" in text and "'relay'" in text and "hunter2" not in text
    assert ("OUTBOX_DB_URL" in text) if kind is DatabaseLoginError else ("/etc/ca.crt" in text or "trust" in text)


def test_a_password_echoed_by_a_driver_is_masked() -> None:
    refused = refused_connection(
        wrap(OperationalError, PsycopgLike("password authentication failed (tried hunter2)", None)), URL)
    assert refused is not None and "hunter2" not in str(refused) and "***" in str(refused)


@pytest.mark.parametrize(
    "error",
    [
        wrap(OperationalError, Exception("no such table: bridge_offsets")),  # sqlite3: no SQLSTATE
        wrap(ProgrammingError, PsycopgLike('relation "bridge_offsets" does not exist', "42P01")),
        wrap(ProgrammingError, PsycopgLike('column "status_json" does not exist', "42703")),
        wrap(ProgrammingError, Exception("42S02", "[42S02] Invalid object name 'bridge_offsets'. (208)")),
    ],
)
def test_a_missing_table_is_not_retried_but_names_outbox_bridge_migrate(error: DBAPIError) -> None:
    assert not is_transient(error)
    translated = store_error(error, "reading bridge_offsets")
    assert isinstance(translated, NotMigratedError) and isinstance(translated, ConfigurationError)
    assert "not migrated" in str(translated) and "outbox-bridge migrate" in str(translated)
    assert "retry" not in str(translated)
