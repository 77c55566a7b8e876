"""What every benchmark gets: the run's id and sizes, where raw data goes, and what to clean up."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.stack import Scratch

log = logging.getLogger("bench")


@dataclass(frozen=True)
class Sizes:
    """How much each benchmark does; `--quick` shrinks everything for a smoke run."""

    b1_events_1broker: int
    #: Rounds of ceiling, bridge, ceiling on one broker; B1 reports the round with the median fraction.
    b1_rounds: int
    b1_events_3brokers: int
    b1_tuning_events: int
    #: Events per variant of B1-tracing (tracing off and on); 0 skips it.
    b1_tracing_events: int
    #: Events per variant of B1-formats (json values, json-schema values); 0 skips it.
    b1_formats_events: int
    #: Events per variant of B1-delivery (at-least-once, exactly-once); 0 skips it.
    b1_delivery_events: int
    b1_profile_events: int
    b2_events: int
    #: Rounds of ceiling, bridge, ceiling for B2; it reports the round with the median fraction.
    b2_rounds: int
    b3_seconds: float
    b3_rates: tuple[int, ...]
    b4_crashes: int
    b4_rate: int
    b5_events: int
    b5_keys: int
    b5_max_per_batch: int
    b6_seconds: float
    b6_rate: int
    b7_small_events: int
    b8_events: int
    b8_crashes: int
    b8_row_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


FULL = Sizes(
    b1_events_1broker=1_000_000,
    b1_rounds=3,
    b1_events_3brokers=500_000,
    b1_tuning_events=1_000_000,
    b1_tracing_events=200_000,
    b1_formats_events=200_000,
    b1_delivery_events=200_000,
    b1_profile_events=250_000,
    b2_events=500_000,
    b2_rounds=3,
    b3_seconds=30.0,
    b3_rates=(1_000, 5_000, 20_000),
    b4_crashes=20,
    b4_rate=5_000,
    b5_events=1_000_000,
    b5_keys=100_000,
    b5_max_per_batch=250_000,
    b6_seconds=60.0,
    b6_rate=1_000,
    b7_small_events=100_000,
    b8_events=1_000_000,
    b8_crashes=10,
    b8_row_seconds=30.0,
)

QUICK = Sizes(
    b1_events_1broker=50_000,
    b1_rounds=1,
    b1_events_3brokers=20_000,
    b1_tuning_events=0,
    b1_tracing_events=20_000,
    b1_formats_events=20_000,
    b1_delivery_events=20_000,
    b1_profile_events=0,
    b2_events=20_000,
    b2_rounds=1,
    b3_seconds=5.0,
    b3_rates=(1_000, 5_000),
    b4_crashes=3,
    b4_rate=2_000,
    b5_events=10_000,
    b5_keys=5_000,
    b5_max_per_batch=10_000,
    b6_seconds=10.0,
    b6_rate=1_000,
    b7_small_events=10_000,
    b8_events=5_000,
    b8_crashes=2,
    b8_row_seconds=5.0,
)


@dataclass
class Context:
    """One run of the suite."""

    run_id: str
    quick: bool
    sizes: Sizes
    raw_dir: Path
    scratch: Scratch
    shared: dict[str, Any]  # what one benchmark leaves for a later one (B1's RSS samples for B7)

    def raw(self, name: str) -> Path:
        path = self.raw_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
