"""A notice's tenant and priorities survive the outbox: committed in a service's database, relayed,
and started with them, as the ledger records each channel's intent and attempt."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.stack import LocalStack
from herald import outbox
from herald.client import HeraldClient
from herald.ledger.store import open_pool
from herald.outbox.relay import OutboxRelay
from tests.intents import ORDER_DATA, fresh_address, fresh_key, fresh_recipient
from tests.stack import create_outbox_database


@pytest.fixture(scope="module")
async def service_pool(stack: LocalStack) -> AsyncIterator[AsyncConnectionPool]:
    """A service's own database with the outbox applied, beside Herald's ledger."""
    async with open_pool(await create_outbox_database(stack.database_url, "tenant_service"), max_size=2) as opened:
        yield opened


async def _recorded(pool: AsyncConnectionPool, workflow_id: str) -> tuple[str, int | None] | None:
    """The ledger's tenant for the intent and the priority key of its first attempt, once written."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """SELECT i.tenant, a.priority FROM intents i JOIN attempts a USING (workflow_id)
                WHERE i.workflow_id = %s AND a.number = 1""",
            (workflow_id,),
        )
        return await cursor.fetchone()  # type: ignore[return-value]


async def test_a_notice_relayed_through_the_outbox_starts_with_its_tenant_and_priorities(
    service_pool: AsyncConnectionPool, herald: HeraldClient, pool: AsyncConnectionPool
) -> None:
    """Enqueued with tenant "acme", SMS at priority 4 and e-mail at 3 (both lower than a receipt's 2):
    the row holds them, the relay starts both intents with them, and each first attempt went at its key."""
    key = fresh_key()
    notice: dict[str, Any] = {"business_key": key, "tenant": "acme", "channels": [
        {"channel": "sms", "recipient": fresh_recipient(), "template_id": "order_receipt", "template_version": 1,
         "render_data": ORDER_DATA, "priority": 4},
        {"channel": "email", "recipient": fresh_address(), "template_id": "order_receipt_email", "template_version": 1,
         "render_data": ORDER_DATA, "priority": 3},
    ]}  # fmt: skip
    async with service_pool.connection() as conn, conn.transaction():
        await outbox.enqueue(conn, notice)
    async with service_pool.connection() as conn:
        cursor = await conn.execute("SELECT notice FROM herald_outbox WHERE business_key = %s", (key,))
        (stored,) = await cursor.fetchone()  # type: ignore[misc]
    assert stored["tenant"] == "acme" and [entry["priority"] for entry in stored["channels"]] == [4, 3]

    done = await OutboxRelay(service_pool, herald).relay_once()
    assert done.relayed == 1 and done.refused == 0 and done.retrying == 0, done
    recorded: dict[str, Any] = {}
    for _ in range(600):  # each channel's intent and first attempt reach the ledger with its first submit
        recorded = {channel: await _recorded(pool, f"{key}/{channel}") for channel in ("sms", "email")}
        if all(recorded.values()):
            break
        await asyncio.sleep(0.1)
    assert recorded == {"sms": ("acme", 4), "email": ("acme", 3)}
    assert [attempt.priority for attempt in (await herald.status(key, "sms")).attempts][:1] == [4]
