"""Configuration: defaults, flag > env > file precedence, refusals that name the setting, masking."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from bridge.config import (
    CONFIG_FILE_ENV,
    ENV_NAMES,
    BridgeConfig,
    Compression,
    LogLevel,
    PoisonPolicy,
    is_legal_topic_name,
    load_config,
    mask_url,
)
from bridge.errors import ConfigurationError

pytestmark = pytest.mark.unit


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    return path


def refusal(env: dict[str, str]) -> str:
    with pytest.raises(ConfigurationError) as info:
        load_config(env=env)
    return str(info.value)


def test_defaults_match_the_design() -> None:
    config = load_config(env={})
    assert config.db_url.get_secret_value() == "sqlite:///.run/outbox.db"
    assert config.bootstrap_servers == "127.0.0.1:9092"
    assert config.bridge_name == "default"
    assert config.topic_template == "outbox.event.{aggregate_type}"
    assert (config.max_in_flight, config.max_in_flight_bytes) == (10_000, 64 * 1024 * 1024)
    assert (config.read_batch_size, config.persist_interval_s) == (1000, 1.0)
    assert (config.poll_interval_min_ms, config.poll_interval_max_ms) == (2, 1000)
    assert config.lease_timeout_s == 10
    assert config.poison_policy is PoisonPolicy.HALT
    assert config.dlq_topic_name == "outbox.dlq.default"
    assert (config.topic_partitions, config.replication_factor, config.min_insync_replicas) == (6, 3, 2)
    assert config.allow_create_topics is True
    assert config.allow_single_broker is False
    assert (config.metrics_host, config.metrics_port) == ("127.0.0.1", 9464)
    assert config.shutdown_timeout_s == 30
    assert (config.linger_ms, config.batch_size, config.compression) == (5, 1024 * 1024, Compression.LZ4)
    assert config.delivery_timeout_ms == 120_000
    assert dict(config.producer_extra) == {}
    assert config.allow_unsafe_producer is False
    assert config.log_level is LogLevel.INFO


def test_every_field_has_exactly_one_env_name() -> None:
    assert set(ENV_NAMES) == set(BridgeConfig.model_fields)
    assert len(set(ENV_NAMES.values())) == len(ENV_NAMES)
    assert all(name.startswith(("OUTBOX_", "KAFKA_", "BRIDGE_")) for name in ENV_NAMES.values()
               if name != "OTEL_TRACES_EXPORTER")  # OpenTelemetry's own name, as every SDK reads it


def test_environment_variables_use_the_design_names() -> None:
    config = load_config(
        env={
            "OUTBOX_DB_URL": "postgresql+psycopg://bridge:pw@db:5432/app",
            "KAFKA_BOOTSTRAP_SERVERS": "k1:9092, k2:9092",
            "BRIDGE_NAME": "orders",
            "BRIDGE_TOPIC_TEMPLATE": "app.{aggregate_type}.events",
            "BRIDGE_MAX_IN_FLIGHT": "500",
            "BRIDGE_POISON_POLICY": "dead-letter",
            "BRIDGE_ALLOW_CREATE_TOPICS": "false",
            "BRIDGE_COMPRESSION": "zstd",
            "BRIDGE_LOG_LEVEL": "debug",
        }
    )
    assert config.db_url.get_secret_value() == "postgresql+psycopg://bridge:pw@db:5432/app"
    assert config.bootstrap_servers == "k1:9092,k2:9092"
    assert config.bridge_name == "orders"
    assert config.topic_for("Order") == "app.Order.events"
    assert config.max_in_flight == 500
    assert config.poison_policy is PoisonPolicy.DEAD_LETTER
    assert config.dlq_topic_name == "outbox.dlq.orders"
    assert config.allow_create_topics is False
    assert config.compression is Compression.ZSTD
    assert config.log_level is LogLevel.DEBUG


def test_flag_beats_env_beats_file_beats_default(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "max_in_flight = 100\nread_batch_size = 200\nlinger_ms = 7\n")
    env = {"BRIDGE_MAX_IN_FLIGHT": "300", "BRIDGE_READ_BATCH_SIZE": "400"}
    config = load_config(flags={"max_in_flight": 500}, toml_path=toml, env=env)
    assert config.max_in_flight == 500  # flag
    assert config.read_batch_size == 400  # env over file
    assert config.linger_ms == 7  # file over default
    assert config.batch_size == 1024 * 1024  # default


def test_flags_that_are_none_are_ignored_and_dashes_are_accepted() -> None:
    config = load_config(
        flags={"max_in_flight": None, "read-batch-size": 50}, env={"BRIDGE_MAX_IN_FLIGHT": "9"}
    )
    assert (config.max_in_flight, config.read_batch_size) == (9, 50)


def test_unknown_flag_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown setting 'max_inflight'"):
        load_config(flags={"max_inflight": 3}, env={})


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"KAFKA_BOOTSTRAP_SERVERS": ""}, "KAFKA_BOOTSTRAP_SERVERS='' (from the environment) is refused"),
        ({"OUTBOX_DB_URL": " "}, "OUTBOX_DB_URL='' (from the environment) is refused"),
        ({"BRIDGE_MAX_IN_FLIGHT": ""}, "BRIDGE_MAX_IN_FLIGHT='' (from the environment) is refused"),
        ({"BRIDGE_LOG_LEVEL": "  "}, "BRIDGE_LOG_LEVEL='' (from the environment) is refused"),
        ({"BRIDGE_PRODUCER_EXTRA": ""}, "BRIDGE_PRODUCER_EXTRA='' (from the environment) is refused"),
        ({"BRIDGE_RETENTION": ""}, "BRIDGE_RETENTION='' (from the environment) is refused"),
        ({CONFIG_FILE_ENV: ""}, f"{CONFIG_FILE_ENV} is set but empty"),
    ],
)
def test_an_empty_environment_variable_is_refused_not_taken_for_the_default(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_config(env=env)
    assert named in str(refused.value)
    assert "unset it" in str(refused.value)


def test_the_empty_refusal_names_the_accepted_values_and_the_default() -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_config(env={"KAFKA_BOOTSTRAP_SERVERS": "", "BRIDGE_METRICS_PORT": ""})
    message = str(refused.value)
    assert "a comma-separated list of host:port" in message and "'127.0.0.1:9092'" in message
    assert "BRIDGE_METRICS_PORT=''" in message and "(9464)" in message


def test_config_file_path_can_come_from_the_environment(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, 'bridge_name = "from-file"\n')
    assert load_config(env={CONFIG_FILE_ENV: str(toml)}).bridge_name == "from-file"


def test_explicit_path_wins_over_the_environment_path(tmp_path: Path) -> None:
    chosen = write_toml(tmp_path, 'bridge_name = "chosen"\n')
    other = tmp_path / "other.toml"
    other.write_text('bridge_name = "other"\n')
    assert load_config(toml_path=chosen, env={CONFIG_FILE_ENV: str(other)}).bridge_name == "chosen"


def test_unknown_toml_key_is_refused_by_name(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "max_in_flight = 5\nmax_inflight_bytes = 10\n")
    with pytest.raises(ConfigurationError, match=r"unknown key 'max_inflight_bytes'") as info:
        load_config(toml_path=toml, env={})
    assert str(toml) in str(info.value)


def test_toml_uses_field_names_not_env_names(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "BRIDGE_MAX_IN_FLIGHT = 5\n")
    with pytest.raises(ConfigurationError, match="unknown key 'BRIDGE_MAX_IN_FLIGHT'"):
        load_config(toml_path=toml, env={})


def test_unknown_toml_table_is_refused(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "[consumer]\nx = 1\n")
    with pytest.raises(ConfigurationError, match="unknown key 'consumer'"):
        load_config(toml_path=toml, env={})


def test_missing_config_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"nope\.toml \(from OUTBOX_CONFIG_FILE\) does not exist"):
        load_config(env={CONFIG_FILE_ENV: str(tmp_path / "nope.toml")})


def test_malformed_toml_is_refused_with_the_file_name(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "max_in_flight = = 3\n")
    with pytest.raises(ConfigurationError, match="is not valid TOML"):
        load_config(toml_path=toml, env={})


def test_a_bad_value_from_the_file_names_its_origin(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "max_in_flight = 0\n")
    with pytest.raises(ConfigurationError, match=r"BRIDGE_MAX_IN_FLIGHT=0 \(from TOML file .*bridge\.toml\)"):
        load_config(toml_path=toml, env={})


def test_producer_table_in_toml_and_json_in_env_merge_key_by_key(tmp_path: Path) -> None:
    toml = write_toml(
        tmp_path,
        '[producer]\n"security.protocol" = "SASL_SSL"\n'
        '"sasl.mechanism" = "PLAIN"\n"sasl.password" = "s3cret"\n',
    )
    env = {"BRIDGE_PRODUCER_EXTRA": '{"sasl.mechanism": "SCRAM-SHA-512", "socket.keepalive.enable": true}'}
    extra = load_config(toml_path=toml, env=env).producer_extra
    assert extra["security.protocol"] == "SASL_SSL"
    assert extra["sasl.mechanism"] == "SCRAM-SHA-512"
    assert extra["socket.keepalive.enable"] is True
    password = extra["sasl.password"]
    assert isinstance(password, SecretStr)
    assert password.get_secret_value() == "s3cret"


def test_producer_table_must_be_a_table(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, 'producer = "acks=1"\n')
    with pytest.raises(ConfigurationError, match="must be a table"):
        load_config(toml_path=toml, env={})


@pytest.mark.parametrize(("raw", "message"), [("{not json", "not valid JSON"), ("[1, 2]", "JSON object")])
def test_producer_extra_env_must_be_a_json_object(raw: str, message: str) -> None:
    assert message in refusal({"BRIDGE_PRODUCER_EXTRA": raw})


def test_unsafe_producer_extras_are_refused_at_load_time() -> None:
    message = refusal({"BRIDGE_PRODUCER_EXTRA": '{"acks": "1"}'})
    assert "acks='1'" in message
    assert "BRIDGE_ALLOW_UNSAFE_PRODUCER" in message


def test_unsafe_producer_extras_load_when_allowed() -> None:
    env = {"BRIDGE_PRODUCER_EXTRA": '{"acks": "1"}', "BRIDGE_ALLOW_UNSAFE_PRODUCER": "true"}
    assert load_config(env=env).producer_extra["acks"] == "1"


@pytest.mark.parametrize(
    ("env_name", "value", "accepted"),
    [
        ("BRIDGE_MAX_IN_FLIGHT", "0", "an integer >= 1 and <= 1000000"),
        ("BRIDGE_MAX_IN_FLIGHT", "1000001", "an integer >= 1 and <= 1000000"),
        ("BRIDGE_MAX_IN_FLIGHT", "lots", "an integer >= 1 and <= 1000000"),
        ("BRIDGE_MAX_IN_FLIGHT_BYTES", "10", "an integer >= 1024"),
        ("BRIDGE_READ_BATCH_SIZE", "-1", "an integer >= 1"),
        ("BRIDGE_PERSIST_INTERVAL_S", "0", "a number > 0 and <= 3600"),
        ("BRIDGE_POLL_INTERVAL_MIN_MS", "0", "an integer >= 1"),
        ("BRIDGE_LEASE_TIMEOUT_S", "0.5", "a number >= 1"),
        ("BRIDGE_POISON_POLICY", "skip", "one of halt, dead-letter"),
        ("BRIDGE_TOPIC_PARTITIONS", "0", "an integer >= 1"),
        ("BRIDGE_REPLICATION_FACTOR", "0", "an integer >= 1 and <= 32"),
        ("BRIDGE_ALLOW_CREATE_TOPICS", "maybe", "true or false"),
        ("BRIDGE_METRICS_PORT", "70000", "an integer >= 0 and <= 65535"),
        ("BRIDGE_SHUTDOWN_TIMEOUT_S", "0", "a number > 0"),
        ("BRIDGE_LINGER_MS", "-5", "an integer >= 0"),
        ("BRIDGE_BATCH_SIZE", "0", "an integer >= 1"),
        ("BRIDGE_COMPRESSION", "brotli", "one of none, gzip, snappy, lz4, zstd"),
        ("BRIDGE_DELIVERY_TIMEOUT_MS", "10", "an integer >= 1000"),
        ("BRIDGE_LOG_LEVEL", "loud", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("BRIDGE_NAME", "orders/eu", "1 to 100 of [a-zA-Z0-9._-]"),
        ("KAFKA_BOOTSTRAP_SERVERS", "k1:9092,,k2:9092", "a comma-separated list of host:port"),
        ("OUTBOX_DB_URL", "not a url", "a SQLAlchemy URL"),
        ("OUTBOX_DB_URL", "mongodb://db/app", "a SQLAlchemy URL"),
        ("BRIDGE_TOPIC_TEMPLATE", "events/{aggregate_type}", "a legal topic name"),
        ("BRIDGE_TOPIC_TEMPLATE", "events.{type}", "a legal topic name"),
        ("BRIDGE_TOPIC_TEMPLATE", "events.{aggregate_type!r}", "a legal topic name"),
        ("BRIDGE_TOPIC_TEMPLATE", "events.{aggregate_type", "a legal topic name"),
        ("BRIDGE_TOPIC_TEMPLATE", "x" * 250, "a legal topic name"),
        ("BRIDGE_DLQ_TOPIC", "dlq.{aggregate_type}", "a legal topic name"),
    ],
)
def test_bad_values_are_refused_naming_variable_value_and_range(
    env_name: str, value: str, accepted: str
) -> None:
    message = refusal({env_name: value})
    assert f"{env_name}={value!r}" in message
    assert "(from the environment)" in message
    assert f"accepted: {accepted}" in message


def test_all_bad_values_are_reported_at_once() -> None:
    message = refusal({"BRIDGE_MAX_IN_FLIGHT": "0", "BRIDGE_COMPRESSION": "brotli"})
    assert "BRIDGE_MAX_IN_FLIGHT" in message
    assert "BRIDGE_COMPRESSION" in message


def test_a_bad_db_url_is_reported_with_its_password_masked() -> None:
    message = refusal({"OUTBOX_DB_URL": "nosuchdb://bridge:hunter2@db/app"})
    assert "hunter2" not in message
    assert "OUTBOX_DB_URL='nosuchdb://bridge:***@db/app'" in message


def test_poll_interval_minimum_above_maximum_is_refused() -> None:
    message = refusal({"BRIDGE_POLL_INTERVAL_MIN_MS": "500", "BRIDGE_POLL_INTERVAL_MAX_MS": "100"})
    assert "BRIDGE_POLL_INTERVAL_MIN_MS=500" in message
    assert "BRIDGE_POLL_INTERVAL_MAX_MS=100" in message


def test_linger_must_be_below_the_delivery_timeout() -> None:
    message = refusal({"BRIDGE_LINGER_MS": "5000", "BRIDGE_DELIVERY_TIMEOUT_MS": "5000"})
    assert "BRIDGE_LINGER_MS=5000 must be below BRIDGE_DELIVERY_TIMEOUT_MS=5000" in message


@pytest.mark.parametrize("replication_factor", ["1", "2"])
def test_low_replication_needs_the_single_broker_switch(replication_factor: str) -> None:
    message = refusal({"BRIDGE_REPLICATION_FACTOR": replication_factor})
    assert "BRIDGE_ALLOW_SINGLE_BROKER=true" in message
    env = {"BRIDGE_REPLICATION_FACTOR": replication_factor, "BRIDGE_ALLOW_SINGLE_BROKER": "true"}
    config = load_config(env=env)
    assert config.min_insync_replicas == 1


def test_dead_letter_topic_may_not_be_an_event_topic() -> None:
    message = refusal({"BRIDGE_DLQ_TOPIC": "outbox.event.dead"})
    assert "BRIDGE_DLQ_TOPIC renders 'outbox.event.dead'" in message


def test_dead_letter_topic_with_a_long_bridge_name_must_stay_legal() -> None:
    message = refusal({"BRIDGE_DLQ_TOPIC": "d" * 200 + ".{bridge_name}", "BRIDGE_NAME": "n" * 60})
    assert "which Kafka refuses" in message


def test_fixed_topic_template_is_allowed() -> None:
    config = load_config(env={"BRIDGE_TOPIC_TEMPLATE": "all-events"})
    assert config.topic_for("Order") == config.topic_for("Invoice") == "all-events"


def test_topic_for_refuses_aggregate_types_that_make_illegal_topics() -> None:
    config = load_config(env={})
    assert config.topic_for("order_line-v2.1") == "outbox.event.order_line-v2.1"
    for aggregate_type in ("Order Line", "Order/Line", "", "x" * 240):
        with pytest.raises(ValueError, match="which Kafka refuses"):
            config.topic_for(aggregate_type)


@pytest.mark.parametrize(
    ("name", "legal"),
    [
        ("a", True),
        ("a.b_c-D9", True),
        ("x" * 249, True),
        ("x" * 250, False),
        (".", False),
        ("..", False),
        ("", False),
        ("a b", False),
        ("ä", False),
    ],
)
def test_legal_topic_names(name: str, legal: bool) -> None:
    assert is_legal_topic_name(name) is legal


def test_config_is_frozen() -> None:
    config = load_config(env={"BRIDGE_PRODUCER_EXTRA": '{"socket.timeout.ms": 1000}'})
    with pytest.raises(ValidationError):
        config.max_in_flight = 1
    with pytest.raises(TypeError):
        config.producer_extra["socket.timeout.ms"] = 5  # type: ignore[index]


def test_direct_construction_ignores_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_MAX_IN_FLIGHT", "7")
    monkeypatch.setenv("max_in_flight", "7")
    assert BridgeConfig().max_in_flight == 10_000
    assert BridgeConfig(max_in_flight=3).max_in_flight == 3


def test_load_config_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_MAX_IN_FLIGHT", "7")
    monkeypatch.delenv(CONFIG_FILE_ENV, raising=False)
    assert load_config().max_in_flight == 7


def test_misspelt_bridge_variables_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bridge.config"):
        load_config(env={"BRIDGE_MAX_INFLIGHT": "5", "HOME": "/root"})
    assert "BRIDGE_MAX_INFLIGHT" in caplog.text
    assert "HOME" not in caplog.text


def test_masked_hides_credentials_and_keeps_the_rest() -> None:
    config = load_config(
        env={
            "OUTBOX_DB_URL": "postgresql+psycopg://bridge:hunter2@db:5432/app?sslmode=require&sslpassword=k3y",
            "BRIDGE_PRODUCER_EXTRA": '{"sasl.username": "svc", "sasl.password": "pa55", '
            '"ssl.key.password": "x"}',
        }
    )
    masked = config.masked()
    assert (
        masked["db_url"]
        == "postgresql+psycopg://bridge:***@db:5432/app?sslmode=require&sslpassword=**********"
    )
    assert masked["producer_extra"] == {
        "sasl.username": "svc",
        "sasl.password": "**********",
        "ssl.key.password": "**********",
    }
    assert masked["compression"] == "lz4"
    assert masked["max_in_flight"] == 10_000
    for text in (str(masked), repr(config), str(config)):
        assert "hunter2" not in text
        assert "pa55" not in text
        assert "k3y" not in text


def test_mask_url_without_credentials_is_unchanged() -> None:
    assert mask_url("sqlite:///.run/outbox.db") == "sqlite:///.run/outbox.db"


def test_mask_url_hides_odbc_connect_strings() -> None:
    url = "mssql+pyodbc://@/?odbc_connect=DRIVER%3D%7BODBC%7D%3BUID%3Dsa%3BPWD%3Dsecret"
    assert "secret" not in mask_url(url)


def test_mask_url_hides_credentials_of_unparseable_urls() -> None:
    assert "hunter2" not in mask_url("::weird:hunter2@host")


@given(st.integers(min_value=-(10**7), max_value=10**7))
def test_max_in_flight_is_accepted_exactly_within_its_range(value: int) -> None:
    if 1 <= value <= 1_000_000:
        assert load_config(env={"BRIDGE_MAX_IN_FLIGHT": str(value)}).max_in_flight == value
    else:
        assert "BRIDGE_MAX_IN_FLIGHT" in refusal({"BRIDGE_MAX_IN_FLIGHT": str(value)})


@given(st.text(alphabet="abcXYZ019._-", min_size=1, max_size=40))
def test_legal_aggregate_types_map_to_their_topic(aggregate_type: str) -> None:
    assert BridgeConfig().topic_for(aggregate_type) == f"outbox.event.{aggregate_type}"


def test_masked_has_every_setting() -> None:
    assert set(load_config(env={}).masked()) == set(ENV_NAMES)


def test_retention_is_off_by_default_and_takes_a_duration() -> None:
    assert load_config(env={"OUTBOX_DB_URL": "sqlite:///x.db"}).retention_period is None
    config = load_config(env={"OUTBOX_DB_URL": "sqlite:///x.db", "BRIDGE_RETENTION": "7d",
                              "BRIDGE_RETENTION_INTERVAL_S": "60"})
    assert config.retention_period is not None and config.retention_period.days == 7
    assert config.retention_interval_s == 60


@pytest.mark.parametrize("value", ["7", "seven days", "0d", "-1h"])
def test_bad_retention_names_the_setting_and_the_forms(value: str) -> None:
    message = refusal({"OUTBOX_DB_URL": "sqlite:///x.db", "BRIDGE_RETENTION": value})
    assert "BRIDGE_RETENTION" in message and "e.g. 90m, 12h, 7d" in message


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("BRIDGE_START_FROM", "latest", "earliest (the oldest row still in the outbox) or a seq"),
        ("BRIDGE_START_FROM", "0", "earliest (the oldest row still in the outbox) or a seq"),
        ("BRIDGE_DEAD_LETTER_ALERT_AFTER", "0h", "e.g. 1h"),
        ("BRIDGE_RETENTION_HOLD_ALERT_AFTER", "soon", "e.g. 6h"),
    ],
)
def test_bad_start_and_alert_settings_name_the_setting_the_value_and_the_forms(
    variable: str, value: str, accepted: str
) -> None:
    message = refusal({"OUTBOX_DB_URL": "sqlite:///x.db", variable: value})
    assert f"{variable}={value!r}" in message and accepted in message


def test_start_from_and_alert_thresholds_reach_their_sections() -> None:
    config = load_config(env={"OUTBOX_DB_URL": "sqlite:///x.db", "BRIDGE_START_FROM": " Earliest ",
                              "BRIDGE_DEAD_LETTER_ALERT_AFTER": "30m", "BRIDGE_RETENTION": "7d",
                              "BRIDGE_RETENTION_HOLD_ALERT_AFTER": "1d"})
    assert config.loop.start_from == "earliest" and config.loop.dead_letter_alert_after_s == 1800
    assert config.retention_section is not None and config.retention_section.hold_alert_after_s == 86400
    assert load_config(env={"BRIDGE_START_FROM": "0042"}).start_from == "42"


@pytest.mark.parametrize(("persist", "lease"), [("5", "10"), ("6", "10"), ("1", "1")])
def test_a_persist_interval_of_half_the_lease_timeout_or_more_is_refused(persist: str, lease: str) -> None:
    message = refusal({"BRIDGE_PERSIST_INTERVAL_S": persist, "BRIDGE_LEASE_TIMEOUT_S": lease})
    assert f"BRIDGE_PERSIST_INTERVAL_S={persist} is half or more of BRIDGE_LEASE_TIMEOUT_S={lease}" in message


def test_a_persist_interval_below_half_the_lease_timeout_is_accepted() -> None:
    config = load_config(env={"BRIDGE_PERSIST_INTERVAL_S": "4.9", "BRIDGE_LEASE_TIMEOUT_S": "10"})
    assert config.persist_interval_s == 4.9


def test_topics_keep_every_record_by_default_and_the_setting_takes_a_duration() -> None:
    config = load_config(env={})
    assert config.topic_retention == "forever" and config.topic_retention_ms == -1
    assert config.topics.policy().retention_ms == -1 and config.topics.policy().outbox_retention is None
    chosen = load_config(env={"BRIDGE_TOPIC_RETENTION": "30d", "BRIDGE_RETENTION": "7d"})
    assert chosen.topic_retention_ms == 30 * 86_400_000
    assert chosen.topics.policy().outbox_retention == timedelta(days=7)
    assert load_config(env={"BRIDGE_TOPIC_RETENTION": " Forever "}).topic_retention_ms == -1


@pytest.mark.parametrize("value", ["7", "never", "0d", "-1", "infinite"])
def test_a_bad_topic_retention_names_the_setting_the_value_and_the_forms(value: str) -> None:
    message = refusal({"BRIDGE_TOPIC_RETENTION": value})
    assert f"BRIDGE_TOPIC_RETENTION={value!r}" in message and "forever" in message and "30d" in message
