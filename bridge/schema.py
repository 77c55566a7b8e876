"""The outbox tables as SQLAlchemy Core metadata: the one description that queries and migrations share.

The tables are created only by the Alembic migrations (`bridge.migrate.upgrade`), never by
`metadata.create_all`: the migrations add what a portable `Table` cannot say, namely the
PostgreSQL sequence function and notify trigger, the SQL Server ticket table, sequence and
INSTEAD OF INSERT trigger, and each dialect's commit-visibility column. A test compares a migrated
database with this metadata, so the two cannot drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Column,
    Dialect,
    FetchedValue,
    Integer,
    MetaData,
    String,
    Table,
    TypeDecorator,
    Unicode,
    UnicodeText,
    UniqueConstraint,
    event,
    text,
)
from sqlalchemy.dialects import mssql
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import DateTime, Text, TypeEngine, UserDefinedType

from bridge.errors import ConfigurationError

#: PostgreSQL channel the insert trigger notifies, so a bridge can LISTEN instead of polling hard.
NOTIFY_CHANNEL: Final = "outbox_events"
#: PostgreSQL function that gives `domain_events.seq` its default (see the migration for why).
SEQ_FUNCTION: Final = "outbox_next_seq"
#: PostgreSQL sequence behind `SEQ_FUNCTION`, owned by `domain_events.seq`.
SEQ_SEQUENCE: Final = "domain_events_seq_seq"
#: SQL Server (revision 0002): the INSTEAD OF INSERT trigger on `domain_events` that takes a ticket
#: (an active rowversion) before it draws seqs from `MSSQL_SEQ_SEQUENCE`; the table of tickets; and
#: the CHECK that refuses a row whose seq did not come from the trigger. A start-up check can look
#: these names up in sys.triggers, sys.sequences, sys.tables and sys.check_constraints.
MSSQL_SEQ_TRIGGER: Final = "domain_events_stamp_then_seq"
MSSQL_SEQ_SEQUENCE: Final = "domain_events_seq"
MSSQL_TICKETS: Final = "outbox_seq_tickets"
MSSQL_SEQ_CHECK: Final = "ck_domain_events_seq_drawn"
#: The commit-visibility ("horizon") column each dialect adds to `domain_events`. It is left out of
#: the portable `Table` below so that `select(domain_events)` works on every dialect; SQLite needs
#: none because it has one writer at a time, so commit order is seq order.
HORIZON_COLUMNS: Final[dict[str, str]] = {"postgresql": "txid", "mssql": "row_version"}
#: The unique constraint on `domain_events.event_id`; a violation of it means a duplicate event.
EVENT_ID_UNIQUE: Final = "uq_domain_events_event_id"
#: Dialects the migrations know how to build the outbox for.
SUPPORTED_DIALECTS: Final = ("sqlite", "postgresql", "mssql")


class UtcTimestamp(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp: `timestamptz`, `DATETIMEOFFSET`, or ISO 8601 text on SQLite.

    SQLite stores `YYYY-MM-DDTHH:MM:SS.ffffffZ`, the same shape as its column default, so the text
    sorts in time order whichever side wrote it.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(Text())
        if dialect.name == "mssql":
            return dialect.type_descriptor(mssql.DATETIMEOFFSET())  # type: ignore[no-untyped-call]
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"timestamp {value.isoformat()} has no timezone; pass an aware datetime (UTC)")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


def as_utc(value: Any) -> datetime:
    """A timestamp as the database returned it (datetime, or ISO 8601 text on SQLite), as an aware UTC datetime."""
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    if not isinstance(parsed, datetime):
        raise TypeError(f"expected a timestamp, the database returned {value!r}")
    if parsed.tzinfo is UTC:
        return parsed
    # Text written by other applications without an offset is taken to be UTC, as the column says.
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class utc_now(FunctionElement[datetime]):
    """The database's current UTC time, usable as a column default on every supported dialect."""

    type = UtcTimestamp()
    inherit_cache = True


@compiles(utc_now)
def _utc_now_default(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(utc_now, "postgresql")
def _utc_now_postgresql(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "now()"


@compiles(utc_now, "mssql")
def _utc_now_mssql(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "SYSUTCDATETIME()"


@compiles(utc_now, "sqlite")
def _utc_now_sqlite(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    # strftime's %f is seconds with milliseconds; the literal 000 pads it to UtcTimestamp's microseconds.
    return "strftime('%Y-%m-%dT%H:%M:%f000Z', 'now')"


class XID8(UserDefinedType[str]):
    """PostgreSQL's 64-bit transaction id type, read back as decimal text."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "XID8"


#: JSON and free text: `text` on PostgreSQL and SQLite, `NVARCHAR(MAX)` on SQL Server (whose plain
#: `Text` would be the deprecated TEXT/NTEXT types).
LongText: Final = UnicodeText().with_variant(mssql.NVARCHAR(), "mssql")
#: `seq`: SQLite makes only an `INTEGER PRIMARY KEY` an alias of its rowid.
SeqType: Final = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

domain_events = Table(
    "domain_events",
    metadata,
    # The database draws the seq: outbox_next_seq() on PostgreSQL, the INSTEAD OF INSERT trigger on
    # SQL Server, the rowid on SQLite. FetchedValue (rather than autoincrement) keeps SQLAlchemy from
    # treating it as an IDENTITY on SQL Server, where it would ask SCOPE_IDENTITY() for it afterwards
    # and get NULL: the trigger's insert runs in another scope.
    Column("seq", SeqType, FetchedValue(), primary_key=True),
    Column("event_id", Unicode(100), nullable=False),
    Column("aggregate_type", Unicode(255), nullable=False),
    Column("aggregate_id", Unicode(255), nullable=False),
    Column("event_type", Unicode(255), nullable=False),
    Column("payload", LongText, nullable=False),
    Column("headers", LongText, nullable=True),
    Column("occurred_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
    Column("schema_version", Integer, nullable=False, server_default=text("1")),
    UniqueConstraint("event_id", name=EVENT_ID_UNIQUE),
    sqlite_autoincrement=True,
    # SQL Server refuses `OUTPUT inserted...` (without INTO) on a table with a trigger, and SQLAlchemy
    # would add `OUTPUT inserted.seq` to a one-row INSERT to learn the seq. Nothing here needs it back.
    implicit_returning=False,
)

bridge_offsets = Table(
    "bridge_offsets",
    metadata,
    Column("bridge_name", String(200), primary_key=True),
    Column("watermark", BigInteger, nullable=False, server_default=text("0")),
    Column("epoch", BigInteger, nullable=False, server_default=text("0")),
    Column("owner", Unicode(255), nullable=True),
    Column("lease_expires_at", UtcTimestamp(), nullable=True),
    Column("heartbeat_at", UtcTimestamp(), nullable=True),
    Column("updated_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
    Column("status_json", LongText, nullable=True),
    # An operator retired the name (`outbox-bridge names retire`): it no longer holds retention back, and it
    # leads again only when told where to start (revision 0004).
    Column("retired_at", UtcTimestamp(), nullable=True),
    Column("retired_reason", LongText, nullable=True),
)

bridge_replay_audit = Table(
    "bridge_replay_audit",
    metadata,
    Column("id", SeqType, primary_key=True, autoincrement=True),
    Column("bridge_name", String(200), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("from_seq", BigInteger, nullable=False),
    Column("to_seq", BigInteger, nullable=True),
    Column("filters_json", LongText, nullable=True),
    Column("requested_by", Unicode(255), nullable=False),
    Column("reason", LongText, nullable=True),
    Column("requested_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
    Column("applied_at", UtcTimestamp(), nullable=True),
    Column("status", String(32), nullable=False, server_default="pending"),
)

#: `bridge_replay_audit.mode` and `.status` values. Besides replays (`rewind`, `range`) the table audits
#: the other operator actions that decide what a name publishes or what the outbox keeps: a start past
#: deleted rows (`start`), retiring a name (`retire`) and resolving dead letters (`resolve`).
REPLAY_MODES: Final = ("rewind", "range", "start", "retire", "resolve")
REPLAY_STATUSES: Final = ("pending", "applied", "refused", "done", "failed")

#: A poison row a bridge name sent to its dead-letter topic (policy `dead-letter`). Written in the same
#: transaction that persists a watermark past the row, so it exists before retention could delete the
#: row; retention and `cleanup` keep the row while any name's dead letter for it is open.
bridge_dead_letters = Table(
    "bridge_dead_letters",
    metadata,
    Column("bridge_name", String(200), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("event_id", Unicode(100), nullable=False),
    Column("aggregate_type", Unicode(255), nullable=False),
    Column("aggregate_id", Unicode(255), nullable=False),
    Column("reason", LongText, nullable=False),
    Column("dead_letter_topic", Unicode(255), nullable=False),
    Column("payload_bytes", BigInteger, nullable=False),
    #: 1 when the dead-letter copy had to be cut to fit its topic (the whole event is only in the outbox).
    Column("payload_truncated", Integer, nullable=False, server_default=text("0")),
    Column("dead_lettered_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
    Column("status", String(16), nullable=False, server_default="open"),
    Column("resolved_at", UtcTimestamp(), nullable=True),
    Column("resolved_by", Unicode(255), nullable=True),
    Column("resolution", LongText, nullable=True),
)

#: `bridge_dead_letters.status`: open until an operator republishes it (`republished`) or says why not
#: (`resolved`); only then may retention delete the row.
DEAD_LETTER_STATUSES: Final = ("open", "resolved", "republished")

#: Each running instance of a bridge name and its state: `starting` (with the start-up step that keeps
#: failing, how often and since when), `standing-by` or `leading`. Written best effort by the instance
#: itself, removed when it stops; `status` and `doctor` read it (revision 0004).
bridge_instances = Table(
    "bridge_instances",
    metadata,
    Column("bridge_name", String(200), primary_key=True),
    Column("instance", Unicode(255), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("step", Unicode(64), nullable=True),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("failing_since", UtcTimestamp(), nullable=True),
    Column("error", LongText, nullable=True),
    Column("updated_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
)

#: What retention and `cleanup` deleted, one row per run (updated batch by batch, each in the batch's own
#: transaction): a bridge whose watermark is below `through_seq` would otherwise pass deleted rows over as
#: rolled-back holes, so it refuses to lead instead (`bridge.daemon.history`).
bridge_deletions = Table(
    "bridge_deletions",
    metadata,
    Column("id", SeqType, primary_key=True, autoincrement=True),
    Column("first_seq", BigInteger, nullable=False),
    Column("through_seq", BigInteger, nullable=False, index=True),
    Column("row_count", BigInteger, nullable=False, server_default=text("0")),
    Column("deleted_by", Unicode(255), nullable=False),
    Column("started_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
    Column("finished_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
)


@event.listens_for(metadata, "before_create")
def _refuse_create_all(target: MetaData, connection: Connection, **kw: Any) -> None:
    raise ConfigurationError(
        "the outbox tables are created by the migrations, not metadata.create_all(): "
        "run bridge.migrate.upgrade(url) or `outbox-bridge migrate`"
    )
