"""The keys a micro-batch touches, as a predicate on the target table's key column.

Kinds that rebuild a key from what the table holds (`History`, `Fold`) read the stored rows of the touched
keys and MERGE on the key. With only a join against the batch, Spark and Delta read the whole table: a
join does not let Delta skip files. A literal predicate does: Delta skips every file whose key statistics
(min/max) cannot hold a touched key, for the read and for the MERGE (which prunes its target by the
conditions that name only the target). The predicate lists the keys while there are few, and otherwise
bounds them by their least and greatest. How much it skips depends on how the table's files spread over
keys: rows written together (one batch's keys) or compacted by key (`maintain`) keep files narrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# Above this many distinct keys a batch's predicate is a range: an IN list of thousands of literals costs
# more to plan than the files it could still skip.
KEY_LIST_LIMIT: Final = 1000


@dataclass(frozen=True)
class TouchedKeys:
    """The distinct keys of a batch (`listed`, when at most KEY_LIST_LIMIT), and their least and greatest."""

    listed: tuple[Any, ...] | None
    least: Any
    greatest: Any

    def on(self, column: Column) -> Column:
        """A predicate true for the rows of `column` a touched key may be in."""
        if self.listed is not None:
            return column.isin(list(self.listed))
        return column.between(F.lit(self.least), F.lit(self.greatest))


def touched_keys(events: DataFrame, key: str) -> TouchedKeys | None:
    """The keys of the batch's events, or None when it has none."""
    rows = events.select(key).distinct().limit(KEY_LIST_LIMIT + 1).collect()
    if not rows:
        return None
    if len(rows) <= KEY_LIST_LIMIT:
        listed = tuple(r[0] for r in rows)
        return TouchedKeys(listed, min(listed), max(listed))
    bounds = events.agg(F.min(key), F.max(key)).first()
    assert bounds is not None
    return TouchedKeys(None, bounds[0], bounds[1])


def target_key(key: str, alias: str = "t") -> Column:
    """The key column of the MERGE target (or any aliased side)."""
    return F.col(f"{alias}.`{key}`")
