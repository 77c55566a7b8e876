"""`history` and `fold` read only the files of the keys a batch touches, however large the table grows (here
fivefold: each step is a Spark batch, and the claim is the same at any size).

Measured with Delta's own MERGE metrics (target files before and after data skipping), not wall time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from projections.applier import BatchApplier
from projections.declaration import Projection
from projections.examples import order_status_fold, orders_history
from projections.lake import Lake
from projections.runner import prepare
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import OutboxEvent, as_micro_batch

pytestmark = pytest.mark.integration

KEYS_PER_BATCH = 4


@pytest.fixture()
def merges(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int, int]]]:
    """(target path, target files before skipping, after skipping) of every Delta MERGE run meanwhile."""
    from delta.tables import DeltaMergeBuilder

    seen: list[tuple[str, int, int]] = []
    execute = DeltaMergeBuilder.execute

    def measured(self: DeltaMergeBuilder) -> Any:
        result = execute(self)
        command = result._jdf.queryExecution().commandExecuted().commandPhysicalPlan().cmd()
        metrics = command.metrics()
        seen.append(
            (
                str(command.targetFileIndex().path().toString()).removeprefix("file:"),
                int(metrics.apply("numTargetFilesBeforeSkipping").value()),
                int(metrics.apply("numTargetFilesAfterSkipping").value()),
            )
        )
        return result

    monkeypatch.setattr(DeltaMergeBuilder, "execute", measured)
    yield seen


def placed(seq: int, order: str) -> OutboxEvent:
    payload = {"order_id": order, "customer": "c", "amount": 10, "currency": "EUR"}
    return OutboxEvent(seq, order, "OrderPlaced", payload, event_id=f"evt-{seq:05d}")


def paid(seq: int, order: str) -> OutboxEvent:
    return OutboxEvent(seq, order, "OrderPaid", {"order_id": order, "amount": 10}, event_id=f"evt-{seq:05d}")


class Orders:
    """Feeds batches of new orders (ids growing, as new aggregates' do) straight to the appliers."""

    def __init__(self, harness: Harness, lake: Lake, projections: tuple[Projection, ...]) -> None:
        self.harness, self.lake = harness, lake
        self.appliers = [
            BatchApplier(p, prepare(harness.spark, p, lake), lake, app_id="touched") for p in projections
        ]
        self.seq, self.orders, self.batch_id = 0, 0, 0

    def apply(self, events: list[OutboxEvent]) -> None:
        raw = as_micro_batch(self.harness.spark, events)
        for applier in self.appliers:
            applier.apply(raw, self.batch_id)
        self.batch_id += 1

    def new_orders(self, batches: int) -> None:
        for _ in range(batches):
            events = []
            for _ in range(KEYS_PER_BATCH):
                self.seq += 1
                events.append(placed(self.seq, f"order-{self.orders:05d}"))
                self.orders += 1
            self.apply(events)

    def pay(self, order: int) -> None:
        self.seq += 1
        self.apply([paid(self.seq, f"order-{order:05d}")])


def test_a_batch_reads_the_same_few_target_files_when_the_table_grows_fivefold(
    harness: Harness, merges: list[tuple[str, int, int]]
) -> None:
    lake = harness.lake("lake")
    projections = (orders_history, order_status_fold)
    tables = {lake.table(p.name): p.name for p in projections}
    orders = Orders(harness, lake, projections)

    def probe() -> dict[str, tuple[int, int]]:
        """Files before and after skipping of each table's MERGE in a batch paying the newest batch's first order."""
        merges.clear()
        orders.pay(orders.orders - KEYS_PER_BATCH)
        return {tables[path]: (before, after) for path, before, after in merges if path in tables}

    orders.new_orders(1)
    small = probe()
    orders.new_orders(4)
    large = probe()

    for name in tables.values():
        (small_before, small_after), (large_before, large_after) = small[name], large[name]
        assert large_before >= 3 * small_before, (name, small, large)  # the table really grew
        # What a batch reads stays the files one batch writes (at most the test session's 2 shuffle partitions).
        assert small_after <= 2 and large_after <= 2, (name, small, large)

    history = harness.spark.read.format("delta").load(lake.table(orders_history.name))
    assert history.count() == 5 * KEYS_PER_BATCH + 2
    folded = harness.spark.read.format("delta").load(lake.table(order_status_fold.name))
    assert sorted(r["order_id"] for r in folded.where("status = 'paid'").collect()) == [
        "order-00000",
        "order-00016",
    ]
