"""Where a projection's history starts: each partition's first remaining offset, compared with 0.

A build from `earliest` reads each partition from the first record Kafka still holds. When retention (or
`kafka-delete-records`) has deleted the records before it, the table silently lacks every event older
than that: Spark's source just starts at the first remaining offset, and `failOnDataLoss` cannot tell, as
nothing vanished while it read. So before a build from earliest (a replay, or `run` on a new checkpoint)
each such partition's first offset is asked of Kafka (ListOffsets, earliest) and compared with 0. A cut
history is refused, before anything changed, unless the operator accepts it (`--accept-truncated-history`);
the progress record notes where the table's history starts (`HistoryStart.as_record`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from projections.declaration import Projection
from projections.errors import ProjectionError, RefusedError
from projections.settings import Settings
from projections.starting_point import EARLIEST

log = logging.getLogger(__name__)

ACCEPT_FLAG: Final = "--accept-truncated-history"
KAFKA_TIMEOUT_S: Final = 15.0


@dataclass(frozen=True)
class HistoryStart:
    """Where the records a build reads begin, as Kafka answered at `checked_at`.

    `starting_offsets` is what the source starts at (Spark's form); `first_offsets` the first offset Kafka
    still holds in each partition read from the earliest; `first_kept` the time of the first record kept in each
    partition whose earlier records were deleted (when it could be read)."""

    starting_offsets: str
    first_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    first_kept: dict[str, dict[str, str]] = field(default_factory=dict)
    checked_at: str = ""
    accepted: bool = False

    @property
    def cut(self) -> dict[str, dict[str, int]]:
        """The partitions read from the earliest whose first offset is above 0: their first records are gone."""
        cut = {t: {p: o for p, o in parts.items() if o > 0} for t, parts in self.first_offsets.items()}
        return {t: parts for t, parts in cut.items() if parts}

    @property
    def from_earliest(self) -> bool:
        """Whether every partition is read from its earliest offset (not from latest or a chosen offset)."""
        if self.starting_offsets == "earliest":
            return True
        if not self.starting_offsets.startswith("{"):
            return False
        given: dict[str, dict[str, int]] = json.loads(self.starting_offsets)
        return all(offset == EARLIEST for parts in given.values() for offset in parts.values())

    @property
    def complete(self) -> bool:
        """Whether the build reads every event its topics ever held: from offset 0 of every partition."""
        return self.from_earliest and not self.cut

    def describe_cut(self) -> str:
        """The cut partitions and the first offset kept in each, e.g. `outbox.event.order partition 0 from
        offset 17 (first kept event at 2026-11-20T10:00:00Z)`."""
        parts = []
        for topic, partitions in sorted(self.cut.items()):
            for partition, offset in sorted(partitions.items(), key=lambda kv: int(kv[0])):
                when = self.first_kept.get(topic, {}).get(partition)
                parts.append(f"{topic} partition {partition} from offset {offset}"
                             + (f" (first kept event at {when})" if when else ""))
        return ", ".join(parts)

    def refusal(self, projection: str, what: str) -> str:
        """Why `what` (a replay, a new checkpoint's run) is refused on this cut history, and what to do."""
        return (
            f"projection {projection}: {what} reads from earliest, but Kafka has deleted the first records of "
            f"{self.describe_cut()}: retention (or delete-records) removed them, so the table would silently lack "
            f"every event before those offsets. Nothing changed. To keep the history, find the events elsewhere "
            f"(the outbox keeps them unless BRIDGE_RETENTION deleted them: `outbox-bridge replay --from-seq` "
            f"publishes them again) and make the topics keep every record (`outbox-bridge topics ensure`); to "
            f"build a table of only the events Kafka still holds, repeat with {ACCEPT_FLAG}"
        )

    def as_record(self) -> dict[str, Any]:
        """The progress record's note of where the table's history starts."""
        return {
            "complete": self.complete,
            "starting_offsets": self.starting_offsets,
            "first_offsets": self.first_offsets,
            "deleted_before": self.cut,
            "first_kept_event_time": self.first_kept,
            "accepted_truncated": self.accepted and bool(self.cut),
            "checked_at": self.checked_at,
        }


def earliest_partitions(starting_offsets: str, partitions: dict[str, list[int]]) -> dict[str, list[int]]:
    """Of the partitions a source reads, those it starts at their earliest offset under `starting_offsets`."""
    if starting_offsets == "earliest":
        return partitions
    if not starting_offsets.startswith("{"):
        return {}  # latest
    given: dict[str, dict[str, int]] = json.loads(starting_offsets)
    # Spark starts a partition the JSON does not name (a topic new to a pattern) at the earliest offset too.
    chosen = {t: [p for p in parts if given.get(t, {}).get(str(p), EARLIEST) == EARLIEST]
              for t, parts in partitions.items()}
    return {t: parts for t, parts in chosen.items() if parts}


def find_history_start(settings: Settings, projection: Projection, starting_offsets: str,
                       accepted: bool = False) -> HistoryStart:
    """Ask Kafka where the history of each partition the source starts at the earliest begins (ProjectionError
    naming the bootstrap servers when Kafka does not answer)."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    # From the defining module: `confluent_kafka.admin` does not re-export it for type checkers.
    from confluent_kafka.admin._listoffsets import OffsetSpec

    from bridge.kafka.reachability import quiet_client_settings
    from projections.kafka_clients import client_conf

    checked_at = datetime.now(UTC).isoformat()
    if starting_offsets == "latest":
        return HistoryStart(starting_offsets, checked_at=checked_at, accepted=accepted)
    admin = AdminClient({**client_conf(settings), **quiet_client_settings(settings.bootstrap_servers)})
    try:
        partitions = earliest_partitions(starting_offsets, _partitions(admin, projection, settings))
        earliest: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        asked = {TopicPartition(t, p): earliest for t, parts in partitions.items() for p in parts}
        first: dict[str, dict[str, int]] = {}
        if asked:
            for tp, future in admin.list_offsets(asked, request_timeout=KAFKA_TIMEOUT_S).items():
                first.setdefault(tp.topic, {})[str(tp.partition)] = int(future.result(KAFKA_TIMEOUT_S).offset)
    except KafkaException as exc:
        raise ProjectionError(
            f"Kafka at {settings.bootstrap_servers} did not answer where the history of projection "
            f"{projection.name}'s topics starts ({exc}); run again once it answers"
        ) from exc
    finally:
        admin.poll(0)
    history = HistoryStart(
        starting_offsets,
        {t: dict(sorted(parts.items(), key=lambda kv: int(kv[0]))) for t, parts in sorted(first.items())},
        checked_at=checked_at,
        accepted=accepted,
    )
    if history.cut:
        history = HistoryStart(history.starting_offsets, history.first_offsets,
                               _first_kept_times(settings, projection, history.cut), checked_at, accepted)
    return history


def check_history(settings: Settings, projection: Projection, starting_offsets: str, what: str) -> HistoryStart:
    """Where the history starts; RefusedError when records were deleted and the settings do not accept it."""
    history = find_history_start(settings, projection, starting_offsets, settings.accept_truncated_history)
    if history.cut:
        if not history.accepted:
            raise RefusedError(history.refusal(projection.name, what))
        log.warning(
            f"building from a truncated history, accepted with {ACCEPT_FLAG}: events before the first kept "
            "offsets are not in the table",
            extra={"projection": projection.name, "deleted_before": history.cut, "first_kept": history.first_kept},
        )
    return history


def _partitions(admin: Any, projection: Projection, settings: Settings) -> dict[str, list[int]]:
    """The partitions the projection reads now; a topic it names that does not exist yet has lost nothing."""
    option, value = projection.source_option(settings.topic_template)
    metadata = admin.list_topics(timeout=KAFKA_TIMEOUT_S)
    if option == "subscribePattern":
        names = [t for t in metadata.topics if re.fullmatch(value, t)]
    else:
        names = [t for t in value.split(",") if t in metadata.topics]
    return {t: sorted(metadata.topics[t].partitions) for t in sorted(names)}


def _first_kept_times(settings: Settings, projection: Projection,
                      cut: dict[str, dict[str, int]]) -> dict[str, dict[str, str]]:
    """The event time (`occurred_at`, else the Kafka timestamp) of the first record kept in each cut partition;
    what cannot be read in time is left out (the offsets alone say where the history starts)."""
    from projections.offset_search import lookup_consumer, record_at

    times: dict[str, dict[str, str]] = {}
    consumer = lookup_consumer(settings, projection)
    try:
        for topic, partitions in cut.items():
            for partition, offset in partitions.items():
                try:
                    message = record_at(consumer, topic, int(partition), offset, offset + 1)
                except ProjectionError:
                    continue
                if message is not None:
                    times.setdefault(topic, {})[partition] = _event_time(message)
    finally:
        consumer.close()
    return times


def _event_time(message: Any) -> str:
    for key, value in message.headers() or []:
        if key == "occurred_at" and value:
            return bytes(value).decode("utf-8", "replace")
    return datetime.fromtimestamp(message.timestamp()[1] / 1000, UTC).isoformat()
