"""Alembic environment for the outbox tables (`bridge.schema`).

Online, `bridge.migrate` hands over an open connection in `config.attributes["connection"]`; the
`alembic` command line instead connects to `sqlalchemy.url`, else to `OUTBOX_DB_URL`. Offline
(`--sql`) only the URL's dialect is used, so each revision can emit its per-dialect DDL.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from bridge.migrate import VERSION_TABLE, include_object, parse_url
from bridge.schema import metadata

config = context.config
if config.config_file_name is not None:
    # Only the alembic command line reads logging settings; a program keeps its own.
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("OUTBOX_DB_URL", "")
    return parse_url(url).render_as_string(hide_password=False)


def configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=metadata,
        version_table=config.get_main_option("version_table") or VERSION_TABLE,
        include_object=include_object,
        compare_type=True,
        **kwargs,
    )


def run_offline() -> None:
    configure(url=database_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_on(connection: Connection) -> None:
    configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    engine = create_engine(database_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            run_on(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
