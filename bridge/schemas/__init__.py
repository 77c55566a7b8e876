"""Record values in a schema registry's wire format (`BRIDGE_VALUE_FORMAT=json-schema`).

`values`: from a plain record to its framed one, each payload validated against its event type's JSON Schema
(no I/O of its own; a payload that fails is poison). `catalog`: the registry behind it, asked once per subject
through confluent-kafka's `SchemaRegistryClient`; it needs the `schema-registry` extra, so it is imported only
when the format is on.
"""
