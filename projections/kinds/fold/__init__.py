"""`fold`: a user function folds each key's events, in seq order, into a state stored one row per key.

The result is the fold of the key's distinct events in seq order, however they are batched and in
whatever order they arrive. Each batch first keeps its events in an event store (`<lake>/_staging/<name>`,
one row per key and seq). Events newer than the key's stored `seq` (the last one folded) are folded onto
the stored state; when an event older than that arrives (a key spanning partitions or topics, a re-send
after a producer rebuild), the key is folded again over its kept events, from its base (below) or None.
The function gets the current state (None before the first event or after a deletion) and an `Event`, and
returns the new state as a dict of the declared state fields, or None to delete the row (a tombstone keeps
its seq). The function must therefore be deterministic: a re-fold calls it again on events it has seen.

The event store is kept within the deduplication horizon (`horizon`, 7 days of event time by default; see
projections/horizon.py). Every `horizon.prune_every` batches, each key's kept events behind the horizon's
floor are compacted, in one Delta commit, into one base row: the last of them, holding the state folded up
to it (None too). Only a seq-prefix is compacted, up to the key's first event still inside the horizon, so
an event time older than seq order says keeps its event. An event behind the floor is refused by the
applier, like for the other kinds; an event inside it but at or below its key's base seq (possible with a
time horizon) can no longer be folded in seq order and is refused by the fold, counted with them.

`folding` holds the folding itself (plain Python, run on the executors), `event_store` the kept events and
their compaction, `kind` the `Fold` kind that applies a batch with them.
"""

from projections.kinds.fold.folding import Event, FoldFunction, State
from projections.kinds.fold.kind import Fold

__all__ = ["Event", "Fold", "FoldFunction", "State"]
