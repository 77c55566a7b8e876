"""B8's two relays behind one small interface, so each extra row is written once and run for both.

A relay opens a lane per row (its own database and topic) and relays it until the lane is closed; in
between it can be killed (SIGKILL) and restarted. Debezium: one Kafka Connect worker for all rows, a
connector (and replication slot) per lane; the slot is dropped when the lane closes, since a leftover
slot pins WAL for the whole server. Bridge: one `outbox-bridge run` process per lane.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from bench.b8_debezium import (
    DEBEZIUM_TUNING,
    PARTITIONS,
    DatabaseCpu,
    bridge_backends,
    connect,
    debezium,
    wait_slot_active,
    walsender,
)
from bench.bridge_process import BridgeProcess, bridge_env
from bench.context import Context
from bench.stack import KAFKA1, PG_HOST, PG_PORT, pg_dsn
from bench.workload import AGGREGATE_TYPE

log = logging.getLogger("bench.b8")

LEASE_TIMEOUT_S = 3  # a restarted bridge waits this long for the killed one's lease to expire (as in B4)
#: The exactly-once relay's settings: the transactional producer, at its default transaction sizes.
EXACTLY_ONCE: Mapping[str, str] = {"BRIDGE_DELIVERY": "exactly-once"}


@dataclass(frozen=True)
class Lane:
    """One row's database and topic for one relay."""

    url: str
    topic: str

    @property
    def dbname(self) -> str:
        return self.url.rsplit("/", 1)[1]

    @property
    def dsn(self) -> str:
        return pg_dsn(self.dbname)


class Relay(Protocol):
    name: str
    #: Records become visible to read_committed consumers only when a transaction commits (exactly-once): its
    #: latency is measured to when such a consumer gets them, not to their append.
    transactional: bool

    def open(self, row: str, topic_config: dict[str, str] | None = None,
             settings: Mapping[str, str] | None = None) -> Lane:
        """Relay a new database into a new topic (created with `topic_config`); `settings` are the relay's
        own overrides (Debezium: connector settings; bridge: BRIDGE_* variables)."""
    def check(self) -> None: ...
    def pid(self) -> int | None:
        """The relay's process (the Connect worker's JVM, `outbox-bridge run`)."""
    def database_cpu(self) -> DatabaseCpu:
        """PostgreSQL's work for the open lane (Debezium's walsender, the bridge's backends)."""
    def kill(self) -> None: ...
    def restart(self) -> None: ...
    def close(self) -> None: ...
    def shutdown(self) -> None: ...


class DebeziumRelay:
    """Debezium's PostgreSQL connector and Outbox Event Router in one Connect worker."""

    name = "debezium"
    transactional = False

    def __init__(self, ctx: Context, tuning: dict[str, str] | None = None) -> None:
        self.ctx = ctx
        self.tuning = DEBEZIUM_TUNING if tuning is None else tuning
        self.worker = connect.ConnectWorker(name=f"connect-b8r-{uuid.uuid4().hex[:6]}", bootstrap=KAFKA1,
                                            rest_port=connect.free_port())
        self.lane: Lane | None = None
        self.connector = self.slot = ""

    def open(self, row: str, topic_config: dict[str, str] | None = None,
             settings: Mapping[str, str] | None = None) -> Lane:
        if not self.worker.running():
            self.worker.start(timeout=180)
        url = self.ctx.scratch.database(f"b8_{row}_dbz")
        prefix = self.ctx.scratch.topic(f"b8-{row}-dbz.")
        topic = self.ctx.scratch.create_topic(KAFKA1, f"b8-{row}-dbz.outbox.event.{AGGREGATE_TYPE}", PARTITIONS, 1,
                                              topic_config)
        self.lane = Lane(url, topic)
        self.connector, self.slot = f"b8-{row}", f"b8_{row}_{self.ctx.run_id}".lower()
        config = debezium.outbox_connector_config(dbname=self.lane.dbname, host=PG_HOST, port=PG_PORT, slot=self.slot,
                                                  publication=self.slot, topic_prefix=prefix, partitions=PARTITIONS,
                                                  tuning={**self.tuning, **(settings or {})})
        self.worker.put_connector(self.connector, config)
        self._wait_running()
        return self.lane

    def _wait_running(self) -> None:
        assert self.lane is not None
        self.worker.wait_state(self.connector, "RUNNING", timeout=180)
        wait_slot_active(self.lane.url, self.slot, timeout=180)

    def check(self) -> None:
        if not self.worker.running():
            raise RuntimeError(f"the Connect worker exited; see {self.worker.log_file}")

    def pid(self) -> int | None:
        pid: int | None = self.worker.pid()
        return pid

    def database_cpu(self) -> DatabaseCpu:
        assert self.lane is not None
        return walsender(self.lane.url, self.slot)

    def kill(self) -> None:
        self.worker.stop(kill=True)

    def restart(self) -> None:
        self.worker.start(timeout=180)
        self._wait_running()

    def close(self) -> None:
        if self.lane is None:
            return
        try:
            self.worker.delete_connector(self.connector)
        except connect.ConnectError as exc:  # the worker is gone or stuck; the slot is dropped below anyway
            log.warning("B8: could not delete connector %s: %s", self.connector, exc)
        debezium.drop_slot(self.lane.dsn, self.slot, self.slot)
        self.lane = None

    def shutdown(self) -> None:
        self.worker.stop()
        self.worker.delete_internal_topics()


class BridgeRelay:
    """`outbox-bridge run`, one process per lane, with a short lease so a restart after a kill is quick; `settings`
    (BRIDGE_* variables) for every lane: `EXACTLY_ONCE` for the exactly-once relay."""

    def __init__(self, ctx: Context, name: str = "bridge", settings: Mapping[str, str] | None = None) -> None:
        self.ctx = ctx
        self.name = name
        self.settings = dict(settings or {})
        self.transactional = self.settings.get("BRIDGE_DELIVERY") == "exactly-once"
        self.env: dict[str, str] = {}
        self.process: BridgeProcess | None = None
        self.epoch = self.starts = 0

    def open(self, row: str, topic_config: dict[str, str] | None = None,
             settings: Mapping[str, str] | None = None) -> Lane:
        lane_name = f"{row}-{self.name}"
        url = self.ctx.scratch.database(f"b8_{lane_name}".replace("-", "_"))
        topic = self.ctx.scratch.create_topic(KAFKA1, f"b8-{lane_name}.{AGGREGATE_TYPE}", PARTITIONS, 1,
                                              topic_config)
        template = self.ctx.scratch.topic(f"b8-{lane_name}.{{aggregate_type}}")
        self.env = bridge_env(url, KAFKA1, f"bench-b8-{lane_name}", template, 1,
                              BRIDGE_LEASE_TIMEOUT_S=LEASE_TIMEOUT_S, **{**self.settings, **(settings or {})})
        self.epoch = 0
        lane = Lane(url, topic)
        self.restart()
        return lane

    def check(self) -> None:
        assert self.process is not None
        self.process.check_running()

    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def database_cpu(self) -> DatabaseCpu:
        return bridge_backends(self.env["OUTBOX_DB_URL"])

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()

    def restart(self) -> None:
        self.starts += 1
        log_file = self.ctx.raw(f"logs/{self.name}-b8-rows-{self.starts:02d}.log")
        self.process = BridgeProcess(self.env, log_file).start()
        self.epoch = self.process.wait_leading(after_epoch=self.epoch, timeout=60)

    def close(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def shutdown(self) -> None:
        self.close()
