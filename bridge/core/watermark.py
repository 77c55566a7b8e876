"""The ack tracker: which events are in flight, and the low watermark that is safe to persist.

The tracker's position is the bridge's one cursor: the reader reads after it, and hands back every
seq in order, either as an event given to the producer (`track`) or as a hole the hole rule settled
(`settle`). The tracker refuses an unexplained gap, so no event can be skipped silently. Acks arrive
in any order. The watermark is the highest seq S such that every seq <= S is acknowledged or a
settled hole; a restart resumes at S + 1.
"""

from __future__ import annotations

from collections import deque

from bridge.core.holes import SeqRange
from bridge.errors import OutboxError


class TrackingError(OutboxError):
    """The daemon broke the tracker's contract (seq out of order, unexplained gap, unknown ack): a bug."""


class _InFlight:
    """One tracked event; `through` is the last seq it accounts for, including holes settled after it."""

    __slots__ = ("acked", "seq", "size", "through")

    def __init__(self, seq: int, size: int) -> None:
        self.seq = seq
        self.size = size
        self.through = seq
        self.acked = False


class AckTracker:
    """Tracks events between the watermark and the reader's position, and bounds that window.

    In flight means handed to the producer and not yet below the watermark: acknowledged events
    stay in the window until every earlier seq is acknowledged, because until then they are what a
    crash would duplicate. Each operation is amortised O(1), however large the holes.
    """

    def __init__(
        self,
        start_watermark: int,
        *,
        max_in_flight: int | None = None,
        max_in_flight_bytes: int | None = None,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if max_in_flight_bytes is not None and max_in_flight_bytes < 1:
            raise ValueError(f"max_in_flight_bytes must be >= 1, got {max_in_flight_bytes}")
        self._max_in_flight = max_in_flight
        self._max_in_flight_bytes = max_in_flight_bytes
        self._watermark = start_watermark
        self._generation = 0
        self._window: deque[_InFlight] = deque()
        self._by_seq: dict[int, _InFlight] = {}
        self._bytes = 0
        self._unacked = 0
        self._unacked_bytes = 0

    @property
    def watermark(self) -> int:
        """Highest seq S such that every seq <= S is acknowledged or a settled hole."""
        return self._watermark

    @property
    def position(self) -> int:
        """Highest seq accounted for (tracked or settled); the reader continues after it."""
        return self._window[-1].through if self._window else self._watermark

    @property
    def generation(self) -> int:
        """Bumped by `rewind` and `reset`; acks tagged with an older generation are ignored."""
        return self._generation

    @property
    def in_flight_count(self) -> int:
        """Events tracked above the watermark, acknowledged or not."""
        return len(self._window)

    @property
    def in_flight_bytes(self) -> int:
        """Total size of the events counted by `in_flight_count`."""
        return self._bytes

    @property
    def unacked_count(self) -> int:
        """Events handed to the producer and not yet acknowledged."""
        return self._unacked

    @property
    def unacked_bytes(self) -> int:
        """Total size of the events counted by `unacked_count`."""
        return self._unacked_bytes

    @property
    def oldest_unacked(self) -> int | None:
        """The seq holding the watermark back, or None when nothing is in flight."""
        # The acknowledged prefix is popped eagerly, so the head of the window is never acknowledged.
        return self._window[0].seq if self._window else None

    def has_room(self, size_bytes: int) -> bool:
        """Whether one more event of size_bytes fits the window; the reader pauses while it does not."""
        if self._max_in_flight is not None and len(self._window) >= self._max_in_flight:
            return False
        if self._max_in_flight_bytes is None or not self._window:
            # An event larger than the byte limit must still go out alone, or the bridge would stall on it.
            return True
        return self._bytes + size_bytes <= self._max_in_flight_bytes

    def settle(self, hole: SeqRange) -> int:
        """Account for `hole`, a gap the reader settled as permanent; it must start at `position` + 1.
        Return how many seqs it covers. O(1) however wide the range."""
        position = self.position
        if hole.first != position + 1 or hole.last < hole.first:
            raise TrackingError(
                f"settled hole {hole.first}..{hole.last} does not follow seq {position}, the last accounted"
                " for: only a gap the reader reported right after the cursor can be settled"
            )
        if self._window:
            self._window[-1].through = hole.last
        else:
            self._watermark = hole.last
        return hole.count

    def track(self, seq: int, size_bytes: int) -> None:
        """Record that event seq (size_bytes long) went to the producer; seq must be position + 1."""
        position = self.position
        if seq != position + 1:
            if seq <= position:
                raise TrackingError(f"seq {seq} tracked out of order: already accounted up to {position}")
            raise TrackingError(
                f"seq {seq} tracked but seqs {position + 1}..{seq - 1} were neither tracked nor settled"
                " as holes; the reader must settle a gap before tracking past it"
            )
        if size_bytes < 0:
            raise ValueError(f"size_bytes must be >= 0, got {size_bytes}")
        entry = _InFlight(seq, size_bytes)
        self._window.append(entry)
        self._by_seq[seq] = entry
        self._bytes += size_bytes
        self._unacked += 1
        self._unacked_bytes += size_bytes

    def ack(self, seq: int, generation: int | None = None) -> bool:
        """Record a successful delivery of seq; return whether it was news.

        A repeated ack, an ack at or below the watermark, or one tagged with an older generation is
        ignored and returns False. An ack for a seq above the watermark that is not in flight (a hole,
        or never tracked) raises TrackingError.
        """
        if generation is not None and generation != self._generation:
            return False
        entry = self._by_seq.get(seq)
        if entry is None:
            if seq <= self._watermark:
                return False
            raise TrackingError(f"ack for seq {seq}, which is not in flight (watermark {self._watermark})")
        if entry.acked:
            return False
        entry.acked = True
        self._unacked -= 1
        self._unacked_bytes -= entry.size
        self._advance()
        return True

    def rewind(self) -> int:
        """Drop everything in flight (the producer was rebuilt) and return the watermark to resume after."""
        return self.reset(self._watermark)

    def reset(self, to: int) -> int:
        """Drop everything in flight and set the watermark to `to` (lower for a replay); return it."""
        self._window.clear()
        self._by_seq.clear()
        self._bytes = self._unacked = self._unacked_bytes = 0
        self._watermark = to
        self._generation += 1
        return to

    def _advance(self) -> None:
        window = self._window
        while window and window[0].acked:
            entry = window.popleft()
            del self._by_seq[entry.seq]
            self._bytes -= entry.size
            self._watermark = entry.through
