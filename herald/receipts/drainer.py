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
from herald.receipts.delivery import StoredReport, deliver

log = logging.getLogger("herald.receipts.drainer")

BATCH = 200


async def drain_once(pool: AsyncConnectionPool, client: Client, *, first_delivery_grace: float = 1.0) -> int:
    """Offer every due, undecided report once, one signal per attempt; returns how many were offered.

    Reports younger than `first_delivery_grace` are still on their first, direct delivery
    (which may hold a non-final report briefly to send it with the final one).
    """
    rows = await store.undecided_reports(pool, older_than_seconds=first_delivery_grace, limit=BATCH)
    reports = sorted((StoredReport(row) for row in rows), key=lambda r: (r.attempt_ref or "", r.inbox_id))
    for _, group in groupby(reports, key=lambda r: r.attempt_ref):
        await deliver(pool, client, list(group))
    return len(rows)


async def run_drainer(
    pool: AsyncConnectionPool, client: Client, interval_seconds: float, stop: asyncio.Event, *, first_delivery_grace: float = 1.0
) -> None:
    while not stop.is_set():
        try:
            await drain_once(pool, client, first_delivery_grace=first_delivery_grace)
        except Exception:  # the loop must outlive a database or Temporal outage
            log.exception("drainer pass failed; retrying in %.1fs", interval_seconds)
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_seconds)
        except TimeoutError:
            pass
