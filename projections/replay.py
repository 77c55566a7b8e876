"""Replaying a projection from a chosen point in its topics (`outbox-projections replay`).

The steps, in order, each one refusing before anything has changed: parse the starting point
(`projections.starting_point`); refuse a rebuild from a start other than earliest unless it is meant
(`projections.partial_rebuild`); ask Kafka whether the principal may read (`projections.driver`), where
that start is (`projections.offset_search`) and whether the partitions read from the earliest still hold
their first records (`projections.history`): a rebuild on a history cut by retention is refused unless
accepted. Then, by default, build the projection into a new table beside the live one and switch the live
one over to it (`projections.new_table`); with `in_place`, reset the live checkpoint instead and apply the
events again onto the live table (every kind is idempotent).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from projections import runner
from projections.declaration import Projection
from projections.driver import check_kafka, driving, locked
from projections.history import HistoryStart, find_history_start
from projections.lake import Lake, delete_path
from projections.lock import ProjectionLock
from projections.new_table import replay_into_new_table
from projections.offset_search import resolve
from projections.partial_rebuild import refuse_partial_rebuild
from projections.settings import Settings
from projections.starting_point import StartingPoint, parse_from_offset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayRequest:
    """What the operator asked for: where to start, into which table, and how long to wait to switch."""

    from_offset: str = "earliest"
    in_place: bool = False
    rebuild: bool = False
    drop_earlier_state: bool = False
    switch_timeout_s: float | None = None


@dataclass(frozen=True)
class ReplayPlan:
    """A request that passed every check, with the offsets it starts at; nothing has changed yet."""

    projection: Projection
    request: ReplayRequest
    starting: StartingPoint
    live_table: str
    #: Where the replay's history starts, or None when Kafka did not answer (the build checks again first).
    history: HistoryStart | None = None

    @property
    def builds_from_scratch(self) -> bool:
        """Whether the table is rebuilt (a new table, or in place with `rebuild`), rather than events re-applied
        onto the live table, which keeps what earlier events made."""
        return self.request.rebuild if self.request.in_place else True

    def summary(self) -> dict[str, Any]:
        """The plan as the command prints it, and logs it before carrying it out."""
        return {
            "projection": self.projection.name,
            "mode": "in place" if self.request.in_place else "new table, then switch over",
            "from_offset": self.starting.spec,
            "starting_offsets": self.starting.offsets,
            "live_table": self.live_table,
            "rebuild": self.request.rebuild,
            "drop_earlier_state": self.request.drop_earlier_state,
            "history": self._history_summary(),
            "accept_truncated_history": self.history.accepted if self.history is not None else False,
        }

    def _history_summary(self) -> dict[str, Any] | str:
        if self.history is None:
            return "not checked: Kafka did not answer (the build checks before it reads)"
        summary = self.history.as_record()
        if self.history.cut:
            summary["says"] = (
                f"the first records of {self.history.describe_cut()} were deleted: "
                + ("the new table would lack every event before them" if self.builds_from_scratch
                   else "the live table keeps what they made (it is not rebuilt); they are only not applied again")
            )
        return summary

    def refusal(self) -> str | None:
        """Why the plan may not be carried out as asked (nothing has changed), or None."""
        history = self.history
        if history is None or not history.cut or history.accepted or not self.builds_from_scratch:
            return None
        what = "--in-place --rebuild" if self.request.in_place else "a replay into a new table"
        return history.refusal(self.projection.name, what)

    def next_step(self) -> str:
        """What the operator does to carry the plan out (the command prints it when --yes is missing)."""
        if self.request.in_place:
            return "Stop the running instance (the replay resets its checkpoint), then repeat with --yes."
        return (
            "Repeat with --yes: the live table keeps serving readers while the new one is built; "
            "the switch waits for the live instance to stop."
        )


def plan_replay(projection: Projection, settings: Settings, request: ReplayRequest) -> ReplayPlan:
    """Check the request and find where it starts (ConfigurationError, RefusedError or KafkaAccessError)."""
    # A malformed value and a refused rebuild fail before anything asks Kafka or starts Spark.
    start_kind, _ = parse_from_offset(request.from_offset)
    refuse_partial_rebuild(
        projection,
        start_kind,
        request.from_offset,
        in_place=request.in_place,
        rebuild=request.rebuild,
        allowed=request.drop_earlier_state,
    )
    answered = check_kafka(settings, projection)
    starting = resolve(request.from_offset, projection, settings)
    history = (find_history_start(settings, projection, starting.offsets, settings.accept_truncated_history)
               if answered else None)
    return ReplayPlan(projection, request, starting, Lake(settings.lake).table(projection.name), history)


def run_replay(plan: ReplayPlan, settings: Settings) -> None:
    """Carry the plan out, then run on as the live instance (a new table with available_now stops there)."""
    projection, request, starting = plan.projection, plan.request, plan.starting
    lake = Lake(settings.lake)
    log.info("replay", extra=plan.summary())

    def announce(message: str) -> None:
        print(f"[replay {projection.name}] {message}", file=sys.stderr, flush=True)
        log.info(message, extra={"projection": projection.name})

    # In place the live instance must be stopped now; otherwise the replay waits for it before switching.
    lock = locked(lake, projection.name) if request.in_place else ProjectionLock(lake, projection.name)
    with driving(settings, projection.name, f"projection-replay-{projection.name}", lock) as (spark, metrics):
        if request.in_place:
            removed = reset_in_place(spark, projection, lake, request.rebuild)
            announce(f"checkpoint reset (existed: {removed}, rebuild: {request.rebuild}); "
                     f"reading from {starting.describe()}")
            settings = settings.model_copy(update={"starting_offsets": starting.offsets})
        else:
            replay_into_new_table(
                spark, projection, settings, starting, lock, wait_s=request.switch_timeout_s, metrics=metrics,
                announce=announce,
            )
            if settings.available_now:
                return
            announce("running on as the live instance")
        runner.run(spark, projection, settings, metrics)


def reset_in_place(spark: SparkSession, projection: Projection, lake: Lake, rebuild: bool) -> bool:
    """Delete the live checkpoint (a new txnAppId comes with the next), and with `rebuild` the table too."""
    removed = delete_path(lake.checkpoint(projection.name), spark)
    if rebuild:
        for path in (lake.table(projection.name), lake.staging(projection.name), lake.progress(projection.name)):
            delete_path(path, spark)
    return removed
