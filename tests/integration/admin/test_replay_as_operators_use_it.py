"""`outbox-bridge replay` as operators use it, against a real broker on SQLite and PostgreSQL: a range into a
topic of its own that does not exist yet (created with the bridge's safe settings, or refused before anything
is sent), by time, by aggregate id, and every attempt in `bridge_replay_audit` with its outcome."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from sqlalchemy import insert, select

from bridge.cli import main
from bridge.migrate import upgrade
from bridge.schema import bridge_replay_audit, domain_events
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from tests.support import keys_in_seq_order, read_topic, record_seq

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

EVENTS = 40
#: Event n occurred at T0 + n minutes; odd seqs are customers, even ones orders; aggregate ids cycle 0..3.
T0 = datetime(2026, 11, 26, 14, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = (f"sqlite:///{tmp_path / 'outbox.db'}" if request.param == "sqlite"
           else str(request.getfixturevalue("postgres_url")))
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(domain_events), [
            {"event_id": f"e-{uuid.uuid4().hex}", "aggregate_type": "customer" if n % 2 else "order",
             "aggregate_id": f"{'customer' if n % 2 else 'order'}-{n % 4}", "event_type": "Changed",
             "payload": json.dumps({"n": n}), "occurred_at": T0 + timedelta(minutes=n)}
            for n in range(1, EVENTS + 1)])
    OffsetStore(engine, "ops").set_watermark(EVENTS)  # all published by the live bridge
    engine.dispose()
    yield url


def _replay(capsys: pytest.CaptureFixture[str], url: str, bootstrap: str, *args: str,
            env: dict[str, str] | None = None) -> tuple[int, dict[str, object], str]:
    flags = ["--db-url", url, "--bootstrap-servers", bootstrap, "--bridge-name", "ops"]
    code = main(["replay", *flags, *args, "--json"])
    captured = capsys.readouterr()
    try:
        out = json.loads(captured.out) if captured.out.strip() else {}
    except ValueError:
        out = {}
    return code, out, captured.err


def _audit(url: str) -> list[dict[str, object]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(bridge_replay_audit).where(bridge_replay_audit.c.mode != "start")
                                              .order_by(bridge_replay_audit.c.id)).mappings()]
    engine.dispose()
    return rows


def _exists(bootstrap: str, topic: str) -> bool:
    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics


@pytest.fixture(autouse=True)
def _development_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_ALLOW_SINGLE_BROKER", "true")
    monkeypatch.setenv("BRIDGE_REPLICATION_FACTOR", "1")


def test_a_range_into_a_topic_that_does_not_exist_creates_it_and_delivers_everything(
    capsys, url, kafka_bootstrap
) -> None:
    topic = f"repair.{uuid.uuid4().hex[:8]}"
    args = ("--mode", "range", "--from-seq", "5", "--to-seq", "25", "--aggregate-type", "customer", "--topic", topic)
    code, plan, _ = _replay(capsys, url, kafka_bootstrap, *args, "--dry-run")
    assert code == 0 and plan["events"] == 11
    assert plan["topic_verdicts"] == {topic: "missing: created before sending, replication factor 1, "
                                             "min.insync.replicas 1"}
    assert not _exists(kafka_bootstrap, topic), "a dry run creates nothing"

    code, result, err = _replay(capsys, url, kafka_bootstrap, *args, "--reason", "feed the repair job", "--yes")
    assert code == 0, err
    assert result["delivered"] == 11
    records = read_topic(kafka_bootstrap, topic)
    assert sorted(record_seq(m) for m in records) == [n for n in range(5, 26) if n % 2]
    for key, seqs in keys_in_seq_order(records).items():
        assert seqs == sorted(seqs), f"{key!r} in seq order"
    [row] = _audit(url)
    assert (row["mode"], row["status"], row["from_seq"], row["to_seq"]) == ("range", "done", 5, 25)
    assert json.loads(str(row["filters_json"]))["topic"] == topic


def test_a_missing_topic_the_bridge_may_not_create_is_refused_before_anything_is_sent(
    capsys, url, kafka_bootstrap, monkeypatch
) -> None:
    monkeypatch.setenv("BRIDGE_ALLOW_CREATE_TOPICS", "false")
    topic = f"repair.{uuid.uuid4().hex[:8]}"
    args = ("--mode", "range", "--from-seq", "1", "--to-seq", "10", "--topic", topic)
    code, plan, _ = _replay(capsys, url, kafka_bootstrap, *args, "--dry-run")
    assert code == 0 and "missing, and BRIDGE_ALLOW_CREATE_TOPICS is false: refused" in str(plan["topic_verdicts"])

    code, _, err = _replay(capsys, url, kafka_bootstrap, *args, "--reason", "try", "--yes")
    assert code == 2, err
    assert f"topic {topic} does not exist" in err and f"outbox-bridge topics ensure --topic {topic}" in err
    assert "retry" not in err
    assert not _exists(kafka_bootstrap, topic)
    [row] = _audit(url)
    assert row["status"] == "refused" and f"outbox-bridge topics ensure --topic {topic}" in str(row["reason"])


def test_by_time_a_rewind_says_which_seq_and_a_range_keeps_to_the_window(capsys, url, kafka_bootstrap) -> None:
    code, plan, _ = _replay(capsys, url, kafka_bootstrap, "--from-time", "2026-11-26T14:30:00Z", "--dry-run")
    assert code == 0 and plan["from_seq"] == 30
    assert plan["from_time_resolved"] == "2026-11-26T14:30:00+00:00 -> seq 30"
    # The same moment in another offset, and the projections' ts:<epoch ms> form.
    code, plan, _ = _replay(capsys, url, kafka_bootstrap, "--from-time", "2026-11-26T15:30:00+01:00", "--dry-run")
    assert plan["from_seq"] == 30
    code, plan, _ = _replay(capsys, url, kafka_bootstrap, "--from-time", f"ts:{int(T0.timestamp() * 1000) + 1}",
                            "--dry-run")
    assert plan["from_seq"] == 1

    code, _, err = _replay(capsys, url, kafka_bootstrap, "--from-time", "2026-11-26T14:30:00", "--dry-run")
    assert code == 5 and "has no UTC offset; write it as 2026-11-26T14:30:00Z" in err

    topic = f"window.{uuid.uuid4().hex[:8]}"
    code, _, err = _replay(capsys, url, kafka_bootstrap, "--mode", "range", "--from-time",
                                "2026-11-26T14:10:00Z", "--to-time", "2026-11-26T14:14:30Z", "--topic", topic,
                                "--reason", "a window", "--yes")
    assert code == 0, err
    assert sorted(record_seq(m) for m in read_topic(kafka_bootstrap, topic)) == [10, 11, 12, 13, 14]
    [row] = _audit(url)
    assert (row["from_seq"], row["to_seq"], row["status"]) == (10, 14, "done")


def test_by_aggregate_id_only_those_aggregates_are_sent_again(capsys, url, kafka_bootstrap) -> None:
    topic = f"orders.{uuid.uuid4().hex[:8]}"
    code, _, err = _replay(capsys, url, kafka_bootstrap, "--mode", "range", "--from-seq", "1", "--aggregate-id",
                                "order-2", "--aggregate-id", "customer-1", "--topic", topic, "--reason",
                                "fix a consumer", "--yes")
    assert code == 0, err
    records = read_topic(kafka_bootstrap, topic)
    assert {m.key() for m in records} == {b"order-2", b"customer-1"}
    assert sorted(record_seq(m) for m in records) == [n for n in range(1, EVENTS + 1) if n % 4 in (1, 2)]
    [row] = _audit(url)
    assert json.loads(str(row["filters_json"]))["aggregate_ids"] == ["order-2", "customer-1"]


def test_every_attempt_is_audited_with_its_outcome(capsys, url, kafka_bootstrap, topic_factory) -> None:
    # Refused: above the watermark.
    code, _, err = _replay(capsys, url, kafka_bootstrap, "--from-seq", "41", "--reason", "too far", "--yes")
    assert code == 5
    # Failed: a record its existing topic can never take (a 200-byte limit): no "retry", the row is named.
    small = topic_factory(name=f"small.{uuid.uuid4().hex[:8]}", partitions=1, config={"max.message.bytes": "200"})
    code, _, err = _replay(capsys, url, kafka_bootstrap, "--mode", "range", "--from-seq", "1", "--to-seq", "3",
                           "--topic", small, "--reason", "into a small topic", "--yes")
    assert code == 1 and "can never be sent as they are" in err and "retry" not in err
    # Done.
    code, _, err = _replay(capsys, url, kafka_bootstrap, "--mode", "range", "--from-seq", "1", "--to-seq", "3",
                           "--topic", f"fine.{uuid.uuid4().hex[:8]}", "--reason", "fine", "--yes")
    assert code == 0, err
    rows = _audit(url)
    assert [(r["mode"], r["status"]) for r in rows] == [("rewind", "refused"), ("range", "failed"),
                                                        ("range", "done")]
    assert "above the watermark 40" in str(rows[0]["reason"]) and "too far" in str(rows[0]["reason"])
    assert "can never be sent" in str(rows[1]["reason"])
