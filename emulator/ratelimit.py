"""The rate limits the emulators play: a per-sender token bucket (a Twilio number's sending rate) and
a per-account request window (SendGrid's Activity API, Infobip's logs: N requests a minute)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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


WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class WindowVerdict:
    """The rate limiter's answer to one request, and what the X-RateLimit headers say."""

    admitted: bool
    limit: int
    remaining: int
    reset_at: float  # unix seconds

    def headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(math.ceil(self.reset_at)),
        }


class RequestWindow:
    """At most ``limit`` requests per fixed 60 s window; the window opens at the first request after the
    previous one closed (so an idle client always starts with the full allowance)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._opened_at = 0.0
        self._used = 0

    def admit(self, now: float) -> WindowVerdict | None:
        """Count one request at unix time ``now``; None when there is no limit."""
        if self.limit is None:
            return None
        if now >= self._opened_at + WINDOW_SECONDS:
            self._opened_at, self._used = now, 0
        admitted = self._used < self.limit
        if admitted:
            self._used += 1
        return WindowVerdict(admitted, self.limit, self.limit - self._used, self._opened_at + WINDOW_SECONDS)

    def exhausted(self, now: float) -> WindowVerdict | None:
        """What a 429 that did not come from the window (an armed fault) reports: nothing left until it closes."""
        if self.limit is None:
            return None
        closes = self._opened_at + WINDOW_SECONDS if now < self._opened_at + WINDOW_SECONDS else now + WINDOW_SECONDS
        return WindowVerdict(False, self.limit, 0, closes)

    def describe(self, now: float) -> dict[str, Any]:
        open_ = self.limit is not None and now < self._opened_at + WINDOW_SECONDS
        return {
            "used": self._used if open_ else 0,
            "resets_at": math.ceil(self._opened_at + WINDOW_SECONDS) if open_ else None,
        }
