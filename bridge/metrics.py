"""Every Prometheus metric the bridge exposes, named in one place.

Alert rules and dashboards may only use names from `METRIC_NAMES` (a test checks them), and code
reaches metrics through typed attributes of `BridgeMetrics`, so a misspelt name fails the type check.
Each daemon builds its own registry instead of using the global one, so tests can make several.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

EVENTS_PUBLISHED: Final = "outbox_events_published_total"
PUBLISH_ERRORS: Final = "outbox_publish_errors_total"
HOLES_SETTLED: Final = "outbox_holes_settled_total"
LATE_EVENTS: Final = "outbox_late_events_total"
POISON_EVENTS: Final = "outbox_poison_events_total"
PRODUCER_REBUILDS: Final = "outbox_producer_rebuilds_total"
TRANSACTIONS: Final = "outbox_transactions_total"
IN_FLIGHT_EVENTS: Final = "outbox_in_flight_events"
IN_FLIGHT_BYTES: Final = "outbox_in_flight_bytes"
WATERMARK_SEQ: Final = "outbox_watermark_seq"
HEAD_SEQ: Final = "outbox_head_seq"
LAG_EVENTS: Final = "outbox_lag_events"
LAG_SECONDS: Final = "outbox_lag_seconds"
HORIZON_HELD_BACK: Final = "outbox_horizon_held_back"
HORIZON_OLDEST_XACT_AGE_SECONDS: Final = "outbox_horizon_oldest_xact_age_seconds"
IS_LEADER: Final = "outbox_is_leader"
EPOCH: Final = "outbox_epoch"
LAST_PERSIST_TIMESTAMP_SECONDS: Final = "outbox_last_persist_timestamp_seconds"
COMMIT_TO_ACK_SECONDS: Final = "outbox_commit_to_ack_seconds"
RETENTION_DELETED: Final = "outbox_retention_deleted_total"
RETENTION_HELD_BACK_SECONDS: Final = "outbox_retention_held_back_seconds"
RETENTION_HOLD_ALERT_AFTER_SECONDS: Final = "outbox_retention_hold_alert_after_seconds"
DEAD_LETTERS_OPEN: Final = "outbox_dead_letters_open"
DEAD_LETTER_OLDEST_AGE_SECONDS: Final = "outbox_dead_letter_oldest_age_seconds"
DEAD_LETTER_ALERT_AFTER_SECONDS: Final = "outbox_dead_letter_alert_after_seconds"
STARTUP_SECONDS: Final = "outbox_startup_seconds"
STARTUP_FAILURES: Final = "outbox_startup_failures_total"
STARTUP_ALERT_AFTER_SECONDS: Final = "outbox_startup_alert_after_seconds"

METRIC_NAMES: Final = (
    EVENTS_PUBLISHED,
    PUBLISH_ERRORS,
    HOLES_SETTLED,
    LATE_EVENTS,
    POISON_EVENTS,
    PRODUCER_REBUILDS,
    TRANSACTIONS,
    IN_FLIGHT_EVENTS,
    IN_FLIGHT_BYTES,
    WATERMARK_SEQ,
    HEAD_SEQ,
    LAG_EVENTS,
    LAG_SECONDS,
    HORIZON_HELD_BACK,
    HORIZON_OLDEST_XACT_AGE_SECONDS,
    IS_LEADER,
    EPOCH,
    LAST_PERSIST_TIMESTAMP_SECONDS,
    COMMIT_TO_ACK_SECONDS,
    RETENTION_DELETED,
    RETENTION_HELD_BACK_SECONDS,
    RETENTION_HOLD_ALERT_AFTER_SECONDS,
    DEAD_LETTERS_OPEN,
    DEAD_LETTER_OLDEST_AGE_SECONDS,
    DEAD_LETTER_ALERT_AFTER_SECONDS,
    STARTUP_SECONDS,
    STARTUP_FAILURES,
    STARTUP_ALERT_AFTER_SECONDS,
)

_HISTOGRAMS: Final = frozenset({COMMIT_TO_ACK_SECONDS})

# Exposed series a PromQL expression may name: a histogram also exposes _bucket, _sum and _count.
SERIES_NAMES: Final = frozenset(METRIC_NAMES) | frozenset(
    f"{name}{suffix}" for name in _HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")
)

# From 1 ms (a local broker) to 30 s (a delivery stuck behind a leader election or a long transaction).
COMMIT_TO_ACK_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class OneThreadHistogram(Collector):
    """A histogram observed from one thread only, exposed like prometheus_client's `Histogram`.

    The daemon observes `outbox_commit_to_ack_seconds` once per acknowledged event. `Histogram.observe`
    takes a lock twice and walks the buckets in Python, which cost more than the rest of the ack;
    here an observation is a bisection and two additions. Only the daemon's thread writes, so no
    count is lost; a scrape copies the counts and may see an event in the buckets but not yet in the
    sum, which the next scrape corrects."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(sorted(float(b) for b in buckets))
        self._labels = [str(floatToGoString(b)) for b in self._bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._counts = [0] * (len(self._bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        registry.register(self)

    def observe(self, amount: float) -> None:
        # The first bound at or above the amount is its bucket (`le`); above them all, +Inf.
        self._counts[bisect_left(self._bounds, amount)] += 1
        self._sum += amount

    def collect(self) -> Iterator[HistogramMetricFamily]:
        counts, total = list(self._counts), self._sum
        yield HistogramMetricFamily(self._name, self._documentation,
                                    buckets=list(zip(self._labels, accumulate(counts), strict=True)), sum_value=total)

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self._name, self._documentation)


class BridgeMetrics:
    """The bridge's metrics, registered in `registry` (a fresh one unless given)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.events_published = Counter(
            EVENTS_PUBLISHED, "Events acknowledged by Kafka, by topic.", ["topic"], registry=r
        )
        self.publish_errors = Counter(
            PUBLISH_ERRORS,
            "Failed deliveries and producer errors, by kind (retriable, fatal, timeout, poison, ...).",
            ["kind"],
            registry=r,
        )
        self.holes_settled = Counter(
            HOLES_SETTLED, "Seqs settled as holes (rolled-back transactions), never published.", registry=r
        )
        self.late_events = Counter(
            LATE_EVENTS, "Rows that appeared in a gap after it was settled, published late.", registry=r
        )
        self.poison_events = Counter(
            POISON_EVENTS,
            "Events that can never be published as they are, by poison policy.",
            ["policy"],
            registry=r,
        )
        self.retention_deleted = Counter(
            RETENTION_DELETED,
            "Published rows deleted from the outbox by the retention setting (BRIDGE_RETENTION).",
            registry=r,
        )
        self.retention_held_back_seconds = Gauge(
            RETENTION_HELD_BACK_SECONDS,
            "How long rows this bridge has published, past the retention period, have waited for another "
            "bridge name (held_by) to publish them; 0 when none waits. Set by each retention pass.",
            ["held_by"],
            registry=r,
        )
        self.retention_hold_alert_after_seconds = Gauge(
            RETENTION_HOLD_ALERT_AFTER_SECONDS,
            "BRIDGE_RETENTION_HOLD_ALERT_AFTER in seconds: the alert on outbox_retention_held_back_seconds.",
            registry=r,
        )
        self.dead_letters_open = Gauge(
            DEAD_LETTERS_OPEN,
            "Dead letters of this bridge name not yet republished or resolved; their rows are kept.",
            registry=r,
        )
        self.dead_letter_oldest_age_seconds = Gauge(
            DEAD_LETTER_OLDEST_AGE_SECONDS, "Age of the oldest open dead letter; 0 when none is open.", registry=r
        )
        self.dead_letter_alert_after_seconds = Gauge(
            DEAD_LETTER_ALERT_AFTER_SECONDS,
            "BRIDGE_DEAD_LETTER_ALERT_AFTER in seconds: the alert on outbox_dead_letter_oldest_age_seconds.",
            registry=r,
        )
        self.startup_seconds = Gauge(
            STARTUP_SECONDS,
            "How long this instance has been starting (checking the outbox and Kafka, reaching the lease) "
            "without standing by or leading yet; 0 once it stands by or leads.",
            registry=r,
        )
        self.startup_failures = Counter(
            STARTUP_FAILURES,
            "Failed attempts at a start-up step, by step (schema revision, seq path, login's rights, kafka, "
            "lease, history).",
            ["step"],
            registry=r,
        )
        self.startup_alert_after_seconds = Gauge(
            STARTUP_ALERT_AFTER_SECONDS,
            "BRIDGE_STARTUP_ALERT_AFTER in seconds: the alert on outbox_startup_seconds.",
            registry=r,
        )
        self.producer_rebuilds = Counter(
            PRODUCER_REBUILDS,
            "Producers discarded after a fatal error, each followed by a rewind.",
            registry=r,
        )
        self.transactions = Counter(
            TRANSACTIONS,
            "Exactly-once delivery's Kafka transactions ended, by outcome: committed, or aborted (its events are "
            "sent again, or were a fenced leader's).",
            ["outcome"],
            registry=r,
        )
        self.in_flight_events = Gauge(
            IN_FLIGHT_EVENTS, "Events handed to the producer, above the watermark.", registry=r
        )
        self.in_flight_bytes = Gauge(IN_FLIGHT_BYTES, "Payload bytes of the in-flight events.", registry=r)
        self.watermark_seq = Gauge(
            WATERMARK_SEQ, "Highest seq with every seq at or below it published.", registry=r
        )
        self.head_seq = Gauge(HEAD_SEQ, "Highest seq in the outbox table.", registry=r)
        self.lag_events = Gauge(LAG_EVENTS, "Events in the outbox above the watermark.", registry=r)
        self.lag_seconds = Gauge(
            LAG_SECONDS, "Age of the oldest event not yet below the watermark.", registry=r
        )
        self.horizon_held_back = Gauge(
            HORIZON_HELD_BACK,
            "1 while a long-running transaction holds the commit-visibility horizon.",
            registry=r,
        )
        self.horizon_oldest_xact_age_seconds = Gauge(
            HORIZON_OLDEST_XACT_AGE_SECONDS, "Age of the oldest transaction holding the horizon.", registry=r
        )
        self.is_leader = Gauge(
            IS_LEADER, "1 while this instance holds the lease for its bridge name.", registry=r
        )
        self.epoch = Gauge(EPOCH, "Fencing epoch of the lease this instance holds.", registry=r)
        self.last_persist_timestamp_seconds = Gauge(
            LAST_PERSIST_TIMESTAMP_SECONDS, "Unix time of the last watermark persisted.", registry=r
        )
        self.commit_to_ack_seconds = OneThreadHistogram(
            COMMIT_TO_ACK_SECONDS,
            "Time from an event's commit (occurred_at) to Kafka's acknowledgement.",
            COMMIT_TO_ACK_BUCKETS,
            registry=r,
        )
