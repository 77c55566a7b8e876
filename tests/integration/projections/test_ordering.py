"""Out-of-order events: the highest seq wins, and a delete is not undone by an older event, in or across batches."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from projections.examples import order_status_fold, orders_current, orders_history
from projections.kinds import LatestState
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import OutboxEvent, produce

# The same declaration as orders_current, but each row is the latest event's payload (no carry forward).
orders_latest_row = dataclasses.replace(
    orders_current, name="orders_latest_row", kind=LatestState(deletes=frozenset({"OrderCancelled"}))
)


def placed(seq: int, order: str, amount: int = 10) -> OutboxEvent:
    payload = {"order_id": order, "customer": f"c-{order}", "amount": amount, "currency": "EUR"}
    return OutboxEvent(seq, order, "OrderPlaced", payload)


def paid(seq: int, order: str, amount: int) -> OutboxEvent:
    return OutboxEvent(seq, order, "OrderPaid", {"order_id": order, "amount": amount})


def shipped(seq: int, order: str, carrier: str) -> OutboxEvent:
    return OutboxEvent(seq, order, "OrderShipped", {"order_id": order, "carrier": carrier})


def cancelled(seq: int, order: str) -> OutboxEvent:
    return OutboxEvent(seq, order, "OrderCancelled", {"order_id": order, "reason": "fraud"})


# Sent in this order; each key lands on one partition, so Kafka keeps the (wrong) order per key.
FIRST_BATCH = [
    shipped(5, "A", "ups"),
    paid(3, "A", 12),
    placed(1, "A"),
    paid(2, "A", 11),  # newest first
    placed(10, "B"),
    cancelled(12, "B"),
    paid(11, "B", 99),  # an older update after the delete
    placed(20, "C"),
    cancelled(22, "C"),
    placed(30, "D"),
    cancelled(31, "D"),
]
SECOND_BATCH = [
    paid(21, "C", 77),  # older than C's delete, arriving a batch later
    placed(32, "D", amount=50),  # newer than D's delete: D is placed again
    paid(4, "A", 13),  # older than A's latest event (5), newer than its latest payment (3)
]

PROJECTIONS = (orders_latest_row, orders_current, orders_history, order_status_fold)


def by_order(harness: Harness, projection: Any, lake: Any) -> dict[str, dict[str, Any]]:
    rows = harness.spark.read.format("delta").load(lake.table(projection.name)).collect()
    return {r["order_id"]: r.asDict() for r in rows}


def test_highest_seq_wins_and_deletes_stay_deleted(harness: Harness) -> None:
    topic = harness.topic(FIRST_BATCH)
    lake = harness.lake("lake")
    harness.run(PROJECTIONS, topic, lake)

    row = by_order(harness, orders_latest_row, lake)
    assert (row["A"]["seq"], row["A"]["event_type"], row["A"]["carrier"], row["A"]["customer"]) == (
        5,
        "OrderShipped",
        "ups",
        None,
    )
    assert (row["B"]["seq"], row["B"]["is_deleted"], row["B"]["amount"]) == (12, True, None)
    assert (row["C"]["seq"], row["C"]["is_deleted"]) == (22, True)

    current = by_order(harness, orders_current, lake)
    a = current["A"]
    assert (a["seq"], a["customer"], a["amount"], a["carrier"]) == (5, "c-A", Decimal("12.00"), "ups")
    b = current["B"]
    assert (b["seq"], b["is_deleted"], b["amount"], b["customer"], b["reason"]) == (
        12,
        True,
        None,
        None,
        "fraud",
    )

    produce(harness.bootstrap, topic, SECOND_BATCH)
    harness.run(PROJECTIONS, topic, lake)

    row = by_order(harness, orders_latest_row, lake)
    assert (row["A"]["seq"], row["A"]["carrier"]) == (5, "ups")  # seq 4 is older than 5
    assert (row["C"]["seq"], row["C"]["is_deleted"], row["C"]["amount"]) == (22, True, None)
    assert (row["D"]["seq"], row["D"]["is_deleted"], row["D"]["amount"]) == (32, False, Decimal("50.00"))

    current = by_order(harness, orders_current, lake)
    # Per column, the newest value wins: seq 4's payment is newer than seq 3's; the row's seq stays 5.
    assert (current["A"]["seq"], current["A"]["amount"], current["A"]["carrier"]) == (
        5,
        Decimal("13.00"),
        "ups",
    )
    assert (current["C"]["is_deleted"], current["C"]["amount"], current["C"]["customer"]) == (
        True,
        None,
        None,
    )
    d = current["D"]
    assert (d["is_deleted"], d["amount"], d["customer"], d["reason"]) == (
        False,
        Decimal("50.00"),
        "c-D",
        None,
    )
    live = harness.spark.read.format("delta").load(lake.table(orders_current.name)).where("NOT is_deleted")
    assert sorted(r["order_id"] for r in live.collect()) == ["A", "D"]

    # History: every version in seq order, the late ones slotted in, B and C ending in a deleted version.
    history = harness.spark.read.format("delta").load(lake.table(orders_history.name))
    timeline = {
        order: [(r["valid_from_seq"], r["valid_to_seq"], r["is_deleted"]) for r in rows]
        for order, rows in _group(history.orderBy("valid_from_seq").collect()).items()
    }
    assert timeline["A"] == [(1, 2, False), (2, 3, False), (3, 4, False), (4, 5, False), (5, None, False)]
    assert timeline["B"] == [(10, 11, False), (11, 12, False), (12, None, True)]
    assert timeline["C"] == [(20, 21, False), (21, 22, False), (22, None, True)]
    assert timeline["D"] == [(30, 31, False), (31, 32, True), (32, None, False)]

    # Fold: every event folded in seq order; one older than the last folded makes the key fold again.
    status = by_order(harness, order_status_fold, lake)
    assert (status["A"]["status"], status["A"]["events"], status["A"]["seq"]) == ("shipped", 5, 5)
    assert (status["A"]["paid"], status["A"]["carrier"]) == (Decimal("13.00"), "ups")
    assert (status["C"]["status"], status["C"]["events"], status["C"]["paid"]) == (
        "cancelled",
        3,
        Decimal("77.00"),
    )
    assert (status["D"]["status"], status["D"]["events"], status["D"]["amount"]) == (
        "placed",
        3,
        Decimal("50.00"),
    )


def _group(rows: list[Any]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for r in rows:
        grouped.setdefault(r["order_id"], []).append(r)
    return grouped
