"""The local stack without Docker: Kafka (KRaft), PostgreSQL, Kafka Connect and a schema registry as processes on
loopback.

`ops/localstack.py` and `ops/connect.py` are its command lines; tests and benchmarks put `ops/` on
`sys.path` and import the parts they drive:

- `places`: the run directory, the jar cache, loopback and the ports;
- `processes`: pid files, waiting for a port, stopping only our own processes, the up/down lock, `StackError`;
- `jars`: the broker's and Spark's jars, resolved through Maven;
- `kafka`: `KafkaCluster`, a named KRaft cluster (brokers and a controller); `kafka_security`: what a
  `--secure` cluster adds (TLS, SCRAM users, ACLs, the client settings);
- `postgres`: `Postgres`, a private server with TLS; `certificates`: its CA and server certificate;
- `connect`: `ConnectWorker`, a Kafka Connect worker for Debezium; `connect_api`: its REST API;
- `registry`: `SchemaRegistry`, Apicurio Registry with Confluent's API, for the json-schema value format;
- `cli`: the commands of `ops/localstack.py`, and `.run/stack.env`, which `up` writes.

Modules import each other as `stack.<module>`, from the bottom up (places, processes, then the services,
then the commands), so a command line can import any of them alone.
"""
