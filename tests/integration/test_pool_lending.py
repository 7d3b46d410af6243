"""How ledger connections are lent, against the session's real PostgreSQL.

A connection idle past the fresh window is checked (one round trip) and replaced if a restart
broke it; one returned a moment ago is lent as it is. A lone report is stored in one statement
that commits by itself, and its connection goes back to the pool in the state it came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from herald.ledger import store
from herald.ledger.lending import CheckIfIdle
from tests.support import fresh_key


@asynccontextmanager
async def _one_connection_pool(url: str, lending: CheckIfIdle) -> AsyncIterator[AsyncConnectionPool]:
    async with AsyncConnectionPool(
        url, min_size=1, max_size=1, open=False, timeout=5, check=lending.check, reset=lending.reset
    ) as pool:
        yield pool


async def _backend_pid(pool: AsyncConnectionPool) -> int:
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT pg_backend_pid()")
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def _terminate(owner_pool: AsyncConnectionPool, pid: int) -> None:
    async with owner_pool.connection() as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_a_connection_returned_a_moment_ago_is_lent_without_a_check(stack) -> None:
    lending = CheckIfIdle(fresh_seconds=60)
    async with _one_connection_pool(stack.database_url, lending) as pool:
        first = await _backend_pid(pool)  # a new connection has no return on record: checked once
        for _ in range(5):
            assert await _backend_pid(pool) == first
    assert lending.checks == 1


async def test_an_idle_connection_broken_by_the_server_is_replaced_when_lent(stack, owner_pool) -> None:
    lending = CheckIfIdle(fresh_seconds=0)  # every loan counts as idle: always checked
    async with _one_connection_pool(stack.database_url, lending) as pool:
        broken = await _backend_pid(pool)
        await _terminate(owner_pool, broken)
        replaced = await _backend_pid(pool)  # the check fails, the pool opens a new connection
    assert replaced != broken
    assert lending.checks >= 2


async def test_a_fresh_connection_broken_meanwhile_fails_its_one_use_and_is_then_replaced(stack, owner_pool) -> None:
    """The price of skipping the check: the caller sees a database error (which every caller
    retries), and the pool discards the broken connection instead of lending it again."""
    lending = CheckIfIdle(fresh_seconds=60)
    async with _one_connection_pool(stack.database_url, lending) as pool:
        broken = await _backend_pid(pool)
        await _terminate(owner_pool, broken)
        with pytest.raises(psycopg.OperationalError):
            await _backend_pid(pool)
        assert await _backend_pid(pool) != broken


async def test_a_lone_report_commits_by_itself_and_its_connection_returns_as_it_came(pool, owner_pool) -> None:
    message_id = "SM" + fresh_key()[-32:].replace("_", "0")
    fields = dict(
        provider="twilio", provider_message_id=message_id, provider_status="sent", attempt_ref=f"att_{fresh_key()[-12:]}",
        error_code=None, provider_event_at=None, payload={"ApiVersion": "2010-04-01"},
    )  # fmt: skip
    async with pool.connection() as conn:
        async with store.each_statement_commits(conn):
            first = await store.store_report(conn, **fields)
            # Committed already: another session sees the row before this block ends.
            async with owner_pool.connection() as other:
                cursor = await other.execute("SELECT count(*) FROM receipt_inbox WHERE id = %s", (first["id"],))
                assert await cursor.fetchone() == (1,)
            again = await store.store_report(conn, **fields)
        assert conn.autocommit is False
        assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert first["new"] is True
    assert again["new"] is False and again["id"] == first["id"]
