"""Example projections of the demo "orders" domain (aggregate type `order`, topic `outbox.event.order`).

Events: OrderPlaced {order_id, customer, amount, currency}, OrderPaid {order_id, amount},
OrderShipped {order_id, carrier}, OrderCancelled {order_id, reason} (a delete for the current state).
"""

from __future__ import annotations

from typing import Final

from projections.declaration import Projection
from projections.kinds import Event, EventLog, Fold, History, LatestState, State, WindowedCounts

ORDER_EVENTS: Final = {
    "OrderPlaced": "order_id STRING NOT NULL, customer STRING, amount DECIMAL(12,2), currency STRING",
    "OrderPaid": "order_id STRING NOT NULL, amount DECIMAL(12,2)",
    "OrderShipped": "order_id STRING NOT NULL, carrier STRING",
    "OrderCancelled": "order_id STRING NOT NULL, reason STRING",
}
ORDER_STATUS: Final = {
    "OrderPlaced": "placed",
    "OrderPaid": "paid",
    "OrderShipped": "shipped",
    "OrderCancelled": "cancelled",
}


def order_status(state: State | None, event: Event) -> State | None:
    """Fold an order's events into its status, amounts and carrier, counting the events applied."""
    state = state or {
        "status": None,
        "customer": None,
        "amount": None,
        "currency": None,
        "paid": None,
        "carrier": None,
        "events": 0,
    }
    payload = event.payload
    if event.event_type == "OrderPlaced":
        state.update(customer=payload["customer"], amount=payload["amount"], currency=payload["currency"])
    elif event.event_type == "OrderPaid":
        state["paid"] = payload["amount"]
    elif event.event_type == "OrderShipped":
        state["carrier"] = payload["carrier"]
    state["status"] = ORDER_STATUS[event.event_type]
    state["events"] = int(state["events"] or 0) + 1
    return state


orders_current = Projection(
    name="orders_current",
    description="one row per order: the latest value of each field; cancelled orders are tombstones",
    kind=LatestState(deletes=frozenset({"OrderCancelled"}), carry_forward=True),
    event_types=ORDER_EVENTS,
    aggregate_types=("order",),
    key="order_id",
)
orders_history = Projection(
    name="orders_history",
    description="every version of every order, valid from one event's seq to the next",
    kind=History(deletes=frozenset({"OrderCancelled"})),
    event_types=ORDER_EVENTS,
    aggregate_types=("order",),
    key="order_id",
)
order_events = Projection(
    name="order_events",
    description="every order event once, by event_id",
    kind=EventLog(),
    event_types=ORDER_EVENTS,
    aggregate_types=("order",),
)
order_events_per_minute = Projection(
    name="order_events_per_minute",
    description="order events per minute, by event type",
    kind=WindowedCounts(window="1 minute"),
    event_types=ORDER_EVENTS,
    aggregate_types=("order",),
)
order_status_fold = Projection(
    name="order_status",
    description="each order's status, amounts and carrier, folded from its events in seq order",
    kind=Fold(
        function=order_status,
        state="status STRING, customer STRING, amount DECIMAL(12,2), currency STRING, paid DECIMAL(12,2), "
        "carrier STRING, events BIGINT",
    ),
    event_types=ORDER_EVENTS,
    aggregate_types=("order",),
    key="order_id",
)

PROJECTIONS: Final = (
    orders_current,
    orders_history,
    order_events,
    order_events_per_minute,
    order_status_fold,
)
