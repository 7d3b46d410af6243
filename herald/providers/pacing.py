"""A submit pacer: one worker process's provider calls, spaced at the route's pace, the most urgent first.

The Temporal server's task-queue rate limit (HERALD_SUBMIT_RATE_LIMIT) bounds submits across
every worker, but after a quiet spell its matcher lets rate + 1 tasks out at once. A provider
whose own bucket holds L messages then answers 429 to the last of that burst whenever the pace is
above L - 1. This pacer lets ``burst`` calls go at once and spaces the rest 1/rate apart, so the
provider sees at most burst + rate x t calls in any t seconds from this worker. With the worker's
burst at half the pace, a bucket of L >= rate keeps about half its room for network jitter, and
the first calls after a quiet spell still leave without waiting.

The calls waiting here were released by the server in priority order; they leave in that order
too. A slot goes, when it opens, to the waiter with the lowest priority key (Temporal's: 1 first),
and within one key to the fairness key (the tenant) whose share is furthest behind its weight
(stride scheduling: each call a tenant makes costs it 1/weight; the tenant that has spent least
goes next; a tenant that had nothing waiting starts level with the last one served, so it cannot
save up a burst), first come first served within one tenant. Served first come first served, an
urgent submit waited here behind the backlog's submits the server had released just before it:
0.50 s at the median in the bench's backlog pass at L = 10/s (the server and the pacer run at one
pace, so what a burst puts here stays), 0.05 s served by priority. A caller that names no priority
waits at the server's default key, first come first served with the others that name none.

Reordering must not make a wait long: a caller may name the time its slot must come by
(``leave_by``; the submit: three quarters of its activity's budget), and while serving by priority
could make any waiter miss it, the earliest deadline goes first. First come first served, a wait
was bounded by the worker's submit slots over the pace; served by priority alone, a backlog
submit could wait as long as more urgent ones kept coming, past its activity's budget, and its
late call could reach the provider after the not-found proof counted it absent.

It smooths; it does not bound the whole fleet (each worker paces itself at the same rate). The
server's limit stays the fleet-wide bound. Waits are short: a task the server released early
waits here at most about one second.

Errors: ``ValueError`` for a pace or burst that is not positive, naming the argument.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

# Temporal's key for a task without a priority (the middle of the default range 1..5).
DEFAULT_PRIORITY = 3
# Idle tenants' shares kept per priority key before those already overtaken are forgotten.
_AHEAD_KEPT = 64


@dataclass(eq=False)
class _Waiter:
    arrival: int
    leave_by: float  # its slot must come by then (inf: no deadline)
    future: asyncio.Future[None]


@dataclass
class _Tenant:
    """One fairness key's waiters at one priority key, and what it has spent of its share."""

    weight: float
    spent: float  # stride scheduling's pass: each call costs 1/weight
    waiters: deque[_Waiter] = field(default_factory=deque)  # in arrival order


@dataclass
class _Level:
    """The waiters at one priority key, by tenant."""

    tenants: dict[str, _Tenant] = field(default_factory=dict)
    served_at: float = 0.0  # the spent share of the tenant served last: where a tenant arriving starts
    # What tenants with nobody waiting now had spent beyond served_at: one that empties its queue and
    # comes back at once must not start level again (it would go first every time, the others never).
    ahead: dict[str, float] = field(default_factory=dict)


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
        self._levels: dict[int, _Level] = {}
        self._waiting = 0  # waiters not yet released (cancelled ones included until they are passed over)
        self._arrivals = itertools.count()
        # The one task that hands out slots while anyone waits; started by the first waiter.
        self._releaser: asyncio.Task[None] | None = None

    @classmethod
    def for_route(cls, per_second: float, **clock: Any) -> Pacer:
        """The submit route's pacer: half the pace may go at once (see the module's note)."""
        return cls(per_second, burst=max(1, math.ceil(per_second / 2)), **clock)

    async def wait(
        self, *, priority: int | None = None, tenant: str = "", weight: float = 1.0, leave_by: float | None = None
    ) -> float:
        """Wait for this call's slot; returns the seconds waited. `priority` is the call's Temporal
        priority key (1 goes first; None: the server's default), `tenant` its fairness key and
        `weight` that key's fairness weight; `leave_by` (on the pacer's clock) the time its slot
        must come by, which goes before priority (see ``_next_waiter``)."""
        now = self._clock()
        if self._waiting == 0 and self._open(now):
            self._take(now)
            return 0.0
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(next(self._arrivals), math.inf if leave_by is None else leave_by, future)
        self._enqueue(priority or DEFAULT_PRIORITY, tenant, weight if weight > 0 else 1.0, waiter)
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.create_task(self._release())
        await future  # cancelled with its caller: the releaser passes over it
        return max(0.0, self._clock() - now)

    async def wait_at_most(self, limit: float) -> float | None:
        """Like ``wait``, unless this call's slot is more than `limit` seconds away: then None, and
        no slot is taken (a caller that must answer within its own deadline says "not now").
        For callers that share one priority: the slot is estimated behind everyone waiting."""
        now = self._clock()
        slot = max(now, self._next) + self._waiting * self._interval
        if slot - self._tolerance - now > limit:
            return None
        return await self.wait()

    def hold_for(self, seconds: float) -> None:
        """No call before `seconds` from now (the provider said when its limit resets)."""
        self._next = max(self._next, self._clock() + seconds)

    def _open(self, now: float) -> bool:
        return now >= self._next - self._tolerance

    def _take(self, now: float) -> None:
        self._next = max(now, self._next) + self._interval

    def _enqueue(self, priority: int, tenant: str, weight: float, waiter: _Waiter) -> None:
        level = self._levels.setdefault(priority, _Level())
        queue = level.tenants.get(tenant)
        if queue is None:
            # Level with the last tenant served (an idle tenant has saved nothing up), or where it
            # stood if it has been served past that since.
            spent = max(level.ahead.pop(tenant, level.served_at), level.served_at)
            queue = level.tenants[tenant] = _Tenant(weight=weight, spent=spent)
        queue.weight = weight
        queue.waiters.append(waiter)
        self._waiting += 1

    def _next_waiter(self, now: float) -> asyncio.Future[None] | None:
        """Take the waiter whose turn it is off the queue: lowest priority key, then the tenant that
        has spent least of its share (the earlier arrival on a tie), then arrival; unless that order
        could make a waiter miss its `leave_by`: then the earliest deadline first.

        Reordering by priority must not turn a short wait into a long one: the submit's own budget
        and the not-found proof (herald.core.delivery_policy's in-flight bound) count on a submit
        reaching the provider soon after it left the server's queue. Served by deadline, k waiters
        whose slots come one interval apart all make theirs whenever that can be done at all."""
        self._drop_gone()
        if not self._levels:
            return None
        waiters = [(w, key, name) for key, level in self._levels.items()
                   for name, t in level.tenants.items() for w in t.waiters]  # fmt: skip
        by_deadline = sorted(waiters, key=lambda item: (item[0].leave_by, item[0].arrival))
        if any(w.leave_by - now < k * self._interval for k, (w, _, _) in enumerate(by_deadline, 1)):
            waiter, key, name = by_deadline[0]
        else:
            key = min(self._levels)
            name, tenant = min(self._levels[key].tenants.items(), key=lambda i: (i[1].spent, i[1].waiters[0].arrival))
            waiter = tenant.waiters[0]
        level = self._levels[key]
        tenant = level.tenants[name]
        tenant.waiters.remove(waiter)
        self._waiting -= 1
        level.served_at = tenant.spent
        tenant.spent += 1.0 / tenant.weight
        if not tenant.waiters:
            del level.tenants[name]
            level.ahead[name] = tenant.spent
        if len(level.ahead) > _AHEAD_KEPT:
            level.ahead = {n: spent for n, spent in level.ahead.items() if spent > level.served_at}
        if not level.tenants:
            del self._levels[key]
        return waiter.future

    def _drop_gone(self) -> None:
        """Forget the waiters whose callers gave up waiting (cancelled): their slots go to the next."""
        for key, level in list(self._levels.items()):
            for name, tenant in list(level.tenants.items()):
                kept = deque(w for w in tenant.waiters if not w.future.done())
                self._waiting -= len(tenant.waiters) - len(kept)
                tenant.waiters = kept
                if not kept:
                    del level.tenants[name]
                    level.ahead[name] = tenant.spent
            if not level.tenants:
                del self._levels[key]

    async def _release(self) -> None:
        """Hand out slots as they open, each to the waiter whose turn it is then: one that arrived
        during the wait may go ahead of those that were waiting."""
        while self._waiting:
            now = self._clock()
            if not self._open(now):
                # Checked again on waking: hold_for may have moved the next slot meanwhile.
                await self._sleep(self._next - self._tolerance - now)
                continue
            future = self._next_waiter(now)
            if future is None:
                return
            # The slot is the schedule's, not the wake's: a releaser woken late (a busy event loop)
            # must not push every later slot back by its lateness, as the waiters' own sleeps never did.
            self._take(min(now, self._next))
            future.set_result(None)
