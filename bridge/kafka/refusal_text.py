"""Refusals that librdkafka names only in its message text, read here and nowhere else.

Most refusals come with a code of their own: TOPIC_AUTHORIZATION_FAILED on a record's delivery report,
`_SSL`, `_AUTHENTICATION`. A few forms do not, and only their text tells what was refused; each form read
here has a test with the text librdkafka produces (tests/unit/test_kafka_refusal_text.py):

- with `enable.gapless.guarantee`, a produce request the ACLs refused comes first as a fatal
  `_GAPLESS_GUARANTEE` error naming the broker's error and the request's topic, before the records' own
  reports: "ProduceRequest for outbox.event.order [0] with 3 message(s) failed: Broker: Topic authorization
  failed (broker 1 PID{Id:53558000,Epoch:0}, base seq 0): unable to satisfy gap-less guarantee", or
  "... Broker: Cluster authorization failed ..." for the idempotent producer's cluster right;
- an untrusted certificate reported as a transport failure (`_TRANSPORT`, not `_SSL`):
  "ssl://host:9093/bootstrap: error:0A000086:SSL routines::certificate verify failed (after 3ms in state
  SSL_HANDSHAKE)";
- the client's log lines about refused credentials or certificates, which the caller reports itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from confluent_kafka import KafkaError

_CLUSTER_DENIED: Final = "cluster authorization failed"
_TOPIC_DENIED: Final = "topic authorization failed"
_PRODUCE_REQUEST_TOPIC: Final = re.compile(r"ProduceRequest for (\S+) \[")
_CERTIFICATE_REFUSED: Final = ("certificate verify failed", "ssl handshake failed")
_REFUSAL_LOGGED: Final = ("authentication", "ssl", "certificate")


@dataclass(frozen=True, slots=True)
class NamedDenial:
    """An ACL refusal an error's text names: the authorization code it stands for, and the topic of the
    refused request when the text names one."""

    code: int
    topic: str | None = None


def denial_named(text: str) -> NamedDenial | None:
    """The ACL refusal `text` names, whatever the error's code; None when it names none."""
    lowered = text.lower()
    if _CLUSTER_DENIED in lowered:
        return NamedDenial(KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    if _TOPIC_DENIED in lowered:
        named = _PRODUCE_REQUEST_TOPIC.search(text)
        return NamedDenial(KafkaError.TOPIC_AUTHORIZATION_FAILED, named.group(1) if named else None)
    return None


def names_untrusted_certificate(text: str) -> bool:
    """Whether `text` says the TLS handshake failed on the brokers' certificate."""
    lowered = text.lower()
    return any(part in lowered for part in _CERTIFICATE_REFUSED)


def names_refused_credentials(log_line: str) -> bool:
    """Whether a client log line is about refused credentials, TLS or a certificate."""
    lowered = log_line.lower()
    return any(part in lowered for part in _REFUSAL_LOGGED)
