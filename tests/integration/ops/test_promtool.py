"""Prometheus's own checker accepts the alert rules and the config, and every alert fires in the situation it
describes and stays quiet in the ones it must not confuse with it (`promtool test rules`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS_DIR = ROOT / "ops" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"
DASHBOARDS = ROOT / "ops" / "grafana" / "dashboards"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed; Debian's `prometheus` package provides it: apt-get install prometheus")
    return path


def run_promtool(promtool: str, *args: str, cwd: Path = ROOT) -> str:
    result = subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def test_alert_rules_pass_promtool_check(promtool: str) -> None:
    output = run_promtool(promtool, "check", "rules", str(ALERTS))
    assert "SUCCESS" in output


def test_prometheus_config_passes_promtool_check(promtool: str) -> None:
    # `check config` also checks the rule files the config names, so alerts.yml must resolve beside it.
    output = run_promtool(promtool, "check", "config", str(CONFIG))
    assert "SUCCESS" in output
    assert "1 rule files found" in output


def _exprs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [expr for value in node.values() for expr in _exprs(value)]
    if isinstance(node, list):
        return [expr for item in node for expr in _exprs(item)]
    return []


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    # promtool parses expressions only inside rule files: each query becomes a recording rule, with
    # Grafana's variables replaced by what they expand to (an interval, or a regex matching everything).
    rules = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for expr in _exprs(json.loads(path.read_text())):
            expr = re.sub(r"\$__(?:rate_interval|interval|range)\b", "5m", expr)
            expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
            rules.append({"record": f"dashboard_query_{len(rules)}", "expr": expr})
    assert rules, f"no queries found in {DASHBOARDS}"
    rule_file = tmp_path / "dashboard_queries.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    output = run_promtool(promtool, "check", "rules", str(rule_file))
    assert f"{len(rules)} rules found" in output


# ------------------------------------------------------------------------------------------ alert behaviour

BRIDGE = 'job="outbox-bridge",bridge_name="default"'
PROJ = 'job="outbox-projections",instance="projections:9465"'


def _labels(selector: str) -> dict[str, str]:
    """`a="x",b="y"` as a dict, for expected alert labels."""
    pairs = (item.split("=", 1) for item in selector.split(","))
    return {key: value.strip('"') for key, value in pairs}


def bridge(instance: str, **extra: str) -> str:
    return ",".join([BRIDGE, f'instance="{instance}"', *(f'{k}="{v}"' for k, v in extra.items())])


# Each scenario: the alert, input series as (metric, labels, values in promtool's expanding notation), and the
# labels of the alerts expected to be firing at each evaluation time (an empty list: none is firing).
SCENARIOS: list[dict[str, Any]] = [
    {
        "alert": "OutboxBridgeLagHigh",
        "series": [
            ("outbox_lag_seconds", bridge("active"), "120x20"),
            ("outbox_is_leader", bridge("active"), "1x20"),
            # A standby's stale gauge must not page anyone.
            ("outbox_lag_seconds", bridge("standby"), "120x20"),
            ("outbox_is_leader", bridge("standby"), "0x20"),
            ("outbox_lag_seconds", bridge("keeping-up"), "5x20"),
            ("outbox_is_leader", bridge("keeping-up"), "1x20"),
        ],
        "expect": {"4m": [], "10m": [bridge("active")]},
    },
    {
        "alert": "OutboxHorizonHeldBack",
        "series": [
            ("outbox_horizon_held_back", bridge("held"), "1x10"),
            ("outbox_horizon_oldest_xact_age_seconds", bridge("held"), "300+60x10"),
            ("outbox_horizon_held_back", bridge("free"), "0x10"),
            ("outbox_horizon_oldest_xact_age_seconds", bridge("free"), "5x10"),
        ],
        "expect": {"1m": [], "5m": [bridge("held")]},
    },
    {
        "alert": "OutboxPublishingStalled",
        "series": [
            # Never published anything: no outbox_events_published_total series at all.
            ("outbox_head_seq", bridge("silent"), "100+10x30"),
            ("outbox_is_leader", bridge("silent"), "1x30"),
            ("outbox_horizon_held_back", bridge("silent"), "0x30"),
            # Published before, then stopped.
            ("outbox_head_seq", bridge("stopped"), "100+10x30"),
            ("outbox_is_leader", bridge("stopped"), "1x30"),
            ("outbox_horizon_held_back", bridge("stopped"), "0x30"),
            ("outbox_events_published_total", bridge("stopped", topic="outbox.event.order"), "0+10x5 50x25"),
            # Publishing: quiet.
            ("outbox_head_seq", bridge("healthy"), "100+10x30"),
            ("outbox_is_leader", bridge("healthy"), "1x30"),
            ("outbox_horizon_held_back", bridge("healthy"), "0x30"),
            ("outbox_events_published_total", bridge("healthy", topic="outbox.event.order"), "0+10x30"),
            # Held back by a long transaction: OutboxHorizonHeldBack says why, this one stays quiet.
            ("outbox_head_seq", bridge("held"), "100+10x30"),
            ("outbox_is_leader", bridge("held"), "1x30"),
            ("outbox_horizon_held_back", bridge("held"), "1x30"),
            # Nothing new in the outbox: quiet.
            ("outbox_head_seq", bridge("idle"), "100x30"),
            ("outbox_is_leader", bridge("idle"), "1x30"),
            ("outbox_horizon_held_back", bridge("idle"), "0x30"),
        ],
        "expect": {"8m": [bridge("silent")], "25m": [bridge("silent"), bridge("stopped")]},
    },
    {
        "alert": "OutboxInFlightWindowStuck",
        "series": [
            ("outbox_in_flight_events", bridge("stuck"), "500x20"),
            ("outbox_watermark_seq", bridge("stuck"), "1000x20"),
            ("outbox_is_leader", bridge("stuck"), "1x20"),
            ("outbox_in_flight_events", bridge("flowing"), "500x20"),
            ("outbox_watermark_seq", bridge("flowing"), "1000+100x20"),
            ("outbox_is_leader", bridge("flowing"), "1x20"),
            ("outbox_in_flight_events", bridge("idle"), "0x20"),
            ("outbox_watermark_seq", bridge("idle"), "1000x20"),
            ("outbox_is_leader", bridge("idle"), "1x20"),
        ],
        "expect": {"10m": [bridge("stuck")]},
    },
    {
        "alert": "OutboxPublishErrors",
        "series": [
            ("outbox_publish_errors_total", bridge("failing", kind="timeout"), "0+5x30"),
            # A burst during a broker restart that then stops.
            ("outbox_publish_errors_total", bridge("blip", kind="retriable"), "0+5x3 15x27"),
        ],
        "expect": {
            "5m": [],
            "20m": [bridge("failing", kind="timeout")],
        },
    },
    {
        "alert": "OutboxPoisonEvents",
        "series": [("outbox_poison_events_total", bridge("active", policy="halt"), "0 0 1x10")],
        "expect": {"1m": [], "3m": [bridge("active", policy="halt")]},
    },
    {
        "alert": "OutboxDeadLettersOpen",
        "series": [
            # Open an hour past the bridge's threshold (BRIDGE_DEAD_LETTER_ALERT_AFTER=1h).
            ("outbox_dead_letter_oldest_age_seconds", bridge("old"), "0+60x90"),
            ("outbox_dead_letters_open", bridge("old"), "1x90"),
            ("outbox_dead_letter_alert_after_seconds", bridge("old"), "3600x90"),
            ("outbox_is_leader", bridge("old"), "1x90"),
            # A longer threshold: not yet.
            ("outbox_dead_letter_oldest_age_seconds", bridge("patient"), "0+60x90"),
            ("outbox_dead_letters_open", bridge("patient"), "1x90"),
            ("outbox_dead_letter_alert_after_seconds", bridge("patient"), "7200x90"),
            ("outbox_is_leader", bridge("patient"), "1x90"),
            # A standby's gauges say nothing.
            ("outbox_dead_letter_oldest_age_seconds", bridge("standby"), "0+60x90"),
            ("outbox_dead_letters_open", bridge("standby"), "1x90"),
            ("outbox_dead_letter_alert_after_seconds", bridge("standby"), "3600x90"),
            ("outbox_is_leader", bridge("standby"), "0x90"),
            # Resolved: none open.
            ("outbox_dead_letter_oldest_age_seconds", bridge("resolved"), "0x90"),
            ("outbox_dead_letters_open", bridge("resolved"), "0x90"),
            ("outbox_dead_letter_alert_after_seconds", bridge("resolved"), "3600x90"),
            ("outbox_is_leader", bridge("resolved"), "1x90"),
        ],
        "expect": {"30m": [], "70m": [bridge("old")]},
    },
    {
        "alert": "OutboxRetentionHeldBack",
        "series": [
            # Name b has kept rows a published for longer and longer, past a's threshold of 6 hours.
            ("outbox_retention_held_back_seconds", bridge("a", held_by="b"), "0+600x60"),
            ("outbox_retention_hold_alert_after_seconds", bridge("a"), "21600x60"),
            ("outbox_is_leader", bridge("a"), "1x60"),
            # Held back a little: quiet.
            ("outbox_retention_held_back_seconds", bridge("c", held_by="d"), "600x60"),
            ("outbox_retention_hold_alert_after_seconds", bridge("c"), "21600x60"),
            ("outbox_is_leader", bridge("c"), "1x60"),
        ],
        "expect": {"20m": [], "50m": [bridge("a", held_by="b")]},
    },
    {
        "alert": "OutboxLateEvents",
        "series": [("outbox_late_events_total", bridge("active"), "0 0 2x10")],
        "expect": {"1m": [], "5m": [bridge("active")]},
    },
    {
        "alert": "OutboxWatermarkNotPersisted",
        # promtool's clock starts at 0: a timestamp of 0 is t seconds old at evaluation time t.
        "series": [
            ("outbox_last_persist_timestamp_seconds", bridge("hung"), "0x20"),
            ("outbox_is_leader", bridge("hung"), "1x20"),
            # A standby does not persist.
            ("outbox_last_persist_timestamp_seconds", bridge("standby"), "0x20"),
            ("outbox_is_leader", bridge("standby"), "0x20"),
            ("outbox_last_persist_timestamp_seconds", bridge("working"), "0+60x20"),
            ("outbox_is_leader", bridge("working"), "1x20"),
        ],
        "expect": {"3m": [], "6m": [bridge("hung")]},
    },
    {
        "alert": "OutboxNoLeader",
        "series": [
            # Both instances up, neither holds the lease.
            ("outbox_is_leader", 'job="outbox-bridge",bridge_name="orders",instance="a"', "0x10"),
            ("outbox_is_leader", 'job="outbox-bridge",bridge_name="orders",instance="b"', "0x10"),
            ("up", 'job="outbox-bridge",bridge_name="orders",instance="a"', "1x10"),
            ("up", 'job="outbox-bridge",bridge_name="orders",instance="b"', "1x10"),
            # Every instance down: no outbox_is_leader series at all.
            ("up", 'job="outbox-bridge",bridge_name="billing",instance="c"', "0x10"),
            # One active, one standby: healthy.
            ("outbox_is_leader", 'job="outbox-bridge",bridge_name="default",instance="d"', "1x10"),
            ("outbox_is_leader", 'job="outbox-bridge",bridge_name="default",instance="e"', "0x10"),
            ("up", 'job="outbox-bridge",bridge_name="default",instance="d"', "1x10"),
            ("up", 'job="outbox-bridge",bridge_name="default",instance="e"', "1x10"),
        ],
        "expect": {
            "1m": [],
            "5m": ['job="outbox-bridge",bridge_name="orders"', 'job="outbox-bridge",bridge_name="billing"'],
        },
    },
    {
        "alert": "OutboxBridgeNotStarting",
        "series": [
            # Starting for longer and longer past its threshold (BRIDGE_STARTUP_ALERT_AFTER=5m).
            ("outbox_startup_seconds", bridge("stuck"), "0+60x20"),
            ("outbox_startup_alert_after_seconds", bridge("stuck"), "300x20"),
            # A healthy standby reports 0.
            ("outbox_startup_seconds", bridge("standby"), "0x20"),
            ("outbox_startup_alert_after_seconds", bridge("standby"), "300x20"),
            # Started after two minutes.
            ("outbox_startup_seconds", bridge("slow"), "0+60x2 0x18"),
            ("outbox_startup_alert_after_seconds", bridge("slow"), "300x20"),
        ],
        "expect": {"4m": [], "10m": [bridge("stuck")]},
    },
    {
        "alert": "OutboxInstanceDown",
        "series": [
            ("up", PROJ, "0x10"),
            ("up", bridge("active"), "1x10"),
            ("up", 'job="node",instance="elsewhere:9100"', "0x10"),
        ],
        "expect": {"1m": [], "5m": [PROJ]},
    },
    {
        "alert": "ProjectionLagHigh",
        "series": [
            ("projection_lag_offsets", f'{PROJ},projection="orders_latest"', "20000x30"),
            ("projection_lag_offsets", f'{PROJ},projection="orders_history"', "500x30"),
        ],
        "expect": {"10m": [], "20m": [f'{PROJ},projection="orders_latest"']},
    },
    {
        "alert": "ProjectionFailedBatches",
        "series": [
            ("projection_failed_batches_total", f'{PROJ},projection="orders_latest"', "0 0 1x10"),
            ("projection_failed_batches_total", f'{PROJ},projection="orders_history"', "0x12"),
        ],
        "expect": {"1m": [], "3m": [f'{PROJ},projection="orders_latest"']},
    },
    {
        "alert": "ProjectionStalled",
        # promtool's clock starts at 0, so a last batch at time 0 is t seconds old at evaluation time t.
        "series": [
            ("projection_last_batch_timestamp_seconds", f'{PROJ},projection="orders_latest"', "0x40"),
            ("projection_lag_offsets", f'{PROJ},projection="orders_latest"', "10x40"),
            # Nothing to do is not a stall.
            ("projection_last_batch_timestamp_seconds", f'{PROJ},projection="orders_history"', "0x40"),
            ("projection_lag_offsets", f'{PROJ},projection="orders_history"', "0x40"),
        ],
        "expect": {"10m": [], "25m": [f'{PROJ},projection="orders_latest"']},
    },
    {
        "alert": "ProjectionQuarantinedEvents",
        "series": [("projection_quarantined_events_total", f'{PROJ},projection="orders_latest"', "0 0 3x10")],
        "expect": {"1m": [], "3m": [f'{PROJ},projection="orders_latest"']},
    },
    {
        "alert": "ProjectionEventsBeyondHorizon",
        "series": [
            ("projection_events_beyond_horizon_total", f'{PROJ},projection="order_events"', "0 0 2x10"),
            ("projection_events_beyond_horizon_total", f'{PROJ},projection="paid_per_minute"', "0x12"),
        ],
        "expect": {"1m": [], "3m": [f'{PROJ},projection="order_events"']},
    },
]


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _unit_tests() -> dict[str, Any]:
    severity = {rule["alert"]: rule["labels"]["severity"] for rule in _rules()}
    tests = []
    for scenario in SCENARIOS:
        alert = scenario["alert"]
        tests.append(
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"{metric}{{{labels}}}", "values": values}
                    for metric, labels, values in scenario["series"]
                ],
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": alert,
                        "exp_alerts": [
                            {"exp_labels": _labels(labels) | {"severity": severity[alert]}} for labels in firing
                        ],
                    }
                    for at, firing in scenario["expect"].items()
                ],
            }
        )
    return {"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": tests}


def test_every_alert_has_a_scenario() -> None:
    assert sorted(s["alert"] for s in SCENARIOS) == sorted(rule["alert"] for rule in _rules())


def test_alerts_fire_when_and_only_when_they_should(promtool: str, tmp_path: Path) -> None:
    # promtool compares annotations too; they are prose (checked by `check rules` and by the docs), so the
    # expressions are tested on a copy without them.
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    (tmp_path / "alerts_test.yml").write_text(yaml.safe_dump(_unit_tests(), sort_keys=False))
    output = run_promtool(promtool, "test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert "SUCCESS" in output
