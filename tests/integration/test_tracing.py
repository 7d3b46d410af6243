"""Traces: an intent started through a traced client yields one trace from the start to the provider call."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg_pool import AsyncConnectionPool

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.privacy.recipient_vault import RecipientVault
from herald.temporal.client import connect
from herald.temporal.tracing import tracing_interceptors
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import TEST_POLICY
from worker import build_providers, build_submit_worker, build_worker


async def test_a_traced_intent_is_one_trace_from_start_to_provider_call(
    settings: Any, pool: AsyncConnectionPool, receipt_server: str
) -> None:
    """With the tracing interceptor on the client, starting an intent, running its workflow and its
    submit activity (in workers built from that client) are spans of one trace."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "herald-test"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    task_queue = f"herald-tracing-{secrets.token_hex(4)}"
    traced = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": task_queue})})
    client = await connect(traced.temporal, interceptors=tracing_interceptors(provider))
    adapters = build_providers(traced, SESSION_KEYRING)
    activities = ProviderActivities(
        adapters, traced.receipts.public_url, pool, vault=RecipientVault(pool, SESSION_KEKS), keyring=SESSION_KEYRING
    )
    try:
        async with (
            build_worker(client, traced, LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS)), activities),
            build_submit_worker(client, traced, activities),
        ):
            herald = HeraldClient(client, task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING)
            key = fresh_key()
            receipt = await herald.send(receipt_request(key, fresh_recipient()))
            assert (await asyncio.wait_for(herald.wait(key), 60)).state is IntentState.DELIVERED
    finally:
        for adapter in adapters.values():
            await adapter.aclose()
        provider.shutdown()

    workflow_id = receipt.workflow_id
    ours = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("temporalWorkflowID") == workflow_id]
    names = {span.name for span in ours}
    assert {
        "StartWorkflow:NotificationWorkflow",
        "RunWorkflow:NotificationWorkflow",
        "StartActivity:submit_attempt",
        "RunActivity:submit_attempt",
    } <= names
    assert len({span.context.trace_id for span in ours}) == 1
    # The worker's spans hang under the client's start: the start is the only root.
    roots = [span for span in ours if span.parent is None]
    assert [span.name for span in roots] == ["StartWorkflow:NotificationWorkflow"]
