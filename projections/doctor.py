"""`outbox-projections doctor NAME`: what a projection depends on, checked without starting Spark.

Kafka reachable and the projection's topics there (with their first records: a table rebuilt from earliest
of a history cut by retention lacks them), the lake path writable, the checkpoint and the table in agreement
(a checkpoint without its table would resume past events the table never got), the projection's lock (is an
instance running) and its progress record. The same checklist, verdicts and exit code as `outbox-bridge
doctor`; every check bounded in time. On an object-store lake (s3a://, ...) the file checks need Spark's
Hadoop file system and are reported as not checked.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from bridge.doctor.checklist import (
    CHECK_TIMEOUT_S,
    KAFKA_TIMEOUT_S,
    Check,
    NoAnswer,
    Verdict,
    as_json,
    bounded,
    exit_code,
    reason,
)
from bridge.doctor.checklist import render as render_checks
from bridge.errors import OutboxError
from bridge.kafka.reachability import quiet_client_settings
from projections.declaration import Projection
from projections.history import ACCEPT_FLAG, find_history_start
from projections.kafka_clients import client_conf
from projections.lake import Lake, is_local, local_path
from projections.progress import read_progress
from projections.settings import Settings
from projections.status import history_line


def kafka_client_settings(settings: Settings) -> dict[str, Any]:
    """librdkafka settings for the projection's cluster: the same as replay's consumer
    (`projections.kafka_clients.consumer_conf`), without a group."""
    return client_conf(settings)


class ProjectionDoctor:
    """Runs one projection's checks in order, each bounded."""

    def __init__(self, projection: Projection, settings: Settings, timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.projection = projection
        self.settings = settings
        self.lake = Lake(settings.lake)
        self.timeout_s = timeout_s
        self._kafka_ok = False
        self._local = is_local(self.lake.root)

    def run(self) -> list[Check]:
        steps: list[tuple[str, Callable[[], list[Check]]]] = [
            ("kafka", self._kafka),
            ("topics", self._topics),
            ("lake", self._lake),
            ("checkpoint", self._checkpoint),
            ("lock", self._lock),
            ("progress", self._progress),
        ]
        checks: list[Check] = []
        for name, step in steps:
            if name == "topics" and not self._kafka_ok:
                checks.append(Check(name, Verdict.SKIPPED, "not checked: Kafka is unreachable"))
                continue
            if name in ("lake", "checkpoint", "lock") and not self._local:
                checks.append(Check(name, Verdict.WARNING, f"not checked: the lake {self.lake.root} is not a local "
                                    "path (object stores are reached through Spark)",
                                    "check it with the store's own tools; `outbox-projections status` reads it"))
                continue
            try:
                checks.extend(bounded(step, self.timeout_s))
            except NoAnswer as exc:
                checks.append(Check(name, Verdict.FAILED, str(exc), "check the service and the network"))
            except (OutboxError, KafkaException, OSError) as exc:
                checks.append(Check(name, Verdict.FAILED, reason(exc), _FIX.get(name)))
        return checks

    # --------------------------------------------------------------------------------------- kafka

    def _metadata(self) -> Any:
        admin = AdminClient({**kafka_client_settings(self.settings),
                             **quiet_client_settings(self.settings.bootstrap_servers)})
        try:
            return admin.list_topics(timeout=KAFKA_TIMEOUT_S)
        finally:
            admin.poll(0)

    def _kafka(self) -> list[Check]:
        metadata = self._metadata()
        self._kafka_ok = True
        return [Check("kafka", Verdict.OK, f"reachable at {self.settings.bootstrap_servers}: "
                      f"{len(metadata.brokers)} broker(s)")]

    def _topics(self) -> list[Check]:
        option, value = self.projection.source_option(self.settings.topic_template)
        existing = set(self._metadata().topics)
        if option == "subscribePattern":
            matched = sorted(t for t in existing if re.fullmatch(value, t))
            if not matched:
                return [Check("topics", Verdict.WARNING, f"no topic matches the pattern {value!r} yet",
                              "the bridge creates each topic with its first event; check BRIDGE_TOPIC_TEMPLATE")]
            return [Check("topics", Verdict.OK, f"pattern {value!r} matches {', '.join(matched)}"), *self._history()]
        checks = self._history()
        for topic in value.split(","):
            if topic in existing:
                checks.append(Check("topics", Verdict.OK, f"{topic} exists"))
            else:
                checks.append(Check(
                    "topics", Verdict.FAILED, f"{topic} does not exist, so the projection's query fails at start",
                    f"check BRIDGE_TOPIC_TEMPLATE={self.settings.topic_template!r} against the bridge's; the bridge "
                    "creates a topic with its first event (or `outbox-bridge topics ensure --topic "
                    f"{topic}`)"))
        return checks

    def _history(self) -> list[Check]:
        history = find_history_start(self.settings, self.projection, "earliest")
        if not history.cut:
            return []
        return [Check("topics", Verdict.WARNING,
                      f"Kafka has deleted the first records of {history.describe_cut()}: a table rebuilt from earliest "
                      f"lacks every event before them (a replay or a new checkpoint is refused without "
                      f"{ACCEPT_FLAG})",
                      "`outbox-bridge topics check` shows each topic's retention; `outbox-bridge topics ensure` keeps "
                      "every record from now on")]

    # ---------------------------------------------------------------------------------------- lake

    def _lake(self) -> list[Check]:
        root = local_path(self.lake.root)
        existing = root
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            return [Check("lake", Verdict.FAILED, f"{existing} is not a directory, so the lake {root} cannot be "
                          "created", "point PROJECTIONS_LAKE_PATH at a directory")]
        probe = existing / f".doctor-{uuid.uuid4().hex[:8]}"
        try:
            probe.write_text("probe\n")
            probe.unlink()
        except OSError as exc:
            return [Check("lake", Verdict.FAILED, f"{existing} is not writable ({exc.strerror}) by uid {os.getuid()}",
                          f"give this user write access to {existing}, or point PROJECTIONS_LAKE_PATH elsewhere")]
        where = "exists" if existing == root else f"will be created under {existing}"
        return [Check("lake", Verdict.OK, f"{root} {where}, writable")]

    def _checkpoint(self) -> list[Check]:
        name = self.projection.name
        table = local_path(self.lake.table(name))
        checkpoint = local_path(self.lake.checkpoint(name))
        has_table = (table / "_delta_log").is_dir()
        commits = _batch_ids(checkpoint / "commits")
        has_checkpoint = (checkpoint / "offsets").is_dir()
        if not has_table and not has_checkpoint:
            return [Check("checkpoint", Verdict.OK, f"not started yet: the first run reads from "
                          f"{self.settings.starting_offsets}")]
        if has_checkpoint and not has_table:
            return [Check("checkpoint", Verdict.FAILED,
                          f"the checkpoint {checkpoint} has read batches but the table {table} is missing: the next "
                          "run would resume after them, and their events would never reach the table",
                          f"rebuild: `outbox-projections replay {name} --in-place --rebuild` (stop the projection "
                          "first)")]
        if has_table and not has_checkpoint:
            verdict = Verdict.FAILED if self.settings.starting_offsets == "latest" else Verdict.WARNING
            return [Check("checkpoint", verdict,
                          f"the table {table} exists but its checkpoint {checkpoint} does not: the next run starts "
                          f"a new one from {self.settings.starting_offsets}"
                          + (" and skips what arrived meanwhile" if verdict is Verdict.FAILED
                             else " and applies those events again (idempotent, but slow)"),
                          f"restore the checkpoint, or rebuild: `outbox-projections replay {name} --in-place "
                          "--rebuild`")]
        progress = read_progress(self.lake, name)
        last = max(commits) if commits else None
        if progress is not None and last is not None and progress.batch_id < last:
            return [Check("checkpoint", Verdict.WARNING,
                          f"the checkpoint committed batch {last} but the progress record says {progress.batch_id}",
                          "the progress record catches up with the next batch; if it does not, see the run's log")]
        return [Check("checkpoint", Verdict.OK, f"table and checkpoint agree (last committed batch {last})")]

    def _lock(self) -> list[Check]:
        path = local_path(self.lake.lock(self.projection.name))
        if not path.exists():
            return [Check("lock", Verdict.OK, "free: no instance of this projection has run in this lake")]
        holder = path.read_text().strip() or "unknown"
        held = _flock_held(path)
        if held is None:
            return [Check("lock", Verdict.WARNING, f"cannot tell whether {path} is held (no /proc/locks); last "
                          f"holder {holder}")]
        if held:
            return [Check("lock", Verdict.OK, f"held: an instance is running ({holder})")]
        return [Check("lock", Verdict.OK, f"free: no instance is running (last holder {holder})")]

    def _progress(self) -> list[Check]:
        progress = read_progress(self.lake, self.projection.name) if self._local else None
        if progress is None:
            return [Check("progress", Verdict.OK, "no batch applied yet")]
        age = ""
        if progress.updated_at:
            seconds = (datetime.now(UTC) - datetime.fromisoformat(progress.updated_at)).total_seconds()
            age = f" ({seconds:.0f}s ago)"
        return [Check("progress", Verdict.OK, f"batch {progress.batch_id} applied at {progress.updated_at}{age}, "
                      f"max seq {progress.max_seq}, last event {progress.last_event_time}; history "
                      f"{history_line(progress.history)}")]


_FIX: Final = {
    "kafka": "check that the brokers are running and that KAFKA_BOOTSTRAP_SERVERS names them (locally, `make up` "
             "starts them), and the [kafka] settings",
    "lake": "check PROJECTIONS_LAKE_PATH and this user's access to it",
}


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return [int(entry.name) for entry in directory.iterdir() if entry.name.isdigit()]


def _flock_held(path: Path) -> bool | None:
    """Whether someone holds a flock on path, read from /proc/locks (taking the lock to find out could
    make a starting instance refuse to run); None where /proc/locks is not available."""
    try:
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    stat = path.stat()
    wanted = f":{stat.st_ino}"
    for line in locks.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].endswith(wanted):
            major_minor = fields[5].rsplit(":", 1)[0]
            major, minor = (int(part, 16) for part in major_minor.split(":"))
            if (major, minor) == (os.major(stat.st_dev), os.minor(stat.st_dev)):
                return True
    return False


def doctor_command(projection: Projection, settings: Settings, json_output: bool) -> int:
    """`outbox-projections doctor NAME [--json]`: print the checklist, return 0 unless a check failed."""
    started = time.monotonic()
    checks = ProjectionDoctor(projection, settings).run()
    if json_output:
        print(as_json(checks))
    else:
        print(render_checks(checks, f"outbox-projections doctor: projection {projection.name!r} "
                                    f"(checked in {time.monotonic() - started:.1f}s)"))
    return exit_code(checks)
