"""The doctor's schema registry check, with `BRIDGE_VALUE_FORMAT=json-schema` only: the registry answers with the
bridge's credentials, and every event type in the outbox has a schema under its subject (or, with
`BRIDGE_SCHEMA_DIR`, a file the bridge registers), since each event of a type without one is poison.

The registry client is the bridge's own (`bridge.schemas.catalog`), and a registry that does not answer is judged
as the bridge judges it (`bridge.schemas.faults`), both imported only when the format is on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from bridge.config import BridgeConfig, SubjectNaming
from bridge.doctor.checklist import Check, Verdict
from bridge.doctor.database import DatabaseChecks
from bridge.schema import domain_events

NAME = "schema registry"


class RegistryChecks:
    """The registry's check; nothing at all in the plain json value format."""

    def __init__(self, config: BridgeConfig, database: DatabaseChecks) -> None:
        self.config = config
        self.database = database

    def registry(self) -> list[Check]:
        section = self.config.schemas
        if section is None:
            return []
        from bridge.schemas.catalog import registry_client

        kinds = self._event_kinds() if self.database.migrated else None
        return subject_checks(registry_client(section), section.url, section.naming, section.schema_dir, kinds)

    def _event_kinds(self) -> list[tuple[str, str]]:
        """Each (topic, event type) in the outbox; unroutable aggregate types are the bridge's to report."""
        kinds: set[tuple[str, str]] = set()
        with self.database.outbox.connect() as conn:
            query = select(domain_events.c.aggregate_type, domain_events.c.event_type).distinct()
            for aggregate_type, event_type in conn.execute(query):
                try:
                    kinds.add((self.config.topic_for(aggregate_type), event_type))
                except ValueError:
                    continue
        return sorted(kinds)


def subject_checks(client: Any, url: str, naming: SubjectNaming, schema_dir: Path | None,
                   kinds: list[tuple[str, str]] | None) -> list[Check]:
    """The registry reachable (its subjects listed), then one line per event kind: its subject has a schema, or
    the bridge registers one from `schema_dir`, or each such event is poison. `kinds` None: the outbox could not
    be read."""
    from bridge.schemas.catalog import subject_for
    from bridge.schemas.faults import REQUEST_FAILURES, listing_fault

    try:
        subjects = set(client.get_subjects())
    except REQUEST_FAILURES as exc:  # as the bridge's start-up check judges the same request
        fault = listing_fault(exc)
        return [Check(NAME, Verdict.FAILED, f"{url} {fault.problem}", fault.fix)]
    checks = [Check(NAME, Verdict.OK, f"reachable at {url}: {len(subjects)} subject(s)")]
    if kinds is None:
        return [*checks, Check(NAME, Verdict.SKIPPED, "the outbox could not be read, so its event types are not "
                               "known")]
    for topic, event_type in kinds:
        subject = subject_for(naming, topic, event_type)
        if subject in subjects:
            checks.append(Check(NAME, Verdict.OK, f"{event_type} on {topic}: subject {subject} has a schema"))
        elif schema_dir is not None and (schema_dir / f"{event_type}.json").is_file():
            checks.append(Check(NAME, Verdict.OK, f"{event_type} on {topic}: the bridge registers "
                                f"{schema_dir / f'{event_type}.json'} under subject {subject}"))
        else:
            where = f" nor in {schema_dir}" if schema_dir is not None else ""
            checks.append(Check(NAME, Verdict.FAILED, f"{event_type} on {topic}: no schema under subject "
                                f"{subject}{where}, so each such event is poison",
                                f"register the event type's JSON Schema under {subject}, or add "
                                f"<BRIDGE_SCHEMA_DIR>/{event_type}.json"))
    return checks
