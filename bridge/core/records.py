"""An outbox row, and from it the Kafka record, as fixed by the design: topic from the template, key the
aggregate id, value the payload bytes unchanged, and the event's metadata as headers (the dead-letter
record too). Pure: the store reads rows (`bridge.store.rows`), the publisher sends records."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import orjson

from bridge.core.json_text import NotJsonError, parse_json
from bridge.errors import PoisonEventError


class OutboxRow(NamedTuple):
    """One `domain_events` row: `payload` is the JSON text exactly as written, `headers` the raw JSON
    text of the row's own headers (None when absent); parsing them is the publisher's call.

    A named tuple rather than a frozen dataclass: the bridge makes one per event, and a tuple is made
    several times faster."""

    seq: int
    event_id: str
    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: str
    headers: str | None
    occurred_at: datetime
    schema_version: int
    #: Why the row as stored cannot be published (its other fields then hold a readable stand-in for
    #: the dead-letter copy); None for every row read as written.
    unreadable: str | None = None

    @classmethod
    def from_mapping(cls, row: Mapping[Any, Any]) -> OutboxRow:
        return cls(
            seq=int(row["seq"]),
            event_id=row["event_id"],
            aggregate_type=row["aggregate_type"],
            aggregate_id=row["aggregate_id"],
            event_type=row["event_type"],
            payload=row["payload"],
            headers=row["headers"],
            occurred_at=row["occurred_at"],
            schema_version=int(row["schema_version"]),
        )


# Kafka's default max.message.bytes for a topic (1 MiB + record batch overhead).
DEFAULT_MAX_MESSAGE_BYTES: Final = 1_048_588
# Per-record overhead of the batch format beyond key, value and headers; keeps the size check conservative.
_RECORD_OVERHEAD: Final = 128
# The names of the five headers every record carries, counted in its size.
_FIXED_HEADER_NAMES: Final = sum(map(len, ("event_id", "event_type", "aggregate_type", "seq", "occurred_at")))


def iso_timestamp(moment: datetime) -> bytes:
    """`moment.isoformat()`, encoded. For UTC, which is what every dialect reads, orjson writes the same
    text (microseconds only when not zero, +00:00) about four times faster, and this runs for every
    event; an offset in seconds (old local times) it would round, so anything else goes to isoformat."""
    if moment.tzinfo is UTC:
        return orjson.dumps(moment)[1:-1]
    return moment.isoformat().encode()


class KafkaRecord(NamedTuple):
    """A record ready for `Producer.produce`; `size` is computed once, by `of`."""

    seq: int
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    size: int

    @classmethod
    def of(cls, seq: int, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> KafkaRecord:
        size = len(key) + len(value) + _RECORD_OVERHEAD
        for name, header in headers:
            size += len(name) + len(header)
        return cls(seq, topic, key, value, headers, size)


#: `KafkaRecord(...)` runs the named tuple's `__new__`, Python code even when this module is compiled; this makes
#: the same tuple in C, once per event.
_new_record: Final = tuple.__new__


class TopicRouter:
    """Remembers `route` per aggregate type, so the template and the name check run once per type,
    not once per event. Refusals are remembered too; past `limit` types it stops remembering."""

    def __init__(self, route: Callable[[str], str], limit: int = 10_000) -> None:
        self._route = route
        self._limit = limit
        self._known: dict[str, str | ValueError] = {}

    def __call__(self, aggregate_type: str) -> str:
        known = self._known.get(aggregate_type)
        if known is None:
            try:
                known = self._route(aggregate_type)
            except ValueError as exc:
                known = exc
            if len(self._known) < self._limit:
                self._known[aggregate_type] = known
        if isinstance(known, ValueError):
            raise ValueError(str(known))
        return known


def build_record(
    row: OutboxRow, route: Callable[[str], str], max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> KafkaRecord:
    """Build the record for a row, or raise PoisonEventError naming the seq and why it can never be sent.

    `route` maps an aggregate type to its topic and raises ValueError for a name Kafka would refuse.
    """
    return record_and_payload(row, route, max_message_bytes)[0]


def record_and_payload(
    row: OutboxRow, route: Callable[[str], str], max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> tuple[KafkaRecord, Any]:
    """`build_record`'s record, and the value of the payload it parsed to check it is JSON, so that a check of
    that value (its JSON Schema) need not parse it again."""
    if row.unreadable is not None:
        raise PoisonEventError(row.seq, f"the row cannot be read as stored: {row.unreadable}")
    if not row.aggregate_id:
        raise PoisonEventError(row.seq, "aggregate_id is empty, so the record would have no key")
    try:
        topic = route(row.aggregate_type)
    except ValueError as exc:
        raise PoisonEventError(row.seq, f"unroutable: {exc}") from exc
    try:
        payload = parse_json(row.payload)  # the writer's verdict too, so a row it accepted is never poison
    except NotJsonError as exc:
        raise PoisonEventError(row.seq, f"payload is not valid JSON ({exc})") from exc
    event_id = row.event_id.encode()
    event_type = row.event_type.encode()
    aggregate_type = row.aggregate_type.encode()
    seq = str(row.seq).encode()
    occurred_at = iso_timestamp(row.occurred_at)
    key = row.aggregate_id.encode()
    value = row.payload.encode()
    headers: list[tuple[str, bytes]] = [
        ("event_id", event_id),
        ("event_type", event_type),
        ("aggregate_type", aggregate_type),
        ("seq", seq),
        ("occurred_at", occurred_at),
    ]
    # KafkaRecord.of's size, summed here without its loop: this runs for every event.
    size = (_FIXED_HEADER_NAMES + _RECORD_OVERHEAD + len(key) + len(value) + len(event_id) + len(event_type)
            + len(aggregate_type) + len(seq) + len(occurred_at))
    if row.headers:
        extra = _row_headers(row)
        headers.extend(extra)
        size += sum(len(name) + len(header) for name, header in extra)
    if size > max_message_bytes:
        raise too_large(row.seq, size, max_message_bytes, topic)
    return _new_record(KafkaRecord, (row.seq, topic, key, value, headers, size)), payload


def too_large(seq: int, size: int, max_message_bytes: int, topic: str) -> PoisonEventError:
    """The refusal of a record of `size` bytes over its topic's limit."""
    return PoisonEventError(
        seq,
        f"record is {size} bytes, over the {max_message_bytes}-byte limit of topic {topic} "
        "(raise the topic's max.message.bytes and the producer's message.max.bytes, or shrink the event)",
    )


def _row_headers(row: OutboxRow) -> list[tuple[str, bytes]]:
    try:
        parsed = parse_json(row.headers or "")
    except NotJsonError as exc:
        raise PoisonEventError(row.seq, f"headers column is not valid JSON ({exc})") from exc
    if not isinstance(parsed, dict):
        raise PoisonEventError(row.seq, "headers column must be a JSON object of string values")
    out = []
    for key, value in parsed.items():
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        out.append((str(key), text.encode()))
    return out


def dead_letter_record(row: OutboxRow, reason: str, topic: str, bridge_name: str, max_bytes: int,
                       outbox: str = "") -> KafkaRecord:
    """The record that carries a poison row to the dead-letter topic: the row's key and payload (cut to
    fit, and said so, when even that topic's limit is exceeded) with `dlq_reason` and `dlq_bridge`.
    `dlq_payload_complete` says whether the payload is whole; `dlq_outbox` names the database whose outbox
    keeps the whole event (at the record's `seq`) until an operator resolves the dead letter."""
    headers = [
        ("event_id", row.event_id.encode()),
        ("event_type", row.event_type.encode()),
        ("aggregate_type", row.aggregate_type.encode()),
        ("seq", str(row.seq).encode()),
        ("occurred_at", iso_timestamp(row.occurred_at)),
        ("dlq_reason", reason.encode()[:4096]),
        ("dlq_bridge", bridge_name.encode()),
        ("dlq_outbox", outbox.encode()[:1024]),
    ]
    key = (row.aggregate_id or f"seq-{row.seq}").encode()[:1024]
    value = row.payload.encode()
    record = KafkaRecord.of(row.seq, topic, key, value, [*headers, ("dlq_payload_complete", b"true")])
    if record.size > max_bytes:
        # Too large even for the dead-letter topic: keep what fits, and say so.
        headers += [("dlq_payload_complete", b"false"), ("dlq_payload_truncated_from", str(len(value)).encode())]
        value = value[: max(0, max_bytes - (record.size - len(value)) - 64)]
        record = KafkaRecord.of(row.seq, topic, key, value, headers)
    return record


def payload_complete(record: KafkaRecord) -> bool:
    """Whether a dead-letter record carries its row's whole payload."""
    return ("dlq_payload_complete", b"false") not in record.headers
