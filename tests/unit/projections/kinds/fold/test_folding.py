"""The fold executor: a key's pending events applied in seq order onto its stored state."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import Row

from projections.errors import FoldError
from projections.examples import order_status
from projections.kinds.fold.folding import Event, KeyFolder, State

pytestmark = pytest.mark.unit

COLUMNS = (
    "order_id",
    "status",
    "customer",
    "amount",
    "currency",
    "paid",
    "carrier",
    "events",
    "aggregate_id",
    "event_id",
    "event_type",
    "seq",
    "occurred_at",
    "is_deleted",
)
STATE = ("status", "customer", "amount", "currency", "paid", "carrier", "events")
FIELDS = {
    "OrderPlaced": ("order_id", "customer", "amount", "currency"),
    "OrderPaid": ("order_id", "amount"),
    "OrderShipped": ("order_id", "carrier"),
    "OrderCancelled": ("order_id", "reason"),
}


def row(
    seq: int,
    event_type: str,
    stored: dict[str, Any] | None = None,
    applied: int | None = None,
    deleted: bool = False,
    refold: bool = False,
    base: dict[str, Any] | bool | None = False,
    **payload: Any,
) -> Row:
    """One row as the folder gets it; `base` (a state, or None for a deleted one) makes it a base row."""
    values = {"customer": None, "amount": None, "currency": None, "carrier": None, "reason": None, **payload}
    return Row(
        order_id="o1",
        event_id=f"e{seq}",
        event_type=event_type,
        aggregate_type="order",
        aggregate_id="o1",
        seq=seq,
        occurred_at=datetime(2024, 5, 1, tzinfo=UTC),
        **values,
        _state=Row(**stored) if stored else None,
        _applied_seq=applied,
        _deleted=deleted,
        _refold=refold,
        _base=base is not False,
        _base_state=Row(**{n: base.get(n) for n in STATE}) if isinstance(base, dict) else None,
    )


def folded(rows: list[Row], function: Any = order_status) -> dict[str, Any]:
    """The row the folder makes of one key's rows, by column, with `_refold` last."""
    return dict(zip((*COLUMNS, "_refold"), folder(function)(("o1", rows)), strict=True))


def folder(function: Any = order_status) -> KeyFolder:
    return KeyFolder(
        function=function, key="order_id", fields_by_type=FIELDS, state_names=STATE, columns=COLUMNS
    )


def test_events_are_applied_in_seq_order_whatever_the_arrival_order() -> None:
    rows = [
        row(3, "OrderShipped", carrier="ups"),
        row(1, "OrderPlaced", customer="c", amount=Decimal(5), currency="EUR"),
        row(2, "OrderPaid", amount=Decimal(5)),
    ]
    out = folded(rows)
    assert (out["status"], out["events"], out["seq"], out["event_id"]) == ("shipped", 3, 3, "e3")
    assert (out["customer"], out["paid"], out["carrier"], out["is_deleted"]) == (
        "c",
        Decimal(5),
        "ups",
        False,
    )


def test_folding_continues_from_the_stored_state() -> None:
    stored = {
        "status": "paid",
        "customer": "c",
        "amount": Decimal(5),
        "currency": "EUR",
        "paid": Decimal(5),
        "carrier": None,
        "events": 2,
    }
    out = folded([row(9, "OrderShipped", stored, applied=8, carrier="dhl")])
    assert (out["status"], out["events"], out["customer"], out["carrier"]) == ("shipped", 3, "c", "dhl")
    assert out["_refold"] is False


def test_a_refold_starts_from_none_over_all_the_kept_events_and_says_so() -> None:
    # Rows of a re-fold come from the event store: no stored state, every kept event of the key.
    rows = [
        row(3, "OrderShipped", refold=True, carrier="ups"),
        row(1, "OrderPlaced", refold=True, customer="c", amount=Decimal(5), currency="EUR"),
        row(2, "OrderPaid", refold=True, amount=Decimal(5)),
    ]
    out = folded(rows)
    assert (out["status"], out["events"], out["seq"], out["paid"], out["_refold"]) == (
        "shipped",
        3,
        3,
        Decimal(5),
        True,
    )


def test_none_deletes_and_a_deleted_key_starts_again_from_none() -> None:
    seen: list[State | None] = []

    def delete_on_cancel(state: State | None, event: Event) -> State | None:
        seen.append(state)
        return None if event.event_type == "OrderCancelled" else {"status": event.event_type, "events": 1}

    out = folded([row(4, "OrderCancelled")], delete_on_cancel)
    assert out["is_deleted"] is True and out["status"] is None
    stale = {"status": "x", "events": 9}
    folder(delete_on_cancel)(("o1", [row(6, "OrderPlaced", stale, applied=5, deleted=True)]))
    assert seen[-1] is None


def test_unknown_state_fields_are_an_error_naming_key_and_seq() -> None:
    with pytest.raises(FoldError, match="'o1' at seq 1"):
        folder(lambda state, event: {"colour": "red"})(("o1", [row(1, "OrderPlaced")]))


PAID = {"status": "paid", "customer": "c", "amount": Decimal(5), "currency": "EUR", "paid": Decimal(5), "events": 2}


def test_a_refold_starts_from_the_keys_base_and_folds_only_the_events_after_it() -> None:
    rows = [
        row(7, "OrderShipped", refold=True, carrier="ups"),
        row(4, "OrderPaid", refold=True, base=PAID),
    ]
    out = folded(rows)
    assert (out["status"], out["events"], out["customer"], out["carrier"], out["seq"]) == (
        "shipped",
        3,
        "c",
        "ups",
        7,
    )


def test_a_base_holding_none_folds_on_from_none() -> None:
    seen: list[State | None] = []

    def record(state: State | None, event: Event) -> State | None:
        seen.append(state)
        return {"status": event.event_type}

    out = folded([row(5, "OrderPlaced", refold=True), row(4, "OrderCancelled", refold=True, base=None)], record)
    assert seen == [None] and (out["status"], out["is_deleted"]) == ("OrderPlaced", False)


def test_a_base_is_the_compacted_rows_folded_in_seq_order_from_the_older_base() -> None:
    compacted = [
        row(6, "OrderShipped", carrier="dhl"),
        row(4, "OrderPaid", base=PAID),
        row(5, "OrderPaid", amount=Decimal(7)),
    ]
    key, seq, state = folder().base(("o1", compacted))
    assert (key, seq) == ("o1", 6)
    assert state == ("shipped", "c", Decimal(5), "EUR", Decimal(7), "dhl", 4)


def test_a_base_of_a_deleted_key_holds_none() -> None:
    def delete_on_cancel(state: State | None, event: Event) -> State | None:
        return None if event.event_type == "OrderCancelled" else {"status": "x", "events": 1}

    assert folder(delete_on_cancel).base(("o1", [row(1, "OrderPlaced"), row(2, "OrderCancelled")])) == ("o1", 2, None)
