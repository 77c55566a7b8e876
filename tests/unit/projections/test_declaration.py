"""Projection declarations: what is refused when declared, and how payload schemas become columns."""

from __future__ import annotations

import sys
import types

import pytest
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

from projections import EventLog, History, LatestState, Projection, WindowedCounts
from projections.catalog import load_catalog
from projections.errors import DeclarationError, UnknownProjectionError

pytestmark = pytest.mark.unit

PLACED = StructType(
    [
        StructField("order_id", StringType(), False),
        StructField("amount", DecimalType(12, 2)),
        StructField("customer", StringType()),
    ]
)
PAID = StructType([StructField("order_id", StringType(), False), StructField("amount", DecimalType(12, 2))])


def declare(**overrides: object) -> Projection:
    values: dict[str, object] = {
        "name": "orders",
        "kind": LatestState(),
        "event_types": {"OrderPlaced": PLACED, "OrderPaid": PAID},
        "aggregate_types": ("order",),
    }
    return Projection(**{**values, **overrides})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["Orders", "1orders", "orders-current", "", "x" * 64])
def test_names_that_cannot_be_directories_and_labels_are_refused(name: str) -> None:
    with pytest.raises(DeclarationError, match="projection name"):
        declare(name=name)


@pytest.mark.parametrize(
    "source",
    [{}, {"topics": ("a",), "topic_pattern": "b.*"}, {"aggregate_types": ("order",), "topics": ("a",)}],
)
def test_exactly_one_source(source: dict[str, object]) -> None:
    with pytest.raises(DeclarationError, match="exactly one of topics, topic_pattern or aggregate_types"):
        declare(**{"aggregate_types": (), **source})


def test_options_the_runner_owns_are_refused() -> None:
    with pytest.raises(DeclarationError, match="startingOffsets"):
        declare(options={"startingOffsets": "latest", "kafka.client.rack": "a"})
    assert declare(options={"kafka.client.rack": "a"}).options == {"kafka.client.rack": "a"}


def test_a_payload_key_must_be_declared_by_every_event_type() -> None:
    assert declare(key="order_id").key == "order_id"
    with pytest.raises(DeclarationError, match="key field 'customer'"):
        declare(key="customer")


def test_delete_types_must_be_handled_types() -> None:
    with pytest.raises(DeclarationError, match="OrderCancelled"):
        declare(kind=LatestState(deletes=frozenset({"OrderCancelled"})))
    with pytest.raises(DeclarationError, match="OrderCancelled"):
        declare(kind=History(deletes=frozenset({"OrderCancelled"})))


def test_windowed_counts_dimensions_are_checked() -> None:
    with pytest.raises(DeclarationError, match="dimensions"):
        declare(kind=WindowedCounts(dimensions=("customer",)))
    assert declare(kind=WindowedCounts(dimensions=("event_type",))).kind.name == "windowed_counts"


def test_source_option_renders_the_topic_template() -> None:
    assert declare().source_option("outbox.event.{aggregate_type}") == ("subscribe", "outbox.event.order")
    assert declare(aggregate_types=(), topic_pattern="outbox\\..*").source_option("x") == (
        "subscribePattern",
        "outbox\\..*",
    )
    with pytest.raises(DeclarationError, match="placeholder"):
        declare().source_option("outbox.events")


def test_columns_are_the_union_of_the_event_types_fields_all_nullable() -> None:
    resolved = declare().resolve()
    assert [(f.name, f.nullable) for f in resolved.columns.fields] == [
        ("order_id", True),
        ("amount", True),
        ("customer", True),
    ]
    assert resolved.fields_of("OrderPaid") == ("order_id", "amount")
    assert resolved.required_fields("OrderPlaced") == ("order_id",)


def test_one_field_with_two_types_is_refused() -> None:
    paid = StructType([StructField("amount", LongType())])
    with pytest.raises(DeclarationError, match="'amount' is decimal\\(12,2\\) in one event type and bigint"):
        declare(event_types={"OrderPlaced": PLACED, "OrderPaid": paid}).resolve()


@pytest.mark.parametrize("field", ["seq", "event_id", "is_deleted", "_private"])
def test_payload_fields_may_not_shadow_framework_columns(field: str) -> None:
    schema = StructType([StructField(field, StringType())])
    with pytest.raises(DeclarationError, match="collides"):
        declare(kind=EventLog(), event_types={"OrderPlaced": schema}).resolve()


def test_the_catalog_holds_the_examples_and_refuses_duplicate_names(monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = load_catalog()
    assert catalog.names() == [
        "order_events",
        "order_events_per_minute",
        "order_status",
        "orders_current",
        "orders_history",
    ]
    assert {catalog.get(n).kind.name for n in catalog.names()} == {
        "latest_state",
        "history",
        "event_log",
        "windowed_counts",
        "fold",
    }
    with pytest.raises(UnknownProjectionError, match="orders_currnet"):
        catalog.get("orders_currnet")

    module = types.ModuleType("my_projections")
    module.PROJECTIONS = (declare(name="orders_current"),)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "my_projections", module)
    with pytest.raises(DeclarationError, match=r"declared in both projections\.examples and my_projections"):
        load_catalog(["my_projections"])
    module.PROJECTIONS = (declare(name="my_orders"),)  # type: ignore[attr-defined]
    assert "my_orders" in load_catalog(["my_projections"]).names()
