"""A submit pacer: one worker process's provider calls, spaced at the route's pace.

The Temporal server's task-queue rate limit (HERALD_SUBMIT_RATE_LIMIT) bounds submits across
every worker, but after a quiet spell its matcher lets rate + 1 tasks out at once. A provider
whose own bucket holds L messages then answers 429 to the last of that burst whenever the pace is
above L - 1. This pacer lets ``burst`` calls go at once and spaces the rest 1/rate apart, so the
provider sees at most burst + rate x t calls in any t seconds from this worker. With the worker's
burst at half the pace, a bucket of L >= rate keeps about half its room for network jitter, and
the first calls after a quiet spell still leave without waiting.

It smooths; it does not bound the whole fleet (each worker paces itself at the same rate). The
server's limit stays the fleet-wide bound. Waits are short: a task the server released early
waits here at most about one second.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any


class Pacer:
    def __init__(
        self,
        per_second: float,
        *,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if per_second <= 0:
            raise ValueError("per_second: must be a positive number of calls per second")
        if burst < 1:
            raise ValueError("burst: must be at least 1 call")
        self._interval = 1.0 / per_second
        # A GCRA: the theoretical arrival time of the next call; up to `burst` calls may run ahead of it.
        self._tolerance = (burst - 1) * self._interval
        self._clock = clock
        self._sleep = sleep
        self._next = float("-inf")

    @classmethod
    def for_route(cls, per_second: float, **clock: Any) -> Pacer:
        """The submit route's pacer: half the pace may go at once (see the module's note)."""
        return cls(per_second, burst=max(1, math.ceil(per_second / 2)), **clock)

    async def wait(self) -> float:
        """Wait for this call's slot; returns the seconds waited. Slots are taken in call order."""
        now = self._clock()
        arrival = max(now, self._next)
        # Taken before sleeping: concurrent callers queue behind each other, one interval apart.
        self._next = arrival + self._interval
        delay = max(0.0, arrival - self._tolerance - now)
        if delay > 0:
            await self._sleep(delay)
        return delay

    async def wait_at_most(self, limit: float) -> float | None:
        """Like ``wait``, unless this call's slot is more than `limit` seconds away: then None, and
        no slot is taken (a caller that must answer within its own deadline says "not now")."""
        now = self._clock()
        arrival = max(now, self._next)
        if arrival - self._tolerance - now > limit:
            return None
        return await self.wait()

    def hold_for(self, seconds: float) -> None:
        """No call before `seconds` from now (the provider said when its limit resets)."""
        self._next = max(self._next, self._clock() + seconds)
