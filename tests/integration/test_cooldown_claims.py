"""The recipient cooldown's claims, against the session's real PostgreSQL.

The cooldown is about when messages go out. A claim is stamped with the later of the workflow's
clock and the database's, and restamped when the provider answers, so the next intent to the same
recipient waits a full cooldown after the provider could last have received the message.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from psycopg_pool import AsyncConnectionPool

from herald.ledger import policy_store
from tests.intents import fresh_recipient
from tests.keys import SESSION_KEYRING

COOLDOWN = timedelta(seconds=1)


async def _claim(pool: AsyncConnectionPool, fingerprint: str, workflow_id: str, at: datetime) -> datetime | None:
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
        return await policy_store.claim_cooldown(
            cursor, fingerprint=fingerprint, channel="sms", workflow_id=workflow_id, cooldown=COOLDOWN, at=at
        )


async def _stamp(pool: AsyncConnectionPool, fingerprint: str) -> datetime:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT last_submit_at FROM recipient_cooldowns WHERE recipient_fingerprint = %s AND channel = 'sms'",
            (fingerprint,),
        )
        row = await cursor.fetchone()
    assert row is not None
    return row[0]


async def test_a_claim_decided_long_ago_is_stamped_when_it_is_made(pool: AsyncConnectionPool) -> None:
    """The workflow decided an hour ago (its activity started late): the claim counts from now."""
    fingerprint = SESSION_KEYRING.recipient(fresh_recipient())
    before = datetime.now(UTC)
    assert await _claim(pool, fingerprint, "first/sms", before - timedelta(hours=1)) is None
    assert await _stamp(pool, fingerprint) >= before
    blocked_until = await _claim(pool, fingerprint, "second/sms", datetime.now(UTC))
    assert blocked_until is not None and blocked_until >= before + COOLDOWN


async def test_the_provider_answer_restamps_the_claim_and_the_next_intent_waits_from_it(
    pool: AsyncConnectionPool,
) -> None:
    """A submit that took 0.5 s: the next intent's cooldown runs from the answer, not the claim."""
    fingerprint = SESSION_KEYRING.recipient(fresh_recipient())
    claimed_at = datetime.now(UTC)
    assert await _claim(pool, fingerprint, "first/sms", claimed_at) is None
    claim_stamp = await _stamp(pool, fingerprint)
    await asyncio.sleep(0.5)  # the provider call
    await policy_store.count_cooldown_from_answer(pool, fingerprint=fingerprint, channel="sms", workflow_id="first/sms")
    answer_stamp = await _stamp(pool, fingerprint)
    assert answer_stamp >= claim_stamp + timedelta(seconds=0.5)
    # One cooldown after the claim, but not after the answer: refused, until the answer's cooldown ends.
    blocked_until = await _claim(pool, fingerprint, "second/sms", claim_stamp + COOLDOWN)
    assert blocked_until == answer_stamp + COOLDOWN
    assert await _claim(pool, fingerprint, "second/sms", answer_stamp + COOLDOWN) is None


async def test_an_answer_moves_only_its_own_claim_and_never_backwards(pool: AsyncConnectionPool) -> None:
    fingerprint = SESSION_KEYRING.recipient(fresh_recipient())
    ahead = datetime.now(UTC) + timedelta(hours=1)  # a time-skipping workflow clock, ahead of the wall
    assert await _claim(pool, fingerprint, "first/sms", ahead) is None
    await policy_store.count_cooldown_from_answer(pool, fingerprint=fingerprint, channel="sms", workflow_id="first/sms")
    assert await _stamp(pool, fingerprint) == ahead
    await policy_store.count_cooldown_from_answer(pool, fingerprint=fingerprint, channel="sms", workflow_id="other/sms")
    assert await _stamp(pool, fingerprint) == ahead
