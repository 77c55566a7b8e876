"""The reader and lease-store contracts (tests/contracts/) on the in-memory outbox and lease store of
`bridge.store.testing`, which the daemon's unit tests stand on: they keep the promises the databases keep."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from bridge.store.lease import RewindRequest
from bridge.store.reader import OutboxReader
from bridge.store.testing import InMemoryLeaseStore, InMemoryOutbox
from tests.contracts.offsets import BRIDGE, OffsetStoreContract, RewindRequests, StoredLeases
from tests.contracts.reader import HorizonReaderContract, OutboxWriter, Transaction


class _Transaction:
    def __init__(self, outbox: InMemoryOutbox, seq: int) -> None:
        self._outbox = outbox
        self._seq = seq

    def commit(self) -> None:
        self._outbox.commit(self._seq)

    def rollback(self) -> None:
        self._outbox.rollback(self._seq)


class _Writer:
    def __init__(self, outbox: InMemoryOutbox) -> None:
        self._outbox = outbox

    def _begin(self, index: int) -> int:
        return self._outbox.begin(aggregate_id=f"a-{index % 3}", event_id=f"e-{index}")

    def write(self, count: int, start: int = 0) -> None:
        seqs = [self._begin(index) for index in range(start, start + count)]
        for seq in seqs:
            self._outbox.commit(seq)

    def delete(self, *seqs: int) -> None:
        self._outbox.delete(*seqs)

    def begin(self, index: int) -> Transaction:
        return _Transaction(self._outbox, self._begin(index))


class TestInMemoryReader(HorizonReaderContract):
    @pytest.fixture()
    def outbox(self) -> InMemoryOutbox:
        return InMemoryOutbox()

    @pytest.fixture()
    def writer(self, outbox: InMemoryOutbox) -> OutboxWriter:
        return _Writer(outbox)

    @pytest.fixture()
    def reader(self, outbox: InMemoryOutbox) -> Iterator[OutboxReader]:
        reader = outbox.reader()
        yield reader
        reader.close()


class _Rewinds:
    """Requests for `BRIDGE` go to the store under test; those for other names to stores of their own, as
    each in-memory store holds one bridge name."""

    def __init__(self, store: InMemoryLeaseStore) -> None:
        self._stores = {BRIDGE: store}
        self._filed: dict[int, RewindRequest] = {}

    def request(self, bridge_name: str, from_seq: int, status: str = "pending") -> int:
        store = self._stores.setdefault(bridge_name, InMemoryLeaseStore(bridge_name))
        request = store.request_rewind(from_seq, state=status)
        if bridge_name == BRIDGE:
            self._filed[request.id] = request
        return request.id

    def audit(self, request_id: int) -> tuple[str, datetime | None]:
        store, request = self._stores[BRIDGE], self._filed[request_id]
        return store.rewind_status(request), store.rewind_applied_at(request)


class TestInMemoryLeaseStore(OffsetStoreContract):
    @pytest.fixture()
    def in_memory(self) -> InMemoryLeaseStore:
        return InMemoryLeaseStore(BRIDGE)

    @pytest.fixture()
    def store(self, in_memory: InMemoryLeaseStore) -> StoredLeases:
        return in_memory

    @pytest.fixture()
    def rewinds(self, in_memory: InMemoryLeaseStore) -> RewindRequests:
        return _Rewinds(in_memory)
