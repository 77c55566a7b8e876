"""Record values in a schema registry's wire format (`BRIDGE_VALUE_FORMAT=json-schema`).

`values`: from a plain record to its framed one, each payload validated against its event type's JSON Schema
(no I/O of its own; a payload that fails is poison). `catalog`: the registry behind it, asked once per subject
through confluent-kafka's `SchemaRegistryClient`; `faults`: what a failed request says about the registry, for
the bridge and its doctor. `catalog` and `faults` need the `schema-registry` extra, so they are imported only when
the format is on.
"""
