"""Every kind's table read without Spark, by delta-rs (the `deltalake` package, what a Python or Rust service
would use): the same rows as Spark reads, and no table feature delta-rs cannot read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from deltalake import DeltaTable

from projections.examples import (
    order_events,
    order_events_per_minute,
    order_status_fold,
    orders_current,
    orders_history,
)
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import order_lifecycle

EVERY_KIND = [orders_current, orders_history, order_events, order_events_per_minute, order_status_fold]


def _plain(value: Any) -> Any:
    """One value as both readers can agree on it: UTC timestamps without zone, maps as sorted pairs."""
    if isinstance(value, datetime):
        return (value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value).isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in sorted(value.items())}
    if isinstance(value, list | tuple):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):  # an Arrow map
            return {key: _plain(item) for key, item in sorted(value)}
        return [_plain(item) for item in value]
    return value


def _sorted(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(_plain(row), sort_keys=True, default=str) for row in rows)


@pytest.mark.slow
def test_delta_rs_reads_every_kind_s_table_as_spark_does(harness: Harness) -> None:
    topic = harness.topic(order_lifecycle(6), copies=2)
    lake = harness.lake("lake")
    harness.run(EVERY_KIND, topic, lake)
    for projection in EVERY_KIND:
        path = lake.table(projection.name)
        by_spark = [row.asDict(recursive=True) for row in harness.spark.read.format("delta").load(path).collect()]
        table = DeltaTable(path)
        by_delta_rs = table.to_pyarrow_table().to_pylist()
        assert by_spark, f"{projection.name}: the table is empty, the comparison would prove nothing"
        assert _sorted(by_delta_rs) == _sorted(by_spark), projection.name
        protocol = table.protocol()
        assert protocol.min_reader_version == 1, (projection.name, protocol)  # as the README says
        assert not (protocol.reader_features or []), (
            f"{projection.name} needs reader features {protocol.reader_features}; README must name the readers"
        )
