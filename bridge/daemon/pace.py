"""The pace of a term's outbox reads, and when the records a read sent go out.

A read that returns a full batch is followed by the next at once: a backlog. One that returns fewer rows than it
asked for means the bridge has caught up, and the next read waits until `interval_s` after it started, so that a
trickle of commits is read a few rows per query rather than one query per commit. What that read sent is the
outbox's tail: no later row will join its records in a producer batch, so the wait sends them at once instead of
after linger.ms, which is worth waiting for only in a backlog.
"""

from __future__ import annotations

from bridge.kafka.publisher import Publisher


class ReadPace:
    """When the next read may start, and whether the last one left a tail to send at once."""

    __slots__ = ("_interval_s", "_tail_queued", "next_read_at")

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        #: Monotonic time before which the next read waits; 0 after a full read.
        self.next_read_at = 0.0
        self._tail_queued = False

    def read(self, started: float, caught_up: bool) -> None:
        """A read that started at `started` returned; `caught_up` when it found fewer rows than it asked for."""
        self.next_read_at = started + self._interval_s if caught_up else 0.0

    def sent(self, sent_any: bool) -> None:
        """The records of that read were handed to the producer (`sent_any`: at least one); they are the tail if it
        caught up."""
        self._tail_queued = sent_any and self.next_read_at > 0.0

    def wait(self, publisher: Publisher, timeout: float) -> None:
        """Serve delivery reports for up to `timeout` seconds; a tail the last read sent goes out at once."""
        if self._tail_queued:
            self._tail_queued = False
            publisher.send_queued(timeout)
        else:
            publisher.poll(timeout)
