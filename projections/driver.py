"""The driver process of a projection: what `run` and `replay` set up around the runner.

Kafka's answer to the projection's principal is checked first, so refused credentials, an untrusted
certificate or a topic it may not read stop the command before Spark starts. Then the projection's lock,
a Spark session and the Prometheus server on the driver; all three are let go on the way out, whatever
happened.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from projections import runner
from projections.declaration import Projection
from projections.errors import RefusedError
from projections.lake import Lake
from projections.lock import ProjectionLock
from projections.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from projections.metrics import ProjectionMetrics

log = logging.getLogger(__name__)


def check_kafka(settings: Settings, projection: Projection) -> bool:
    """Refused credentials, an untrusted certificate or a topic the principal may not read: one clear error
    now (KafkaAccessError), not Spark's exception after its start, nor a consumer retrying; unreachable
    brokers are left to the source's retries. Returns whether Kafka answered."""
    from bridge.kafka.access import check_connection, check_read_access
    from projections.kafka_clients import client_conf

    conf = client_conf(settings)
    if not check_connection(conf):
        return False
    option, value = projection.source_option(settings.topic_template)
    if option == "subscribe":  # a pattern names no topic to ask about
        check_read_access(conf, [topic for topic in value.split(",") if topic])
    return True


def locked(lake: Lake, name: str) -> ProjectionLock:
    """The projection's lock, taken at once, or RefusedError naming who holds it."""
    lock = ProjectionLock(lake, name)
    if not lock.acquire(0):
        raise RefusedError(
            f"projection {name} is already running ({lock.holder()}, lock {lock.path}); stop that instance first"
        )
    return lock


def serve_metrics(spark: SparkSession, settings: Settings, name: str) -> tuple[ProjectionMetrics | None, Any]:
    """The projection's metrics, fed from Spark's progress and served on the driver; (None, None) when off."""
    from prometheus_client import start_http_server

    from projections.metrics import ProgressListener, ProjectionMetrics

    if not settings.metrics_port:
        return None, None
    metrics = ProjectionMetrics()
    spark.streams.addListener(ProgressListener(metrics, {name}))
    server, _ = start_http_server(settings.metrics_port, addr=settings.metrics_host, registry=metrics.registry)
    log.info("serving /metrics", extra={"address": f"http://{settings.metrics_host}:{settings.metrics_port}"})
    return metrics, server


@contextlib.contextmanager
def driving(
    settings: Settings, name: str, app_name: str, lock: ProjectionLock
) -> Iterator[tuple[SparkSession, ProjectionMetrics | None]]:
    """A Spark session and the metrics server for projection `name`; on the way out the server stops, then
    the session, and `lock` is released."""
    from projections.session import build_session

    with contextlib.ExitStack() as cleanup:
        cleanup.callback(lock.release)
        spark = build_session(app_name=app_name)
        cleanup.callback(spark.stop)
        metrics, server = serve_metrics(spark, settings, name)
        if server is not None:
            cleanup.callback(server.shutdown)
        yield spark, metrics


def run_projection(settings: Settings, projection: Projection) -> None:
    """`outbox-projections run NAME`: check Kafka, take the lock, run until stopped or drained."""
    projection.source_option(settings.topic_template)  # a bad template fails before Spark starts
    log.info("effective settings", extra={"projection": projection.name, "settings": settings.masked()})
    check_kafka(settings, projection)
    lock = locked(Lake(settings.lake), projection.name)
    with driving(settings, projection.name, f"projection-{projection.name}", lock) as (spark, metrics):
        runner.run(spark, projection, settings, metrics)
