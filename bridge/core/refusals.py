"""Records Kafka refuses for what they are, not for the state of the cluster: the refusal state machine.

The broker refuses a whole record batch when one record in it is too large or malformed, so a refusal
names suspects, not culprits. A suspect is sent again alone, once everything before it is acknowledged;
a record refused while alone is the culprit, and goes to the poison policy. Pure: the daemon feeds it
delivery reports and asks it what to do next.
"""

from __future__ import annotations


class Refusals:
    """Suspects to send alone, the one record out alone now, and culprits refused alone (with reasons)."""

    __slots__ = ("_culprits", "_suspects", "alone")

    def __init__(self) -> None:
        self._suspects: dict[int, str] = {}
        self._culprits: dict[int, str] = {}
        #: The seq sent alone and not yet acknowledged; nothing after it is sent meanwhile.
        self.alone: int | None = None

    def refused(self, seq: int, reason: str) -> None:
        """A delivery report refused `seq` for its content."""
        if seq == self.alone:
            self._culprits[seq] = reason
        else:
            self._suspects.setdefault(seq, reason)

    def delivered(self, seq: int) -> None:
        """A delivery report acknowledged `seq`."""
        if seq == self.alone:
            self.alone = None
            self._suspects.pop(seq, None)

    def must_go_alone(self, seq: int) -> bool:
        return seq in self._suspects

    def culprit(self, seq: int) -> str | None:
        """Why `seq` was refused alone (it is poison), once; None when it was not."""
        return self._culprits.pop(seq, None)

    def restart(self) -> None:
        """The producer was rebuilt: nothing is out alone any more (suspects and culprits are kept)."""
        self.alone = None

    @property
    def suspects(self) -> list[int]:
        return sorted(self._suspects)

    @property
    def culprits(self) -> list[int]:
        return sorted(self._culprits)
