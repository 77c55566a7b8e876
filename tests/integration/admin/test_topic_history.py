"""The history a topic keeps, on the real broker: a topic the bridge creates keeps every record; a topic that
deletes records after seven days is reported (a warning, not unsafe) by `topics check` and `doctor`, with the
outbox's retention in the same line when it deletes too; `topics ensure` lengthens it and never shortens one."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from bridge.config import BridgeConfig
from bridge.doctor import BridgeDoctor, Verdict
from bridge.kafka.topics import TopicGuard
from bridge.migrate import upgrade
from bridge.status import topics_command
from tests.support import bridge_config, insert_events, topic_configs

pytestmark = pytest.mark.integration

SEVEN_DAYS_MS = 7 * 86_400_000


def topics_report(config: BridgeConfig, action: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = topics_command(config, action, as_json=True, extra_topics=[])
    return code, {r["topic"]: r for r in json.loads(capsys.readouterr().out)}


@pytest.fixture
def outbox(sqlite_url: str) -> str:
    upgrade(sqlite_url)
    insert_events(sqlite_url, 3, aggregate_type="order")
    return sqlite_url


def test_a_topic_the_bridge_creates_keeps_every_record(
    outbox: str, kafka_bootstrap: str, topic_factory: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = bridge_config(outbox, kafka_bootstrap)
    topic = config.topic_for("order")
    try:
        code, reports = topics_report(config, "ensure", capsys)
        assert code == 0 and reports[topic]["exists"]
        configs = topic_configs(kafka_bootstrap, topic)
        kept = (configs["retention.ms"], configs["retention.bytes"], configs["cleanup.policy"])
        assert kept == ("-1", "-1", "delete")
        assert reports[topic]["retention_ms"] == -1 and reports[topic]["history"] is None

        # The daemon's own creation (TopicGuard.ensure before a topic's first event) keeps every record too.
        daemon_topic = config.topic_for("invoice")
        TopicGuard(config.kafka.client_conf(), config.topics.policy()).ensure(daemon_topic, allow_create=True)
        assert topic_configs(kafka_bootstrap, daemon_topic)["retention.ms"] == "-1"
    finally:
        AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics(
            [topic, config.topic_for("invoice"), config.dlq_topic_name])


def test_a_seven_day_topic_is_reported_by_topics_check_and_doctor_and_ensure_lengthens_it(
    outbox: str, kafka_bootstrap: str, topic_factory: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = bridge_config(outbox, kafka_bootstrap, retention="7d")
    topic = topic_factory(name=config.topic_for("order"), config={"retention.ms": str(SEVEN_DAYS_MS)})
    topic_factory(name=config.dlq_topic_name, config={"retention.ms": "-1"})
    code, reports = topics_report(config, "check", capsys)
    assert code == 0, "a finite history is a warning, not an unsafe topic"
    history = reports[topic]["history"]
    assert reports[topic]["safe"] and reports[topic]["retention_ms"] == SEVEN_DAYS_MS
    assert "its history goes back 7 days" in history["summary"]
    assert "With BRIDGE_RETENTION=7d on the outbox too, an event older than 7 days is gone everywhere" in \
        history["summary"]
    assert "outbox-bridge topics ensure" in history["fix"] and "unset BRIDGE_RETENTION" in history["fix"]

    assert topics_command(config, "check", as_json=False, extra_topics=[]) == 0
    text = capsys.readouterr().out
    assert "7 days" in text and "gone everywhere" in text

    checks = BridgeDoctor(config).run()
    [warning] = [c for c in checks if c.name == "topics" and c.verdict is Verdict.WARNING and "history" in c.summary]
    assert topic in warning.summary and "its history goes back 7 days" in warning.summary
    assert "gone everywhere" in warning.summary and "retention.ms=-1" in (warning.fix or "")
    assert not [c for c in checks if c.name == "topics" and c.verdict is Verdict.FAILED]

    # A team that chose one day: ensure leaves seven days as they are (never shorter).
    code, reports = topics_report(bridge_config(outbox, kafka_bootstrap, topic_retention="1d",
                                                bridge_name=config.bridge_name,
                                                topic_template=config.topic_template), "ensure", capsys)
    assert code == 0 and topic_configs(kafka_bootstrap, topic)["retention.ms"] == str(SEVEN_DAYS_MS)

    # The default, forever: ensure lengthens it, and the warning is gone.
    code, reports = topics_report(config, "ensure", capsys)
    assert code == 0 and reports[topic]["history"] is None
    assert topic_configs(kafka_bootstrap, topic)["retention.ms"] == "-1"
    checks = BridgeDoctor(config).run()
    assert not [c for c in checks if c.name == "topics" and "history" in c.summary]
