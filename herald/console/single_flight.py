"""One computation at a time, its result shared: the routes page's whole-ledger report, read at most once per FRESH_FOR.

The report costs seconds at 100,000 intents (bench/RESULTS-console.md) and reads the whole ledger;
two operators with the page open, each reloading, would run it twice at once and double the load on
the database the workers write to. So the console keeps the last result: a reader within
`fresh_for` seconds of it gets it as it was (the page says when it was computed, and in how long),
a reader after that starts one computation, and readers arriving while it runs wait for that one
instead of starting their own. A computation that fails is not kept: its waiters each get the
error (a 503 page), and the next reader tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")

# Long enough that operators reloading together share one reading, short enough that a page an
# operator reloads after acting is at most this old.
FRESH_FOR = 15.0


class Computed(BaseModel, Generic[T]):
    """A result, when its computation began (what it read is as of then) and how long it took."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    value: T
    at: datetime
    seconds: float


class SingleFlight(Generic[T]):
    """The last result of `compute` while it is fresh; otherwise one computation, whoever asks."""

    def __init__(self, compute: Callable[[], Awaitable[T]], fresh_for: float = FRESH_FOR) -> None:
        self._compute = compute
        self._fresh_for = fresh_for
        self._last: Computed[T] | None = None
        self._finished_at = 0.0  # monotonic, of self._last
        self._running: asyncio.Future[Computed[T]] | None = None

    async def get(self) -> Computed[T]:
        if self._last is not None and time.monotonic() - self._finished_at < self._fresh_for:
            return self._last
        if self._running is None:
            self._running = asyncio.ensure_future(self._run())
            self._running.add_done_callback(_retrieved)
        # Shielded: a reader that goes away (a closed tab) does not cancel the others' computation.
        return await asyncio.shield(self._running)

    async def _run(self) -> Computed[T]:
        started, began = time.monotonic(), datetime.now(UTC)
        try:
            value = await self._compute()
        finally:
            self._running = None
        finished = time.monotonic()
        self._last = Computed(value=value, at=began, seconds=finished - started)
        self._finished_at = finished
        return self._last


def _retrieved(done: asyncio.Future[Any]) -> None:
    # Every reader may have gone before a computation failed: its error is read here, so asyncio does
    # not log it as never retrieved (the readers that stayed got it as their 503).
    if not done.cancelled():
        done.exception()
