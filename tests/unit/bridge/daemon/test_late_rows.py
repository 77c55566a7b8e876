"""A row that appears in a seq gap the bridge already settled (inserted with an explicit seq, behind the
seq path's back) is published late, not lost: the bridge counts it (`outbox_late_events_total`, which
the OutboxLateEvents alert watches), rewinds to just before it, and sends everything from there again,
so each key still reaches Kafka in seq order from that point on."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bridge.core.records import KafkaRecord
from bridge.migrate import upgrade
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from tests.support import running, start_unit_bridge

INSERT = ("INSERT INTO domain_events ({seq}event_id, aggregate_type, aggregate_id, event_type, payload) "
          "VALUES ({value}:e, 'order', :a, 'Placed', '{{}}')")


def _wait(predicate: object, what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_row_inserted_into_a_settled_hole_is_counted_and_published_by_a_rewind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(INSERT.format(seq="", value="")), [{"e": f"e-{i}", "a": f"a-{i % 2}"} for i in range(1, 11)])
        conn.execute(text("DELETE FROM domain_events WHERE seq = 5"))  # a gap: settled at once on SQLite
    delivered: list[KafkaRecord] = []
    with running(start_unit_bridge(url, "late", delivered, persist_interval_s=0.05)) as bridge:
        daemon = bridge.daemon
        _wait(lambda: daemon.tracker is not None and daemon.tracker.watermark == 10, "the first pass")
        assert [r.seq for r in delivered] == [1, 2, 3, 4, 6, 7, 8, 9, 10]
        assert daemon.holes_settled == 1
        with engine.begin() as conn:
            conn.execute(text(INSERT.format(seq="seq, ", value="5, ")), {"e": "late-5", "a": "a-1"})
        _wait(lambda: 5 in [r.seq for r in delivered], "the late row to be published")
        _wait(lambda: [r.seq for r in delivered][-6:] == [5, 6, 7, 8, 9, 10], "everything after it again")
        assert daemon.metrics.late_events._value.get() == 1
        _wait(lambda: daemon.tracker is not None and daemon.tracker.watermark == 10, "the watermark")
    store_engine = make_engine(url)
    stored = OffsetStore(store_engine, "late").read()
    store_engine.dispose()
    engine.dispose()
    assert stored is not None and stored.watermark == 10
    late = [r for r in delivered if r.seq == 5]
    assert len(late) == 1 and dict(late[0].headers)["event_id"] == b"late-5"
