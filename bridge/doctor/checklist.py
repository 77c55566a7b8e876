"""A doctor's checklist: each check ends ok, warning, failed or skipped, with what was found and what to do.

Both doctors, the bridge's and the projections', report through it: the same verdicts, the same lines and
JSON, and the same exit code (1 when anything failed, so the command can gate a deployment). Every check is
bounded in time: a database or a cluster that does not answer is reported, never waited for.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from sqlalchemy.exc import DBAPIError

#: Seconds one check may take before it is reported as not answering.
CHECK_TIMEOUT_S: Final = 20.0
#: Seconds a Kafka request may take (metadata, configs, ACLs): well inside CHECK_TIMEOUT_S.
KAFKA_TIMEOUT_S: Final = 8.0


class Verdict(StrEnum):
    """How a check went; only FAILED makes the command exit non-zero."""

    OK = "ok"
    WARNING = "warning"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the checklist: what was checked, how it went, what was found and what to do."""

    name: str
    verdict: Verdict
    summary: str
    fix: str | None = None


class NoAnswer(Exception):
    """A check did not finish within its time."""


def bounded(function: Callable[[], list[Check]], timeout: float) -> list[Check]:
    """Run one check in a daemon thread and give up after `timeout` seconds (the thread is left behind;
    the command exits soon after, so it cannot hold anything up)."""
    result: list[list[Check]] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(function())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which reports it
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True, name="doctor-check")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise NoAnswer(f"no answer within {timeout:g}s")
    if failure:
        raise failure[0]
    return result[0]


def reason(exc: BaseException) -> str:
    """What a check that raised reports: the first line of the error (librdkafka's or the database driver's
    own words, not the wrapper's)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return str(exc.args[0].str())
    if isinstance(exc, DBAPIError):
        return str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed (warnings allowed), 1 otherwise."""
    return 1 if any(c.verdict is Verdict.FAILED for c in checks) else 0


def as_json(checks: list[Check]) -> str:
    return json.dumps({"ok": exit_code(checks) == 0, "checks": [asdict(c) for c in checks]}, indent=2)


_MARK: Final = {Verdict.OK: "ok", Verdict.WARNING: "WARN", Verdict.FAILED: "FAIL", Verdict.SKIPPED: "-"}


def render(checks: list[Check], title: str) -> str:
    """The checklist as plain lines: verdict, check, what was found, and the fix under it."""
    width = max(len(c.name) for c in checks) if checks else 0
    lines = [title]
    for check in checks:
        lines.append(f"  {_MARK[check.verdict]:<4}  {check.name:<{width}}  {check.summary}")
        if check.fix and check.verdict is not Verdict.OK:
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {check.fix}")
    failed = sum(c.verdict is Verdict.FAILED for c in checks)
    warned = sum(c.verdict is Verdict.WARNING for c in checks)
    lines.append(f"{failed} failed, {warned} warning(s), {sum(c.verdict is Verdict.OK for c in checks)} ok"
                 + ("" if failed else ": ready"))
    return "\n".join(lines)
