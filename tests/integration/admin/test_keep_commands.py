"""`outbox-bridge names [retire]` and `outbox-bridge dead-letters [list|resolve]` as an operator types them:
output, refusals (exit 5, nothing changed) and the audit rows. SQLite, no broker needed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from bridge.cli import main
from bridge.migrate import upgrade
from bridge.schema import bridge_replay_audit, domain_events
from bridge.store import dead_letters
from bridge.store.dead_letters import DeadLetter
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore

pytestmark = pytest.mark.integration


@pytest.fixture()
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(domain_events), [
            {"event_id": f"e-{n}", "aggregate_type": "order", "aggregate_id": "o-1", "event_type": "Placed",
             "payload": "{}"} for n in range(1, 11)])
        dead_letters.record(conn, "a", [DeadLetter(7, "e-7", "order", "o-1", "record is too large", "outbox.dlq.a",
                                                   5000, True)], datetime.now(UTC))
    OffsetStore(engine, "a").set_watermark(10)
    OffsetStore(engine, "b").set_watermark(4)
    engine.dispose()
    return url


def _audit(url: str, mode: str) -> list[dict[str, object]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(bridge_replay_audit).where(bridge_replay_audit.c.mode == mode))
                .mappings()]
    engine.dispose()
    return rows


def test_names_lists_every_name_the_slowest_first_and_retire_is_audited(url: str, capsys) -> None:
    assert main(["names", "--db-url", url, "--bridge-name", "a", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [n["bridge_name"] for n in listed] == ["b", "a"]
    assert listed[0]["holds_retention_back"] and listed[0]["lag_events"] == 6 and listed[0]["not_led_for_long"]
    assert not listed[1]["holds_retention_back"]

    assert main(["names", "--db-url", url, "retire", "b", "--reason", "moved to the new cluster", "--yes"]) == 0
    [row] = _audit(url, "retire")
    assert row["bridge_name"] == "b" and row["reason"] == "moved to the new cluster" and row["from_seq"] == 4
    assert main(["names", "--db-url", url, "retire", "b", "--reason", "again", "--yes"]) == 5
    assert "already retired" in capsys.readouterr().err
    assert main(["names", "--db-url", url, "retire", "nobody", "--reason", "x", "--yes"]) == 5
    assert "no bridge name 'nobody'" in capsys.readouterr().err


def test_dead_letters_list_and_resolve_with_a_reason(url: str, capsys) -> None:
    assert main(["dead-letters", "--db-url", url, "--bridge-name", "a", "--json"]) == 0
    [letter] = json.loads(capsys.readouterr().out)
    assert (letter["seq"], letter["payload_truncated"], letter["status"]) == (7, True, "open")

    with pytest.raises(SystemExit) as usage:
        main(["dead-letters", "--db-url", url, "--bridge-name", "a", "resolve", "7", "--yes"])
    assert usage.value.code == 2 and "--reason" in capsys.readouterr().err, "--reason is required"
    assert main(["dead-letters", "--db-url", url, "--bridge-name", "a", "resolve", "8", "--reason", "x",
                 "--yes"]) == 5
    assert "no open dead letter at seq 8" in capsys.readouterr().err
    assert main(["dead-letters", "--db-url", url, "--bridge-name", "a", "resolve", "7", "--reason",
                 "repaired in the ERP", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resolved"] == [7]
    [row] = _audit(url, "resolve")
    assert row["bridge_name"] == "a" and row["from_seq"] == 7 and row["reason"] == "repaired in the ERP"
    assert main(["dead-letters", "--db-url", url, "--bridge-name", "a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
