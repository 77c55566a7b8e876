"""docker-compose.yml and ops/Dockerfile describe the stack the design asks for: three replicated KRaft
brokers, the databases, a bridge that starts only on a migrated schema and healthy dependencies, and
monitoring wired to files that exist. Checked by reading the files (no Docker engine needed)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS_CONFIG = ROOT / "ops" / "prometheus" / "prometheus.yml"
BROKER_BOOTSTRAP = "kafka-1:9092,kafka-2:9092,kafka-3:9092"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict of strings, from either the mapping or the list form."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {
        key: "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in env.items()
    }


def kafka_brokers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in services.items() if str(svc.get("image", "")).startswith("apache/kafka")}


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """Dependency -> condition (the short list form means service_started)."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def dockerfile_stages(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Instructions per build stage (named by `AS name`, else by index), continuation lines joined."""
    lines = re.sub(r"\\\n", " ", path.read_text()).splitlines()
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, argument = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            match = re.search(r"\bAS\s+(\S+)", argument, re.IGNORECASE)
            current = stages.setdefault(match.group(1) if match else str(len(stages)), [])
        if current is not None:
            current.append((instruction, argument.strip()))
    return stages


def exec_form(argument: str) -> list[str]:
    parsed = yaml.safe_load(argument)
    assert isinstance(parsed, list), f"not an exec-form JSON array: {argument}"
    return [str(item) for item in parsed]


# ------------------------------------------------------------------------------------------------ services


def test_the_stack_has_every_service(services: dict[str, dict[str, Any]]) -> None:
    for name in ("sqlserver", "postgres", "migrate", "bridge", "prometheus", "grafana"):
        assert name in services, f"docker-compose.yml has no {name} service"
    assert sorted(kafka_brokers(services)) == ["kafka-1", "kafka-2", "kafka-3"]


def test_images_are_the_agreed_ones(services: dict[str, dict[str, Any]]) -> None:
    for name, broker in kafka_brokers(services).items():
        assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", broker["image"]), f"{name}: pin an apache/kafka 4.x tag"
    assert services["sqlserver"]["image"] == "mcr.microsoft.com/mssql/server:2022-latest"
    assert services["postgres"]["image"].startswith("postgres:16")
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    for name in ("prometheus", "grafana"):
        assert not services[name]["image"].endswith(":latest"), f"{name}: pin a version"


def test_brokers_replicate_every_write_to_three_with_two_in_sync(services: dict[str, dict[str, Any]]) -> None:
    for name, broker in kafka_brokers(services).items():
        env = environment(broker)
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2", name
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false", name
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false", name
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2", name


def test_brokers_form_one_kraft_cluster_with_three_voters(services: dict[str, dict[str, Any]]) -> None:
    brokers = kafka_brokers(services)
    envs = {name: environment(broker) for name, broker in brokers.items()}
    assert len({env["CLUSTER_ID"] for env in envs.values()}) == 1, "every node needs the same CLUSTER_ID"
    assert len({env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in envs.values()}) == 1
    node_ids = {env["KAFKA_NODE_ID"] for env in envs.values()}
    assert len(node_ids) == 3, "node ids must differ"
    voters = next(iter(envs.values()))["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    voter_hosts = set()
    for voter in voters:
        match = re.fullmatch(r"(\d+)@([\w.-]+):(\d+)", voter)
        assert match, f"voter {voter!r} is not id@host:port"
        voter_hosts.add((match.group(1), match.group(2)))
    assert len(voter_hosts) == 3
    for node_id, host in voter_hosts:
        assert host in brokers, f"voter {node_id}@{host} is not a compose service"
        assert envs[host]["KAFKA_NODE_ID"] == node_id, f"voter {node_id}@{host} has another node id"
        assert "controller" in envs[host]["KAFKA_PROCESS_ROLES"], f"{host} is a voter but not a controller"
    for name, env in envs.items():
        # Containers reach each broker by its service name on 9092, as the bridge's bootstrap list says.
        assert f"://{name}:9092" in env["KAFKA_ADVERTISED_LISTENERS"], name


def test_published_ports_bind_loopback_only(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for port in service.get("ports", []):
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port} must set host_ip: 127.0.0.1"
            else:
                assert str(port).startswith("127.0.0.1:"), f"{name}: port {port!r} must bind 127.0.0.1"


def test_databases_have_healthchecks_and_sql_server_its_settings(services: dict[str, dict[str, Any]]) -> None:
    for name in ("postgres", "sqlserver", *kafka_brokers(services)):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    env = environment(services["sqlserver"])
    assert env["ACCEPT_EULA"] == "Y"
    # The SA password comes from the user's environment, with a development default.
    assert re.fullmatch(r"\$\{MSSQL_SA_PASSWORD:-.+\}", env["MSSQL_SA_PASSWORD"])


def test_every_healthy_condition_names_a_service_with_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for dependency, condition in depends_on(service).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            if condition == "service_healthy":
                target = services[dependency]
                has_check = bool(target.get("healthcheck", {}).get("test"))
                built_with_check = "build" in target and not target.get("healthcheck", {}).get("disable")
                assert has_check or built_with_check, f"{name} waits for {dependency} to be healthy; it has no check"


def test_bridge_starts_after_healthy_kafka_and_database_and_a_finished_migration(
    services: dict[str, dict[str, Any]],
) -> None:
    deps = depends_on(services["bridge"])
    for broker in kafka_brokers(services):
        assert deps.get(broker) == "service_healthy", f"bridge must wait for {broker} to be healthy"
    assert deps.get("postgres") == "service_healthy"
    assert deps.get("migrate") == "service_completed_successfully"
    assert depends_on(services["migrate"]).get("postgres") == "service_healthy"
    assert services["migrate"]["command"] == ["migrate"]
    assert services["bridge"]["command"] == ["run"]


def test_bridge_environment_uses_the_contract_names(services: dict[str, dict[str, Any]]) -> None:
    for name in ("bridge", "migrate"):
        env = environment(services[name])
        assert env["OUTBOX_DB_URL"].startswith("postgresql+psycopg://"), name
        assert "@postgres:5432/" in env["OUTBOX_DB_URL"], name
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == BROKER_BOOTSTRAP, name
        assert "BRIDGE_NAME" in env, name
    # The SQL Server alternative is there to uncomment.
    assert re.search(r"#\s*OUTBOX_DB_URL:\s*\"?mssql\+pyodbc://", COMPOSE.read_text())


def test_bridge_metrics_port_is_published_and_scraped(services: dict[str, dict[str, Any]]) -> None:
    bridge = services["bridge"]
    assert "127.0.0.1:9464:9464" in [str(port) for port in bridge.get("ports", [])]
    assert "9464" in [str(port) for port in bridge.get("expose", [])]
    scrape = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
    targets = {
        job["job_name"]: [t for group in job.get("static_configs", []) for t in group["targets"]] for job in scrape
    }
    assert targets["outbox-bridge"] == ["bridge:9464"]
    assert targets["outbox-projections"] == ["projections:9465"]
    for host_port in (t for ts in targets.values() for t in ts):
        assert host_port.split(":")[0] in services, f"Prometheus scrapes {host_port}, which is no compose service"


# ------------------------------------------------------------------------------------------------ Dockerfile


def test_bridge_is_built_from_ops_dockerfile(services: dict[str, dict[str, Any]]) -> None:
    for name in ("bridge", "migrate"):
        build = services[name]["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == ROOT / "ops" / "Dockerfile", name
        assert build.get("target", "bridge") == "bridge", name


def test_dockerfile_runs_the_bridge_as_a_non_root_user_with_a_healthcheck() -> None:
    stages = dockerfile_stages(ROOT / "ops" / "Dockerfile")
    assert "bridge" in stages
    assert list(stages)[-1] == "bridge", "a plain `docker build` must produce the bridge image (last stage)"
    bridge = stages["bridge"]
    instructions = {name: [arg for inst, arg in bridge if inst == name] for name in {i for i, _ in bridge}}
    assert exec_form(instructions["ENTRYPOINT"][-1]) == ["outbox-bridge"]
    assert exec_form(instructions["CMD"][-1]) == ["run"]
    user = instructions["USER"][-1].split(":")[0]
    assert user not in ("root", "0"), "the bridge must not run as root"
    healthcheck = instructions["HEALTHCHECK"][-1]
    assert "9464" in healthcheck and "/healthz" in healthcheck
    runs = " ".join(instructions["RUN"])
    assert "msodbcsql18" in runs and "unixodbc" in runs, "the SQL Server ODBC driver must be installed"
    installs = [shlex.split(run) for run in instructions["RUN"] if "pip install" in run]
    extras = [arg.rpartition("outbox_bridge-*.whl)")[2] for args in installs for arg in args
              if "outbox_bridge-*.whl)[" in arg]
    assert any("mssql" in extra.strip("[]").split(",") for extra in extras), (
        "the project's wheel must be installed with the mssql extra"
    )
    # python:3.11-slim, whichever Debian release tag follows it.
    assert re.search(r"python:3\.11-slim", (ROOT / "ops" / "Dockerfile").read_text())


# ------------------------------------------------------------------------------------------------ monitoring


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(host path, container path) of the service's bind mounts (sources starting with . or /)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            source, target = volume.get("source", ""), volume.get("target", "")
        else:
            source, target = str(volume).split(":")[:2]
        if source.startswith((".", "/")):
            mounts.append(((COMPOSE.parent / source).resolve(), target))
    return mounts


def test_every_bind_mount_points_at_something_that_exists(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for host, _ in bind_mounts(service):
            assert host.exists(), f"{name} mounts {host}, which does not exist"


def test_prometheus_gets_its_config_and_rules(services: dict[str, dict[str, Any]]) -> None:
    mounts = dict((target, host) for host, target in bind_mounts(services["prometheus"]))
    config_dir = mounts["/etc/prometheus"]
    assert (config_dir / "prometheus.yml").is_file()
    config = yaml.safe_load((config_dir / "prometheus.yml").read_text())
    for rule_file in config["rule_files"]:
        assert (config_dir / rule_file).is_file(), f"prometheus.yml names {rule_file}, which is not beside it"
    command = " ".join(services["prometheus"].get("command", []))
    assert "--config.file=/etc/prometheus/prometheus.yml" in command


def test_grafana_is_provisioned_with_prometheus_and_the_dashboards(services: dict[str, dict[str, Any]]) -> None:
    mounts = dict((target, host) for host, target in bind_mounts(services["grafana"]))
    provisioning = mounts["/etc/grafana/provisioning"]
    datasources = [
        source
        for path in sorted((provisioning / "datasources").glob("*.y*ml"))
        for source in yaml.safe_load(path.read_text())["datasources"]
    ]
    assert any(s["type"] == "prometheus" and s["url"] == "http://prometheus:9090" for s in datasources)
    providers = [
        provider
        for path in sorted((provisioning / "dashboards").glob("*.y*ml"))
        for provider in yaml.safe_load(path.read_text())["providers"]
    ]
    assert providers, "no dashboard provider"
    for provider in providers:
        container_dir = provider["options"]["path"]
        assert container_dir in mounts, f"dashboard provider reads {container_dir}, which nothing is mounted at"
        assert list(mounts[container_dir].glob("*.json")), f"no dashboard JSON in {mounts[container_dir]}"
