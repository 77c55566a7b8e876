"""Replaying into a new table beside the live one, then switching the live one over to it.

The new table gets a lake of its own under `<lake>/_replays/<name>/<id>` (new checkpoint, so a new
txnAppId) and is drained to the end of what Kafka holds. Then the replay waits for the live instance to
stop (the projection's lock), drains what arrived meanwhile, and switches over: the live table is
overwritten with the new one in a single Delta commit, so a reader sees the old table or the new one,
never a half-built one; the new checkpoint, staging and progress record take the old ones' places and the
new quarantine entries join the old.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from projections import runner
from projections.declaration import Projection
from projections.errors import RefusedError
from projections.lake import Lake, delete_path, move_path, write_text
from projections.lock import ProjectionLock
from projections.progress import read_progress, write_progress
from projections.settings import Settings
from projections.starting_point import StartingPoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from projections.metrics import ProjectionMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayResult:
    """What a replay into a new table did."""

    replay_id: str
    starting: StartingPoint
    record: str  # the replay's record file
    rows: int  # rows in the table after the switch
    built_s: float
    waited_s: float


def new_replay_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def replay_into_new_table(
    spark: SparkSession,
    projection: Projection,
    settings: Settings,
    starting: StartingPoint,
    lock: ProjectionLock,
    *,
    wait_s: float | None = None,
    metrics: ProjectionMetrics | None = None,
    replay_id: str | None = None,
    announce: Callable[[str], None] = lambda _: None,
) -> ReplayResult:
    """Build the projection from `starting` into a new table, then switch the live one over to it.

    Waits for the live instance to stop (up to `wait_s`, or for as long as it takes) before switching,
    and returns holding `lock`, so the caller can go on as the live instance. If the wait runs out the
    new table is left where it was built and RefusedError says how to finish or discard it.
    """
    lake = Lake(settings.lake)
    replay_id = replay_id or new_replay_id()
    shadow = Lake(f"{lake.replays(projection.name)}/{replay_id}")
    shadow_settings = settings.model_copy(
        update={"lake": shadow.root, "starting_offsets": starting.offsets, "available_now": True}
    )
    record: dict[str, Any] = {
        "projection": projection.name,
        "replay_id": replay_id,
        "from_offset": starting.spec,
        "starting_offsets": starting.offsets,
        "new_table": shadow.table(projection.name),
        "live_table": lake.table(projection.name),
        "accept_truncated_history": settings.accept_truncated_history,
        "started_at": datetime.now(UTC).isoformat(),
    }
    record_path = f"{lake.replays(projection.name)}/{replay_id}.json"

    def save_record(state: str, **more: Any) -> None:
        record.update(state=state, **more)
        write_text(record_path, json.dumps(record, indent=2) + "\n", spark)

    save_record("building")
    announce(f"building {projection.name} from {starting.describe()} into {shadow.table(projection.name)}")
    started = time.monotonic()
    runner.run(spark, projection, shadow_settings, metrics)
    built_s = time.monotonic() - started
    announce(
        f"caught up with Kafka in {built_s:.1f}s; waiting for the live instance of {projection.name} to stop "
        f"(lock {lock.path}) to switch over"
    )
    waiting = time.monotonic()
    if not lock.acquire(
        wait_s,
        on_wait=lambda waited: announce(f"still waiting for {lock.holder()} to stop ({waited:.0f}s)"),
    ):
        save_record("built, not switched")
        raise RefusedError(
            f"the live instance of {projection.name} ({lock.holder()}) did not stop within {wait_s:.0f}s, so "
            f"the table was not switched. The new table stays at {shadow.table(projection.name)}; stop the "
            f"live instance and replay again, or delete {shadow.root}"
        )
    waited_s = time.monotonic() - waiting
    try:
        # What arrived while the live instance was still running: the same checkpoint resumes.
        runner.run(spark, projection, shadow_settings, metrics)
        rows = _switch(spark, projection, lake, shadow)
    except BaseException:
        lock.release()
        raise
    save_record("switched", switched_at=datetime.now(UTC).isoformat(), rows=rows, built_s=round(built_s, 3),
                waited_s=round(waited_s, 3))
    delete_path(shadow.root, spark)
    announce(f"switched {projection.name} over to the replayed table ({rows} rows)")
    log.info("replay switched over", extra=record)
    return ReplayResult(replay_id, starting, record_path, rows, built_s, waited_s)


def _switch(spark: SparkSession, projection: Projection, lake: Lake, shadow: Lake) -> int:
    """Make the replayed table, checkpoint, staging and progress the live ones.

    The table goes first, in one Delta commit (readers see the old or the new table). Should the process
    die before the checkpoint is moved, the old checkpoint resumes against the new table and, every kind
    being idempotent, brings it to the same state.
    """
    name = projection.name
    (
        # The build created the table before its first batch (`runner.prepare`), so it exists even if empty.
        spark.read.format("delta").load(shadow.table(name)).write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("userMetadata", f"outbox-projections replay switch-over from {shadow.root}")
        .save(lake.table(name))
    )
    if not move_path(shadow.staging(name), lake.staging(name), spark):
        delete_path(lake.staging(name), spark)
    move_path(shadow.checkpoint(name), lake.checkpoint(name), spark)
    progress = read_progress(shadow, name, spark)
    if progress is None:
        delete_path(lake.progress(name), spark)
    else:
        write_progress(lake, dataclasses.replace(progress, table=lake.table(name)), spark)
    _merge_quarantine(spark, shadow.quarantine(name), lake.quarantine(name), name)
    return int(spark.read.format("delta").load(lake.table(name)).count())


def _merge_quarantine(spark: SparkSession, source: str, target: str, name: str) -> None:
    from delta.tables import DeltaTable

    from projections import quarantine

    if DeltaTable.isDeltaTable(spark, source):
        quarantine.add(spark, target, name, spark.read.format("delta").load(source))
