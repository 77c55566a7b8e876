"""The settings whose value is one of a few words: each an enum, loaded by `bridge.config.settings`."""

from __future__ import annotations

from enum import StrEnum

from bridge.enums import AnyCaseStrEnum


class PoisonPolicy(StrEnum):
    """What the bridge does with an event that can never be published as it is."""

    HALT = "halt"
    DEAD_LETTER = "dead-letter"


class DeliveryMode(StrEnum):
    """What the bridge promises consumers: `at-least-once` (an idempotent producer, bounded duplicates after a
    crash or a takeover) or `exactly-once` (a transactional producer; `read_committed` consumers see each event
    once)."""

    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"


class RecordFormat(StrEnum):
    """How an event becomes a Kafka record: the design's own format, or CloudEvents 1.0 in binary content mode
    (the same key, value and headers, plus the event's `ce_` attributes and `content-type`)."""

    PLAIN = "plain"
    CLOUDEVENTS = "cloudevents"


class ValueFormat(StrEnum):
    """What a record's value is: the payload bytes as written, or those bytes validated against the event type's
    JSON Schema in a schema registry and framed with its id (the registry's wire format)."""

    JSON = "json"
    JSON_SCHEMA = "json-schema"


class SubjectNaming(StrEnum):
    """Which registry subject an event's schema is under: Confluent's TopicRecordNameStrategy (`<topic>-<event
    type>`), RecordNameStrategy (`<event type>`) or TopicNameStrategy (`<topic>-value`)."""

    TOPIC_RECORD = "topic-record"
    RECORD = "record"
    TOPIC = "topic"


class Compression(StrEnum):
    """Producer compression codecs (librdkafka `compression.type`)."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class LogLevel(AnyCaseStrEnum):
    """Log levels of the standard logging module."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"
