"""The value format settings: BRIDGE_VALUE_FORMAT (json by default) and the schema registry's, checked together
once at the edge and handed to the gate as one section."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import ENV_NAMES, SubjectNaming, ValueFormat, load_config
from bridge.errors import ConfigurationError

pytestmark = pytest.mark.unit

REGISTRY = {"BRIDGE_VALUE_FORMAT": "json-schema", "BRIDGE_SCHEMA_REGISTRY_URL": "http://127.0.0.1:8081/apis/ccompat/v7/"}


def test_by_default_values_are_the_payload_and_no_registry_is_used() -> None:
    config = load_config(env={})
    assert config.value_format is ValueFormat.JSON
    assert config.schemas is None


def test_the_variables_are_the_documented_ones() -> None:
    assert ENV_NAMES["value_format"] == "BRIDGE_VALUE_FORMAT"
    assert ENV_NAMES["schema_registry_url"] == "BRIDGE_SCHEMA_REGISTRY_URL"
    assert ENV_NAMES["schema_registry_user"] == "BRIDGE_SCHEMA_REGISTRY_USER"
    assert ENV_NAMES["schema_registry_password"] == "BRIDGE_SCHEMA_REGISTRY_PASSWORD"
    assert ENV_NAMES["schema_subjects"] == "BRIDGE_SCHEMA_SUBJECTS"
    assert ENV_NAMES["schema_dir"] == "BRIDGE_SCHEMA_DIR"


def test_json_schema_gives_the_registry_section_with_one_subject_per_event_type_by_default() -> None:
    section = load_config(env=REGISTRY).schemas
    assert section is not None
    assert section.url == "http://127.0.0.1:8081/apis/ccompat/v7"
    assert section.naming is SubjectNaming.TOPIC_RECORD
    assert section.schema_dir is None
    assert section.client_conf() == {"url": "http://127.0.0.1:8081/apis/ccompat/v7", "timeout": 5.0,
                                     "max.retries": 0}, "bounded requests, retried by the loop, not inside"


def test_basic_auth_goes_to_the_client_and_the_password_is_masked_in_the_log(tmp_path: Path) -> None:
    config = load_config(env=REGISTRY | {"BRIDGE_SCHEMA_REGISTRY_USER": "bridge",
                                         "BRIDGE_SCHEMA_REGISTRY_PASSWORD": "s3cret",
                                         "BRIDGE_SCHEMA_SUBJECTS": "record", "BRIDGE_SCHEMA_DIR": str(tmp_path)})
    section = config.schemas
    assert section is not None
    assert section.client_conf()["basic.auth.user.info"] == "bridge:s3cret"
    assert (section.naming, section.schema_dir) == (SubjectNaming.RECORD, tmp_path)
    assert "s3cret" not in str(config.masked())


@pytest.mark.parametrize(("env", "said"), [
    ({"BRIDGE_VALUE_FORMAT": "json-schema"}, "needs BRIDGE_SCHEMA_REGISTRY_URL"),
    ({"BRIDGE_SCHEMA_REGISTRY_URL": "http://127.0.0.1:8081"}, "set BRIDGE_VALUE_FORMAT=json-schema"),
    (REGISTRY | {"BRIDGE_SCHEMA_REGISTRY_USER": "bridge"}, "give both"),
    ({**REGISTRY, "BRIDGE_SCHEMA_REGISTRY_URL": "http://u:p@127.0.0.1:8081", "BRIDGE_SCHEMA_REGISTRY_USER": "bridge",
      "BRIDGE_SCHEMA_REGISTRY_PASSWORD": "s"}, "in one place"),
    (REGISTRY | {"BRIDGE_RECORD_FORMAT": "cloudevents"}, "do not go together"),
    (REGISTRY | {"BRIDGE_SCHEMA_REGISTRY_URL": "127.0.0.1:8081"}, "http(s)://host:port"),
    (REGISTRY | {"BRIDGE_SCHEMA_DIR": "/nonexistent/schemas"}, "no such directory"),
    ({"BRIDGE_VALUE_FORMAT": "avro"}, "json, json-schema"),
    (REGISTRY | {"BRIDGE_SCHEMA_SUBJECTS": "topic-name"}, "topic-record, record, topic"),
])
def test_settings_that_disagree_are_refused_naming_the_variables(env: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_config(env=env)
    assert said in str(raised.value)


def test_credentials_in_the_registry_url_are_masked_in_the_log() -> None:
    config = load_config(env=REGISTRY | {"BRIDGE_SCHEMA_REGISTRY_URL": "https://bridge:s3cret@registry.example:8081"})
    assert config.schemas is not None and "s3cret" in config.schemas.client_conf()["url"]
    assert config.masked()["schema_registry_url"] == "https://bridge:***@registry.example:8081"
