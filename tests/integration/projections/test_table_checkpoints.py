"""A projection's Delta tables are checkpointed every `CHECKPOINT_INTERVAL` commits, not every 10 (Delta's default):
Delta writes a checkpoint inside the commit that reaches it, which made every tenth micro-batch 0.5 to 0.9 s
slower (#33, B6's tail)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from projections.examples import (
    order_events,
    order_events_per_minute,
    order_status_fold,
    orders_current,
    orders_history,
)
from projections.kinds.base import CHECKPOINT_INTERVAL
from projections.lake import Lake
from projections.runner import prepare


def checkpoints(table: str) -> list[str]:
    return sorted(p.name for p in Path(table, "_delta_log").glob("*.checkpoint*.parquet"))


def commit_times(spark: Any, table: str, commits: int) -> None:
    """`commits` metadata-only commits (a table property changed each time)."""
    for n in range(commits):
        spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('test.commit' = '{n}')")


def test_every_kinds_table_is_created_with_the_checkpoint_interval(projection_spark: Any, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    tables = []
    for projection in (orders_current, orders_history, order_events, order_events_per_minute, order_status_fold):
        payload = prepare(projection_spark, projection, lake)
        tables += list(projection.kind.tables(projection, payload, lake))
    assert len(tables) == 7  # a staging table for the window counts and the fold's event store
    for table in tables:
        detail = projection_spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
        assert detail["properties"].get("delta.checkpointInterval") == str(CHECKPOINT_INTERVAL), table


def test_a_projection_table_passes_commit_ten_without_a_checkpoint(projection_spark: Any, tmp_path: Path) -> None:
    assert CHECKPOINT_INTERVAL > 12
    lake = Lake(str(tmp_path / "lake"))
    prepare(projection_spark, orders_current, lake)
    table = lake.table(orders_current.name)
    # The control: a table created with Delta's defaults is checkpointed at version 10.
    plain = str(tmp_path / "plain")
    projection_spark.sql(f"CREATE TABLE delta.`{plain}` (k STRING) USING delta")

    commit_times(projection_spark, table, 12)
    commit_times(projection_spark, plain, 12)

    assert checkpoints(plain) == ["00000000000000000010.checkpoint.parquet"]
    assert checkpoints(table) == []
    assert projection_spark.read.format("delta").load(table).count() == 0  # still read from its JSON commits
