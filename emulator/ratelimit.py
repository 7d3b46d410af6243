"""Per-sender token bucket, like the per-number sending limits a real account has."""

from __future__ import annotations

import math

# Idle senders whose bucket is full again carry no information; forget them past
# this many so a test that rotates senders cannot grow memory without bound.
_MAX_TRACKED_SENDERS = 10_000


class SenderRateLimiter:
    """Allows ``rate`` messages per second per sender, with a burst of ``max(1, rate)``."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._capacity = max(1.0, rate)
        self._buckets: dict[str, tuple[float, float]] = {}  # sender -> (tokens, at monotonic time)

    @property
    def enabled(self) -> bool:
        return self._rate > 0

    def try_take(self, sender: str, now: float) -> int | None:
        """Take one token for ``sender`` at monotonic time ``now``.

        Returns:
            None when the message may go, else the whole seconds until it may (Retry-After).
        """
        if not self.enabled:
            return None
        tokens, at = self._buckets.get(sender, (self._capacity, now))
        tokens = min(self._capacity, tokens + (now - at) * self._rate)
        if tokens >= 1.0:
            self._remember(sender, tokens - 1.0, now)
            return None
        self._remember(sender, tokens, now)
        return max(1, math.ceil((1.0 - tokens) / self._rate))

    def clear(self) -> None:
        self._buckets.clear()

    def _remember(self, sender: str, tokens: float, now: float) -> None:
        self._buckets[sender] = (tokens, now)
        if len(self._buckets) > _MAX_TRACKED_SENDERS:
            refill = self._capacity / self._rate
            self._buckets = {key: value for key, value in self._buckets.items() if now - value[1] < refill}
