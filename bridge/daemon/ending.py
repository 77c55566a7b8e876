"""How a leadership term ended: what `Term.run` returns to the loop instead of calling back into it."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.errors import PoisonEventError
from bridge.exits import EXIT_OK


@dataclass(frozen=True, slots=True)
class Ending:
    """How a term ended. `code` is the process's exit code, or None when the lease was lost and the loop
    stands by again; `why` says what happened; `halted` is the poison event a halt stopped before."""

    code: int | None
    why: str
    halted: PoisonEventError | None = None


STOPPED = Ending(EXIT_OK, "stopped")
