"""The doctor's checks of the bridge's state in its database: the lease, the watermark against the head, the
transaction holding the horizon back, the history above the watermark, dead letters, the other bridge names on
the outbox, the instances starting, and retention.

They run once the outbox tables are known to be usable (`DatabaseChecks.migrated`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import select, text

from bridge.config import BridgeConfig, parse_duration
from bridge.daemon.status import LONG_TRANSACTION_S, holder_age_s
from bridge.doctor.checklist import Check, Verdict
from bridge.doctor.database import OutboxDatabase
from bridge.names import list_names
from bridge.schema import as_utc, domain_events
from bridge.store import dead_letters, instances
from bridge.store.deletable import deletable
from bridge.store.engine import make_reader
from bridge.store.offsets import OffsetStore


class StateChecks:
    """The bridge's state, checked in order; the lease check learns the watermark the others start from."""

    def __init__(self, config: BridgeConfig, outbox: OutboxDatabase) -> None:
        self.config = config
        self.outbox = outbox
        #: The watermark in this bridge name's row (0 when it never ran).
        self.persisted_watermark = 0

    def lease(self) -> list[Check]:
        row = OffsetStore(self.outbox.engine(), self.config.bridge_name).read()
        name = self.config.bridge_name
        if row is None:
            return [Check("lease", Verdict.WARNING, f"bridge {name!r} has never run against this database",
                          "start it: `outbox-bridge run` (BRIDGE_NAME names the bridge)")]
        self.persisted_watermark = row.watermark
        now = datetime.now(UTC)
        renewed = f"renewed {_ago(row.heartbeat_at, now)}" if row.heartbeat_at else "never renewed"
        if row.owner and row.lease_expires_at and row.lease_expires_at > now:
            since = row.status.get("leading_since")
            held = f" since {since}" if since else ""
            return [Check("lease", Verdict.OK, f"held by {row.owner} (epoch {row.epoch}){held}, {renewed}, "
                          f"expires in {(row.lease_expires_at - now).total_seconds():.1f}s")]
        if row.owner:
            return [Check("lease", Verdict.WARNING,
                          f"held by {row.owner} (epoch {row.epoch}) but expired {_ago(row.lease_expires_at, now)}; "
                          f"{renewed}",
                          "that instance died or is stuck: a standby takes over; else start one (`outbox-bridge run`)")]
        return [Check("lease", Verdict.WARNING, f"free: no instance of bridge {name!r} is publishing "
                      f"(last update {_ago(row.updated_at, now)})", "start one: `outbox-bridge run`")]

    def watermark(self) -> list[Check]:
        engine = self.outbox.engine()
        row = OffsetStore(engine, self.config.bridge_name).read()
        watermark = row.watermark if row else 0
        reader = make_reader(engine)
        try:
            head_seq = reader.head_seq()
            oldest = reader.oldest_after(watermark)
        finally:
            reader.close()
        lag = max(0, head_seq - watermark)
        age = (datetime.now(UTC) - oldest.occurred_at).total_seconds() if oldest else 0.0
        summary = f"watermark {watermark}, head {head_seq}: {lag} events to publish"
        summary += f", the oldest waiting {age:.0f}s" if lag else ""
        status = row.status if row else {}
        checks = []
        if status.get("halted_at_seq") is not None and not (row and row.owner):
            checks.append(Check("watermark", Verdict.FAILED,
                                f"{summary}; the bridge halted on the poison event seq {status['halted_at_seq']}",
                                "fix or remove that row, or run with BRIDGE_POISON_POLICY=dead-letter; then start "
                                "the bridge"))
        elif watermark > head_seq and head_seq > 0:
            checks.append(Check("watermark", Verdict.WARNING,
                                f"watermark {watermark} is above the newest seq {head_seq}",
                                "if the outbox was restored or recreated, new events up to the watermark would be "
                                "skipped: `outbox-bridge replay --from-seq` to move the watermark back"))
        elif lag and not (row and row.owner):
            checks.append(Check("watermark", Verdict.WARNING, f"{summary}, and no instance is publishing",
                                "start the bridge: `outbox-bridge run`"))
        else:
            checks.append(Check("watermark", Verdict.OK, summary))
        if status.get("last_error"):
            checks.append(Check("watermark", Verdict.WARNING, f"the bridge last reported: {status['last_error']}",
                                "see the bridge's log around that time; `outbox-bridge status` shows the rest"))
        return checks

    def horizon(self) -> list[Check]:
        engine = self.outbox.engine()
        reader = make_reader(engine)
        try:
            batch = reader.poll(self.persisted_watermark, 1)
            holder = reader.horizon_holder() if batch.waiting_on is not None else None
        finally:
            reader.close()
        if batch.waiting_on is None:
            return [Check("horizon", Verdict.OK, "no transaction holds publishing back")]
        age = holder_age_s(holder)
        who = json.dumps({k: v for k, v in (holder or {}).items() if v is not None}, default=str)
        summary = f"seq {batch.waiting_on.first} and later wait for an open transaction: {who}"
        if age is not None and age < LONG_TRANSACTION_S:
            return [Check("horizon", Verdict.OK, summary + f" (open {age:.1f}s: an ordinary commit)")]
        return [Check("horizon", Verdict.WARNING, summary,
                      "commit or end that transaction (PostgreSQL: pg_terminate_backend(pid); SQL Server: KILL "
                      "session); events behind it are published once it ends")]

    def history(self) -> list[Check]:
        """Whether this name may lead from its watermark: nothing above it deleted, not retired."""
        found = OffsetStore(self.outbox.engine(), self.config.bridge_name).history(self.persisted_watermark)
        retired = found.retired_at is not None
        if found.deleted is None and not retired:
            return [Check("history", Verdict.OK, f"every row above the watermark {found.watermark} is still in "
                          "the outbox")]
        summary = (f"bridge name {self.config.bridge_name!r} was retired at {found.retired_at}" if retired
                   else f"above the watermark {found.watermark}, {found.deleted.describe() if found.deleted else ''}")
        return [Check("history", Verdict.FAILED, f"{summary}: the bridge refuses to lead (exit code 10)",
                      "publish what its consumers need from another source, then `outbox-bridge run --start-from "
                      "earliest` (or a seq; audited); see docs/OPERATIONS.md, several bridge names on one outbox")]

    def dead_letters(self) -> list[Check]:
        with self.outbox.connect() as conn:
            found = dead_letters.open_summary(conn, self.config.bridge_name)
        if not found.count:
            return [Check("dead letters", Verdict.OK, "none open")]
        age = (datetime.now(UTC) - found.oldest_at).total_seconds() if found.oldest_at else 0.0
        return [Check("dead letters", Verdict.WARNING,
                      f"{found.count} open, the oldest {age:.0f}s old: their consumers never saw them, and the outbox "
                      "keeps their rows", "`outbox-bridge dead-letters list`; fix the cause, then `dead-letters "
                      "republish SEQ` or `dead-letters resolve SEQ --reason ...`")]

    def instances(self) -> list[Check]:
        """Instances of this name that are starting and failing a step (each reports its own state)."""
        with self.outbox.connect() as conn:
            running = instances.listed(conn, self.config.bridge_name)
        stuck = [i for i in running if i["state"] == instances.STARTING and i["step"]]
        if not stuck:
            states = ", ".join(f"{i['instance']} {i['state']}" for i in running) or "none reported"
            return [Check("instances", Verdict.OK, f"running instances: {states}")]
        return [Check("instances", Verdict.WARNING,
                      f"instance {i['instance']} cannot start: step {i['step']!r} failed {i['attempts']} time(s) "
                      f"since {i['failing_since']} (last at {i['updated_at']}): {i['error']}",
                      "see docs/OPERATIONS.md#outboxbridgenotstarting; a row left by an instance that crashed "
                      "shows an old time and can be ignored")
                for i in stuck]

    def names(self) -> list[Check]:
        checks = []
        for name in list_names(self.config.database, parse_duration(self.config.retention_hold_alert_after)):
            if name["bridge_name"] == self.config.bridge_name or name["retired_at"]:
                continue
            held = " and holds retention back" if name["holds_retention_back"] else ""
            if name["not_led_for_long"]:
                checks.append(Check("names", Verdict.WARNING,
                                    f"bridge name {name['bridge_name']!r} (watermark {name['watermark']}) has not led "
                                    f"since {name['last_led_at'] or 'it was registered'}{held}",
                                    f"start it, or if it is gone for good: `outbox-bridge names retire "
                                    f"{name['bridge_name']} --reason ...`"))
            else:
                checks.append(Check("names", Verdict.OK, f"bridge name {name['bridge_name']!r} at watermark "
                                    f"{name['watermark']}{held}"))
        return checks or [Check("names", Verdict.OK, f"{self.config.bridge_name!r} is the only bridge name on the "
                                "outbox")]

    def retention(self) -> list[Check]:
        period = self.config.retention_period
        with self.outbox.connect() as conn:
            oldest = conn.execute(select(domain_events.c.occurred_at).order_by(domain_events.c.seq).limit(1)).scalar()
            rows = int(conn.execute(text("SELECT COUNT(*) FROM domain_events")).scalar() or 0)
            held = deletable(conn, self.config.bridge_name) if period is not None else None
        if period is None:
            return [Check("retention", Verdict.OK, f"off: every row is kept ({rows} rows)",
                          "to bound the outbox set BRIDGE_RETENTION (e.g. 7d) or run `outbox-bridge cleanup`")]
        summary = f"rows older than {self.config.retention} are deleted every {self.config.retention_interval_s:g}s " \
                  f"once every bridge name published them ({rows} rows)"
        if held is not None and held.held_back_by is not None:
            return [Check("retention", Verdict.WARNING, f"{summary}; bridge name {held.held_back_by!r} holds it back "
                          f"at seq {held.held_back_at}",
                          f"start that bridge, or retire the name: `outbox-bridge names retire {held.held_back_by} "
                          "--reason ...`")]
        if oldest is not None:
            age = datetime.now(UTC) - as_utc(oldest)
            overdue = age - period
            if overdue.total_seconds() > 2 * self.config.retention_interval_s + 60 and self.persisted_watermark > 0:
                return [Check("retention", Verdict.WARNING, f"{summary}, yet the oldest row is {age} old",
                              "retention runs only in the active instance: is one running with BRIDGE_RETENTION? "
                              "Rows above the watermark are kept until they are published")]
        return [Check("retention", Verdict.OK, summary)]


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "never"
    seconds = (now - as_utc(moment)).total_seconds()
    return f"{seconds:.1f}s ago" if seconds < 120 else f"at {as_utc(moment).isoformat(timespec='seconds')}"
