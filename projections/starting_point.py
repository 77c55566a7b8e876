"""Where a replay starts: a `--from-offset` value, classified without asking Kafka.

`--from-offset` takes `earliest`, `latest`, Spark's per-partition JSON (`{"topic":{"0":42}}`), a time
(ISO 8601 with an offset, e.g. `2026-11-22T10:00:00Z`, or `ts:<epoch ms>`: the first record per partition
whose Kafka timestamp is at or after it) or a seq (`seq:<N>` or a bare number: the first record per
partition whose `seq` header is at least N). `projections.offset_search.resolve` turns times and seqs into
per-partition offsets before Spark starts, so the replay starts exactly where the operator saw it would.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from bridge.errors import ConfigurationError

# Spark's per-partition JSON: -2 is the earliest offset, -1 the latest.
EARLIEST: Final = -2
LATEST: Final = -1
_SEQ = re.compile(r"^(?:seq:)?(\d+)$")
_EPOCH_MS = re.compile(r"^ts:(\d+)$")


@dataclass(frozen=True)
class StartingPoint:
    """Where a replay starts, as asked (`spec`) and as the Kafka source takes it (`offsets`)."""

    spec: str
    kind: str  # earliest, latest, offsets, timestamp or seq
    offsets: str  # Spark's startingOffsets: earliest, latest or per-partition JSON

    def describe(self) -> str:
        return self.spec if self.kind in ("earliest", "latest") else f"{self.spec} -> {self.offsets}"


def parse_from_offset(text: str) -> tuple[str, Any]:
    """Classify a --from-offset value: (kind, value); ConfigurationError naming the forms it accepts."""
    value = text.strip()
    if value in ("earliest", "latest"):
        return value, value
    if value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise ConfigurationError(f"--from-offset {text!r} is not valid JSON ({exc})") from None
        return "offsets", _check_offsets_json(parsed, text)
    seq = _SEQ.match(value)
    if seq:
        return "seq", int(seq.group(1))
    epoch = _EPOCH_MS.match(value)
    if epoch:
        return "timestamp", int(epoch.group(1))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigurationError(
            f"--from-offset {text!r}: use earliest, latest, per-partition JSON like "
            '\'{"outbox.event.order":{"0":42,"1":-2}}\', a time with its UTC offset like 2026-11-22T10:00:00Z '
            "(or ts:<epoch ms>), or a seq like seq:1200"
        ) from None
    if moment.tzinfo is None:
        raise ConfigurationError(
            f"--from-offset {text!r} has no UTC offset; write it as {value}Z (UTC) or with +HH:MM"
        )
    return "timestamp", int(moment.timestamp() * 1000)


def _check_offsets_json(parsed: Any, text: str) -> dict[str, dict[str, int]]:
    problem = f'--from-offset {text!r}: expected {{"topic": {{"partition": offset, ...}}, ...}} with offsets >= -2'
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigurationError(problem)
    out: dict[str, dict[str, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise ConfigurationError(problem)
        out[topic] = {}
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or not isinstance(offset, int) or isinstance(offset, bool):
                raise ConfigurationError(problem)
            if offset < EARLIEST:
                raise ConfigurationError(problem)
            out[topic][str(int(partition))] = offset
    return out
