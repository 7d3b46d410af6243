"""The drainer: re-signals inbox rows that have no verdict yet, with growing delays.

A report can beat its own attempt row, a signal can fail while Temporal is away,
a receipt server can die between its 2xx and its signal: in every case the row
is in the inbox, and this loop keeps offering it until the workflow decides.
"""

from __future__ import annotations

import asyncio
import logging
from itertools import groupby

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.ledger import store
from herald.receipts.delivery import VERDICT_GRACE_SECONDS, StoredReport, deliver

log = logging.getLogger("herald.receipts.drainer")

BATCH = 200


async def drain_once(pool: AsyncConnectionPool, client: Client, *, grace: float = VERDICT_GRACE_SECONDS) -> int:
    """Offer every due, undecided report once, one signal per attempt; returns how many were offered.

    Rows the direct delivery could not signal carry a redelivery schedule and are due on it;
    rows without one are offered once they are older than `grace`.
    """
    rows = await store.undecided_reports(pool, older_than_seconds=grace, limit=BATCH)
    reports = sorted((StoredReport(row) for row in rows), key=lambda r: (r.attempt_ref or "", r.inbox_id))
    for _, group in groupby(reports, key=lambda r: r.attempt_ref):
        await deliver(pool, client, list(group))
    return len(rows)


async def run_drainer(
    pool: AsyncConnectionPool, client: Client, interval_seconds: float, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        try:
            await drain_once(pool, client)
        except Exception:  # the loop must outlive a database or Temporal outage
            log.exception("drainer pass failed; retrying in %.1fs", interval_seconds)
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_seconds)
        except TimeoutError:
            pass
