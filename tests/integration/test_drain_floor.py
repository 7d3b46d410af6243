"""The drainer's floor, against a fresh ledger database on the session's real PostgreSQL.

A pass reads only the inbox above a floor below which every row has its verdict and was received
long enough ago that nothing can still appear there; a periodic full pass reads everything again.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from herald.ledger import store
from herald.ledger.migrate import apply_migrations
from herald.ledger.store import open_pool
from herald.receipts.drainer import DrainFloor
from tests.stack import create_database

SETTLED = 600.0


@pytest.fixture(scope="module")
async def ledger(stack: Any) -> AsyncIterator[AsyncConnectionPool]:
    """A ledger of its own: the session's drainer and other tests' rows stay out of these counts."""
    url = await create_database(stack.database_url, "floor")
    await apply_migrations(url)
    async with open_pool(url, max_size=2) as pool:
        yield pool


async def _report(pool: AsyncConnectionPool, *, age: timedelta, decided: bool, row_id: int | None = None) -> int:
    sid = f"SM{secrets.token_hex(16)}"
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """INSERT INTO receipt_inbox (id, provider, provider_message_id, provider_status, attempt_ref,
                                          payload, received_at)
               VALUES (coalesce(%(id)s, nextval('receipt_inbox_id_seq')), 'twilio', %(sid)s, 'delivered', 'a',
                       '{}', now() - %(age)s)
               RETURNING id""",
            {"id": row_id, "sid": sid, "age": age},
        )
        (inbox_id,) = await cursor.fetchone()  # type: ignore[misc]
    if decided:
        await _decide(pool, inbox_id)
    return inbox_id


async def _decide(pool: AsyncConnectionPool, inbox_id: int) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO receipt_outcomes (inbox_id, outcome, reason) VALUES (%s, 'ignored', 'test')", (inbox_id,)
        )


async def _undecided_ids(pool: AsyncConnectionPool, after_id: int) -> list[int]:
    rows = await store.undecided_reports(pool, older_than_seconds=0, limit=100, after_id=after_id)
    return sorted(row["id"] for row in rows)


async def test_the_floor_stops_below_the_first_undecided_or_recent_row(ledger: AsyncConnectionPool) -> None:
    old = timedelta(hours=1)
    first = await _report(ledger, age=old, decided=True)
    second = await _report(ledger, age=old, decided=True)
    waiting = await _report(ledger, age=old, decided=False)
    after = await _report(ledger, age=old, decided=True)
    assert await store.decided_floor(ledger, after_id=0, settled_seconds=SETTLED) == second
    assert first < second < waiting < after
    await _decide(ledger, waiting)
    assert await store.decided_floor(ledger, after_id=second, settled_seconds=SETTLED) == after
    # Decided, but received a moment ago: a lower id may still be in an open transaction.
    recent = await _report(ledger, age=timedelta(seconds=1), decided=True)
    assert await store.decided_floor(ledger, after_id=after, settled_seconds=SETTLED) == after
    assert await store.decided_floor(ledger, after_id=after, settled_seconds=0.5) == recent


async def test_a_pass_reads_above_the_floor_and_a_full_pass_finds_a_row_below_it(ledger: AsyncConnectionPool) -> None:
    old = timedelta(hours=1)
    top = await _report(ledger, age=old, decided=True)
    # A decided row placed far above the sequence leaves free ids below the floor (runs last in
    # this module: the sequence never reaches them).
    gap_top = await _report(ledger, age=old, decided=True, row_id=top + 1000)
    # Settled after half a second here, so the first test's row received "a moment ago" is too.
    floor = DrainFloor(settled_seconds=0.5, full_pass_seconds=3600)
    await floor.advance(ledger)
    assert floor.start() == gap_top
    # A row committed into the gap now (as if its transaction had outlived SETTLED_SECONDS): the
    # floor's reasoning misses it, so passes above the floor do not see it; a full pass does.
    hidden = await _report(ledger, age=old, decided=False, row_id=top + 500)
    fresh = await _report(ledger, age=timedelta(minutes=5), decided=False, row_id=gap_top + 1)
    assert await _undecided_ids(ledger, floor.start()) == [fresh]
    due = DrainFloor(settled_seconds=0.5, full_pass_seconds=0)
    await due.advance(ledger)
    assert due.start() == 0
    assert await _undecided_ids(ledger, due.start()) == [hidden, fresh]
