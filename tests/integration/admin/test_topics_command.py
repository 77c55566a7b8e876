"""`outbox-bridge topics check | ensure` on the 3-broker cluster: an unsafe topic is named with the setting
and the fix, `ensure` fixes what it safely can, and a missing topic is created safe."""

from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient, NewTopic

from bridge.cli import main
from bridge.migrate import upgrade
from tests.support import insert_events


def test_topics_check_names_unsafe_settings_and_ensure_fixes_them(capsys, sqlite_url, kafka_cluster3) -> None:
    upgrade(sqlite_url)
    insert_events(sqlite_url, 3, aggregate_type="order")
    insert_events(sqlite_url, 3, aggregate_type="invoice", start=3)
    template = f"topicscheck{abs(hash(sqlite_url)) % 10**8}.{{aggregate_type}}"
    unsafe = template.replace("{aggregate_type}", "order")
    missing = template.replace("{aggregate_type}", "invoice")
    admin = AdminClient({"bootstrap.servers": kafka_cluster3.bootstrap})
    admin.create_topics([NewTopic(unsafe, num_partitions=3, replication_factor=3, config={
        "min.insync.replicas": "1", "unclean.leader.election.enable": "true"})])[unsafe].result(30)
    args = ["--db-url", sqlite_url, "--bootstrap-servers", kafka_cluster3.bootstrap, "--topic-template", template,
            "--bridge-name", "topics-test", "--json"]

    assert main(["topics", "check", *args]) == 4
    reports = {r["topic"]: r for r in json.loads(capsys.readouterr().out)}
    problems = " ".join(reports[unsafe]["problems"])
    assert "min.insync.replicas is 1, needs 2" in problems and "unclean.leader.election.enable is true" in problems
    assert "outbox-bridge topics ensure" in problems
    assert not reports[missing]["exists"]

    assert main(["topics", "ensure", *args]) == 0
    reports = {r["topic"]: r for r in json.loads(capsys.readouterr().out)}
    assert reports[unsafe]["safe"] and reports[unsafe]["min_insync_replicas"] == 2
    assert reports[unsafe]["unclean_leader_election"] is False
    assert reports[missing]["safe"] and reports[missing]["replication_factor"] == 3

    assert main(["topics", "check", *args]) == 0
    capsys.readouterr()
    dlq = next(r["topic"] for r in reports.values() if r["topic"].startswith("outbox.dlq."))
    admin.delete_topics([unsafe, missing, dlq])


def test_in_exactly_once_topics_checks_and_ensures_the_progress_topic_compacted(
    capsys, monkeypatch, sqlite_url, kafka_bootstrap
) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    upgrade(sqlite_url)
    insert_events(sqlite_url, 3, aggregate_type="order")
    name = f"progress{abs(hash(sqlite_url)) % 10**8}"
    settings = {"DELIVERY": "exactly-once", "ALLOW_SINGLE_BROKER": "true", "REPLICATION_FACTOR": "1"}
    for setting, value in settings.items():
        monkeypatch.setenv(f"BRIDGE_{setting}", value)
    args = ["--db-url", sqlite_url, "--bootstrap-servers", kafka_bootstrap, "--topic-template",
            f"{name}.{{aggregate_type}}", "--bridge-name", name, "--json"]
    progress = f"outbox.progress.{name}"

    assert main(["topics", "check", *args]) == 4
    reports = {r["topic"]: r for r in json.loads(capsys.readouterr().out)}
    assert not reports[progress]["exists"], "the progress topic is checked with the others"

    assert main(["topics", "ensure", *args]) == 0
    reports = {r["topic"]: r for r in json.loads(capsys.readouterr().out)}
    assert reports[progress]["safe"] and reports[progress]["partitions"] == 1
    assert "compact" in reports[progress]["cleanup_policy"]

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    deleting = ConfigResource("topic", progress, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    next(iter(admin.incremental_alter_configs([deleting]).values())).result(30)
    assert main(["topics", "check", *args]) == 4
    reports = {r["topic"]: r for r in json.loads(capsys.readouterr().out)}
    assert "cleanup.policy=delete" in " ".join(reports[progress]["problems"])
    assert "set cleanup.policy=compact" in " ".join(reports[progress]["problems"])
