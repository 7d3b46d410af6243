"""Metrics through real processes: a worker's SDK endpoint after real intents, and the ledger exporter
reading the real ledger (in process over ASGI, and as `python -m herald.metrics`)."""

from __future__ import annotations

import asyncio
import secrets
import sys
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.metrics.exporter import build_exporter, ledger_pool
from tests.faults.workers import service, worker
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator

WAIT = 60


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _total(family: Any, suffix: str | None = None, **labels: str) -> float:
    """The sum of the family's samples named `<family><suffix>` whose labels include `labels`
    (the parser names a counter's samples `<family>_total`, with or without the suffix on the wire)."""
    if suffix is None:
        suffix = "_total" if family.type == "counter" else ""
    return sum(
        s.value
        for s in family.samples
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def _scrape(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    response = await http.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return _families(response.text)


async def test_a_worker_serves_sdk_metrics_and_how_its_intents_ended(
    stack: LocalStack, temporal: Client, receipt_server: str, emulator: Emulator
) -> None:
    """worker.py with HERALD_WORKER_METRICS_ADDRESS serves the SDK's series, provider latency and
    herald_intents_finished, which tells the undelivered intent from the delivered one although
    Temporal counts both as completed workflows."""
    task_queue = f"herald-metrics-{secrets.token_hex(4)}"
    address = f"127.0.0.1:{free_port()}"
    with worker(stack, "metrics-worker", HERALD_TASK_QUEUE=task_queue, HERALD_WORKER_METRICS_ADDRESS=address):
        herald = HeraldClient(temporal, task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING)
        delivered_key, undelivered_key, undelivered_to = fresh_key(), fresh_key(), fresh_recipient()
        await emulator.arm(undelivered_to, "undelivered")
        await herald.send(receipt_request(delivered_key, fresh_recipient()))
        await herald.send(receipt_request(undelivered_key, undelivered_to))
        assert (await asyncio.wait_for(herald.wait(delivered_key), WAIT)).state is IntentState.DELIVERED
        assert (await asyncio.wait_for(herald.wait(undelivered_key), WAIT)).state is IntentState.UNDELIVERED

        async with httpx.AsyncClient(timeout=5) as http:
            families = await _scrape(http, f"http://{address}/metrics")
    # Temporal's view: two workflows completed, none failed; the submit activity ran and was timed.
    assert _total(families["temporal_workflow_completed"], workflow_type="NotificationWorkflow") == 2
    assert "temporal_workflow_failed" not in families or _total(families["temporal_workflow_failed"]) == 0
    latency = families["temporal_activity_execution_latency"]
    assert _total(latency, "_count", activity_type="submit_attempt", task_queue=f"{task_queue}-submit") == 2
    # Herald's view of the same two workflows: one delivered, one undelivered.
    finished = families["herald_intents_finished"]
    assert _total(finished, state="delivered", channel="sms", task_queue=task_queue) == 1
    assert _total(finished, state="undelivered", channel="sms", task_queue=task_queue) == 1
    provider = families["herald_provider_latency"]
    assert _total(provider, "_count", provider="twilio", operation="submit", outcome="accepted") == 2
    # Both were transactional (built-in priority key 2): their queue age, by the key they went at.
    queue_age = families["herald_route_queue_age"]
    assert _total(queue_age, "_count", priority="2", provider="twilio", task_queue=f"{task_queue}-submit") == 2


async def test_the_ledger_exporter_counts_the_intents_sent(herald: HeraldClient, settings: Any) -> None:
    """After three delivered intents, a scrape's herald_intents{state="delivered"} has grown by them,
    and coverage, unknown share, queue and inbox series are present."""
    async with ledger_pool(settings.database_url.get_secret_value(), 5.0) as pool:
        transport = httpx.ASGITransport(app=build_exporter(pool, query_timeout=5.0))
        async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as http:
            before = await _scrape(http, "/metrics")
            keys = [fresh_key() for _ in range(3)]
            for key in keys:
                await herald.send(receipt_request(key, fresh_recipient()))
            for key in keys:
                assert (await asyncio.wait_for(herald.wait(key), WAIT)).state is IntentState.DELIVERED
            after = await _scrape(http, "/metrics")
    assert _total(after["herald_ledger_up"]) == 1
    # Other tests' intents may still be moving in the shared ledger: at least ours were added.
    grown = _total(after["herald_intents"], state="delivered", channel="sms") - _total(
        before["herald_intents"], state="delivered", channel="sms"
    )
    assert grown >= 3
    assert _total(after["herald_intents"]) - _total(before["herald_intents"]) >= 3
    assert 0 < _total(after["herald_intents_coverage_ratio"], channel="sms") <= 1
    assert "herald_intents_unknown_ratio" in after
    assert _total(after["herald_submit_outcomes"], channel="sms", outcome="accepted") >= 3
    for name in (
        "herald_submit_queue_oldest_age_seconds",
        "herald_inbox_undecided",
        "herald_inbox_oldest_undecided_age_seconds",
        "herald_intents_oldest_unresolved_age_seconds",
    ):
        assert name in after, name


async def test_ledger_queries_are_bounded_and_an_unreachable_ledger_is_reported(settings: Any) -> None:
    """The exporter's connections carry the statement timeout, and a ledger it cannot reach yields
    herald_ledger_up 0 in a normal answer."""
    async with ledger_pool(settings.database_url.get_secret_value(), 0.2) as pool:
        async with pool.connection() as conn:
            with pytest.raises(psycopg.errors.QueryCanceled):
                await conn.execute("SELECT pg_sleep(2)")
    async with ledger_pool(f"postgresql://herald@127.0.0.1:{free_port()}/ledger", 0.5) as unreachable:
        transport = httpx.ASGITransport(app=build_exporter(unreachable, query_timeout=0.5))
        async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as http:
            families = await _scrape(http, "/metrics")
    assert _total(families["herald_ledger_up"]) == 0
    assert "herald_intents" not in families


async def test_the_exporter_process_serves_the_ledger(stack: LocalStack) -> None:
    """`python -m herald.metrics` listens on HERALD_METRICS_HOST:HERALD_METRICS_PORT and answers from the
    ledger, and from the Temporal server for the route's backlog."""
    port = free_port()
    argv = [sys.executable, "-m", "herald.metrics"]
    env = {"HERALD_METRICS_HOST": "127.0.0.1", "HERALD_METRICS_PORT": str(port)}
    with service(stack, "metrics-exporter", argv, "metrics exporter serving", env):
        async with httpx.AsyncClient(timeout=10) as http:
            families = await _scrape(http, f"http://127.0.0.1:{port}/metrics")
    assert _total(families["herald_ledger_up"]) == 1
    assert "herald_intents" in families
    # The route's backlog, from the stack's Temporal server (HERALD_TEMPORAL_* as the stack sets them).
    assert _total(families["herald_route_backlog_up"]) == 1
