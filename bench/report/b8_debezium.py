"""B8's rows of the summary and its section: the bridge beside warm Debezium (Kafka Connect) on the same
PostgreSQL and Kafka, throughput and CPU per phase, and how far the two relays' records differ."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bench.report.cells import DASH, Plots, num, problem, problem_row, verdict
from bench.targets import B8_CONCURRENT_GOAL, STATED

TITLE = "B8: the bridge beside Debezium"

#: How B8 is run, before its numbers (and in place of them until it has run).
METHOD = [
    "Debezium 3.4.3.Final (PostgreSQL connector, `plugin.name=pgoutput`, Outbox Event Router) in a Kafka Connect "
    "4.1.1 worker, both resolved from Maven Central by `ops/maven/kafka-connect` and `ops/maven/debezium` (no "
    "Docker) and run by `ops/connect.py`: distributed mode, one worker, on the same 1-broker Kafka and the same "
    "PostgreSQL as the bridge, internal topics with replication 1. The worker's producer is set like the bridge's "
    "(Connect's own defaults are not idempotent): `enable.idempotence=true`, `acks=all`, 5 requests in flight, "
    "and the bridge's defaults for `linger.ms`, `batch.size`, `compression.type` and `delivery.timeout.ms`. The "
    "connector keeps Debezium's defaults (`max.batch.size`, `max.queue.size`, `lsn.flush.mode`) except "
    "`poll.interval.ms=10` (the default 500 ms wait on an empty queue is the usual first tuning); the router "
    "is set to produce our record format (`ops/debezium.py`, checked field by field by "
    "`tests/integration/peers/test_debezium_records.py`).",
    "Each relay has its own database and topic (6 partitions, 512-byte payloads, 10,000 keys) and they never run "
    "at the same time. Debezium is measured warm: its worker starts, a first run of N events is reported as "
    "*cold first run*, and only then come the backlog (rows written while the connector is stopped, then "
    "resumed: WAL streamed from its slot) and concurrent (N rows COPYed in 1% transactions while it runs) "
    "phases; *restart* stops the worker, writes N rows and starts a new JVM. The bridge: a loaded backlog, then "
    "the same concurrent load, then a stop, N rows and a new process. Rate: records acknowledged per second "
    "from the first new record to the last (topic high watermarks every 0.1 s). CPU: user+system seconds of "
    "the relay process over the same span (the whole worker JVM for Debezium), per 100,000 events, plus "
    "PostgreSQL's own work for it: Debezium's walsender, which decodes the WAL, and the bridge's backends "
    "(its sessions, named `outbox-bridge`), which run its queries.",
    "Logical decoding reads the whole server's WAL, whichever database wrote it: on a shared PostgreSQL, other "
    "databases' writes during a Debezium phase cost it time and walsender CPU that the bridge, which queries "
    "only its table, does not pay. Run B8 on a quiet server.",
    "Not included: Confluent's JDBC Source connector. It is published only to Confluent's own Maven repository "
    "(packages.confluent.io) under the Confluent Community License, not to Maven Central, so the project's "
    "Maven set-up (Maven Central only) cannot fetch it; and its incrementing mode (`WHERE id > last`) is known "
    "to skip rows whose transactions commit out of id order, which no throughput figure would show.",
]


def database_cpu(phase: dict[str, Any]) -> float | None:
    """PostgreSQL's CPU per 100,000 events for a relay's phase. Results stored before the bridge's backends were
    counted hold only Debezium's walsender, under that name."""
    value = phase.get("database_cpu_s_per_100k", phase.get("walsender_cpu_s_per_100k"))
    return None if value is None else float(value)


def cpu_sum(phase: dict[str, Any]) -> str:
    """A relay's CPU seconds per 100,000 events: its process + PostgreSQL's work for it = total."""
    relay, database = phase.get("relay_cpu_s_per_100k"), database_cpu(phase)
    if relay is None:
        return DASH
    if database is None:
        return f"{num(relay, 2)} + not measured"
    return f"{num(relay, 2)} + {num(database, 2)} = {num(relay + database, 2)}"


def summary(bench: dict[str, Any]) -> list[str]:
    b8 = bench.get("B8")
    why = problem(b8)
    if why:
        return [problem_row("B8", "bridge beside warm Debezium", why, STATED["B8"], DASH)]
    assert b8 is not None
    rows = []
    for phase, label in (("backlog", "backlog drain"), ("concurrent", "inserts running concurrently")):
        ours, theirs = b8["bridge"][phase], b8["debezium"][phase]
        ratio = b8["bridge_over_debezium"].get(phase)
        ahead = None if ratio is None else ratio > 1
        goal = (f"; #33's goal with inserts running, >= {B8_CONCURRENT_GOAL:.0f}x: "
                f"{verdict(ratio >= B8_CONCURRENT_GOAL)}{_writer_rates(b8)}"
                if phase == "concurrent" and ratio is not None else "")
        rows.append(
            f"| B8 | {label} ({b8['events_per_phase']:,} events) | {num(ours['events_per_s'])} events/s, "
            f"{cpu_sum(ours)} CPU s per 100k | Debezium {num(theirs['events_per_s'])} "
            f"events/s, {cpu_sum(theirs)} CPU s per 100k | ahead of Debezium (aim 2x; "
            f"got {DASH if ratio is None else f'{ratio:.2f}x'}){goal} | {verdict(ahead)} |")
    return rows


def _writer_rates(b8: dict[str, Any]) -> str:
    """How fast the writer inserted beside each relay in the concurrent phase: no relay publishes rows faster than
    they are committed, so a ratio above the writer's rate over Debezium's events/s cannot be reached."""
    ours, theirs = b8["bridge"]["concurrent"], b8["debezium"]["concurrent"]
    if not ours.get("insert_s") or not theirs.get("insert_s") or not theirs.get("events_per_s"):
        return ""
    rate = b8["events_per_phase"] / ours["insert_s"]
    return (f" (the writer inserted {num(rate)} rows/s beside the bridge, "
            f"{num(b8['events_per_phase'] / theirs['insert_s'])} beside Debezium: the most the bridge can show is "
            f"{rate / theirs['events_per_s']:.2f}x)")


def section(results: dict[str, Any], plots: Plots) -> str:
    b8, versions = results.get("benchmarks", {}).get("B8"), results.get("versions", {})
    lines = [f"## {TITLE}", "", *(f"{paragraph}\n" for paragraph in METHOD)]
    why = problem(b8)
    if why:
        hint = " yet: `python -m bench.run --only B8` measures it" if why == "not run" else ""
        return "\n".join([*lines, *_record_format(None), "", f"{why[0].upper()}{why[1:]}{hint}."]) + "\n"
    assert b8 is not None
    dbz, ours = b8["debezium"], b8["bridge"]
    lines += [
        f"{b8['events_per_phase']:,} events per phase; Kafka Connect {dbz.get('kafka_connect_version', DASH)}, "
        f"Debezium {b8['debezium_version']}, worker heap `{dbz.get('worker_heap', DASH)}`, worker start-up "
        f"{num(dbz.get('worker_start_s'), 1)} s; librdkafka {versions.get('librdkafka', DASH)} for the bridge"
        + (f"; the bridge's per-event core {b8['bridge_core']}" if b8.get("bridge_core") else "") + ".",
        "",
        "| phase | Debezium events/s | bridge events/s | bridge / Debezium | Debezium CPU s per 100k: worker + "
        "walsender = total | bridge CPU s per 100k: process + its backends = total | Debezium cores | bridge cores |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {"backlog": "backlog drain (Debezium warm)", "concurrent": "inserts running concurrently",
             "restart": "first N after a restart"}
    for phase, label in names.items():
        d, o = dbz.get(phase, {}), ours.get(phase, {})
        ratio = b8.get("bridge_over_debezium", {}).get(phase)
        lines.append(
            f"| {label} | {num(d.get('events_per_s'))} | {num(o.get('events_per_s'))} | "
            f"{DASH if ratio is None else f'{ratio:.2f}x'} | {cpu_sum(d)} | {cpu_sum(o)} | "
            f"{num(d.get('relay_cores'), 2)} | {num(o.get('relay_cores'), 2)} |")
    lines += _exactly_once(b8, names)
    lines.append(plots.link("b8_throughput", "bridge vs Debezium throughput"))
    lines.append(plots.link("b8_cpu", "bridge vs Debezium CPU per 100,000 events"))
    cold = dbz.get("cold_first_run", {})
    lines += [
        "",
        f"Debezium's cold first run after the worker started: {num(cold.get('events_per_s'))} events/s. After a "
        f"restart the first record came {num(dbz.get('restart', {}).get('first_record_after_s'), 1)} s after the "
        f"worker was started (bridge: {num(ours.get('restart', {}).get('first_record_after_s'), 1)} s).",
        "",
        *_record_format(b8.get("record_format_differences")),
    ]
    return "\n".join(lines) + "\n"


def _exactly_once(b8: dict[str, Any], names: dict[str, str]) -> list[str]:
    """The bridge's phases in exactly-once delivery, beside Debezium's and the default bridge's of the same run."""
    eos = b8.get("bridge_exactly_once")
    if not eos:
        return []
    lines = [
        "",
        "The bridge again, in exactly-once delivery (`BRIDGE_DELIVERY=exactly-once`, transactions at their default "
        "sizes), counted as a `read_committed` consumer sees it: an event once its transaction committed (last "
        "stable offsets; each commit marker takes an offset per partition, a fraction of a percent here). Its own "
        "database and topic, after the two above.",
        "",
        "| phase | exactly-once events/s | / Debezium | / the bridge's default | CPU s per 100k: process + its "
        "backends = total | cores |",
        "|---|---|---|---|---|---|",
    ]
    for phase, label in names.items():
        o, e = b8["bridge"].get(phase, {}), eos.get(phase, {})
        ratio = b8.get("bridge_exactly_once_over_debezium", {}).get(phase)
        of_default = e["events_per_s"] / o["events_per_s"] if e.get("events_per_s") and o.get("events_per_s") \
            else None
        lines.append(
            f"| {label} | {num(e.get('events_per_s'))} | {DASH if ratio is None else f'{ratio:.2f}x'} | "
            f"{DASH if of_default is None else f'{of_default:.0%}'} | {cpu_sum(e)} | {num(e.get('relay_cores'), 2)} |")
    return lines


def _record_format(differences: dict[str, str] | None) -> list[str]:
    """The record-format comparison's outcome: from the run, else from ops/debezium.py itself."""
    if differences is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ops"))
        import debezium

        differences = dict(debezium.DIFFERENCES)
    return [
        "Record format (the router set up as in `ops/debezium.py`, compared field by field by "
        "`tests/integration/peers/test_debezium_records.py`): the same topic name, key, partition, value bytes and "
        "`event_id`, `event_type`, `aggregate_type`, `seq` header bytes, in the same header order. Differences the "
        "router cannot remove:",
        "",
        *(f"- {name}: {text}." for name, text in differences.items()),
    ]
