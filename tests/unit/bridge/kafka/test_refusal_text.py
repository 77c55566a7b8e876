"""Each librdkafka message form the bridge reads a refusal from, as librdkafka 2.16 writes it.

The texts were taken from librdkafka itself: the produce and producer-id refusals from its mock cluster with
the refusal injected (rd_kafka_mock_push_request_errors), the certificate ones from a TLS listener whose
certificate the client does not trust, the connection refusal from a closed port."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from bridge.exits import EXIT_CERTIFICATE, EXIT_DENIED
from bridge.kafka.access import (
    AccessDenied,
    CertificateUntrusted,
    _RefusalsAside,
    delivery_refused,
    is_authentication_failure,
    is_certificate_failure,
)
from bridge.kafka.refusal_text import NamedDenial, denial_named, names_refused_credentials, names_untrusted_certificate

CONF = {"bootstrap.servers": "kafka:9093", "sasl.username": "bridge", "sasl.mechanism": "SCRAM-SHA-256"}

#: A produce request refused by the topic's ACLs, with enable.gapless.guarantee: raised as a fatal error.
GAPLESS_TOPIC_DENIED = (
    "ProduceRequest for outbox.event.order [0] with 3 message(s) failed: Broker: Topic authorization failed "
    "(broker 1 PID{Id:53558000,Epoch:0}, base seq 0): unable to satisfy gap-less guarantee"
)
#: The same, refused for the cluster right an idempotent producer needs.
GAPLESS_CLUSTER_DENIED = (
    "ProduceRequest for outbox.event.order [0] with 3 message(s) failed: Broker: Cluster authorization failed "
    "(broker 1 PID{Id:710770000,Epoch:0}, base seq 0): unable to satisfy gap-less guarantee"
)
#: The producer id refused (InitProducerId): raised as a fatal CLUSTER_AUTHORIZATION_FAILED.
PRODUCER_ID_DENIED = (
    "Failed to acquire idempotence PID from broker 127.0.0.1:41967/1: Broker: Cluster authorization failed"
)
#: Each record's own delivery report after a topic's ACLs refused it.
RECORD_DENIED = "Broker: Topic authorization failed"
#: An untrusted certificate, as error_cb reports it with code _SSL ...
SSL_UNTRUSTED = (
    "ssl://127.0.0.1:37831/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: "
    "broker certificate could not be verified, verify that ssl.ca.location is correctly configured or root CA "
    "certificates are installed (install ca-certificates package) (after 5ms in state SSL_HANDSHAKE)"
)
#: ... and, on later attempts, with code _TRANSPORT: only the text says it is the certificate.
TRANSPORT_UNTRUSTED = (
    "ssl://127.0.0.1:37831/bootstrap: error:0A000086:SSL routines::certificate verify failed "
    "(after 3ms in state SSL_HANDSHAKE)"
)
#: A broker that is not listening: no refusal, the producer keeps trying.
CONNECTION_REFUSED = (
    "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)"
)


def test_a_produce_request_refused_by_a_topic_acl_names_the_requests_topic() -> None:
    named = denial_named(GAPLESS_TOPIC_DENIED)
    assert named == NamedDenial(KafkaError.TOPIC_AUTHORIZATION_FAILED, "outbox.event.order")
    refused = delivery_refused(KafkaError._GAPLESS_GUARANTEE, GAPLESS_TOPIC_DENIED, CONF)
    assert isinstance(refused, AccessDenied) and refused.exit_code == EXIT_DENIED
    assert "User:bridge Write on topic outbox.event.order (TOPIC_AUTHORIZATION_FAILED)" in str(refused)
    assert "--operation Write --topic outbox.event.order" in str(refused)


def test_a_produce_request_refused_for_the_cluster_asks_for_the_idempotent_producers_right() -> None:
    assert denial_named(GAPLESS_CLUSTER_DENIED) == NamedDenial(KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    refused = delivery_refused(KafkaError._GAPLESS_GUARANTEE, GAPLESS_CLUSTER_DENIED, CONF)
    assert isinstance(refused, AccessDenied)
    assert "IdempotentWrite on cluster" in str(refused) and "CLUSTER_AUTHORIZATION_FAILED" in str(refused)


def test_a_refused_producer_id_asks_for_the_idempotent_producers_right() -> None:
    assert denial_named(PRODUCER_ID_DENIED) == NamedDenial(KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    refused = delivery_refused(KafkaError.CLUSTER_AUTHORIZATION_FAILED, PRODUCER_ID_DENIED, CONF)
    assert isinstance(refused, AccessDenied) and "IdempotentWrite on cluster" in str(refused)


def test_a_records_refusal_names_no_topic_in_its_text() -> None:
    assert denial_named(RECORD_DENIED) == NamedDenial(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    refused = delivery_refused(KafkaError.TOPIC_AUTHORIZATION_FAILED, RECORD_DENIED, CONF)
    assert isinstance(refused, AccessDenied) and "Write on topic the bridge's topics" in str(refused)


@pytest.mark.parametrize(("code", "text"), [(KafkaError._SSL, SSL_UNTRUSTED),
                                            (KafkaError._TRANSPORT, TRANSPORT_UNTRUSTED)])
def test_an_untrusted_certificate_is_a_refusal_whichever_code_reports_it(code: int, text: str) -> None:
    assert names_untrusted_certificate(text)
    err = KafkaError(code, text)
    assert is_certificate_failure(err) and not is_authentication_failure(err)
    refused = delivery_refused(code, text, CONF)
    assert isinstance(refused, CertificateUntrusted) and refused.exit_code == EXIT_CERTIFICATE


@pytest.mark.parametrize("text", [CONNECTION_REFUSED, "1/1 brokers are down",
                                  "Failed to get metadata: Local: Broker transport failure"])
def test_an_unreachable_broker_is_no_refusal(text: str) -> None:
    assert denial_named(text) is None and not names_untrusted_certificate(text)
    assert delivery_refused(KafkaError._TRANSPORT, text, CONF) is None


def test_the_clients_log_of_a_refused_certificate_is_left_to_the_caller_and_the_rest_passes() -> None:
    # As confluent-kafka hands librdkafka's log to a `logger`: the message is the last argument.
    seen: list[tuple[object, ...]] = []

    class Inner:
        def log(self, level: int, message: str, *args: object) -> None:
            seen.append(args)

    aside = _RefusalsAside(Inner())  # type: ignore[arg-type]
    untrusted = f"[thrd:ssl://127.0.0.1:56255/bootstrap]: {SSL_UNTRUSTED}"
    unreachable = f"[thrd:127.0.0.1:1/bootstrap]: {CONNECTION_REFUSED}"
    aside.log(40, "%s [%s] %s", "FAIL", "rdkafka#producer-1", untrusted)
    aside.log(40, "%s [%s] %s", "FAIL", "rdkafka#producer-2", unreachable)
    assert names_refused_credentials(untrusted) and not names_refused_credentials(unreachable)
    assert seen == [("FAIL", "rdkafka#producer-2", unreachable)]


def test_the_clients_log_of_refused_credentials_is_left_to_the_caller() -> None:
    # librdkafka's format for it ("SASL authentication error: %s", the broker's reason, where it happened);
    # composed, not captured: no SASL listener is at hand in a unit test. The refusal itself is told by its
    # code (_AUTHENTICATION), not its text.
    line = ("[thrd:sasl_ssl://kafka:9093/bootstrap]: sasl_ssl://kafka:9093/bootstrap: SASL authentication error: "
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-256 (after 5ms in state AUTH_REQ)")
    assert names_refused_credentials(line)


def test_a_refused_transactional_id_asks_for_write_and_describe_on_it_not_for_a_topic() -> None:
    # How the exactly-once publisher reports init_transactions refused: its step, then librdkafka's text.
    reason = f"init_transactions: {KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED).str()}"
    conf = {**CONF, "transactional.id": "outbox-bridge-orders"}
    refused = delivery_refused(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, reason, conf)
    assert isinstance(refused, AccessDenied)
    assert "Write on transactional-id outbox-bridge-orders" in str(refused)
    assert "--operation Write --operation Describe --transactional-id outbox-bridge-orders" in str(refused)
