"""Kafka out of reach, said once in a while in one clear line instead of librdkafka's every second.

librdkafka retries a refused connection about once a second and logs each failure (`FAIL ... Connection
refused`), from every client the bridge holds. An operator needs one line: which bootstrap servers, what
failed, what to check. `Reachability` says that at most once per `interval_s` per bootstrap list; the
clients' own logs go through `ClientLog`, which hands connection failures to it, replaces librdkafka's
warning about a setting the bridge makes on purpose (`explain_gapless`) and forwards the rest to the
`bridge.kafka.librdkafka` logger.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Any, Final

from confluent_kafka import KafkaError

from bridge.kafka.producer_settings import explain_gapless

log = logging.getLogger("bridge.kafka")
_client_log = logging.getLogger("bridge.kafka.librdkafka")

#: librdkafka log facilities that report a broker connection failing (refused, reset, unresolvable).
CONNECTION_FACILITIES: Final = frozenset({"FAIL"})
#: Client errors (error_cb) that mean "the brokers cannot be reached", as opposed to a refusal.
UNREACHABLE_ERRORS: Final = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE})
REPORT_INTERVAL_S: Final = 30.0


class Reachability:
    """Reports that the brokers at `bootstrap_servers` cannot be reached: the first time at once, then at
    most once per `interval_s`, with how many failures were not reported in between."""

    def __init__(self, bootstrap_servers: str, interval_s: float = REPORT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka's threads and the loop may report at once
        self._reported_at: float | None = None
        self._suppressed = 0

    def unreachable(self, reason: str) -> bool:
        """Note a failure to reach the brokers; return whether it was reported (logged) now."""
        with self._lock:
            now = self._clock()
            if self._reported_at is not None and now - self._reported_at < self._interval_s:
                self._suppressed += 1
                return False
            suppressed, self._suppressed, self._reported_at = self._suppressed, 0, now
        log.warning(
            "Kafka is unreachable at %s (%s): check that the brokers are running and that "
            "KAFKA_BOOTSTRAP_SERVERS names them (locally, `make up` starts them); retrying, next report "
            "in %ds", self.bootstrap_servers, _last_part(reason), int(self._interval_s),
            extra={"bootstrap_servers": self.bootstrap_servers, "error": reason, "suppressed": suppressed},
        )
        return True

    def error(self, err: KafkaError) -> bool:
        """An `error_cb` error: report it if it means the brokers are out of reach; return whether it did."""
        if err.code() not in UNREACHABLE_ERRORS:
            return False
        self.unreachable(err.str())
        return True


def _last_part(reason: str) -> str:
    # "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms ...)"
    # -> "Connection refused"; the full text stays in the `error` field.
    tail = reason.rsplit("failed: ", 1)[-1]
    return tail.split(" (after ", 1)[0].strip() or reason


@cache
def reachability(bootstrap_servers: str) -> Reachability:
    """The one reporter per bootstrap list, shared by every client of this process (producer, admin)."""
    return Reachability(bootstrap_servers)


class ClientLog:
    """librdkafka's log for one client (its `logger` setting): connection failures go to the rate-limited
    `Reachability`, the warning that enable.gapless.guarantee is experimental becomes the bridge's reason for
    it (once, at info), everything else goes to the `bridge.kafka.librdkafka` logger."""

    def __init__(self, reporter: Reachability) -> None:
        self._reporter = reporter

    def log(self, level: int, message: str, *args: Any) -> None:
        # confluent-kafka calls log(level, "%s [%s] %s", facility, client name, text).
        if args and args[0] in CONNECTION_FACILITIES:
            self._reporter.unreachable(str(args[-1]))
            return
        if args and explain_gapless(str(args[0]), str(args[-1])):
            return
        _client_log.log(level, message, *args)


def quiet_client_settings(bootstrap_servers: str) -> dict[str, Any]:
    """The librdkafka settings that route a client's logs and connection failures through `reachability`."""
    return {"logger": ClientLog(reachability(bootstrap_servers))}
