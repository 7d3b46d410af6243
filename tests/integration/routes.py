"""A route of its own for tests of the throttled submit queue: workers on a fresh task queue whose
submits the Temporal server paces (the rate-limited emulator is the `limited_emulator` fixture)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from herald.client import HeraldClient
from herald.intent import Channel
from herald.providers.twilio import TwilioAdapter
from tests.support import TEST_POLICY
from worker import build_submit_worker, build_worker, submit_pacer

LIMIT = 10.0  # the emulator's messages/s per sender (Herald has one sender)


@asynccontextmanager
async def route_paced_at(
    pace: float, temporal: Client, settings: Any, pool: AsyncConnectionPool, emulator_url: str
) -> AsyncIterator[tuple[HeraldClient, str]]:
    """Workers on a fresh task queue whose submits the server paces at `pace`, sending to `emulator_url`."""
    task_queue = f"herald-route-{secrets.token_hex(4)}"
    limited = settings.model_copy(
        update={
            "temporal": settings.temporal.model_copy(update={"task_queue": task_queue}),
            "twilio": settings.twilio.model_copy(update={"api_base": emulator_url, "submit_rate_limit": pace}),
        }
    )
    adapter = TwilioAdapter(limited.twilio)
    provider = ProviderActivities({Channel.SMS: adapter}, limited.receipts.public_url, pool, pacer=submit_pacer(limited))
    try:
        async with (
            build_worker(temporal, limited, LedgerActivities(pool), provider),
            build_submit_worker(temporal, limited, provider),
        ):
            yield HeraldClient(temporal, task_queue, policy=TEST_POLICY), task_queue
    finally:
        await adapter.aclose()
