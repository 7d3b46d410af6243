"""The drainer: re-signals inbox rows that have no verdict yet, with growing delays.

A report can beat its own attempt row, a signal can fail while Temporal is away,
a receipt server can die between its 2xx and its signal: in every case the row
is in the inbox, and this loop keeps offering it until the workflow decides.
"""

from __future__ import annotations

import asyncio
import logging

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.ledger import store
from herald.receipts.delivery import StoredReport, deliver

log = logging.getLogger("herald.receipts.drainer")

# Reports younger than this are still on their first, direct delivery.
FIRST_DELIVERY_GRACE_SECONDS = 1.0
BATCH = 200


async def drain_once(pool: AsyncConnectionPool, client: Client) -> int:
    """Offer every due, undecided report once; returns how many were offered."""
    rows = await store.undecided_reports(pool, older_than_seconds=FIRST_DELIVERY_GRACE_SECONDS, limit=BATCH)
    for row in rows:
        await deliver(pool, client, StoredReport(row))
    return len(rows)


async def run_drainer(pool: AsyncConnectionPool, client: Client, interval_seconds: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await drain_once(pool, client)
        except Exception:  # the loop must outlive a database or Temporal outage
            log.exception("drainer pass failed; retrying in %.1fs", interval_seconds)
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_seconds)
        except TimeoutError:
            pass
