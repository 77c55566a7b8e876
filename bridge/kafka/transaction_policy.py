"""How the exactly-once publisher sizes its transactions and where it records what they committed.

A transaction is committed once it holds `max_events` events or is `interval_s` old, whichever comes first:
the count bounds the work a failed commit sends again, the age bounds the latency a `read_committed` consumer
sees. Every transaction also writes the last seq it covers to the bridge's progress topic (compacted, keyed by
the bridge name), so a restart resumes exactly after what Kafka committed (`bridge.kafka.progress`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: librdkafka refuses a delivery.timeout.ms above the transaction timeout, and the broker refuses a transaction
#: timeout above its transaction.max.timeout.ms (15 minutes by default).
BROKER_TRANSACTION_MAX_TIMEOUT_MS: Final = 900_000


def transactional_id(bridge_name: str) -> str:
    """The `transactional.id` of every instance of a bridge name: the same for all, so a new leader's producer
    fences the previous leader's."""
    return f"outbox-bridge-{bridge_name}"


@dataclass(frozen=True, slots=True)
class TransactionPolicy:
    """The exactly-once settings a `TransactionalPublisher` is made with."""

    transactional_id: str
    max_events: int
    interval_s: float
    progress_topic: str
    #: The progress record's key: the bridge name (a progress topic may be shared by several names).
    progress_key: bytes
    #: How long `init_transactions` (fencing the previous leader) may take before the attempt counts as failed.
    init_timeout_s: float = 10.0


def policy_for(bridge_name: str, max_events: int, interval_ms: int, progress_topic: str,
               lease_timeout_s: float) -> TransactionPolicy:
    """The policy of a bridge name's exactly-once delivery, from its settings."""
    return TransactionPolicy(
        transactional_id=transactional_id(bridge_name),
        max_events=max_events,
        interval_s=interval_ms / 1000,
        progress_topic=progress_topic,
        progress_key=bridge_name.encode(),
        # Fencing the previous leader blocks the term: well inside the lease it must renew meanwhile.
        init_timeout_s=lease_timeout_s / 2,
    )
