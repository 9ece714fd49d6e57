"""Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter").

The SDK's clients retry the API with it, and the edge relay retries its upstream: one policy, so
a fleet behind an edge backs off as one behind the API does.
"""

from __future__ import annotations

import random

__all__ = ["DEFAULT_BACKOFF_CAP", "Backoff"]

DEFAULT_BACKOFF_CAP = 5.0
"""Seconds. A client sees the API again within ~5 s of its return (at 30 s it took up to 16 s
after a 24 s outage); full jitter still spreads a fleet's retries over those 5 s."""


class Backoff:
    """`next()` is a delay drawn uniformly from [0, min(cap, base * 2**failures)).

    Full jitter spreads a fleet that lost the API at the same moment, so it does not come back in
    lockstep. `reset()` after a success.
    """

    def __init__(
        self,
        *,
        base: float = 0.5,
        cap: float = DEFAULT_BACKOFF_CAP,
        rng: random.Random | None = None,
    ) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"backoff needs 0 < base <= cap (got base={base}, cap={cap})")
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng or random.Random()

    def ceiling(self) -> float:
        """The upper bound of the next delay."""
        # min() before the power would overflow: 2**1100 is fine for int, not for float.
        return min(self.cap, self.base * 2.0 ** min(self.failures, 64))

    def next(self) -> float:
        """The delay before the next attempt; counts one more failure."""
        delay = self._rng.uniform(0, self.ceiling())
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0
