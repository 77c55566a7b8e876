"""Create, upgrade and inspect the outbox tables with Alembic: online, or as SQL text for a DBA to run.

The Alembic configuration is built here rather than read from an ini file, so the same calls work
from the command line, from tests and from an application. The revision history is kept in its own
table, `outbox_alembic_version`, because the outbox usually lives in an application's database that
may run its own Alembic history in `alembic_version`.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Column, Index, create_engine
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import SchemaItem

from bridge.errors import ConfigurationError, DatabaseLoginError, OutboxError
from bridge.exits import EXIT_DB_LOGIN, EXIT_ERROR, EXIT_OK, EXIT_USAGE
from bridge.schema import HORIZON_COLUMNS, SUPPORTED_DIALECTS
from bridge.store.engine import translate_refusals
from bridge.store.failures import store_error


def _migrations_dir() -> Path:
    """The Alembic environment and revisions: `bridge/migrations` when installed from a wheel (which ships the
    repository's `migrations/` there, inside the package), else `migrations/` beside `bridge/` (a checkout, or an
    editable install of one)."""
    package = Path(__file__).resolve().parent
    installed = package / "migrations"
    return installed if (installed / "env.py").is_file() else package.parent / "migrations"


MIGRATIONS_DIR: Final = _migrations_dir()
VERSION_TABLE: Final = "outbox_alembic_version"
_URL_EXAMPLES: Final = "e.g. postgresql+psycopg://user:password@host:5432/db, sqlite:///outbox.db, mssql+pyodbc://..."


def masked(url: str | URL) -> str:
    """The URL with its password hidden, for messages and logs."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def parse_url(url: str | URL) -> URL:
    """A SQLAlchemy URL for a supported dialect, or a `ConfigurationError` that says how to fix it."""
    if isinstance(url, URL):
        parsed = url
    else:
        if not url or not url.strip():
            raise ConfigurationError(f"no database URL: set OUTBOX_DB_URL to a SQLAlchemy URL, {_URL_EXAMPLES}")
        try:
            parsed = make_url(url.strip())
        except ArgumentError as exc:
            raise ConfigurationError(
                f"database URL {masked(url)!r} is not a SQLAlchemy URL; set OUTBOX_DB_URL to one, {_URL_EXAMPLES}"
            ) from exc
    if parsed.get_backend_name() not in SUPPORTED_DIALECTS:
        raise ConfigurationError(
            f"database URL {masked(parsed)!r}: the outbox migrations support "
            f"{', '.join(SUPPORTED_DIALECTS)}, not {parsed.get_backend_name()!r}; "
            "point OUTBOX_DB_URL at one of those"
        )
    return parsed


def alembic_config() -> Config:
    """An Alembic `Config` for the outbox migrations, with no ini file and no URL yet."""
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise ConfigurationError(
            f"the outbox migrations are missing: expected {MIGRATIONS_DIR}/env.py; reinstall outbox-bridge (its "
            "wheel ships them as bridge/migrations) or run from a source checkout"
        )
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_table", VERSION_TABLE)
    return config


def head() -> str:
    """The newest revision in `migrations/versions`."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if revision is None:
        raise ConfigurationError(f"no revisions found under {MIGRATIONS_DIR / 'versions'}")
    return revision


@contextmanager
def connected(url: str | URL, doing: str) -> Iterator[Connection]:
    """One connection in one transaction: on PostgreSQL and SQL Server a failed migration leaves nothing."""
    parsed = parse_url(url)
    try:
        engine = create_engine(parsed, poolclass=NullPool)
    except (NoSuchModuleError, ImportError) as exc:
        raise ConfigurationError(
            f"cannot load the database driver for {masked(parsed)!r} ({exc}); install it (SQL Server: "
            "pip install 'outbox-bridge[mssql]') or name an installed one, e.g. postgresql+psycopg://"
        ) from exc
    translate_refusals(engine)
    try:
        with engine.begin() as conn:
            yield conn
    except DBAPIError as exc:
        raise store_error(exc, f"{doing} at {masked(parsed)}") from exc
    finally:
        engine.dispose()


def _run_online(url: str | URL, revision: str, *, down: bool) -> None:
    config = alembic_config()
    with connected(url, f"migrating the outbox schema to {revision}") as conn:
        config.attributes["connection"] = conn
        try:
            if down:
                command.downgrade(config, revision)
            else:
                command.upgrade(config, revision)
        except CommandError as exc:
            raise ConfigurationError(f"cannot migrate to revision {revision!r}: {exc}") from exc
    if not down:
        _sqlite_wal(url)


def _sqlite_wal(url: str | URL) -> None:
    """Put a SQLite outbox in WAL mode, once, where nothing else is using it yet: the mode persists in
    the file, so the bridge's readers never have to take the exclusive lock the switch needs."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    with connected(parsed, "switching the SQLite outbox to WAL mode") as conn:
        conn.exec_driver_sql("PRAGMA busy_timeout=10000")
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")


def upgrade(url: str | URL, revision: str = "head") -> None:
    """Bring the outbox tables at `url` up to `revision` (default: the newest)."""
    _run_online(url, revision, down=False)


def downgrade(url: str | URL, revision: str) -> None:
    """Take the outbox tables at `url` down to `revision`; "base" drops them all, with their rows."""
    _run_online(url, revision, down=True)


def _offline_sql(url_or_dialect: str | URL, revision: str, *, down: bool) -> str:
    if isinstance(url_or_dialect, str) and url_or_dialect.strip() and "://" not in url_or_dialect:
        url_or_dialect = f"{url_or_dialect.strip()}://"
    parsed = parse_url(url_or_dialect)
    config = alembic_config()
    config.output_buffer = io.StringIO()
    # Only the dialect matters offline: no credentials go into the configuration, nothing connects and
    # the driver (pyodbc for SQL Server) need not be installed.
    config.set_main_option("sqlalchemy.url", f"{parsed.drivername}://")
    if ":" not in revision:
        # Offline, Alembic cannot read where the database stands; a downgrade starts from the head.
        revision = f"{head()}:{revision}" if down else revision
    try:
        if down:
            command.downgrade(config, revision, sql=True)
        else:
            command.upgrade(config, revision, sql=True)
    except CommandError as exc:
        raise ConfigurationError(f"cannot render the migration to revision {revision!r}: {exc}") from exc
    return config.output_buffer.getvalue()


def sql(url_or_dialect: str | URL, revision: str = "head", *, downgrade: bool = False) -> str:
    """The DDL that an upgrade (or downgrade) would run, as text, without connecting. Takes a URL
    (`mssql+pyodbc://...`) or a dialect name (`postgresql`)."""
    return _offline_sql(url_or_dialect, revision, down=downgrade)


def current(url: str | URL) -> str | None:
    """The revision the outbox tables at `url` are at, or None when they were never created."""
    with connected(url, "reading the outbox schema revision") as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def include_object(
    item: SchemaItem, name: str | None, type_: str, reflected: bool, compare_to: SchemaItem | None
) -> bool:
    """Autogenerate filter: skip tables that are not ours (the outbox shares the application's database)
    and the per-dialect horizon column and its index, which only the migrations declare."""
    if type_ == "table" and reflected and compare_to is None:
        return False
    horizon = set(HORIZON_COLUMNS.values())
    if type_ == "column" and isinstance(item, Column) and item.table.name == "domain_events":
        return name not in horizon
    if type_ == "index" and isinstance(item, Index) and item.table is not None:
        return not {column.name for column in item.columns} <= horizon
    return True


def migrate_command(url: str, sql: bool, revision: str, downgrade: bool) -> int:
    """`outbox-bridge migrate [--sql]`: run (or print) the migration, report on stdout/stderr, return
    the exit status (0 done, 2 bad configuration or TLS, 6 login refused, 1 database failure)."""
    try:
        if sql:
            sys.stdout.write(_offline_sql(url, revision, down=downgrade))
            return EXIT_OK
        _run_online(url, revision, down=downgrade)
        at = current(url)
        print(f"outbox schema at {masked(url)}: revision {at or 'base (no outbox tables)'}")
        return EXIT_OK
    except DatabaseLoginError as exc:
        print(f"outbox-bridge migrate: {exc}", file=sys.stderr)
        return EXIT_DB_LOGIN
    except ConfigurationError as exc:
        print(f"outbox-bridge migrate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutboxError as exc:
        print(f"outbox-bridge migrate: {exc}", file=sys.stderr)
        return EXIT_ERROR
