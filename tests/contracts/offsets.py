"""The lease and offset store contract: every `LeaseStore` fences the watermark by epoch, moves it only
forward, measures leases by one clock (on a database, the database's), and lowers the watermark for a
rewind only under the current epoch, atomically with its audit row.

Subclass `OffsetStoreContract` per database and give it a `backend_url` fixture (a fresh database); a store
that is not `OffsetStore` on a database overrides the `store` and `rewinds` fixtures instead."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Protocol

import pytest
from sqlalchemy import insert, select
from sqlalchemy.engine import Engine

from bridge.errors import FencedError
from bridge.migrate import upgrade
from bridge.schema import bridge_replay_audit
from bridge.store.engine import make_engine
from bridge.store.lease import Lease, LeaseStore
from bridge.store.offsets import OffsetRow, OffsetStore

#: The bridge name of the store under test.
BRIDGE = "orders"


class StoredLeases(LeaseStore, Protocol):
    """A lease store that can say what it holds, as `OffsetStore.read` does."""

    def read(self) -> OffsetRow | None: ...


class RewindRequests(Protocol):
    """Rewind requests as `outbox-bridge replay --mode rewind` files them, and what became of them."""

    def request(self, bridge_name: str, from_seq: int, status: str = "pending") -> int:
        """File a request (with `status`, one an earlier leader already answered); return its id."""
        ...

    def audit(self, request_id: int) -> tuple[str, datetime | None]:
        """The status of a request for `BRIDGE`, and when it was applied."""
        ...


class AuditTable:
    """Rewind requests in `bridge_replay_audit`, where the operator's command writes them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def request(self, bridge_name: str, from_seq: int, status: str = "pending") -> int:
        with self._engine.begin() as conn:
            result = conn.execute(insert(bridge_replay_audit).values(
                bridge_name=bridge_name, mode="rewind", from_seq=from_seq, requested_by="test", reason="why",
                requested_at=datetime.now(UTC), status=status))
            return int(result.inserted_primary_key[0])

    def audit(self, request_id: int) -> tuple[str, datetime | None]:
        with self._engine.connect() as conn:
            row = conn.execute(select(bridge_replay_audit.c.status, bridge_replay_audit.c.applied_at)
                               .where(bridge_replay_audit.c.id == request_id)).one()
        return row.status, row.applied_at


def _take(store: LeaseStore, owner: str, lease_seconds: float) -> Lease:
    lease = store.try_acquire(owner, lease_seconds)
    assert lease is not None, f"{owner} should get the lease"
    return lease


class OffsetStoreContract:
    """Runs against the store of a subclass's `store` fixture: by default `OffsetStore` on the database a
    subclass's `backend_url` fixture names."""

    @pytest.fixture()
    def backend_url(self) -> str:
        raise NotImplementedError("a backend's subclass gives its database URL")

    @pytest.fixture()
    def engine(self, backend_url: str) -> Iterator[Engine]:
        upgrade(backend_url)
        engine = make_engine(backend_url)
        yield engine
        engine.dispose()

    @pytest.fixture()
    def store(self, engine: Engine) -> StoredLeases:
        return OffsetStore(engine, BRIDGE)

    @pytest.fixture()
    def rewinds(self, engine: Engine) -> RewindRequests:
        return AuditTable(engine)

    def test_a_paused_former_leader_with_a_stale_epoch_cannot_move_the_watermark(self, store: StoredLeases) -> None:
        old = _take(store, "a", lease_seconds=0.2)
        store.persist(old, 10, 0.2, {})
        time.sleep(0.3)  # "a" is paused past its lease
        new = _take(store, "b", lease_seconds=30)
        assert new.epoch == old.epoch + 1 and new.watermark == 10
        store.persist(new, 15, 30, {})

        with pytest.raises(FencedError, match="no longer current"):
            store.persist(old, 99, 0.2, {})
        row = store.read()
        assert row is not None
        assert (row.watermark, row.epoch, row.owner) == (15, new.epoch, "b")

    def test_a_live_lease_is_not_taken_and_a_released_one_is_taken_at_once(self, store: StoredLeases) -> None:
        leader = _take(store, "a", lease_seconds=30)
        assert store.try_acquire("b", 30) is None
        store.release(leader)
        assert _take(store, "b", 30).epoch == leader.epoch + 1

    def test_the_watermark_only_moves_forward_unless_lowering_is_asked_for(self, store: StoredLeases) -> None:
        lease = _take(store, "a", 30)
        store.persist(lease, 100, 30, {})
        store.persist(lease, 40, 30, {"note": "a bug would do this"})
        row = store.read()
        assert row is not None and row.watermark == 100
        assert row.status == {"note": "a bug would do this"}  # the lease and status are still written
        store.persist_rewound(lease, 40, 30, {})
        row = store.read()
        assert row is not None and row.watermark == 40

    def test_pending_rewinds_come_oldest_first_and_only_for_this_bridge(
        self, store: StoredLeases, rewinds: RewindRequests
    ) -> None:
        rewinds.request("payments", 3)
        rewinds.request(BRIDGE, 9, status="applied")
        first = rewinds.request(BRIDGE, 7)
        rewinds.request(BRIDGE, 5)
        pending = store.pending_rewind()
        assert pending is not None and (pending.id, pending.from_seq) == (first, 7)

    def test_a_rewind_lowers_the_watermark_and_marks_the_request_applied_together(
        self, store: StoredLeases, rewinds: RewindRequests
    ) -> None:
        lease = _take(store, "a", 30)
        store.persist(lease, 100, 30, {})
        request_id = rewinds.request(BRIDGE, 41)
        request = store.pending_rewind()
        assert request is not None

        assert store.apply_rewind(lease, request, 30) is True
        row = store.read()
        assert row is not None and row.watermark == 40 and row.epoch == lease.epoch
        status, applied_at = rewinds.audit(request_id)
        assert status == "applied" and applied_at is not None
        assert store.pending_rewind() is None

    def test_a_stale_leader_cannot_apply_a_rewind_and_the_request_stays_pending(
        self, store: StoredLeases, rewinds: RewindRequests
    ) -> None:
        old = _take(store, "a", 0.1)
        store.persist(old, 100, 0.1, {})
        time.sleep(0.2)
        _take(store, "b", 30)
        request_id = rewinds.request(BRIDGE, 41)
        request = store.pending_rewind()
        assert request is not None

        with pytest.raises(FencedError):
            store.apply_rewind(old, request, 30)
        row = store.read()
        assert row is not None and row.watermark == 100
        assert rewinds.audit(request_id) == ("pending", None)

    def test_a_request_no_longer_pending_is_not_applied(self, store: StoredLeases, rewinds: RewindRequests) -> None:
        lease = _take(store, "a", 30)
        store.persist(lease, 100, 30, {})
        rewinds.request(BRIDGE, 41)
        request = store.pending_rewind()
        assert request is not None
        store.refuse_rewind(request, "the operator gave up")

        assert store.apply_rewind(lease, request, 30) is False
        row = store.read()
        assert row is not None and row.watermark == 100
        assert rewinds.audit(request.id)[0] == "refused"
