"""`outbox-bridge doctor`: everything the bridge depends on, checked, each with what to do about it.

A checklist for the first hour and the bad day: the database (reachable, migrated, the never-skip seq
path, the login's privileges), the bridge's state in it (lease, watermark against the head, the
transaction holding the horizon back, retention) and Kafka (reachable with the configured settings,
the topics safe, the ACLs). Each check ends ok, warning or failed, or skipped when what it needs
failed first; any failure makes the command exit non-zero, so it can gate a deployment. Every check is
bounded in time: a database or a cluster that does not answer is reported, never waited for.

`checklist` is the part both doctors share (verdicts, the bounded run, the lines, JSON and exit code);
`database`, `state` and `kafka` hold the bridge's checks per area; `command` runs them in order.
"""

from bridge.doctor.checklist import (
    CHECK_TIMEOUT_S,
    KAFKA_TIMEOUT_S,
    Check,
    NoAnswer,
    Verdict,
    as_json,
    bounded,
    exit_code,
    reason,
    render,
)
from bridge.doctor.command import BridgeDoctor, doctor_command

__all__ = [
    "CHECK_TIMEOUT_S",
    "KAFKA_TIMEOUT_S",
    "BridgeDoctor",
    "Check",
    "NoAnswer",
    "Verdict",
    "as_json",
    "bounded",
    "doctor_command",
    "exit_code",
    "reason",
    "render",
]
