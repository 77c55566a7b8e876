"""A replay that builds a table from scratch must start at the earliest offset, unless the operator means otherwise.

A table built from a later starting point holds only what the events from that point give: the replay's
switch-over (or `--in-place --rebuild`) then drops from the live table everything earlier events put
there. Every kind keeps state from earlier events, so such a replay is refused unless the operator says
explicitly that a table of only the later events is what they want (`--drop-earlier-state`). Re-applying
events onto the live table (`--in-place` without `--rebuild`) keeps the earlier state and needs no flag.
"""

from __future__ import annotations

from typing import Final

from projections.declaration import Projection
from projections.errors import RefusedError

FLAG: Final = "--drop-earlier-state"


def refuse_partial_rebuild(
    projection: Projection, start_kind: str, spec: str, *, in_place: bool, rebuild: bool, allowed: bool
) -> None:
    """Raise RefusedError when the replay would rebuild the table from a start other than `earliest`.

    `start_kind` is the kind of starting point `starting_point.parse_from_offset` found in `spec`.
    """
    builds_from_scratch = rebuild if in_place else True
    if start_kind == "earliest" or not builds_from_scratch or allowed:
        return
    kind, name = projection.kind, projection.name
    mode = "--in-place --rebuild" if in_place else "a replay into a new table"
    keep = (
        f"drop --rebuild (the replay then re-applies the events from {spec} onto the live table)"
        if in_place
        else f"stop the live instance and replay with --in-place (it re-applies the events from {spec} onto "
        "the live table and keeps what came before)"
    )
    raise RefusedError(
        f"projection {name} ({kind.name}): {mode} starting at {spec} would hold only what follows it, so the "
        f"live table would lose {kind.lost_by_a_later_start}. To re-apply events, {keep}; to rebuild, use "
        f"--from-offset earliest; if a table of only what follows {spec} is really meant, add {FLAG}"
    )
