"""Fixtures for the projection tests: one shared Spark session, a harness that runs projections to completion."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from projections import runner
from projections.declaration import Projection
from projections.lake import Lake
from projections.settings import Settings
from tests.integration.projections.events import OutboxEvent, produce

# Compaction after every commit is right for a long-running job and slow for many tiny test batches.
_FAST_DELTA = {
    "spark.databricks.delta.autoCompact.enabled": "false",
    "spark.databricks.delta.optimizeWrite.enabled": "false",
}


@pytest.fixture(scope="session")
def projection_spark(spark: Any) -> Iterator[Any]:
    """The shared session, with per-commit compaction off for the duration of the projection tests."""
    previous = {key: spark.conf.get(key, None) for key in _FAST_DELTA}
    for key, value in _FAST_DELTA.items():
        spark.conf.set(key, value)
    yield spark
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def on_topic(projection: Projection, topic: str) -> Projection:
    """The projection reading one given topic instead of its declared source."""
    return dataclasses.replace(projection, aggregate_types=(), topic_pattern=None, topics=(topic,))


def delta_log(table: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(version, action) for every action in a local Delta table's JSON log, oldest first."""
    for entry in sorted(Path(table, "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            yield int(entry.stem), json.loads(line)


def table_rows(spark: Any, path: str, drop: Iterable[str] = ()) -> list[str]:
    """A table's rows as sorted JSON strings: comparable row by row, readable in a failing diff."""
    frame = spark.read.format("delta").load(path).drop(*drop)
    return sorted(json.dumps(r.asDict(recursive=True), default=str, sort_keys=True) for r in frame.collect())


@dataclass
class Harness:
    """Runs projections against the test broker with availableNow triggers and reads their tables back."""

    spark: Any
    bootstrap: str
    tmp_path: Path
    new_topic: Callable[..., str]

    def lake(self, name: str) -> Lake:
        return Lake(str(self.tmp_path / name))

    def topic(self, events: Iterable[OutboxEvent], copies: int = 1, partitions: int = 2) -> str:
        topic = self.new_topic("proj", partitions=partitions)
        produce(self.bootstrap, topic, events, copies=copies)
        return topic

    def kafka_batch(self, topic: str) -> Any:
        """The topic's records as one static DataFrame, shaped as a micro-batch of the Kafka source."""
        return (
            self.spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .load()
        )

    def settings(self, lake: Lake, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "lake": lake.root,
            "available_now": True,
            "metrics_port": 0,
        }
        return Settings(**{**values, **overrides})

    def run(self, projections: Iterable[Projection], topic: str, lake: Lake, **overrides: Any) -> None:
        """Run the projections on the topic to the end of what it holds, side by side, and check none failed."""
        self.run_together([(projections, topic, lake)], **overrides)

    def run_together(self, builds: Iterable[tuple[Iterable[Projection], str, Lake]], **overrides: Any) -> None:
        """Several `run`s at once, each its projections on its topic into its lake: one wait instead of one each
        (the queries' start-up and Delta commits overlap). Each build runs in a session of its own, because
        Spark refuses two active queries of one name in a session."""
        queries = [
            runner.start(session, on_topic(p, topic), self.settings(lake, **overrides))
            for session, (projections, topic, lake) in zip(self._sessions(), builds, strict=False)
            for p in projections
        ]
        for query in queries:
            query.awaitTermination()
        errors = [f"{q.name}: {q.exception()}" for q in queries if q.exception() is not None]
        assert not errors, errors

    def _sessions(self) -> Iterator[Any]:
        """This harness's session, then new ones on the same Spark context with the same Delta settings."""
        yield self.spark
        while True:
            session = self.spark.newSession()
            for key in _FAST_DELTA:
                session.conf.set(key, self.spark.conf.get(key))
            yield session

    def rows(self, projection: Projection, lake: Lake, drop: Iterable[str] = ()) -> list[str]:
        return table_rows(self.spark, lake.table(projection.name), drop)


@pytest.fixture()
def harness(
    projection_spark: Any, kafka_bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path
) -> Harness:
    return Harness(projection_spark, kafka_bootstrap, tmp_path, topic_factory)
