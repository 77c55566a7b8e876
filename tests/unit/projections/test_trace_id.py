"""The trace id column a declaration turns on: in the tables of the kinds whose rows each come from one event,
refused for the others, and reserved against payload fields only when kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from projections import EventLog, Fold, History, LatestState, Projection, WindowedCounts
from projections.errors import DeclarationError
from projections.kind import Kind

pytestmark = pytest.mark.unit

PLACED = StructType([StructField("order_id", StringType(), False), StructField("status", StringType())])


def declare(kind: Kind, trace_id: bool, placed: StructType = PLACED) -> Projection:
    return Projection(name="orders", kind=kind, event_types={"OrderPlaced": placed}, aggregate_types=("order",),
                      trace_id=trace_id)


@pytest.mark.parametrize("kind", [LatestState(), LatestState(carry_forward=True), History(), EventLog()])
def test_kinds_whose_rows_come_from_one_event_keep_its_trace_id_when_declared(kind: Kind) -> None:
    off = declare(kind, trace_id=False)
    assert "trace_id" not in kind.table_schema(off, off.resolve()).fieldNames(), "off by default: tables unchanged"
    on = declare(kind, trace_id=True)
    field = kind.table_schema(on, on.resolve())["trace_id"]
    assert field.dataType == StringType() and field.nullable, "null for an event written outside a trace"


@pytest.mark.parametrize("kind", [
    WindowedCounts(window=timedelta(minutes=1)),
    Fold(function=lambda state, event: state, state="n BIGINT"),
])
def test_kinds_whose_rows_gather_many_events_refuse_it(kind: Kind) -> None:
    with pytest.raises(DeclarationError, match="trace_id is kept only by kinds whose rows each come from one event"):
        declare(kind, trace_id=True)


def test_a_payload_field_named_trace_id_collides_only_when_the_column_is_kept() -> None:
    placed = StructType([*PLACED.fields, StructField("trace_id", StringType())])
    assert "trace_id" in declare(LatestState(), trace_id=False, placed=placed).resolve().columns.fieldNames()
    with pytest.raises(DeclarationError, match="payload field 'trace_id' of OrderPlaced collides"):
        declare(LatestState(), trace_id=True, placed=placed).resolve()
