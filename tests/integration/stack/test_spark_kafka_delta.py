"""Spark with the cached jars reads a real Kafka topic and writes and reads back a real Delta table."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer


def test_spark_reads_kafka_and_round_trips_delta(spark, kafka_bootstrap, topic_factory, tmp_path: Path) -> None:
    topic = topic_factory("spark", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
    sent = {f"key-{i}": f'{{"n":{i}}}' for i in range(50)}
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value, headers=[("event_type", b"Counted")])
    assert producer.flush(30) == 0

    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "headers")
    )
    table = tmp_path / "delta-table"
    frame.select("key", "value").write.format("delta").save(str(table))

    rows = {r["key"]: r["value"] for r in spark.read.format("delta").load(str(table)).collect()}
    assert rows == sent
    header = frame.select("headers").first()["headers"][0]
    assert (header["key"], bytes(header["value"])) == ("event_type", b"Counted")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    assert history[0]["operation"] == "WRITE"
