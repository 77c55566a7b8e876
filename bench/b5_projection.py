"""B5: projection throughput: a topic of N events over K keys drained into `latest_state` and `event_log`.

The topic is filled by the bare producer (the bridge's records and headers, 6 partitions) before the
clock starts. Each projection runs as an availableNow query with maxOffsetsPerTrigger, timed from
`start` to its end; the bare MERGE baseline (`bench.spark_jobs`) runs on the same topic in the same
session as the ceiling. A small untimed run of both, for each kind, first warms the JVM up (not in
--quick, which also runs `latest_state` only).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

from bench.backlog import PARTITIONS
from bench.context import Context
from bench.spark_jobs import (
    KINDS,
    applier_phases,
    drain,
    fill,
    merge_metrics,
    profile,
    session,
    start_baseline,
    start_projection,
    warm_up,
)
from bench.stack import KAFKA1
from bench.targets import B5_FRACTION, b5_fraction
from bench.workload import AGGREGATE_TYPE
from projections.lake import Lake

log = logging.getLogger("bench.b5")



def run(ctx: Context) -> dict[str, Any]:
    events, keys, per_batch = ctx.sizes.b5_events, ctx.sizes.b5_keys, ctx.sizes.b5_max_per_batch
    spark = session(ctx)
    lake = ctx.raw("lake-b5")
    # Both sides' code paths first, so that neither pays the JVM's warm-up inside its timed run (the side timed
    # first would otherwise pay for both).
    warm_up(ctx, per_batch)
    fill(ctx, "b5", events, keys)
    template = ctx.scratch.topic("b5.{aggregate_type}")
    topic = ctx.scratch.topic(f"b5.{AGGREGATE_TYPE}")
    result: dict[str, Any] = {
        "target": f">= {B5_FRACTION} of the bare MERGE's events/s, on local[2]",
        "events": events, "keys": keys, "max_offsets_per_trigger": per_batch, "partitions": PARTITIONS,
        "measured": "availableNow query from start() to its end, tables created beforehand",
        "kinds": {},
    }
    try:
        for kind in KINDS[:1] if ctx.quick else KINDS:  # a smoke run needs one kind to prove the path
            started = time.monotonic()
            with applier_phases() as phases:
                query = start_projection(spark, kind, f"bench_{kind}", lake, KAFKA1, template, available_now=True,
                                         max_per_batch=per_batch)
                measured = drain(query, events, started)
            log.info("B5 %s: %s", kind, measured.as_dict())
            started = time.monotonic()
            query = start_baseline(spark, kind, lake / f"baseline_{kind}", lake / f"_cp_baseline_{kind}", KAFKA1,
                                   topic, per_batch)
            baseline = drain(query, events, started)
            log.info("B5 %s baseline: %s", kind, baseline.as_dict())
            merges = {"projection": merge_metrics(spark, Path(Lake(str(lake)).table(f"bench_{kind}"))),
                      "baseline": merge_metrics(spark, lake / f"baseline_{kind}")}
            row: dict[str, Any] = {"projection": measured.as_dict(), "baseline": baseline.as_dict(),
                   "profile": profile(measured.batches, baseline.batches, phases, merges),
                   "_batches": {"projection": measured.batches, "baseline": baseline.batches}}
            row["fraction_of_baseline"] = round(baseline.seconds / measured.seconds, 3) if measured.seconds else 0.0
            row["meets_target"] = b5_fraction(row) >= B5_FRACTION
            result["kinds"][kind] = row
    finally:
        shutil.rmtree(lake, ignore_errors=True)
    return result
