"""The record format and tracing settings: BRIDGE_RECORD_FORMAT, BRIDGE_CLOUDEVENTS_SOURCE and the standard
OTEL_TRACES_EXPORTER, loaded like every other setting and handed to the parts that use them."""

from __future__ import annotations

import pytest

from bridge.config import ENV_NAMES, RecordFormat, load_config
from bridge.errors import ConfigurationError

pytestmark = pytest.mark.unit


def test_by_default_records_are_plain_and_tracing_is_off() -> None:
    config = load_config(env={})
    assert config.record_format is RecordFormat.PLAIN
    assert config.topics.record_format is RecordFormat.PLAIN
    assert config.trace_exporters == ()


def test_the_variables_are_the_documented_ones() -> None:
    assert ENV_NAMES["record_format"] == "BRIDGE_RECORD_FORMAT"
    assert ENV_NAMES["cloudevents_source"] == "BRIDGE_CLOUDEVENTS_SOURCE"
    assert ENV_NAMES["traces_exporter"] == "OTEL_TRACES_EXPORTER"


def test_cloudevents_take_their_source_from_the_bridge_name_unless_one_is_given() -> None:
    config = load_config(env={"BRIDGE_RECORD_FORMAT": "cloudevents", "BRIDGE_NAME": "orders"})
    assert config.topics.record_format is RecordFormat.CLOUDEVENTS
    assert config.topics.cloudevents_source == "urn:outbox-bridge:orders"
    given = load_config(env={"BRIDGE_RECORD_FORMAT": "cloudevents",
                             "BRIDGE_CLOUDEVENTS_SOURCE": "https://shop.example/orders"})
    assert given.topics.cloudevents_source == "https://shop.example/orders"


def test_a_source_for_plain_records_is_refused_as_a_mistake() -> None:
    with pytest.raises(ConfigurationError, match="BRIDGE_CLOUDEVENTS_SOURCE is set but BRIDGE_RECORD_FORMAT=plain"):
        load_config(env={"BRIDGE_CLOUDEVENTS_SOURCE": "urn:orders"})


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("BRIDGE_RECORD_FORMAT", "avro", "one of plain, cloudevents"),
    ("BRIDGE_CLOUDEVENTS_SOURCE", "my orders", "URI-reference without spaces"),
    ("OTEL_TRACES_EXPORTER", "otlp,none", "exporter names"),
    ("OTEL_TRACES_EXPORTER", "otlp;console", "exporter names"),
])
def test_bad_values_are_refused_naming_the_variable_and_what_is_accepted(variable: str, value: str,
                                                                         said: str) -> None:
    env = {variable: value}
    if variable == "BRIDGE_CLOUDEVENTS_SOURCE":
        env["BRIDGE_RECORD_FORMAT"] = "cloudevents"
    with pytest.raises(ConfigurationError, match=variable) as raised:
        load_config(env=env)
    assert said in str(raised.value)


@pytest.mark.parametrize(("value", "exporters"), [
    ("none", ()),
    ("otlp", ("otlp",)),
    (" OTLP , console", ("otlp", "console")),
])
def test_tracing_is_on_when_otel_traces_exporter_names_an_exporter(value: str, exporters: tuple[str, ...]) -> None:
    assert load_config(env={"OTEL_TRACES_EXPORTER": value}).trace_exporters == exporters


def test_the_settings_are_in_the_logged_configuration() -> None:
    masked = load_config(env={"BRIDGE_RECORD_FORMAT": "cloudevents", "OTEL_TRACES_EXPORTER": "otlp"}).masked()
    assert masked["record_format"] == "cloudevents" and masked["traces_exporter"] == "otlp"
