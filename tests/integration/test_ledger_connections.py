"""How ledger connections are lent, against the session's real PostgreSQL.

A connection idle past the fresh window is checked (one round trip) and replaced if a restart
broke it; one returned a moment ago is lent as it is. Reports written at once share a
transaction (group commit), and one that cannot be stored fails alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.core.rows import InboxReport
from herald.ledger import store
from herald.ledger.group_commit import GroupCommit
from herald.ledger.lending import CheckIfIdle
from tests.intents import fresh_key


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


async def test_reports_stored_together_share_one_transaction_and_each_gets_its_own_row(pool, owner_pool) -> None:
    """Group commit on the inbox: concurrent writes queue behind the one committing and share
    the next transaction; a repeat in the same transaction finds the first copy as a repeat."""
    inbox = GroupCommit(pool, store.store_reports)

    def report(status: str, message_id: str) -> InboxReport:
        return InboxReport(
            provider="twilio", provider_message_id=message_id, provider_status=status,
            attempt_ref=f"att_{message_id[-12:]}", error_code=None, provider_event_at=None,
            payload={"ApiVersion": "2010-04-01"},
        )  # fmt: skip

    ids = ["SM" + fresh_key()[-32:].replace("_", "0") for _ in range(20)]
    writes = [report("sent", message_id) for message_id in ids] + [report("sent", ids[-1])]
    rows = await asyncio.gather(*(inbox.write(write) for write in writes))

    assert inbox.transactions < len(writes)  # the first went alone, the rest waited and went together
    assert [row["new"] for row in rows] == [True] * 20 + [False]
    assert rows[-1]["id"] == rows[-2]["id"]
    async with owner_pool.connection() as other:
        cursor = await other.execute(
            "SELECT count(*) FROM receipt_inbox WHERE provider_message_id = ANY(%s)", (ids,)
        )
        assert await cursor.fetchone() == (20,)


async def test_a_write_that_breaks_a_rule_fails_alone_and_the_rest_of_its_transaction_commits(pool) -> None:
    inbox = GroupCommit(pool, store.store_reports)
    good = [
        InboxReport(
            provider="twilio", provider_message_id="SM" + fresh_key()[-32:].replace("_", "0"), provider_status="sent",
            attempt_ref=None, error_code=None, provider_event_at=None, payload={},
        )  # fmt: skip
        for _ in range(4)
    ]
    # NUL is not storable in PostgreSQL text: this one write fails, by itself.
    bad = good[0].model_copy(update={"provider_message_id": "SM\x00bad"})
    results = await asyncio.gather(*(inbox.write(write) for write in [good[0], *good[1:3], bad, good[3]]), return_exceptions=True)

    assert [isinstance(result, dict) and result["new"] for result in results] == [True, True, True, False, True]
    assert isinstance(results[3], psycopg.DataError)


def _report(message_id: str, status: str = "sent") -> InboxReport:
    return InboxReport(
        provider="twilio", provider_message_id=message_id, provider_status=status,
        attempt_ref=f"att_{message_id[-12:]}", error_code=None, provider_event_at=None, payload={},
    )  # fmt: skip


async def test_a_report_stored_alone_is_autocommitted_and_a_shared_batch_is_one_transaction(pool, owner_pool) -> None:
    """Alone, a report is one autocommitted INSERT (no BEGIN, COMMIT or pipeline); reports that
    queue behind it still share a transaction; the pool lends its connections back in the
    ordinary mode either way, and a repeat stored alone finds its first copy."""
    seen: list[tuple[int, bool, psycopg.pq.TransactionStatus]] = []

    async def recording(conn: psycopg.AsyncConnection, reports: list[InboxReport]) -> list[dict]:
        seen.append((len(reports), conn.autocommit, conn.info.transaction_status))
        return await store.store_reports(conn, reports)

    inbox = GroupCommit(pool, recording, alone_in_autocommit=True)
    ids = ["SM" + fresh_key()[-32:].replace("_", "0") for _ in range(8)]

    first = await inbox.write(_report(ids[0]))
    repeat = await inbox.write(_report(ids[0]))
    together = await asyncio.gather(*(inbox.write(_report(message_id)) for message_id in ids[1:]))

    idle, in_transaction = psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.INTRANS
    assert seen[0] == (1, True, idle) and seen[1] == (1, True, idle)
    assert any(size > 1 and not autocommit and status == in_transaction for size, autocommit, status in seen[2:])
    assert first["new"] and not repeat["new"] and repeat["id"] == first["id"]
    assert all(row["new"] for row in together)
    async with pool.connection() as conn:
        assert conn.autocommit is False
    async with owner_pool.connection() as other:
        cursor = await other.execute("SELECT count(*) FROM receipt_inbox WHERE provider_message_id = ANY(%s)", (ids,))
        assert await cursor.fetchone() == (8,)


async def test_a_report_that_cannot_be_stored_alone_fails_and_leaves_the_connection_usable(pool) -> None:
    inbox = GroupCommit(pool, store.store_reports, alone_in_autocommit=True)
    with pytest.raises(psycopg.DataError):
        await inbox.write(_report("SM\x00bad"))  # NUL is not storable in PostgreSQL text
    row = await inbox.write(_report("SM" + fresh_key()[-32:].replace("_", "0")))
    assert row["new"]
    async with pool.connection() as conn:
        assert conn.autocommit is False
