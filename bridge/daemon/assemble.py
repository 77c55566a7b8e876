"""Wire a `BridgeDaemon` from the configuration: the one place the daemon's collaborators are built.

Each collaborator gets the section it uses: the engine the database section, the producer the producer section
(`as_librdkafka_dict()`), the topic guard and the poison gate the topic section, the loop its own. With tracing on
(`OTEL_TRACES_EXPORTER`), the producer is a `TracedPublisher`; with `BRIDGE_DELIVERY=exactly-once`, a
`TransactionalPublisher`, and each term asks the progress topic where Kafka's commits end; with
`BRIDGE_VALUE_FORMAT=json-schema` the gate frames values with the registry's schemas, and a start-up step checks the
registry answers the bridge's login before it stands by or leads. Tests that want other collaborators (an in-memory
publisher, a topic guard that accepts everything, a reader over a fault proxy) pass them here, or build
`BridgeDaemon` directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.config import BridgeConfig, mask_url
from bridge.daemon.loop import BridgeDaemon, new_instance_id
from bridge.daemon.poison import producer_limit
from bridge.daemon.startup import StartupStep
from bridge.kafka.access import check_connection
from bridge.kafka.progress import ProgressTopic, committed_progress, trusted
from bridge.kafka.publisher import DeliveryCallback, KafkaPublisher, Publisher
from bridge.kafka.topics import TopicChecker, TopicGuard
from bridge.kafka.transaction_policy import TransactionPolicy
from bridge.kafka.transactional import ABORTED, COMMITTED, TransactionalPublisher
from bridge.metrics import BridgeMetrics
from bridge.schemas.values import SchemaValues
from bridge.store.engine import any_thread, make_engine, make_reader
from bridge.store.failures import store_error
from bridge.store.instances import InstanceBoard
from bridge.store.invariants import check_never_skip
from bridge.store.maintenance import cleanup
from bridge.store.offsets import OffsetStore
from bridge.store.privileges import FIX, excess_rights
from bridge.store.reader import OutboxReader
from bridge.store.revision import check_migrated
from bridge.store.rows import event_id_at

if TYPE_CHECKING:
    from bridge.schemas.catalog import RegistryCatalog

log = logging.getLogger("bridge.daemon")

#: Makes a publisher from librdkafka settings and the daemon's delivery callback (`KafkaPublisher`).
PublisherFactory = Callable[[dict[str, Any], DeliveryCallback], Publisher]


def build_daemon(
    config: BridgeConfig,
    *,
    metrics: BridgeMetrics | None = None,
    publisher_factory: PublisherFactory | None = None,
    topic_guard: TopicChecker | None = None,
    instance_id: str | None = None,
    engine: Engine | None = None,
    reader_factory: Callable[[Engine], OutboxReader] = make_reader,
    tracer_provider: Any = None,
    committed: Callable[[int], int | None] | None = None,
) -> BridgeDaemon:
    """The daemon for `config`, with real collaborators unless others are given. `tracer_provider` (an OpenTelemetry
    SDK `TracerProvider`) turns the publish spans on with it instead of one made from the `OTEL_*` variables. In
    exactly-once delivery the publisher is transactional, and `committed` (by default: read from the progress topic)
    says where Kafka's commits end."""
    database = config.database
    topics = config.topics
    engine = engine or make_engine(database.url_text)
    instance_id = instance_id or new_instance_id()
    conf = config.producer.as_librdkafka_dict()  # refuses unsafe extras now, before anything starts
    make_publisher = publisher_factory or KafkaPublisher
    finish_tracing: Callable[[], object] = _nothing
    client_conf = config.kafka.client_conf()
    transactions = config.transactions
    transactional: dict[str, Any] | None = None  # the transactional publisher's settings, in exactly-once
    if transactions is not None and publisher_factory is None:
        metrics = metrics or BridgeMetrics()
        ended = metrics.transactions
        for outcome in (COMMITTED, ABORTED):
            ended.labels(outcome=outcome)  # both series from the start, at 0
        transactional = {"policy": transactions, "on_transaction": lambda outcome: ended.labels(outcome=outcome).inc()}
        make_publisher = partial(TransactionalPublisher, **transactional)
        committed = committed or _committed_in_kafka(client_conf, config, transactions, engine)
    if publisher_factory is None:
        traced = _traced_publisher(config, tracer_provider, str(conf.get("client.id", "")), transactional)
        if traced is not None:
            make_publisher, finish_tracing = traced
    guard = topic_guard or TopicGuard(client_conf, topics.policy())

    def connected(what: str, check: Callable[[Connection], None]) -> Callable[[], None]:
        """A start-up step on a connection of its own: a failure retries this step alone."""
        def step() -> None:
            try:
                with engine.connect() as conn:
                    check(conn)
            except DBAPIError as exc:
                raise store_error(exc, what) from exc
        return step

    def warn_excess_rights(conn: Connection) -> None:
        excess = excess_rights(conn)
        if excess is not None:
            log.warning(f"the bridge runs as {excess.login!r}, {excess.why}: it needs far fewer rights; {FIX}",
                        extra={"login": excess.login, "why": excess.why})

    def check_kafka() -> None:
        # Needs a real cluster: not when tests give an in-memory publisher. Unreachable brokers are not a
        # refusal: the producer keeps trying, and the lag and publishing alerts say so.
        if publisher_factory is None:
            check_connection(client_conf)

    catalog = registry_catalog(config)

    # Refuse to lead an outbox that was never migrated, or whose seq path no longer takes the horizon stamp
    # first; warn when the login could do far more than publish; refuse Kafka credentials it rejects, and a
    # schema registry that refuses the bridge's login (one that does not answer is waited for).
    startup = (
        StartupStep("schema revision", connected("checking the outbox's schema revision", check_migrated)),
        StartupStep("seq path", connected("checking the outbox's seq path", check_never_skip)),
        StartupStep("login's rights", connected("checking the login's rights", warn_excess_rights)),
        StartupStep("kafka", check_kafka),
        *([StartupStep("schema registry", catalog.answers)] if catalog is not None else []),
    )

    retention = config.retention_section

    def retention_pass(period: timedelta) -> dict[str, Any]:
        # The same pass as `outbox-bridge cleanup --older-than`.
        return cleanup(database, period, dry_run=False, show_progress=False,
                       deleted_by=f"retention of bridge {database.bridge_name!r}")

    return BridgeDaemon(
        config.loop,
        topics,
        offsets=OffsetStore(engine, database.bridge_name),
        open_reader=lambda: reader_factory(engine),
        new_publisher=lambda on_delivery: make_publisher(dict(conf), on_delivery),
        topic_guard=guard,
        startup=startup,
        retention=retention,
        retention_pass=retention_pass if retention is not None else None,
        producer_limit=producer_limit(config.producer_extra),
        metrics=metrics,
        instance_id=instance_id,
        on_exit=lambda: _finish(engine, finish_tracing),
        instances=InstanceBoard(engine, database.bridge_name, instance_id),
        # For the refusal messages (principal, bootstrap, CA): no need to hold the password there.
        kafka_conf={**{k: v for k, v in client_conf.items() if k != "sasl.password"},
                    **({"transactional.id": transactions.transactional_id} if transactions is not None else {})},
        outbox=database.masked_url,
        values=SchemaValues(catalog) if catalog is not None else None,
        committed=committed if transactions is not None else None,
        checkpoint_worker=any_thread(engine),
    )


def schema_values(config: BridgeConfig) -> SchemaValues | None:
    """The registry's framing of values in the json-schema format, None in plain JSON."""
    catalog = registry_catalog(config)
    return SchemaValues(catalog) if catalog is not None else None


def registry_catalog(config: BridgeConfig) -> RegistryCatalog | None:
    """The schema registry of the json-schema value format, None in plain JSON. The registry client (the
    `schema-registry` extra) is imported only here, so a bridge without it never loads it."""
    section = config.schemas
    if section is None:
        return None
    from bridge.schemas.catalog import RegistryCatalog, registry_client

    url = mask_url(section.url)
    log.info("values in the schema registry's wire format, each payload validated against its JSON Schema",
             extra={"registry": url, "subjects": section.naming.value,
                    "registers_from": str(section.schema_dir) if section.schema_dir else None})
    return RegistryCatalog(registry_client(section), section.naming, section.schema_dir, url)


def _committed_in_kafka(client_conf: dict[str, Any], config: BridgeConfig, transactions: TransactionPolicy,
                        engine: Engine) -> Callable[[int], int | None]:
    """The last seq Kafka committed for this bridge, from its progress topic (created, or checked, the first time),
    when it is above the watermark given and this outbox holds the event it names there (`trusted`). At or below
    the watermark it is not asked about: retention may have deleted that event."""
    topics = config.topics
    progress = ProgressTopic(client_conf, topics.policy(), transactions.progress_topic, topics.allow_create)
    ensured: list[bool] = []

    def committed(watermark: int) -> int | None:
        if not ensured:
            progress.ensure()
            ensured.append(True)
        found = committed_progress(client_conf, transactions.progress_topic, transactions.progress_key,
                                   timeout=transactions.init_timeout_s)
        if found is None or found.seq <= watermark:
            return None
        return trusted(found, lambda seq: event_id_at(engine, seq))

    return committed


def _nothing() -> None:
    return None


def _finish(engine: Engine, finish_tracing: Callable[[], object]) -> None:
    engine.dispose()
    finish_tracing()  # exports the spans still batched


def _traced_publisher(config: BridgeConfig, provider: Any, client_id: str, transactional: dict[str, Any] | None = None
                      ) -> tuple[PublisherFactory, Callable[[], object]] | None:
    """The publisher that sends in publish spans (transactional, with `transactional`'s settings, in exactly-once
    delivery), and what exports the last spans at exit; None when tracing is off. The SDK is imported only here,
    so a bridge without tracing never loads it."""
    own = provider is None
    if own:
        if not config.trace_exporters:
            return None
        from bridge.tracing.provider import tracer_provider

        provider = tracer_provider(config.trace_exporters, config.bridge_name)
    from bridge.kafka.traced_publisher import TracedPublisher, TracedTransactionalPublisher
    from bridge.tracing.spans import PublishSpans

    spans = PublishSpans(provider.get_tracer("outbox-bridge"), client_id)
    log.info("tracing: a publish span for each event whose row carries a sampled trace context",
             extra={"exporters": list(config.trace_exporters) or "given"})
    finish = provider.shutdown if own else provider.force_flush
    if transactional is not None:
        return partial(TracedTransactionalPublisher, spans, **transactional), finish
    return partial(TracedPublisher, spans), finish
