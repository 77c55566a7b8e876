"""How far back a topic's history goes, and what to say when it does not reach the first event.

The stream is how every consumer builds its own state: a new service, or a projection rebuilt after a bug,
reads a topic from its first record. So the topics the bridge creates keep every record (`retention.ms=-1`,
`retention.bytes=-1`, `cleanup.policy=delete`) unless `BRIDGE_TOPIC_RETENTION` says otherwise. A topic that
deletes records by age or size, or compacts them, has a finite history: reported as a warning (the bridge
still publishes safely; the choice may be deliberate), saying how far back it goes and, when the outbox
deletes published rows too (`BRIDGE_RETENTION`), that older events are gone everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Final

#: `retention.ms` / `retention.bytes` of a topic that keeps every record.
FOREVER: Final = -1

_UNITS: Final = (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000))
_SUFFIXES: Final = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


def describe_ms(ms: int) -> str:
    """A retention in words: `7 days`, `36 hours`, `90 minutes`; `forever` for -1."""
    if ms < 0:
        return "forever"
    for unit, size in _UNITS:
        if ms >= size and ms % size == 0:
            count = ms // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{ms} ms"


def describe_bytes(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"


@dataclass(frozen=True, slots=True)
class Retention:
    """A topic's retention settings as the brokers apply them (its own, or the brokers' defaults)."""

    ms: int
    bytes: int
    cleanup_policy: str

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def keeps_every_record(self) -> bool:
        return self.ms < 0 and self.bytes < 0 and not self.compacted


@dataclass(frozen=True, slots=True)
class HistoryFinding:
    """A topic whose history is finite: how far back it goes (`summary`) and how to keep more (`fix`)."""

    topic: str
    summary: str
    fix: str

    def __str__(self) -> str:
        return f"{self.summary}; {self.fix}"


def creation_configs(retention_ms: int) -> dict[str, str]:
    """The retention configs of a topic the bridge creates: `retention_ms` (-1 keeps every record), no size limit,
    records deleted only by age (never compacted)."""
    return {"retention.ms": str(retention_ms), "retention.bytes": str(FOREVER), "cleanup.policy": "delete"}


def shorter(current: int, wanted: int) -> bool:
    """Whether a retention limit `current` keeps less than `wanted` (-1 is no limit)."""
    return current >= 0 and (wanted < 0 or current < wanted)


def lengthening(retention: Retention, wanted_ms: int) -> dict[str, str]:
    """The configs that bring a topic's retention up to `wanted_ms`; never one that keeps less than now.

    The size limit is lifted only when every record is wanted: with a finite `wanted_ms` a size limit is the
    team's choice, kept. Compaction is never changed here (it decides what a topic is for)."""
    configs = {}
    if shorter(retention.ms, wanted_ms):
        configs["retention.ms"] = str(wanted_ms)
    if wanted_ms < 0 and retention.bytes >= 0:
        configs["retention.bytes"] = str(FOREVER)
    return configs


def history_finding(topic: str, retention: Retention, wanted_ms: int,
                    outbox_retention: timedelta | None) -> HistoryFinding | None:
    """None when the topic keeps every record; otherwise how far back its history goes and how to change it.

    `wanted_ms` is BRIDGE_TOPIC_RETENTION in ms (-1: forever); `outbox_retention` is BRIDGE_RETENTION, or None
    when the outbox keeps every row."""
    if retention.keeps_every_record:
        return None
    deletes = []
    if retention.ms >= 0:
        deletes.append(f"deletes records older than {describe_ms(retention.ms)} (retention.ms={retention.ms})")
    if retention.bytes >= 0:
        deletes.append(f"deletes the oldest records beyond {describe_bytes(retention.bytes)} per partition "
                       f"(retention.bytes={retention.bytes})")
    if retention.compacted:
        deletes.append(f"is compacted (cleanup.policy={retention.cleanup_policy}): only the latest record of "
                       "each key is kept")
    reach = (f"its history goes back {describe_ms(retention.ms)}"
             if retention.ms >= 0 and retention.bytes < 0 and not retention.compacted
             else "its history does not reach the first event")
    summary = (f"topic {topic} {' and '.join(deletes)}, so {reach}: a projection rebuilt from earliest, or a new "
               "consumer, starts there")
    if outbox_retention is not None:
        outbox_ms = int(outbox_retention.total_seconds() * 1000)
        if retention.ms >= 0:
            gone = f"an event older than {describe_ms(max(outbox_ms, retention.ms))} is gone everywhere"
        else:
            gone = f"an event older than {describe_ms(outbox_ms)} that Kafka no longer holds is gone everywhere"
        summary += (f". With BRIDGE_RETENTION={setting(outbox_ms)} on the outbox too, {gone}: neither in the "
                    "outbox nor in Kafka")
    return HistoryFinding(topic, summary, _fix(topic, retention, wanted_ms, outbox_retention is not None))


def _fix(topic: str, retention: Retention, wanted_ms: int, outbox_deletes: bool) -> str:
    keep_all = f"kafka-configs --alter --entity-type topics --entity-name {topic} --add-config " \
               "retention.ms=-1,retention.bytes=-1"
    if lengthening(retention, wanted_ms):
        target = "every record" if wanted_ms < 0 else describe_ms(wanted_ms)
        ways = [f"run `outbox-bridge topics ensure` (BRIDGE_TOPIC_RETENTION={setting(wanted_ms)}: it keeps "
                f"{target}, never less than now), or {keep_all}"]
    else:
        ways = [f"to keep every event set BRIDGE_TOPIC_RETENTION=forever and run `outbox-bridge topics ensure`, "
                f"or {keep_all}"]
    if retention.compacted:
        ways.append(f"compaction stays until the topic's owner sets cleanup.policy=delete (kafka-configs --alter "
                    f"--entity-type topics --entity-name {topic} --add-config cleanup.policy=delete)")
    if outbox_deletes:
        ways.append("or unset BRIDGE_RETENTION so the outbox keeps them")
    return "; ".join(ways) + " (the cost: docs/OPERATIONS.md, 'The stream's history')"


def setting(ms: int) -> str:
    """A retention as BRIDGE_TOPIC_RETENTION and BRIDGE_RETENTION take it: `forever`, `7d`, `36h`, `90m`."""
    if ms < 0:
        return "forever"
    for suffix, size in _SUFFIXES:
        if ms % size == 0:
            return f"{ms // size}{suffix}"
    return f"{ms}ms"
