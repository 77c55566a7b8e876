"""The whole daemon with json-schema values and a registry that fails: one that cannot be reached is retried as
the database and the admin API are, at start-up and while leading, and every event is published once it answers;
one that refuses the bridge's login stops it (exit 2), nothing sent: at start-up before it leads, or later, when
its first lookup is refused. SQLite outbox, in-memory publisher and topic guard."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.core.records import KafkaRecord
from bridge.core.wire_format import schema_prefix, unframe
from bridge.daemon import assemble
from bridge.errors import SchemaRegistryRefusedError, SchemaRegistryUnavailableError
from bridge.exits import EXIT_USAGE
from bridge.migrate import upgrade
from bridge.schemas.values import RegisteredSchema
from tests.support import RunningBridge, insert_events, start_unit_bridge, wait_until

pytestmark = pytest.mark.unit

EVENTS = 5
REGISTRY = {"value_format": "json-schema", "schema_registry_url": "http://127.0.0.1:9", "persist_interval_s": 0.2,
            "lease_timeout_s": 3.0}


class FlakyRegistry:
    """Its lookups fail `failures` times with `error`, then answer with schema id 3; its start-up check
    (`answers`) fails `check_failures` times with `check_error`."""

    def __init__(self, error: Exception, failures: int, check_error: Exception | None = None,
                 check_failures: int = 0) -> None:
        self.error = error
        self.failures = failures
        self.asked = 0
        self.check_error = check_error
        self.check_failures = check_failures
        self.checked = 0

    def answers(self) -> None:
        self.checked += 1
        if self.check_error is not None and self.checked <= self.check_failures:
            raise self.check_error

    def __call__(self, topic: str, event_type: str) -> RegisteredSchema:
        self.asked += 1
        if self.asked <= self.failures:
            raise self.error
        return RegisteredSchema(f"{topic}-{event_type}", 3, schema_prefix(3), lambda _value: None)


Started = tuple[RunningBridge, list[KafkaRecord]]


@pytest.fixture()
def start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[FlakyRegistry, str], Started]:
    """Starts the daemon, named as given, on an outbox of `EVENTS` events with the given registry as its catalog;
    gives the running bridge and the list of what it sent."""
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    insert_events(url, EVENTS)

    def run(registry: FlakyRegistry, name: str) -> Started:
        monkeypatch.setattr(assemble, "registry_catalog", lambda _config: registry)
        sent: list[KafkaRecord] = []
        return start_unit_bridge(url, name, sent, **REGISTRY), sent

    return run


def _stopped_having_sent_nothing(bridge: RunningBridge, sent: list[KafkaRecord]) -> None:
    bridge.thread.join(20)
    assert bridge.result == [EXIT_USAGE]
    assert sent == []


def test_an_unreachable_registry_is_retried_and_every_event_published_once_it_answers(
    start: Callable[[FlakyRegistry, str], Started],
) -> None:
    registry = FlakyRegistry(SchemaRegistryUnavailableError("the schema registry is unreachable"), failures=2)
    bridge, sent = start(registry, "flaky")
    wait_until(lambda: len(sent) >= EVENTS, 20, f"{EVENTS} events sent")
    assert bridge.stop() == 0
    assert sorted(record.seq for record in sent) == list(range(1, EVENTS + 1))
    assert {unframe(record.value)[0] for record in sent} == {3}
    assert registry.asked == 3, "asked again after each failure, then once for the subject"
    errors = bridge.daemon.metrics.publish_errors.labels(kind="registry")
    assert errors._value.get() == 2


def test_a_registry_refusing_a_lookup_while_leading_stops_the_bridge_with_exit_2(
    start: Callable[[FlakyRegistry, str], Started],
) -> None:
    refused = SchemaRegistryRefusedError("the schema registry refused the bridge (unauthorized)")
    bridge, sent = start(FlakyRegistry(refused, 99), "refused")
    _stopped_having_sent_nothing(bridge, sent)
    assert "refused the bridge" in bridge.daemon.last_error


def test_a_registry_unreachable_at_start_up_is_waited_for_then_the_bridge_leads(
    start: Callable[[FlakyRegistry, str], Started],
) -> None:
    unreachable = SchemaRegistryUnavailableError("the schema registry at http://127.0.0.1:9 is unreachable")
    registry = FlakyRegistry(unreachable, 0, check_error=unreachable, check_failures=2)
    bridge, sent = start(registry, "late")
    wait_until(lambda: len(sent) >= EVENTS, 20, f"{EVENTS} events sent")
    assert bridge.stop() == 0
    assert registry.checked == 3, "checked again after each failure, then passed"
    failures = bridge.daemon.metrics.startup_failures.labels(step="schema registry")
    assert failures._value.get() == 2


def test_a_registry_refusing_the_login_at_start_up_stops_the_bridge_before_it_leads(
    start: Callable[[FlakyRegistry, str], Started],
) -> None:
    refused = SchemaRegistryRefusedError("the schema registry at http://127.0.0.1:9 refused the bridge's login "
                                         "(unauthorized): check BRIDGE_SCHEMA_REGISTRY_USER and "
                                         "BRIDGE_SCHEMA_REGISTRY_PASSWORD")
    registry = FlakyRegistry(refused, 0, check_error=refused, check_failures=99)
    bridge, sent = start(registry, "refused-early")
    _stopped_having_sent_nothing(bridge, sent)
    assert registry.checked == 1, "not retried"
    assert bridge.daemon.tracker is None, "never led: no term began"
    assert registry.asked == 0
    assert bridge.daemon.last_error == str(refused)
