"""An intent's expiry reaches into the route's queue: a submit still queued when the intent expires
is never started, and the intent ends expired, nothing sent, however long the backlog."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.core.lifecycle import IntentState, SubmitResult
from tests.integration.routes import route_paced_at
from tests.integration.test_route_priority import _accepted_order
from tests.intents import fresh_key, fresh_recipient, receipt_request


async def test_an_intent_that_expires_while_its_submit_is_queued_ends_expired_and_is_never_sent(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, receipt_server: str, limited_emulator: str
) -> None:
    """The route's submit worker is away (a backlog that does not move); an intent expiring in 3 s
    ends expired "in the route queue" with its attempt never sent, and when the worker comes back
    the queued submit is not run: the emulator never sees it. Another intent queued beside it, with
    time to spare, is delivered once the worker is back."""
    late_key, late_to = fresh_key(), fresh_recipient()
    spare_key, spare_to = fresh_key(), fresh_recipient()
    async with route_paced_at(5.0, temporal, settings, pool, limited_emulator, hold=True) as route:
        herald = route.herald
        expires_at = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
        await herald.send(receipt_request(late_key, late_to, expires_at=expires_at))
        await herald.send(receipt_request(spare_key, spare_to))
        late = await asyncio.wait_for(herald.wait(late_key), 30)
        await route.release()
        spare = await asyncio.wait_for(herald.wait(spare_key), 30)
        await asyncio.sleep(1.0)  # time for a wrongly started submit to reach the provider
    assert late.state is IntentState.EXPIRED and late.closed_by == "clock:expiry"
    assert "expired in the route queue" in late.transitions[-1].reason
    [attempt] = late.attempts
    assert attempt.submit_result is SubmitResult.NOT_SENT and attempt.provider is None
    assert spare.state is IntentState.DELIVERED
    assert await _accepted_order(limited_emulator, {late_to, spare_to}) == [spare_to]
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT provider FROM attempts WHERE workflow_id = %s", (late.workflow_id,)
        )
        assert await cursor.fetchall() == [(None,)]  # the attempt is recorded, never handed to a provider
