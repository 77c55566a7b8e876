"""What every leadership term of one instance works with, given by the loop to each `Term` it makes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.config import LoopSection
from bridge.core.late import SettledHoles
from bridge.core.refusals import Refusals
from bridge.daemon.leadership import Leadership
from bridge.daemon.persisting import Persisting
from bridge.daemon.poison import PoisonGate
from bridge.daemon.tally import Tally
from bridge.kafka.publisher import DeliveryCallback, Publisher
from bridge.metrics import BridgeMetrics
from bridge.store.lease import LeaseStore

#: Each term and each rebuild gets a new publisher, reporting its deliveries to the term.
NewPublisher = Callable[[DeliveryCallback], Publisher]


@dataclass(frozen=True, slots=True)
class TermParts:
    """What every term of one instance works with. Some of it outlives a term on purpose: a topic is checked
    once per process (the gate), a record refused for its content stays suspect (the refusals), and a row
    that turns up in a hole settled before the lease was lost is still found (the settled holes)."""

    settings: LoopSection
    instance_id: str
    leadership: Leadership
    offsets: LeaseStore
    new_publisher: NewPublisher
    gate: PoisonGate
    refusals: Refusals
    settled: SettledHoles
    persisting: Persisting
    tally: Tally
    metrics: BridgeMetrics
    stop: threading.Event
    #: The Kafka client settings, without the password: for the refusal messages (principal, bootstrap, CA).
    kafka_conf: Mapping[str, Any]
    #: Exactly-once delivery: the last seq Kafka committed for this bridge (None: nothing yet), asked after each
    #: new producer fenced its predecessors. None in at-least-once delivery.
    committed: Callable[[int], int | None] | None = None
    #: Whether the checkpoint's statements run on a worker thread while the loop sends (`checkpoints`): the
    #: database's connections may be used from any thread (not a SQLite database in memory).
    checkpoint_worker: bool = False
