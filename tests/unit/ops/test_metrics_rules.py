"""Alert rules and the Grafana dashboard use only metrics the code exposes.

Bridge names come from `bridge.metrics.METRIC_NAMES`, with the series suffixes prometheus-client really
exposes for each metric's type (read from a live `BridgeMetrics` registry). Projection names come from
`projections.metrics.METRIC_NAMES` once that module exists, else from the agreed list below.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from bridge import metrics as bridge_metrics

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
DASHBOARDS = ROOT / "ops" / "grafana" / "dashboards"
OPERATIONS = ROOT / "docs" / "OPERATIONS.md"

# The projection driver's metrics as agreed with projections/metrics.py (name: type); used until that
# module exists, and for the types of the names it declares.
PROJECTION_METRICS_AGREED: dict[str, str] = {
    "projection_batch_duration_seconds": "histogram",
    "projection_input_rows_per_second": "gauge",
    "projection_processed_rows_per_second": "gauge",
    "projection_lag_offsets": "gauge",
    "projection_batches_total": "counter",
    "projection_failed_batches_total": "counter",
    "projection_quarantined_events_total": "counter",
    "projection_events_beyond_horizon_total": "counter",
    "projection_last_batch_timestamp_seconds": "gauge",
}

# Series Prometheus itself writes, not the bridge or the driver.
PROMETHEUS_SERIES = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds"})

REQUIRED_ALERTS = {
    "OutboxBridgeLagHigh",
    "OutboxHorizonHeldBack",
    "OutboxPublishingStalled",
    "OutboxInFlightWindowStuck",
    "OutboxPublishErrors",
    "OutboxInstanceDown",
    "OutboxNoLeader",
    "OutboxDeadLettersOpen",
    "OutboxBridgeNotStarting",
    "OutboxRetentionHeldBack",
    "ProjectionLagHigh",
    "ProjectionFailedBatches",
}


# ----------------------------------------------------------------------------------- exposed series names


def exposed_series(name: str, kind: str) -> set[str]:
    """The series names prometheus-client exposes for a metric declared as `name` of type `kind`."""
    base = name.removesuffix("_total") if kind == "counter" else name
    return {
        "counter": {f"{base}_total", f"{base}_created"},
        "gauge": {name},
        "histogram": {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"},
        "summary": {name, f"{name}_sum", f"{name}_count", f"{name}_created"},
        "info": {f"{name}_info"},
    }.get(kind, {name})


def registry_series(registry: CollectorRegistry, declared: Iterable[str]) -> set[str]:
    """Series of the registry's metrics that are among `declared` (counters may be declared with _total)."""
    declared = set(declared)
    series: set[str] = set()
    for family in registry.collect():
        name = family.name
        if family.type == "counter" and f"{name}_total" in declared:
            name = f"{name}_total"
        if name in declared:
            series |= exposed_series(name, family.type)
    return series


def bridge_series() -> set[str]:
    registry = bridge_metrics.BridgeMetrics().registry
    series = registry_series(registry, bridge_metrics.METRIC_NAMES)
    registered = {family.name for family in registry.collect()}
    # Every declared name is registered, so the set above is the whole of METRIC_NAMES.
    for name in bridge_metrics.METRIC_NAMES:
        assert name in registered or name.removesuffix("_total") in registered, f"{name} is not registered"
    return series


def projection_metrics() -> dict[str, str]:
    """Declared projection metrics with their types: projections.metrics if it exists, else the agreed list."""
    try:
        module = importlib.import_module("projections.metrics")
    except ModuleNotFoundError as exc:
        if exc.name != "projections.metrics":
            raise
        return PROJECTION_METRICS_AGREED
    declared: Iterable[str] = module.METRIC_NAMES
    return {
        name: PROJECTION_METRICS_AGREED.get(name, "counter" if name.endswith("_total") else "gauge")
        for name in declared
    }


def projection_series() -> set[str]:
    return {series for name, kind in projection_metrics().items() for series in exposed_series(name, kind)}


# ----------------------------------------------------------------------------------- names in PromQL

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_OFFSET = re.compile(r"\boffset\s+-?\w+")
_GRAFANA_VARIABLE = re.compile(r"\$\{?\w+\}?")
_TOKEN = re.compile(r"(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_:][\w:]*)(?P<call>\s*\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right", "offset"}
    | {"inf", "nan", "Inf", "NaN", "atan2"}
)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers that are not functions, keywords or label names."""
    text = _STRING.sub('""', expr)
    text = _GRAFANA_VARIABLE.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    text = _OFFSET.sub("", text)
    names = set()
    for token in _TOKEN.finditer(text):
        name = token.group("name")
        if name and not token.group("call") and name not in _KEYWORDS:
            names.add(name)
    return names


_LABEL_VALUES = re.compile(r"^\s*label_values\s*\((?P<expr>.*),\s*\w+\s*\)\s*$", re.S)


def template_query_exprs(query: str) -> list[str]:
    """The PromQL inside a Grafana variable query (`label_values(expr, label)`, `query_result(expr)`)."""
    match = _LABEL_VALUES.match(query)
    if match:
        return [match.group("expr")]
    match = re.match(r"^\s*(?:query_result|metrics)\s*\((?P<expr>.*)\)\s*$", query, re.S)
    if match:
        return [match.group("expr")]
    return [] if re.match(r"^\s*label_values\s*\(\s*\w+\s*\)\s*$", query) else [query]


# ----------------------------------------------------------------------------------- where they are used


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _walk(node: Any) -> Iterable[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def dashboard_exprs(path: Path) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets (nested rows too) and variable queries."""
    dashboard = json.loads(path.read_text())
    exprs = [node["expr"] for node in _walk(dashboard.get("panels", [])) if isinstance(node.get("expr"), str)]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        exprs += template_query_exprs(query)
    return exprs


def used_names() -> dict[str, set[str]]:
    """Metric name -> where it is used."""
    where: dict[str, set[str]] = {}
    for rule in alert_rules():
        for name in metric_names(rule["expr"]):
            where.setdefault(name, set()).add(f"alerts.yml {rule.get('alert') or rule.get('record')}")
    for path in sorted(DASHBOARDS.glob("*.json")):
        for expr in dashboard_exprs(path):
            for name in metric_names(expr):
                where.setdefault(name, set()).add(f"{path.name}: {expr}")
    return where


# ----------------------------------------------------------------------------------- tests


def test_metric_names_reads_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(outbox_commit_to_ack_seconds_bucket{job="a", le!="1e3"}'
        "[$__rate_interval]))) > 1e-3 and on (job, instance) (outbox_is_leader == 1)"
        " unless ignoring(kind) sum(x_total offset 5m) without (topic) or vector(0)"
    )
    assert metric_names(expr) == {"outbox_commit_to_ack_seconds_bucket", "outbox_is_leader", "x_total"}
    assert template_query_exprs("label_values(outbox_is_leader, bridge_name)") == ["outbox_is_leader"]
    assert template_query_exprs("label_values(bridge_name)") == []


def test_exposed_series_follow_prometheus_client() -> None:
    assert exposed_series("a_total", "counter") == {"a_total", "a_created"}
    assert exposed_series("h_seconds", "histogram") == {
        "h_seconds_bucket",
        "h_seconds_sum",
        "h_seconds_count",
        "h_seconds_created",
    }
    series = bridge_series()
    # A histogram is queried through its series, never by its bare name; a counter keeps its _total.
    assert bridge_metrics.COMMIT_TO_ACK_SECONDS not in series
    assert f"{bridge_metrics.COMMIT_TO_ACK_SECONDS}_bucket" in series
    assert bridge_metrics.EVENTS_PUBLISHED in series
    assert bridge_metrics.LAG_SECONDS in series


def test_alerts_and_dashboards_use_only_exposed_metrics() -> None:
    allowed = bridge_series() | projection_series() | PROMETHEUS_SERIES
    where = used_names()
    assert where, "no metric names found in alerts.yml or the dashboards"
    unknown = {name: sorted(places) for name, places in where.items() if name not in allowed}
    assert not unknown, (
        "metric names not exposed by bridge/metrics.py or projections/metrics.py "
        f"(bridge names must be in METRIC_NAMES, with prometheus-client's suffixes): {unknown}"
    )


def test_bridge_and_projection_metrics_are_both_used() -> None:
    names = set(used_names())
    assert names & bridge_series(), "no bridge metric used"
    assert names & projection_series(), "no projection metric used"


def test_dashboards_show_every_bridge_and_projection_metric() -> None:
    names = set(used_names())
    bridge_missing = [
        name
        for name in bridge_metrics.METRIC_NAMES
        if not names & registry_series(bridge_metrics.BridgeMetrics().registry, [name])
    ]
    projection_missing = [name for name, kind in projection_metrics().items() if not names & exposed_series(name, kind)]
    assert not bridge_missing + projection_missing, "metrics on no panel and in no alert"


def test_required_alerts_exist_with_summary_description_and_severity() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules() if "alert" in rule}
    missing = REQUIRED_ALERTS - set(rules)
    assert not missing, f"missing alerts: {sorted(missing)}"
    for name, rule in rules.items():
        annotations = rule.get("annotations", {})
        assert annotations.get("summary", "").strip(), f"{name} has no summary"
        assert len(annotations.get("description", "")) > 80, f"{name} has no real description"
        assert rule.get("labels", {}).get("severity") in {"warning", "critical"}, f"{name} has no severity"


def test_every_alert_has_a_runbook_section_in_operations_md() -> None:
    headings = {
        re.sub(r"[^a-z0-9_-]", "", line.lstrip("#").strip().lower().replace(" ", "-"))
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in alert_rules():
        if "alert" not in rule:
            continue
        runbook = rule["annotations"].get("runbook", "")
        assert runbook.startswith("docs/OPERATIONS.md#"), f"{rule['alert']} has no runbook link"
        assert runbook.split("#", 1)[1] in headings, f"{runbook}: no such heading in docs/OPERATIONS.md"


def test_operations_names_every_projection_metric() -> None:
    text = OPERATIONS.read_text()
    assert [name for name in projection_metrics() if f"`{name}`" not in text] == []
