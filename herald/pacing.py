"""A submit pacer: evenly spaced provider calls from one worker process.

The Temporal server's task-queue rate limit (HERALD_SUBMIT_RATE_LIMIT) bounds submits across
every worker, but after a quiet spell its matcher lets rate + 1 tasks out at once. A provider
whose own bucket holds L messages then answers 429 to the last of a burst whenever the pace is
above L - 1. This pacer spaces the calls one worker makes to at least 1/rate seconds apart
(a burst of one), so the provider sees at most 1 + rate x t calls in any t seconds from this
worker and its bucket stays full: the pace can sit just under L with no 429.

It smooths; it does not bound the whole fleet (each worker paces itself at the same rate). The
server's limit stays the fleet-wide bound. Waits are short: a task the server released early
waits here at most (rate + 1) / rate seconds, about one second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class Pacer:
    def __init__(
        self,
        per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if per_second <= 0:
            raise ValueError("per_second: must be a positive number of calls per second")
        self._interval = 1.0 / per_second
        self._clock = clock
        self._sleep = sleep
        self._next = float("-inf")  # the earliest time the next call may go

    async def wait(self) -> float:
        """Wait for this call's slot; returns the seconds waited. Slots are taken in call order."""
        now = self._clock()
        slot = max(now, self._next)
        # Taken before sleeping: concurrent callers queue behind each other, one interval apart.
        self._next = slot + self._interval
        delay = slot - now
        if delay > 0:
            await self._sleep(delay)
        return delay
