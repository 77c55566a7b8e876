"""Debezium's PostgreSQL connector with the Outbox Event Router, set up to publish our record format.

Our format (docs/DESIGN "Kafka records"): topic `outbox.event.<aggregate_type>`, key `aggregate_id`, value
the `payload` text unchanged, headers `event_id`, `event_type`, `aggregate_type`, `seq`, `occurred_at`
(then the row's own `headers` JSON entries). The router gets there as follows:

- topic: `route.by.field=aggregate_type`, `route.topic.replacement=<prefix>outbox.event.${routedByValue}`;
- key: `table.field.event.key=aggregate_id`, written by the worker's StringConverter as UTF-8;
- value: `table.field.event.payload=payload` with `table.expand.json.payload=false`, so the text is passed
  through as a string and the StringConverter writes its UTF-8 bytes;
- headers: `table.fields.additional.placement` puts the five columns into headers of the same names, in
  our order; the SimpleHeaderConverter writes strings as UTF-8 and the BIGINT `seq` as decimal text;
- the router always adds an `id` header (the event id again): Kafka's stock DropHeaders removes it.

What it cannot match is listed in DIFFERENCES (the comparison test asserts exactly these).

The slot and publication are the connector's own (`plugin.name=pgoutput`); the slot is created when the
connector first starts and must be dropped after it is deleted (`drop_slot`): a leftover slot pins WAL for
the whole server. `lsn.flush.mode` keeps Debezium's default.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

CONNECTOR_CLASS: Final = "io.debezium.connector.postgresql.PostgresConnector"
EVENT_ROUTER: Final = "io.debezium.transforms.outbox.EventRouter"
HEADER_COLUMNS: Final = ("event_id", "event_type", "aggregate_type", "seq", "occurred_at")

#: The differences between Debezium's records and the bridge's that no stock setting removes.
DIFFERENCES: Final[Mapping[str, str]] = {
    "occurred_at": (
        "Debezium renders a timestamptz(6) as io.debezium.time.ZonedTimestamp: six fraction digits always and "
        "`Z` for UTC (2026-01-31T12:00:00.000000Z); the bridge writes Python's isoformat: `+00:00`, and no "
        "fraction at all on a whole second (2026-01-31T12:00:00+00:00). Same instant, other bytes; no stock "
        "transform rewrites a header's text"
    ),
    "row headers": (
        "the bridge adds each entry of the row's `headers` JSON object as its own Kafka header; the router can "
        "only place the whole column into one header (here: not placed), since no stock transform splits "
        "JSON into headers"
    ),
    "timestamp": (
        "the record timestamp (CreateTime) is a relay's clock on both sides, so the values differ: the bridge's is "
        "when it produced the record, Debezium's a time taken from the change event when the connector handled it; "
        "neither is the row's occurred_at, and neither is a field of our format"
    ),
}


def outbox_connector_config(*, dbname: str, slot: str, publication: str, topic_prefix: str,
                            host: str = "127.0.0.1", port: int = 25432, user: str = "postgres",
                            password: str = "", partitions: int = 6, replication: int = 1,
                            table: str = "public.domain_events",
                            tuning: Mapping[str, str] | None = None) -> dict[str, str]:
    """The connector config: the outbox table only, routed to `<topic_prefix>outbox.event.<aggregate_type>`.

    `topic_prefix` may be empty (our default topic names); `tuning` adds or overrides connector settings
    (e.g. `poll.interval.ms`) and is reported with the benchmark.
    """
    config = {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.dbname": dbname,
        # Names Debezium's own topics (heartbeats, schema changes); the router renames every data record.
        "topic.prefix": f"dbz.{slot}",
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": publication,
        "publication.autocreate.mode": "filtered",
        "table.include.list": table,
        # xid8 is no type Debezium maps; the bridge's horizon column is not part of the event anyway.
        "column.exclude.list": f"{table}.txid",
        # Only changes after the slot exists: the outbox's history is not re-published as snapshot reads.
        "snapshot.mode": "no_data",
        "tombstones.on.delete": "false",
        # No `__debezium.context.*` headers (connector name, task id, ...) on every record.
        "extended.headers.enabled": "false",
        "transforms": "outbox,dropid",
        "transforms.outbox.type": EVENT_ROUTER,
        "transforms.outbox.table.field.event.id": "event_id",
        "transforms.outbox.table.field.event.key": "aggregate_id",
        "transforms.outbox.table.field.event.payload": "payload",
        "transforms.outbox.table.expand.json.payload": "false",
        "transforms.outbox.route.by.field": "aggregate_type",
        "transforms.outbox.route.topic.replacement": f"{topic_prefix}outbox.event.${{routedByValue}}",
        "transforms.outbox.table.fields.additional.placement": ",".join(f"{c}:header:{c}" for c in HEADER_COLUMNS),
        "transforms.dropid.type": "org.apache.kafka.connect.transforms.DropHeaders",
        "transforms.dropid.headers": "id",
        # Topics the worker creates itself have the bridge's shape.
        "topic.creation.default.partitions": str(partitions),
        "topic.creation.default.replication.factor": str(replication),
    }
    config.update(tuning or {})
    return config


def drop_slot(dsn: str, slot: str, publication: str | None = None, timeout: float = 30.0) -> None:
    """Drop the connector's replication slot (waiting for its walsender to go) and its publication.

    Call it after the connector is deleted or its worker stopped; a slot left behind pins WAL for the whole
    server. `dsn` is a libpq connection string to the connector's database.
    """
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
            if row is None:
                break
            if row[0] is None:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                break
            if time.monotonic() > deadline:
                # The walsender outlived its client (a killed worker): end it, then drop the slot.
                conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            time.sleep(0.2)
        if publication is not None:
            conn.execute(f'DROP PUBLICATION IF EXISTS "{publication}"')
