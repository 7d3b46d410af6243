"""The drainer: re-signals inbox rows that have no verdict yet, with growing delays.

A report can beat its own attempt row, a signal can fail while Temporal is away,
a receipt server can die between its 2xx and its signal: in every case the row
is in the inbox, and this loop keeps offering it until the workflow decides.

Each pass reads only the inbox above a floor below which every row has its verdict
(`store.decided_floor`), so a pass costs the recent rows, not the inbox's whole history
(at 1,000,000 decided rows, the whole-inbox query took 360-510 ms a pass). Every
FULL_PASS_SECONDS a pass reads the whole inbox again, the safety net for a row the floor's
reasoning would miss (an inbox transaction held open longer than SETTLED_SECONDS).

While passes keep failing (the ledger away for an hour is 3,600 passes), the log gets one line
when the failures begin, one if their kind changes, and one with their count when a pass succeeds
again; a traceback only for an error that is not an outage (our bug), once per run of failures.
"""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import groupby

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.ledger import store
from herald.receipts.delivery import VERDICT_GRACE_SECONDS, StoredReport, deliver
from herald.receipts.routing import OPERATIONAL_ERRORS, error_kind

log = logging.getLogger("herald.receipts.drainer")

BATCH = 200
# A row received this long ago has long since committed or rolled back (an inbox write lasts
# seconds, bounded by the receipt server's store deadline): the floor may pass it once it is decided.
SETTLED_SECONDS = 600.0
FULL_PASS_SECONDS = 600.0


async def drain_once(
    pool: AsyncConnectionPool, client: Client, *, grace: float = VERDICT_GRACE_SECONDS, after_id: int = 0
) -> int:
    """Offer every due, undecided report above `after_id` once, one signal per attempt; returns
    how many were offered.

    Rows the direct delivery could not signal carry a redelivery schedule and are due on it;
    rows without one are offered once they are older than `grace`.
    """
    rows = await store.undecided_reports(pool, older_than_seconds=grace, limit=BATCH, after_id=after_id)
    reports = sorted((StoredReport(row) for row in rows), key=lambda r: (r.attempt_ref or "", r.inbox_id))
    for _, group in groupby(reports, key=lambda r: r.attempt_ref):
        await deliver(pool, client, list(group))
    return len(rows)


class DrainFloor:
    """Where the next pass starts reading the inbox: the floor, or 0 when a full pass is due."""

    def __init__(
        self, *, settled_seconds: float = SETTLED_SECONDS, full_pass_seconds: float = FULL_PASS_SECONDS
    ) -> None:
        self._settled = settled_seconds
        self._full_pass = full_pass_seconds
        self._floor = 0
        self._last_full = time.monotonic()

    def start(self) -> int:
        if time.monotonic() - self._last_full >= self._full_pass:
            self._last_full = time.monotonic()
            self._floor = 0
        return self._floor

    async def advance(self, pool: AsyncConnectionPool) -> None:
        self._floor = await store.decided_floor(pool, after_id=self._floor, settled_seconds=self._settled)


class FailedPasses:
    """A run of consecutive failed passes, logged as it begins, changes kind and ends, not once a pass."""

    def __init__(self, interval_seconds: float) -> None:
        self._interval = interval_seconds
        self.count = 0
        self._kind: str | None = None

    def failed(self, error: Exception) -> None:
        kind = error_kind(error)
        if kind != self._kind:
            since = f" after {self.count} failed with {self._kind}" if self.count else ""
            log.warning(
                "drainer passes fail with %s%s; retrying every %.1f s, logged again when this changes",
                kind, since, self._interval,
                exc_info=None if isinstance(error, OPERATIONAL_ERRORS) else error,
            )  # fmt: skip
            self._kind = kind
        self.count += 1

    def succeeded(self) -> None:
        if self.count:
            log.warning("drainer passes succeed again after %d failed (last: %s)", self.count, self._kind)
        self.count, self._kind = 0, None


async def run_drainer(pool: AsyncConnectionPool, client: Client, interval_seconds: float, stop: asyncio.Event) -> None:
    floor = DrainFloor()
    failures = FailedPasses(interval_seconds)
    while not stop.is_set():
        try:
            await drain_once(pool, client, after_id=floor.start())
            await floor.advance(pool)
        except Exception as error:  # noqa: BLE001 - the loop must outlive an outage; logged by FailedPasses
            failures.failed(error)
        else:
            failures.succeeded()
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_seconds)
        except TimeoutError:
            pass
