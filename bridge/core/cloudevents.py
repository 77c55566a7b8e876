"""CloudEvents 1.0 in Kafka's binary content mode (the CloudEvents Kafka protocol binding): the plain record of
`records.build_record`, with the event's context attributes added as `ce_` headers and `content-type`.

The key, the value and the design's own headers stay as they are, so a consumer of the plain format (the
projections among them) reads these records as before, and a CloudEvents consumer reads each as the row's event:
`id` the event id, `source` the bridge's, `type` the event type, `time` when it occurred (RFC 3339), `subject`
the aggregate id, the payload as JSON data. Pure, and run for every event in this format, so compiled with the
rest of the per-event core.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

from bridge.core.records import DEFAULT_MAX_MESSAGE_BYTES, KafkaRecord, OutboxRow, build_record, too_large

SPEC_VERSION: Final = b"1.0"
CONTENT_TYPE: Final = b"application/json"
#: The headers this format adds. A row header of one of these names is left out, so that each is sent once and
#: says what the row's columns say.
ATTRIBUTE_HEADERS: Final = frozenset(
    {"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_subject", "content-type"}
)
#: The headers `build_record` puts first, in this order: the row's own follow them.
_FIXED_HEADERS: Final = 5
_ADDED_BYTES: Final = sum(map(len, ATTRIBUTE_HEADERS)) + len(SPEC_VERSION) + len(CONTENT_TYPE)
_new_record: Final = tuple.__new__


def build_cloudevent(row: OutboxRow, route: Callable[[str], str], source: bytes,
                     max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> KafkaRecord:
    """The row's record as a CloudEvent in binary mode, or PoisonEventError as for `build_record` (the size
    checked with the attributes)."""
    plain = build_record(row, route, sys.maxsize)
    headers = plain.headers
    size = plain.size
    if len(headers) > _FIXED_HEADERS:
        own = headers[_FIXED_HEADERS:]
        kept = [header for header in own if header[0] not in ATTRIBUTE_HEADERS]
        if len(kept) != len(own):
            size -= sum(len(name) + len(value) for name, value in own if name in ATTRIBUTE_HEADERS)
            headers = headers[:_FIXED_HEADERS] + kept
    event_id = headers[0][1]
    event_type = headers[1][1]
    occurred_at = headers[4][1]
    key = plain.key
    headers += [
        ("ce_specversion", SPEC_VERSION),
        ("ce_id", event_id),
        ("ce_source", source),
        ("ce_type", event_type),
        ("ce_time", occurred_at),
        ("ce_subject", key),
        ("content-type", CONTENT_TYPE),
    ]
    size += _ADDED_BYTES + len(event_id) + len(source) + len(event_type) + len(occurred_at) + len(key)
    if size > max_message_bytes:
        raise too_large(row.seq, size, max_message_bytes, plain.topic)
    return _new_record(KafkaRecord, (row.seq, plain.topic, key, plain.value, headers, size))
