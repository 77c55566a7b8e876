"""What a failed step of a term means: retried (the database, Kafka's admin API or the schema registry did not
answer) or the end of the term with an exit code (a poison row under `halt`, an unsafe topic, a registry that
refused the login, a missing ACL). Nothing is lost either way: the next read starts after the last seq handed to
Kafka, and a term that ends persists what was acknowledged first."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException

from bridge.daemon.ending import Ending
from bridge.daemon.tally import Tally
from bridge.errors import (
    PoisonEventError,
    SchemaRegistryRefusedError,
    SchemaRegistryUnavailableError,
    TopicSafetyError,
    TransientStoreError,
)
from bridge.exits import EXIT_POISON, EXIT_UNSAFE, EXIT_USAGE
from bridge.kafka.access import KafkaAccessError

log = logging.getLogger("bridge.daemon")

#: Failures a read step retries after a back-off.
RETRIED = (TransientStoreError, KafkaException, SchemaRegistryUnavailableError)
#: Failures that end the term: retrying cannot fix them.
ENDING = (PoisonEventError, TopicSafetyError, SchemaRegistryRefusedError, KafkaAccessError)


def retried(tally: Tally, exc: Exception, delay: float) -> float:
    """Count and log a failure of `RETRIED`; return `delay`, the back-off before the next read."""
    registry = isinstance(exc, SchemaRegistryUnavailableError)
    tally.error("database" if isinstance(exc, TransientStoreError) else "registry" if registry else "admin", exc)
    log.warning("reading or routing failed; retrying", extra={"error": str(exc), "retry_in_s": round(delay, 3)})
    return delay


def ending(tally: Tally, exc: Exception) -> Ending:
    """How a failure of `ENDING` ends the term, logged once."""
    if isinstance(exc, KafkaAccessError):
        return Ending(tally.refused(exc), str(exc))
    tally.last_error = str(exc)
    if isinstance(exc, PoisonEventError):
        # Poison policy `halt`: everything before the bad row is published and persisted, then the bridge stops.
        log.error("halting on a poison event; fix or remove the row, or run with BRIDGE_POISON_POLICY=dead-letter",
                  extra={"seq": exc.seq, "reason": exc.reason})
        return Ending(EXIT_POISON, str(exc), halted=exc)
    if isinstance(exc, TopicSafetyError):  # a topic that could lose acknowledged writes
        log.error("unsafe topic; stopping", extra={"error": str(exc)})
        return Ending(EXIT_UNSAFE, str(exc))
    log.error("the schema registry refused the bridge; stopping", extra={"error": str(exc)})
    return Ending(EXIT_USAGE, str(exc))
