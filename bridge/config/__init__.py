"""The bridge's configuration: typed, frozen, validated once at the edge.

`load_config` (`loading`) layers flags over environment variables over a TOML file over defaults into a
`BridgeConfig` (`model`), whose fields are the settings as loaded (`settings`, named by `env_names`; the enums of
those of a few words in `choices`). Each part of the bridge is given only the section it uses (`sections`):
`database`, `kafka`, `producer`, `topics`, `loop`, `retention_section`, `schemas`, and `transactions` for
exactly-once delivery. Topic templates and legal topic names are in `templates`; what the logs and the refusals
show of credentials, in `masking`.
"""

from bridge.config.choices import (
    Compression,
    DeliveryMode,
    LogLevel,
    PoisonPolicy,
    RecordFormat,
    SubjectNaming,
    ValueFormat,
)
from bridge.config.env_names import CONFIG_FILE_ENV, ENV_NAMES, EXTRA_ENV_NAME, TOML_PRODUCER_TABLE
from bridge.config.loading import load_config
from bridge.config.masking import mask_url
from bridge.config.model import BridgeConfig
from bridge.config.sections import (
    DatabaseSection,
    KafkaConnection,
    LoopSection,
    ProducerSection,
    RetentionSection,
    SchemaSection,
    TopicSection,
)
from bridge.config.settings import MIB, ProducerValue, parse_duration, parse_start_from
from bridge.config.templates import LEGAL_TOPIC_NAME, is_legal_topic_name, render_template

__all__ = [
    "CONFIG_FILE_ENV",
    "ENV_NAMES",
    "EXTRA_ENV_NAME",
    "LEGAL_TOPIC_NAME",
    "MIB",
    "TOML_PRODUCER_TABLE",
    "BridgeConfig",
    "Compression",
    "DatabaseSection",
    "DeliveryMode",
    "KafkaConnection",
    "LogLevel",
    "LoopSection",
    "PoisonPolicy",
    "ProducerSection",
    "ProducerValue",
    "RecordFormat",
    "RetentionSection",
    "SchemaSection",
    "SubjectNaming",
    "TopicSection",
    "ValueFormat",
    "is_legal_topic_name",
    "load_config",
    "mask_url",
    "parse_duration",
    "parse_start_from",
    "render_template",
]
