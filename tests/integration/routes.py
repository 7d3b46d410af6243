"""A route of its own for tests of the throttled submit queue: workers on a fresh task queue whose
submits the Temporal server paces (the rate-limited emulator is the `limited_emulator` fixture)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from herald.client import HeraldClient
from herald.core.message import Channel
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.twilio import TwilioAdapter
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import TEST_POLICY
from worker import build_submit_worker, submit_pacer, workflow_workers

LIMIT = 10.0  # the emulator's messages/s per sender (Herald has one sender)


class Route:
    """A route's client and task queue; with its submits held, `release()` starts its submit worker."""

    def __init__(self, herald: HeraldClient, task_queue: str, release: Callable[[], Awaitable[None]]) -> None:
        self.herald, self.task_queue, self.release = herald, task_queue, release


@asynccontextmanager
async def route_paced_at(
    pace: float, temporal: Client, settings: Any, pool: AsyncConnectionPool, emulator_url: str, *, hold: bool = False
) -> AsyncIterator[Route]:
    """Workers on a fresh task queue whose submits the server paces at `pace`, sending to
    `emulator_url`. With `hold`, no submit worker polls until `release()`: a backlog forms at the
    server, in the order the test queues it, however slowly the host starts the workflows."""
    task_queue = f"herald-route-{secrets.token_hex(4)}"
    limited = settings.model_copy(
        update={
            "temporal": settings.temporal.model_copy(update={"task_queue": task_queue}),
            "twilio": settings.twilio.model_copy(update={"api_base": emulator_url, "submit_rate_limit": pace}),
        }
    )
    adapter = TwilioAdapter(limited.twilio)
    provider = ProviderActivities(
        {Channel.SMS: adapter},
        limited.receipts.public_url,
        pool,
        pacer=submit_pacer(limited),
        vault=RecipientVault(pool, SESSION_KEKS),
        keyring=SESSION_KEYRING,
    )
    async with AsyncExitStack() as stack:
        stack.push_async_callback(adapter.aclose)
        for polling in workflow_workers(temporal, limited, LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS)), provider):  # fmt: skip
            await stack.enter_async_context(polling)

        async def release() -> None:
            await stack.enter_async_context(build_submit_worker(temporal, limited, provider))

        if not hold:
            await release()
        yield Route(
            HeraldClient(temporal, task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING), task_queue, release
        )
