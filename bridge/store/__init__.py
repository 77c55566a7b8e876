"""The outbox store: reading `domain_events` in seq order without ever skipping a late commit.

- `holes`: the horizon rule as pure logic (`HoleTracker`, `Horizon`, `SeqRange`), no I/O;
- `postgres`: the snapshot-horizon read (`read_visible`, `poll`) and `horizon_holders`;
- `rows`: `OutboxRow` and the plain seq-ordered read (`select_after`) that SQLite can tail safely;
- `failures`: driver errors translated into `StoreError` / `TransientStoreError`.

Writing events is `bridge.writer`; the tables are `bridge.schema`; migrations are `bridge.migrate`.
"""

from bridge.store.holes import Advance, HoleTracker, Horizon, SeqRange
from bridge.store.rows import OutboxRow, select_after

__all__ = ["Advance", "HoleTracker", "Horizon", "OutboxRow", "SeqRange", "select_after"]
