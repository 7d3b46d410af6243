"""The send policy's dispatch order read once, at start, by a client that has the ledger: the first
attempt goes at the published priority with no read of its own in the workflow (one billed local
activity less per intent), and a client without the ledger leaves the read to the workflow."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.intake.requests import Category
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY, category_published

PUBLISHED_PRIORITY = 4  # transactional's built-in is 2


@pytest.fixture
async def transactional_at_4(pool: AsyncConnectionPool) -> AsyncIterator[None]:
    async with category_published(pool, Category.TRANSACTIONAL, "transactional at 4", priority=PUBLISHED_PRIORITY):
        yield


async def _dispatch_order_reads(temporal: Client, workflow_id: str) -> int:
    """The workflow's own reads of the send policy: local-activity markers of `dispatch_order`."""
    reads = 0
    async for event in temporal.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            data = event.marker_recorded_event_attributes.details["data"].payloads[0].data
            reads += b'"dispatch_order"' in data
    return reads


async def test_a_client_with_the_ledger_reads_the_order_at_start_and_the_workflow_does_not(
    herald: HeraldClient, temporal: Client, settings: Any, transactional_at_4: None
) -> None:
    with_ledger = fresh_key()
    without_ledger = fresh_key()
    bare = HeraldClient(
        temporal, settings.temporal.task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING
    )  # no vault: no ledger
    await herald.send(receipt_request(with_ledger, fresh_recipient()))
    await bare.send(receipt_request(without_ledger, fresh_recipient()))
    finals = await asyncio.wait_for(asyncio.gather(herald.wait(with_ledger), bare.wait(without_ledger)), 60)
    assert [f.state for f in finals] == [IntentState.DELIVERED] * 2
    # Both went at the published priority; only the bare client's workflow had to read it.
    assert [f.attempts[0].priority for f in finals] == [PUBLISHED_PRIORITY] * 2
    assert await _dispatch_order_reads(temporal, finals[0].workflow_id) == 0
    assert await _dispatch_order_reads(temporal, finals[1].workflow_id) == 1
