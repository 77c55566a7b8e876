"""From Kafka records to events: the envelope from the key and headers, the payload parsed per event type.

Both record formats of the bridge read the same: a CloudEvents record (`BRIDGE_RECORD_FORMAT=cloudevents`) carries
the plain format's headers too, and its CloudEvents attributes, which say nothing those do not, are left out of
`headers`.

Both value formats read the same too: a value in a schema registry's wire format (`BRIDGE_VALUE_FORMAT=json-schema`:
magic byte 0, a 4-byte schema id, then the payload as written) gives the payload without its frame. A plain JSON
value never starts with byte 0, so the first byte tells them apart, and the registry need not be asked: the payload
was validated before it was published.

`decode` keeps every record and says, per record, whether the projection handles it (`_relevant`) and
what is wrong with it (`_error`, null when nothing is). The batch applier sends relevant records with an
error to quarantine and the rest of the relevant ones to the projection's kind.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from bridge.core.wire_format import MAGIC_BYTE, PREFIX_BYTES
from projections.declaration import Projection
from projections.payload import DEFAULT_KEY, TRACE_ID, ResolvedPayload

STANDARD_HEADERS: Final = ("event_id", "event_type", "aggregate_type", "seq", "occurred_at")
#: The headers the cloudevents format adds (`bridge.core.cloudevents`): its records are those with `ce_specversion`.
CLOUDEVENTS_HEADERS: Final = ("ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_subject",
                              "content-type")
# A version-00 traceparent's trace id; a malformed one, or the all-zero (invalid) id, gives no trace id.
_TRACE_ID: Final = "^00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$"
ERROR: Final = "_error"
RELEVANT: Final = "_relevant"
_CORRUPT: Final = "_corrupt_record"

# Envelope columns in the order `decode` gives them; payload fields follow, then `_relevant` and `_error`.
ENVELOPE: Final = (
    "topic",
    "partition",
    "offset",
    "kafka_timestamp",
    "aggregate_id",
    "event_id",
    "event_type",
    "aggregate_type",
    "seq",
    "seq_text",
    "occurred_at",
    "occurred_at_text",
    "headers",
    "payload",
    "value",
)


def unframed_sql(value: str) -> str:
    """Spark SQL giving the payload bytes of the binary column `value`: without the wire format's frame when the
    value starts with the magic byte (and is long enough to hold the frame), else the value itself."""
    return (f"CASE WHEN length({value}) >= {PREFIX_BYTES} AND substring({value}, 1, 1) = X'{MAGIC_BYTE:02X}' "
            f"THEN substring({value}, {PREFIX_BYTES + 1}) ELSE {value} END")


def _header(name: str) -> Column:
    # The last occurrence wins, as with most Kafka clients; an absent header gives null.
    return F.expr(f"try_element_at(filter(headers, h -> h.key = '{name}'), -1).value").cast("string")


def _quoted(names: tuple[str, ...]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def _envelope(raw: DataFrame) -> DataFrame:
    standard = _quoted(STANDARD_HEADERS)
    cloudevent = "exists(coalesce(headers, array()), h -> h.key = 'ce_specversion')"
    return (
        raw.select(
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.col("timestamp").alias("kafka_timestamp"),
            F.col("key").cast("string").alias("aggregate_id"),
            _header("event_id").alias("event_id"),
            _header("event_type").alias("event_type"),
            _header("aggregate_type").alias("aggregate_type"),
            _header("seq").alias("seq_text"),
            _header("occurred_at").alias("occurred_at_text"),
            F.expr(
                f"transform(filter(coalesce(headers, array()), h -> h.key NOT IN ({standard}) AND NOT "
                f"({cloudevent} AND h.key IN ({_quoted(CLOUDEVENTS_HEADERS)}))), "
                "h -> named_struct('key', h.key, 'value', CAST(h.value AS STRING)))"
            ).alias("headers"),
            F.expr(unframed_sql("value")).cast("string").alias("payload"),
            F.col("value"),
        )
        .withColumns(
            {
                "seq": F.expr("try_cast(seq_text AS BIGINT)"),
                "occurred_at": F.expr("try_to_timestamp(occurred_at_text)"),
            }
        )
        .select(*ENVELOPE)
    )


def decode(raw: DataFrame, projection: Projection, payload: ResolvedPayload) -> DataFrame:
    """Kafka rows (with headers) to one row per record: envelope, payload fields, `_relevant`, `_error`."""
    frame = _envelope(raw)
    types = list(payload.by_event_type)
    # One parsed struct per event type, non-null only on rows of that type.
    parsed = {t: f"_p{i}" for i, t in enumerate(types)}
    options = {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}
    frame = frame.withColumns(
        {
            parsed[t]: F.when(
                F.col("event_type") == t,
                F.from_json(
                    "payload",
                    StructType([*payload.by_event_type[t].fields, StructField(_CORRUPT, StringType())]),
                    options,
                ),
            )
            for t in types
        }
    )
    fields = {}
    for column in payload.columns.fields:
        sources = [F.col(f"{parsed[t]}.{column.name}") for t in types if column.name in payload.fields_of(t)]
        fields[column.name] = (F.coalesce(*sources) if len(sources) > 1 else sources[0]).cast(column.dataType)
    frame = frame.withColumns(fields)

    if projection.handles_every_type:
        relevant = F.lit(True)
    else:
        relevant = F.col("event_type").isNull() | F.col("event_type").isin(types)
    if projection.trace_id:
        trace_id = F.regexp_extract(_header("traceparent"), _TRACE_ID, 1)
        frame = frame.withColumn(TRACE_ID, F.when(~trace_id.isin("", "0" * 32), trace_id))
    frame = frame.withColumn(RELEVANT, relevant)
    frame = frame.withColumn(ERROR, _error(projection, payload, parsed))
    return frame.drop(*parsed.values())


def _error(projection: Projection, payload: ResolvedPayload, parsed: dict[str, str]) -> Column:
    """The first thing wrong with a record, in the order an operator would fix them; null when nothing is."""
    checks: list[tuple[Column, Column]] = [
        (F.col("event_id").isNull() | (F.col("event_id") == ""), F.lit("missing header event_id")),
        (F.col("event_type").isNull() | (F.col("event_type") == ""), F.lit("missing header event_type")),
        (F.col("seq_text").isNull(), F.lit("missing header seq")),
        (
            F.col("seq").isNull(),
            F.concat(F.lit("header seq is not a decimal integer: "), F.col("seq_text")),
        ),
        (F.col("occurred_at_text").isNull(), F.lit("missing header occurred_at")),
        (
            F.col("occurred_at").isNull(),
            F.concat(F.lit("header occurred_at is not an ISO 8601 time: "), F.col("occurred_at_text")),
        ),
        (F.col("aggregate_id").isNull(), F.lit("record has no key (the aggregate_id)")),
    ]
    for event_type, column in parsed.items():
        of_type = F.col("event_type") == event_type
        ddl = payload.by_event_type[event_type].simpleString()
        checks += [
            (of_type & F.col("payload").isNull(), F.lit(f"record of {event_type} has no value (payload)")),
            (
                of_type & F.col(f"{column}.{_CORRUPT}").isNotNull() & F.json_object_keys("payload").isNull(),
                F.lit(f"payload of {event_type} is not a JSON object"),
            ),
            (
                of_type & F.col(f"{column}.{_CORRUPT}").isNotNull(),
                F.lit(f"payload of {event_type} does not fit its schema {ddl}"),
            ),
        ]
        required = payload.required_fields(event_type)
        if required:
            missing = [F.when(F.col(f"{column}.{name}").isNull(), F.lit(name)) for name in required]
            checks.append(
                (
                    of_type & (F.concat_ws("", *missing) != ""),  # concat_ws skips nulls: "" when none missing
                    F.concat(
                        F.lit(f"payload of {event_type} lacks required field(s): "),
                        F.concat_ws(", ", *missing),
                    ),
                )
            )
    if projection.key != DEFAULT_KEY:
        checks.append(
            (
                F.col(projection.key).isNull(),
                F.lit(f"payload has no value for the key field {projection.key}"),
            )
        )
    condition, message = checks[0]
    error = F.when(condition, message)
    for condition, message in checks[1:]:
        error = error.when(condition, message)
    return error
