"""Cleanup never shortens a rewind: it keeps every row a pending rewind will re-publish, and a rewind whose
rows cleanup deleted (before its request, or during it) is refused with nothing changed. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, insert, select, text

from bridge import replay
from bridge.config import BridgeConfig, load_config
from bridge.errors import RefusedError
from bridge.migrate import upgrade
from bridge.replay import ReplayRequest
from bridge.schema import bridge_replay_audit, domain_events
from bridge.store import maintenance
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore

pytestmark = pytest.mark.integration

EVENTS = 20
FROM_SEQ = 11
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BridgeConfig]:
    """An outbox of EVENTS old rows, all published (watermark EVENTS), and no bridge running."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'outbox.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(domain_events), [
            {"event_id": f"e-{i}", "aggregate_type": "order", "aggregate_id": "a-1", "event_type": "Placed",
             "payload": "{}", "occurred_at": LONG_AGO} for i in range(EVENTS)])
    OffsetStore(engine, "race").set_watermark(EVENTS)
    engine.dispose()
    yield load_config(flags={"db_url": url, "bridge_name": "race", "allow_single_broker": True,
                             "replication_factor": 1, "metrics_port": 0}, env={})


def _rewind_request() -> ReplayRequest:
    return ReplayRequest(from_seq=FROM_SEQ, to_seq=None, aggregate_type=None, event_type=None, mode="rewind",
                         topic=None, reason="test", dry_run=False)


def _seqs(config: BridgeConfig) -> list[int]:
    engine = make_engine(config.db_url.get_secret_value())
    with engine.connect() as conn:
        seqs = [int(seq) for seq in conn.execute(select(domain_events.c.seq).order_by(domain_events.c.seq)).scalars()]
    engine.dispose()
    return seqs


def _watermark_and_pending(config: BridgeConfig) -> tuple[int, int]:
    engine = make_engine(config.db_url.get_secret_value())
    row = OffsetStore(engine, "race").read()
    with engine.connect() as conn:
        pending = conn.execute(select(func.count()).where(bridge_replay_audit.c.status == "pending")).scalar()
    engine.dispose()
    assert row is not None
    return row.watermark, int(pending or 0)


def test_cleanup_keeps_every_row_a_pending_rewind_will_republish(config: BridgeConfig) -> None:
    # What `replay --mode rewind` leaves while it waits for the running leader to apply it.
    engine = make_engine(config.db_url.get_secret_value())
    with engine.begin() as conn:
        conn.execute(insert(bridge_replay_audit).values(
            bridge_name="race", mode="rewind", from_seq=FROM_SEQ, requested_by="test",
            requested_at=datetime.now(UTC), status="pending"))
    engine.dispose()

    result = maintenance.cleanup(config.database, timedelta(hours=1), dry_run=False, batch_size=3, show_progress=False)

    assert _seqs(config) == list(range(FROM_SEQ, EVENTS + 1)), "rows the rewind re-publishes were deleted"
    assert result["deleted"] == FROM_SEQ - 1 and result["kept_for_rewind_from"] == FROM_SEQ


def test_a_rewind_whose_rows_cleanup_deleted_after_its_first_check_is_refused_and_changes_nothing(
    config: BridgeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_replay = replay.plan_replay

    def plan_then_cleanup(config: BridgeConfig, request: ReplayRequest) -> dict[str, object]:
        plan = plan_replay(config, request)  # the rows are all there when the command looks, and then they are not
        maintenance.cleanup(config.database, timedelta(hours=1), dry_run=False, show_progress=False)
        return plan

    monkeypatch.setattr(replay, "plan_replay", plan_then_cleanup)
    with pytest.raises(RefusedError, match=f"below the oldest event still in the outbox .seq {EVENTS + 1}"):
        replay.rewind(config, _rewind_request())
    assert _watermark_and_pending(config) == (EVENTS, 0)


def test_a_rewind_requested_during_a_cleanup_batch_waits_for_it_and_sees_what_it_deleted(
    config: BridgeConfig,
) -> None:
    engine = create_engine(config.db_url.get_secret_value())
    outcome: list[object] = []

    def request_rewind() -> None:
        try:
            outcome.append(replay.rewind(config, _rewind_request()))
        except RefusedError as exc:
            outcome.append(exc)

    with engine.connect() as batch:
        # A cleanup batch in progress: it holds the offsets row (bridge.store.offsets.hold_offsets), found no
        # pending rewind, and deletes every published row; it has not committed yet.
        batch.execute(text("UPDATE bridge_offsets SET watermark = watermark WHERE bridge_name = 'race'"))
        batch.execute(text(f"DELETE FROM domain_events WHERE seq <= {EVENTS}"))
        requester = threading.Thread(target=request_rewind, daemon=True)
        requester.start()
        time.sleep(1.0)
        waited = requester.is_alive()
        batch.commit()
    requester.join(15)
    engine.dispose()

    assert waited, f"the rewind did not wait for the cleanup batch: {outcome}"
    assert len(outcome) == 1 and isinstance(outcome[0], RefusedError), outcome
    assert _watermark_and_pending(config) == (EVENTS, 0)
