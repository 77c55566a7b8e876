"""`outbox-bridge doctor`: the bridge's checks in order, each bounded, each skipped when what it needs failed.

The database's checks come first (`database`), then the bridge's state in it (`state`), then Kafka (`kafka`), then
the schema registry when values are in its format (`registry`).
A check that raises, or does not answer in time, is reported as failed with what to look at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, NamedTuple

from confluent_kafka import KafkaException
from sqlalchemy.exc import DBAPIError

from bridge.config import BridgeConfig
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
from bridge.doctor.database import DatabaseChecks, OutboxDatabase
from bridge.doctor.kafka import KafkaChecks
from bridge.doctor.registry import RegistryChecks
from bridge.doctor.state import StateChecks
from bridge.errors import OutboxError


class _Needs(NamedTuple):
    """What a check needs an earlier one to have found, and what to say when it did not."""

    met: Callable[[], bool]
    missing: str


class BridgeDoctor:
    """Runs the bridge's checks in order, each bounded, with what they learn passed along."""

    def __init__(self, config: BridgeConfig, timeout_s: float = CHECK_TIMEOUT_S,
                 kafka_timeout_s: float = KAFKA_TIMEOUT_S) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self._outbox = OutboxDatabase(config.db_url, connect_timeout_s=max(1, int(timeout_s / 2)))
        self._database = DatabaseChecks(config, self._outbox)
        self._state = StateChecks(config, self._outbox)
        self._kafka = KafkaChecks(config, self._database, kafka_timeout_s)
        self._registry = RegistryChecks(config, self._database)

    def run(self) -> list[Check]:
        database, state, kafka = self._database, self._state, self._kafka
        reachable = _Needs(lambda: database.reachable, "the database is unreachable")
        migrated = _Needs(lambda: database.migrated, "the schema is not usable")
        brokers = _Needs(lambda: kafka.reachable, "Kafka is unreachable")
        steps: list[tuple[str, Callable[[], list[Check]], _Needs | None]] = [
            ("database", database.database, None),
            ("schema revision", database.revision, reachable),
            ("never-skip seq path", database.seq_path, migrated),
            ("privileges", database.privileges, migrated),
            ("lease", state.lease, migrated),
            ("watermark", state.watermark, migrated),
            ("horizon", state.horizon, migrated),
            ("history", state.history, migrated),
            ("dead letters", state.dead_letters, migrated),
            ("names", state.names, migrated),
            ("instances", state.instances, migrated),
            ("retention", state.retention, migrated),
            ("kafka", kafka.kafka, None),
            ("topics", kafka.topics, brokers),
            ("acls", kafka.acls, brokers),
            ("schema registry", self._registry.registry, None),  # adds nothing unless values are json-schema
        ]
        checks: list[Check] = []
        try:
            for name, step, needs in steps:
                if needs is not None and not needs.met():
                    checks.append(Check(name, Verdict.SKIPPED, f"not checked: {needs.missing}"))
                    continue
                try:
                    checks.extend(bounded(step, self.timeout_s))
                except NoAnswer as exc:
                    checks.append(Check(name, Verdict.FAILED, f"{exc}", _NO_ANSWER_FIX.get(name, _NO_ANSWER_FIX[""])))
                except (OutboxError, DBAPIError, KafkaException, ImportError) as exc:
                    checks.append(Check(name, Verdict.FAILED, reason(exc), _fix_for(name)))
        finally:
            self._outbox.close()
        return checks


_NO_ANSWER_FIX: Final = {
    "": "check the service and the network; a server that does not answer will stall the bridge too",
    "database": "check OUTBOX_DB_URL, that the server runs and that this host reaches it",
    "kafka": "check that the brokers are running and that KAFKA_BOOTSTRAP_SERVERS names them (locally, `make up`)",
}


def _fix_for(name: str) -> str:
    return {
        "database": "check OUTBOX_DB_URL (host, port, database, user, password), that the server runs and that this "
                    "host reaches it",
        "kafka": "check that the brokers are running, that KAFKA_BOOTSTRAP_SERVERS names them (locally, `make up` "
                 "starts them) and the security settings (KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, "
                 "KAFKA_SSL_CA_LOCATION)",
        "schema registry": "json-schema values need the schema-registry extra: "
                           "`pip install 'outbox-bridge[schema-registry]'`",
    }.get(name, "see the error; `outbox-bridge status` and the bridge's log tell more")


def doctor_command(config: BridgeConfig, json_output: bool) -> int:
    """`outbox-bridge doctor [--json]`: print the checklist, return 0 unless a check failed."""
    started = time.monotonic()
    checks = BridgeDoctor(config).run()
    if json_output:
        print(as_json(checks))
    else:
        print(render(checks, f"outbox-bridge doctor: bridge {config.bridge_name!r} "
                             f"(checked in {time.monotonic() - started:.1f}s)"))
    return exit_code(checks)
