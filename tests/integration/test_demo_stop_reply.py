"""make run's STOP scene against the session's stack: the emulator posts a member's STOP to the
receipt server, and the promotion sent after it is suppressed with nothing at the emulator."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from devstack.demo import InboundReplies, a_stop_reply_suppresses_marketing, settle
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from tests.stack import Emulator


async def test_the_demo_s_stop_reply_suppresses_the_next_promotion(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, receipt_server: str, settings: Any
) -> None:
    """The scene's row ends suppressed by the opt-out, with no message at the emulator and no note of a failed post."""
    async with httpx.AsyncClient(base_url=emulator.base_url, timeout=20, trust_env=False) as admin:
        [row] = await a_stop_reply_suppresses_marketing(
            herald, admin, pool, secrets.token_hex(3), InboundReplies(receipt_server, settings.twilio.from_number)
        )
        await asyncio.wait_for(settle(herald, [row], 60), 70)
    assert row.state is IntentState.SUPPRESSED and row.note == ""
    assert await emulator.messages(row.recipient) == []
