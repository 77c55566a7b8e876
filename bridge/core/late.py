"""Holes the bridge settled, remembered for a while, so that a row appearing in one later is found.

Under the hole rule a settled hole is final: its writer ended without the row. A row can still appear
there if the rule's premises were broken behind the bridge's back (a row inserted with an explicit
seq, a writer that bypassed the seq path). Such a row is published late rather than lost: the bridge
looks for rows in its recently settled holes, counts each one it finds, and rewinds to just before
it. Memory is bounded: the most recent `keep` holes are remembered, older ones are not checked.
"""

from __future__ import annotations

from collections import deque

from bridge.core.holes import SeqRange


class SettledHoles:
    """The most recent holes settled, oldest first, at most `keep` of them."""

    def __init__(self, keep: int = 256) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self._holes: deque[SeqRange] = deque(maxlen=keep)

    def add(self, hole: SeqRange) -> None:
        self._holes.append(hole)

    def recent(self) -> tuple[SeqRange, ...]:
        return tuple(self._holes)

    def forget_from(self, seq: int) -> None:
        """Drop what reaches `seq` or beyond: the bridge is about to read from `seq` again and will
        settle those holes (or deliver their rows) anew."""
        kept = [hole if hole.last < seq else SeqRange(hole.first, seq - 1)
                for hole in self._holes if hole.first < seq]
        self._holes.clear()
        self._holes.extend(kept)
