"""The outbox store: reading `domain_events` in seq order without ever skipping a late commit.

- `reader`: the reader interface (`OutboxReader`, `Batch`) and the read loop every dialect shares;
- `sqlite`, `mssql`, `postgres` (a package): one per dialect, each a visible-rows read and its horizon;
- `table`: the outbox's lookups beside the read (head seq, oldest row after a seq, rows in settled holes);
- `holders`: `HorizonHolder`, the transaction that holds the horizon back, as every dialect names it;
- `engine`: the one place engines are built, and the reader for an engine's dialect;
- `offsets`: the persisted watermark and the lease that fences it (`OffsetStore`), and rewind requests;
- `rows`: the plain seq-ordered read of `OutboxRow`s (the row type is pure, in `bridge.core.records`);
- `failures`: driver errors translated into `StoreError` / `TransientStoreError`.

The hole rule itself is pure logic in `bridge.core.holes`. Writing events is `bridge.writer`; the
tables are `bridge.schema`; migrations are `bridge.migrate`.
"""

from bridge.core.records import OutboxRow
from bridge.store.engine import make_engine, make_reader
from bridge.store.reader import Batch, OutboxReader, VisibleRows
from bridge.store.rows import select_after

__all__ = ["Batch", "OutboxReader", "OutboxRow", "VisibleRows", "make_engine", "make_reader", "select_after"]
