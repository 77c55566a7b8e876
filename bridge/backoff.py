"""Exponential backoff with jitter and a cap, for reconnecting to the database."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    """Delay before retry n (from 0): `min(cap_s, initial_s * multiplier**n)`, minus up to `jitter` of it.

    Jitter spreads reconnects of many bridges after a database restart; `jitter=1.0` is "full
    jitter", the default 0.5 keeps every delay at least half the exponential value so a
    restarting server is not hammered.
    """

    initial_s: float = 0.1
    cap_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not self.initial_s > 0:
            raise ValueError(f"initial_s must be > 0, got {self.initial_s}")
        if not self.cap_s >= self.initial_s:
            raise ValueError(f"cap_s must be >= initial_s ({self.initial_s}), got {self.cap_s}")
        if not self.multiplier >= 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within 0..1, got {self.jitter}")

    def ceiling(self, attempt: int) -> float:
        """The delay before retry `attempt` without jitter."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        if self.multiplier == 1:
            return self.initial_s
        # Compare exponents rather than computing multiplier**attempt, which overflows for large attempts.
        if attempt >= math.log(self.cap_s / self.initial_s, self.multiplier):
            return self.cap_s
        return min(self.cap_s, self.initial_s * self.multiplier**attempt)

    def delay(self, attempt: int, rand: Callable[[], float]) -> float:
        """The delay before retry `attempt`; rand returns a float in [0, 1), e.g. `random.Random().random`."""
        ceiling = self.ceiling(attempt)
        return ceiling * (1.0 - self.jitter * rand())


class Backoff:
    """Counts consecutive failures and hands out the next delay; `reset` after a success."""

    def __init__(self, policy: BackoffPolicy | None = None, rand: Callable[[], float] | None = None) -> None:
        self.policy = policy or BackoffPolicy()
        self._rand = rand or random.random
        self._attempt = 0

    @property
    def attempts(self) -> int:
        """Failures since the last reset."""
        return self._attempt

    def next_delay(self) -> float:
        """Record a failure and return how long to wait before the next try."""
        delay = self.policy.delay(self._attempt, self._rand)
        self._attempt += 1
        return delay

    def reset(self) -> None:
        """Forget past failures: the next delay is the initial one again."""
        self._attempt = 0
