"""An urgent category's short provider queue validity, from a published send policy, against the
real emulator: an unanswered submit is retried once the in-flight bound plus that validity has
passed, not after the delivery policy's default window, and a first copy that was in fact queued
is dropped by the provider at its validity, so the retry is the only message that reaches the handset.

Sends are counted at the emulator, never in Herald's code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.intake.requests import Category
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.stack import TEST_POLICY, Emulator, category_published

VALIDITY = 5  # seconds: the transactional category's provider queue validity in the published policy
BOUND = timedelta(seconds=2)
# The delivery policy's own window is the default 600 s: a retry inside a minute can only come
# from the category's validity.
POLICY = TEST_POLICY.model_copy(
    update={"submit_in_flight_bound": BOUND, "provider_queue_validity": timedelta(seconds=600),
            "resolution_horizon": timedelta(seconds=120)}
)  # fmt: skip


@pytest.fixture
async def short_validity(pool: AsyncConnectionPool) -> AsyncIterator[None]:
    async with category_published(
        pool, Category.TRANSACTIONAL, "short validity", provider_queue_validity_seconds=VALIDITY
    ):
        yield


@pytest.mark.parametrize(
    "fault",
    [
        {"fault": "accept_then_hang", "hang_seconds": 3, "queue_seconds": 30, "callbacks": True},
        {"fault": "hang_without_accept", "hang_seconds": 3},
    ],
    ids=["first-copy-queued-past-its-validity", "never-accepted"],
)
async def test_an_unanswered_urgent_submit_is_retried_after_its_categorys_validity(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, short_validity: None, fault: dict[str, object]
) -> None:
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, count=1, **fault)
    await herald.send(receipt_request(key, to), policy=POLICY)
    final = await asyncio.wait_for(herald.wait(key), 90)
    assert final.state is IntentState.DELIVERED, final.transitions
    first, second = final.attempts
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT prepared_at FROM attempts WHERE workflow_id = %s ORDER BY number", (final.workflow_id,)
        )
        (first_at,), (second_at,) = await cursor.fetchall()
    waited = second_at - first_at
    print(f"\n{fault['fault']}: attempt 2 prepared {waited.total_seconds():.1f} s after attempt 1")
    assert first.validity_seconds == VALIDITY
    # Long before the default window (bound + 600 s), and not before the first copy was settled: a
    # queued copy is dropped by the provider at its validity (its failure is the proof); one never
    # accepted is proven absent only once the in-flight bound plus the validity has passed.
    earliest = timedelta(seconds=VALIDITY) + (BOUND if fault["fault"] == "hang_without_accept" else timedelta(0))
    assert earliest <= waited < timedelta(seconds=60)
    messages = await emulator.messages(to)
    delivered = [m for m in messages if m["status"] == "delivered"]
    assert len(delivered) == 1  # 0 duplicates at the handset
    if fault["fault"] == "accept_then_hang":
        dropped, _ = messages
        assert dropped["validity_seconds"] == VALIDITY
        assert (dropped["status"], dropped["error_code"], dropped["date_sent"]) == ("failed", 30036, None)
    else:
        assert len(messages) == 1  # the first never existed
