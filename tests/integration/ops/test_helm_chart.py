"""The Helm chart (ops/helm/outbox-bridge), rendered by the pinned helm for its default, secured and registry values
(the json-schema value format): every object valid against Kubernetes' own schemas (kubernetes-validate, offline),
every environment variable one the bridge or the projections know (and the set loads as their configuration),
probes on the port the bridge serves them on, rules built from ops/prometheus/alerts.yml, no secret in any
manifest, and registry values that do not hold together refused, naming the value.

No cluster runs here: nothing is applied, scheduled or probed by a kubelet. `make helm` builds helm (`make test` does
it first) and names it in OUTBOX_HELM.
"""

from __future__ import annotations

import ast
import logging
import os
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_schemas

from bridge import config as bridge_config
from projections import settings as projection_settings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "ops" / "helm" / "outbox-bridge"
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
VALUES = {"default": CHART / "ci" / "default-values.yaml", "secured": CHART / "ci" / "secured-values.yaml",
          "registry": CHART / "ci" / "registry-values.yaml"}
#: The kinds of prometheus-operator, which have no schema among Kubernetes' own (checked by the tests below instead).
OPERATOR_KINDS = {"PrometheusRule", "ServiceMonitor", "PodMonitor"}
#: Kubernetes versions whose schemas every object must pass: the oldest the chart supports and the newest known.
OLDEST_SUPPORTED = "1.27.0"

pytestmark = pytest.mark.integration


@cache
def helm() -> str:
    given = os.environ.get("OUTBOX_HELM")
    built = sorted((ROOT / ".cache" / "helm").glob("v*/helm"))
    path = given or (str(built[-1]) if built else shutil.which("helm"))
    if not path:
        pytest.fail("helm is not built: run `make helm` (the pinned version, from the Go module proxy)")
    return path


def helm_template(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), "template", "outbox", str(CHART), "--namespace", "outbox", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@cache
def rendered(values: str) -> tuple[dict[str, Any], ...]:
    result = helm_template("--values", str(VALUES[values]))
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def rendered_text(values: str) -> str:
    return helm_template("--values", str(VALUES[values])).stdout


def of_kind(values: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in rendered(values) if doc["kind"] == kind]


def pod_specs(values: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod spec the release makes: the Deployment's, the Jobs', and the Spark executors' template."""
    for doc in rendered(values):
        if doc["kind"] in ("Deployment", "Job"):
            yield f"{doc['kind']} {doc['metadata']['name']}", doc["spec"]["template"]["spec"]
        elif doc["kind"] == "ConfigMap" and "executor-pod.yaml" in doc.get("data", {}):
            yield "the Spark executor pod template", yaml.safe_load(doc["data"]["executor-pod.yaml"])["spec"]


def containers(values: str, component: str) -> list[dict[str, Any]]:
    found = []
    for doc in rendered(values):
        if doc["kind"] in ("Deployment", "Job"):
            labels = doc["spec"]["template"]["metadata"].get("labels", {})
            if labels.get("app.kubernetes.io/component") == component:
                found += doc["spec"]["template"]["spec"]["containers"]
    assert found, f"no {component} pod rendered"
    return found


def test_helm_is_the_pinned_version() -> None:
    pinned = re.search(r"^HELM_VERSION := (\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert pinned is not None
    # Built by `go install`, helm calls itself by its minor version; the module's exact one is in the binary.
    said = subprocess.run([helm(), "version", "--short"], capture_output=True, text=True, check=True).stdout.strip()
    assert pinned.group(1).startswith(said.split("+")[0]), said
    if shutil.which("go"):
        built = subprocess.run(["go", "version", "-m", helm()], capture_output=True, text=True, check=True).stdout
        assert re.search(rf"\bmod\s+helm\.sh/helm/v3\s+{re.escape(pinned.group(1))}\b", built), built


@pytest.mark.parametrize("values", VALUES)
def test_the_chart_passes_helm_lint(values: str) -> None:
    result = subprocess.run([helm(), "lint", "--strict", str(CHART), "--values", str(VALUES[values])],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, kubernetes_schemas.latest_version()])
@pytest.mark.parametrize("values", VALUES)
def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(values: str, version: str) -> None:
    kinds = set()
    for doc in rendered(values):
        kinds.add(doc["kind"])
        if doc["kind"] in OPERATOR_KINDS:
            continue
        # Strict: a misspelt or misplaced field is an error, not silently dropped by the API server.
        kubernetes_validate.validate(doc, version, strict=True)
        if doc["kind"] == "ConfigMap" and "executor-pod.yaml" in doc["data"]:
            kubernetes_validate.validate(yaml.safe_load(doc["data"]["executor-pod.yaml"]), version, strict=True)
    assert {"Deployment", "Job", "PodDisruptionBudget", "Service", "ServiceAccount"} <= kinds


def test_the_secured_values_render_every_optional_part() -> None:
    kinds = {doc["kind"] for doc in rendered("secured")}
    assert {"PrometheusRule", "ServiceMonitor", "PodMonitor", "Role", "RoleBinding", "ConfigMap"} <= kinds
    jobs = {doc["metadata"]["name"] for doc in of_kind("secured", "Job")}
    assert jobs == {"outbox-outbox-bridge-migrate", "outbox-outbox-bridge-orders-current",
                    "outbox-outbox-bridge-order-events"}


# ------------------------------------------------------------------------------------- environment variables


def env_read_in_source(*packages: str) -> set[str]:
    """The environment variables the code of `packages` reads by name (os.environ.get / [...] / setdefault)."""
    names = set()
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                key = None
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("get", "setdefault") and node.args
                        and "environ" in ast.unparse(node.func.value)):
                    key = node.args[0]
                elif isinstance(node, ast.Subscript) and "environ" in ast.unparse(node.value):
                    key = node.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    names.add(key.value)
    return names


def plain_env(container: dict[str, Any], tmp_path: Path) -> dict[str, str]:
    """The container's environment as the process would see it: a stand-in for each Secret's value and the
    downward API's, and a file of the tmp folder for each path inside a mounted volume."""
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    env = {}
    for variable in container["env"]:
        if "valueFrom" in variable:
            source = variable["valueFrom"]
            value = "10.0.0.7" if "fieldRef" in source else "stand-in"
            if variable["name"] == "OUTBOX_DB_URL":
                value = "postgresql+psycopg://relay:stand-in@db:5432/app"
        else:
            value = variable["value"]
            if any(value.startswith(mount.rstrip("/") + "/") for mount in mounts):
                stand_in = tmp_path / value.strip("/").replace("/", "_")
                stand_in.write_text("mounted\n")
                value = str(stand_in)
        env[variable["name"]] = value
    return env


@pytest.mark.parametrize("values", VALUES)
def test_every_variable_the_chart_sets_for_the_bridge_is_a_setting_it_knows(
    values: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    known = set(bridge_config.ENV_NAMES.values()) | {bridge_config.CONFIG_FILE_ENV}
    for component in ("bridge", "migration"):
        for container in containers(values, component):
            names = [variable["name"] for variable in container["env"]]
            assert len(names) == len(set(names)), f"{component}: a variable set twice: {names}"
            assert set(names) <= known, f"{component}: unknown to the bridge: {sorted(set(names) - known)}"
            # And together they load as the bridge's configuration, with nothing ignored.
            with caplog.at_level(logging.WARNING, logger="bridge.config"):
                bridge_config.load_config(env=plain_env(container, tmp_path))
            assert not [r for r in caplog.records if "unknown environment variable" in r.getMessage()]


@pytest.mark.parametrize("values", ["secured"])
def test_every_variable_the_chart_sets_for_a_projection_is_a_setting_it_knows(values: str, tmp_path: Path) -> None:
    known = set(projection_settings.ENV_NAMES.values()) | env_read_in_source("projections")
    for container in containers(values, "projection"):
        names = {variable["name"] for variable in container["env"]}
        # A variable only the container's arguments use ($(NAME), expanded by the kubelet) is not a setting.
        in_arguments = {name for name in names if any(f"$({name})" in arg for arg in container["args"])}
        assert names - in_arguments <= known, f"unknown to the projections: {sorted(names - in_arguments - known)}"
        env = {k: v for k, v in plain_env(container, tmp_path).items() if k not in in_arguments}
        projection_settings.load_settings(env=env)


def test_the_bridge_and_migration_arguments_are_commands_the_cli_takes() -> None:
    from bridge.cli import build_parser

    result = helm_template("--values", str(VALUES["default"]), "--set", "bridge.extraArgs={--start-from,earliest}")
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job") and "command" not in doc["spec"]["template"]["spec"]["containers"][0]:
            args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
            parsed = build_parser().parse_args(args)  # exits (SystemExit) on anything the CLI does not know
            assert parsed.command == args[0]
    (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["run", "--start-from", "earliest"]


# ---------------------------------------------------------------------------------------------------- probes


@pytest.fixture()
def bridge_endpoint() -> Iterator[tuple[int, threading.Event]]:
    """The bridge's own HTTP endpoint (bridge.http) on a free loopback port; set the event to make it ready."""
    from prometheus_client import CollectorRegistry

    from bridge.http import serve

    ready = threading.Event()
    server = serve("127.0.0.1", 0, CollectorRegistry(), ready.is_set, dict)
    try:
        yield int(server.server_address[1]), ready
    finally:
        server.shutdown()
        server.server_close()


def get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("values", VALUES)
def test_the_probes_hit_the_port_and_paths_the_bridge_serves(
    values: str, tmp_path: Path, bridge_endpoint: tuple[int, threading.Event]
) -> None:
    (container,) = containers(values, "bridge")
    config = bridge_config.load_config(env=plain_env(container, tmp_path))
    assert config.metrics_host == "0.0.0.0", "the kubelet probes the pod's address, not its loopback"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    probes = {kind: container[f"{kind}Probe"]["httpGet"] for kind in ("startup", "liveness", "readiness")}
    for kind, probe in probes.items():
        port = probe["port"] if isinstance(probe["port"], int) else ports[probe["port"]]
        assert port == config.metrics_port, f"the {kind} probe asks {port}; the bridge serves {config.metrics_port}"
    assert probes["liveness"]["path"] == probes["startup"]["path"] == "/healthz"
    assert probes["readiness"]["path"] == "/readyz"
    # The paths as the bridge's endpoint answers them: alive at once, ready only once leading or standing by.
    port, ready = bridge_endpoint
    assert get(port, probes["liveness"]["path"]) == 200
    assert get(port, probes["readiness"]["path"]) == 503
    ready.set()
    assert get(port, probes["readiness"]["path"]) == 200


@pytest.mark.parametrize("values", VALUES)
def test_the_metrics_service_and_monitors_reach_the_ports_the_processes_serve(values: str, tmp_path: Path) -> None:
    (deployment,) = of_kind(values, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    (service,) = of_kind(values, "Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (container,) = containers(values, "bridge")
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= {p["name"] for p in container["ports"]}
    for monitor in of_kind(values, "ServiceMonitor"):
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        # The alert rules group by job and bridge name (ops/prometheus/prometheus.yml sets the same).
        relabel = {r["targetLabel"]: r.get("replacement") for r in endpoint["relabelings"]}
        assert relabel["job"] == "outbox-bridge"
        assert relabel["bridge_name"] == plain_env(container, tmp_path)["BRIDGE_NAME"]
    for monitor in of_kind(values, "PodMonitor"):
        for driver in containers(values, "projection"):
            env = {v["name"]: v.get("value") for v in driver["env"]}
            metrics = {p["name"]: p["containerPort"] for p in driver["ports"]}["metrics"]
            assert str(metrics) == env["PROJECTIONS_METRICS_PORT"] and env["PROJECTIONS_METRICS_HOST"] == "0.0.0.0"
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] == "metrics"
        assert {r["targetLabel"]: r.get("replacement") for r in endpoint["relabelings"]}["job"] == "outbox-projections"


# ----------------------------------------------------------------------------------------- rules and shape


def test_the_prometheus_rule_is_ops_prometheus_alerts_yml_and_passes_promtool(tmp_path: Path) -> None:
    (rule,) = of_kind("secured", "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed; Debian's `prometheus` package provides it: apt-get install prometheus")
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", VALUES)
def test_two_replicas_roll_one_at_a_time_and_a_drain_keeps_one(values: str) -> None:
    (deployment,) = of_kind(values, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    (budget,) = of_kind(values, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = containers(values, "bridge")
    assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]
    (migration,) = [job for job in of_kind(values, "Job") if job["metadata"]["name"].endswith("-migrate")]
    assert migration["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert migration["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]


@pytest.mark.parametrize("values", VALUES)
def test_every_pod_runs_as_non_root_on_a_read_only_root_filesystem(values: str) -> None:
    for where, spec in pod_specs(values):
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            # State goes to mounted paths: /tmp is a volume in every pod.
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, where


def test_the_projection_runs_spark_submit_on_kubernetes_with_the_lake_on_its_volume() -> None:
    for container in containers("secured", "projection"):
        args = container["args"]
        assert container["command"] == ["spark-submit"]
        assert args[args.index("--master") + 1].startswith("k8s://")
        confs = dict(arg.split("=", 1) for arg in args if arg.startswith("spark."))
        assert confs["spark.kubernetes.container.image"].startswith("registry.internal/outbox-projections:")
        assert "/opt/outbox/jobs/run.py" in args
        env = {v["name"]: v.get("value") for v in container["env"]}
        lake = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert env["PROJECTIONS_LAKE_PATH"] in lake
    (template,) = [doc for doc in of_kind("secured", "ConfigMap") if "executor-pod.yaml" in doc["data"]]
    executor = yaml.safe_load(template["data"]["executor-pod.yaml"])["spec"]
    assert "/data/lake" in {m["mountPath"] for m in executor["containers"][0]["volumeMounts"]}


# ------------------------------------------------------------------------------------------------- secrets


SECRET_NAMES = re.compile(r"PASSWORD|SECRET|TOKEN|DB_URL|ACCESS_KEY", re.IGNORECASE)


@pytest.mark.parametrize("values", VALUES)
def test_no_secret_appears_in_a_rendered_manifest(values: str) -> None:
    assert not of_kind(values, "Secret"), "the chart must not carry a Secret: it reads existing ones"
    for where, spec in pod_specs(values):
        for container in spec["containers"]:
            for variable in container.get("env", []):
                if SECRET_NAMES.search(variable["name"]):
                    assert "value" not in variable, f"{where}: {variable['name']} in clear"
                    assert "secretKeyRef" in variable["valueFrom"], f"{where}: {variable['name']} not from a Secret"
    assert not re.search(r"://[^/\s:@\"']+:[^/\s@\"']+@", rendered_text(values)), "a URL with a password"


@pytest.mark.parametrize(("setting", "value"), [
    ("bridge.settings.KAFKA_SASL_PASSWORD", "hunter2"),
    ("bridge.settings.BRIDGE_SCHEMA_REGISTRY_PASSWORD", "hunter2"),
    ("bridge.settings.OUTBOX_DB_URL", "postgresql://relay:hunter2@db/app"),
    ("bridge.settings.BRIDGE_PRODUCER_EXTRA", "sasl.password=hunter2"),
    ("projections.sparkConf.spark\\.hadoop\\.fs\\.s3a\\.secret\\.key", "hunter2"),
    ("projections.settings.KAFKA_SASL_PASSWORD", "hunter2"),
])
def test_the_chart_refuses_a_secret_given_in_its_values(setting: str, value: str) -> None:
    result = helm_template("--values", str(VALUES["secured"]), "--set-string", f"{setting}={value}")
    assert result.returncode != 0
    assert "looks like a secret" in result.stderr
    assert "hunter2" not in result.stdout


def test_the_chart_refuses_to_render_without_the_database_secret_and_says_which_value() -> None:
    result = helm_template("--set", "kafka.bootstrapServers=kafka:9092")
    assert result.returncode != 0
    assert "database.urlSecret.name is required" in result.stderr


# ------------------------------------------------------------------------------------ value format and registry

REGISTRY_VARIABLES = {"BRIDGE_VALUE_FORMAT", "BRIDGE_SCHEMA_REGISTRY_URL", "BRIDGE_SCHEMA_SUBJECTS",
                      "BRIDGE_SCHEMA_REGISTRY_USER", "BRIDGE_SCHEMA_REGISTRY_PASSWORD"}


def test_the_registry_values_turn_json_schema_on_with_the_password_from_an_existing_secret(tmp_path: Path) -> None:
    (container,) = containers("registry", "bridge")
    variables = {variable["name"]: variable for variable in container["env"]}
    assert variables["BRIDGE_SCHEMA_REGISTRY_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "outbox-bridge-registry", "key": "password"}
    config = bridge_config.load_config(env=plain_env(container, tmp_path))
    assert config.value_format.value == "json-schema"
    assert config.schemas is not None
    assert (config.schemas.url, config.schemas.naming.value, config.schemas.user) == (
        "https://schema-registry.internal:8081", "topic-record", "outbox-bridge")
    assert config.schemas.password is not None and config.schemas.password.get_secret_value() == "stand-in"
    (migration,) = containers("registry", "migration")
    assert not {variable["name"] for variable in migration["env"]} & REGISTRY_VARIABLES, "migrating needs no registry"


@pytest.mark.parametrize("values", ["default", "secured"])
def test_the_default_value_format_sets_nothing_of_the_registry(values: str) -> None:
    for component in ("bridge", "migration"):
        for container in containers(values, component):
            assert not {variable["name"] for variable in container["env"]} & REGISTRY_VARIABLES


@pytest.mark.parametrize(("values", "settings", "message"), [
    ("default", ["bridge.valueFormat=json-schema"], "schemaRegistry.url is required"),
    ("default", ["bridge.valueFormat=avro"], 'bridge.valueFormat is "avro": give json'),
    ("default", ["schemaRegistry.url=https://registry:8081"],
     "schemaRegistry is set but bridge.valueFormat is json"),
    ("registry", ["schemaRegistry.url=https://relay:hunter2@registry:8081"], "schemaRegistry.url carries credentials"),
    ("registry", ["schemaRegistry.passwordSecret.name="],
     "schemaRegistry.username is set but no schemaRegistry.passwordSecret.name"),
    ("registry", ["schemaRegistry.username="],
     "schemaRegistry.passwordSecret.name is set but no schemaRegistry.username"),
    ("registry", ["schemaRegistry.subjects=by-type"], 'schemaRegistry.subjects is "by-type"'),
    ("registry", ["bridge.settings.BRIDGE_SCHEMA_REGISTRY_URL=https://registry:8081"],
     "bridge.settings.BRIDGE_SCHEMA_REGISTRY_URL is set by the chart from its own values"),
])
def test_the_chart_refuses_registry_values_that_do_not_hold_together_naming_the_value(
    values: str, settings: list[str], message: str
) -> None:
    result = helm_template("--values", str(VALUES[values]), *(f"--set-string={s}" for s in settings))
    assert result.returncode != 0
    assert message in result.stderr
    assert "hunter2" not in result.stdout


def test_a_registry_without_a_login_renders_url_and_format_only() -> None:
    result = helm_template("--values", str(VALUES["registry"]), "--set-string",
                           "schemaRegistry.username=,schemaRegistry.passwordSecret.name=,schemaRegistry.subjects=")
    assert result.returncode == 0, result.stderr
    (deployment,) = [doc for doc in yaml.safe_load_all(result.stdout) if doc and doc["kind"] == "Deployment"]
    names = {variable["name"] for variable in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert names & REGISTRY_VARIABLES == {"BRIDGE_VALUE_FORMAT", "BRIDGE_SCHEMA_REGISTRY_URL"}
