"""The inbox retention's reading of the ledger's clock (the job itself: ``herald.jobs.retention``)."""

from __future__ import annotations

from datetime import UTC, datetime

from psycopg_pool import AsyncConnectionPool


async def ledger_now(pool: AsyncConnectionPool) -> datetime:
    """The ledger's clock: received_at was written with it and the floor is measured on it, so a
    period of exactly 7 days is not refused because this host's clock runs a little ahead."""
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT now()")
        row = await cursor.fetchone()
    assert row is not None  # SELECT now() always returns one row
    return row[0].astimezone(UTC)
