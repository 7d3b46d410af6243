"""Queue age is seen, not guessed: the route's backlog by priority from the Temporal server while it
is queued, then the ledger's queue age by priority and tenant and the intents that expired in the
queue, in `starter.py report`'s numbers and the exporter's series."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from devstack.processes import free_port
from herald.core.lifecycle import IntentState
from herald.ledger.report import ledger_report
from herald.metrics.exporter import build_exporter, ledger_pool
from herald.client import HeraldClient
from herald.temporal.route_backlog import RouteBacklog, route_backlog
from tests import reads
from tests.integration.routes import route_paced_at
from tests.integration.test_starter_cli import run_starter, stack_env
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY

PACE = 5.0
BATCH = 8


async def test_the_backlog_by_priority_then_queue_age_by_priority_and_tenant(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, receipt_server: str, limited_emulator: str
) -> None:
    """With the route's submit worker away, 8 priority-5 intents of one tenant, 2 transactional ones
    (priority 2) of another and one that expires in the queue: the server counts the backlog by
    priority key; once released, the ledger's report gives each tenant's attempts their queue age
    (the held ones waited at least as long as they were held) and counts the expired one, and the
    exporter serves both."""
    batch_tenant, urgent_tenant = f"batch-{secrets.token_hex(3)}", f"urgent-{secrets.token_hex(3)}"
    batch = [(fresh_key(), fresh_recipient()) for _ in range(BATCH)]
    urgent = [(fresh_key(), fresh_recipient()) for _ in range(2)]
    late_key = fresh_key()
    async with route_paced_at(PACE, temporal, settings, pool, limited_emulator, hold=True) as route:
        herald = route.herald
        await asyncio.gather(
            *(herald.send(receipt_request(k, to, priority=5, tenant=batch_tenant)) for k, to in batch),
            *(herald.send(receipt_request(k, to, tenant=urgent_tenant)) for k, to in urgent),
        )
        expires_at = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
        await herald.send(receipt_request(late_key, fresh_recipient(), tenant=urgent_tenant, expires_at=expires_at))
        keys = [k for k, _ in [*batch, *urgent]]
        while not all(status.attempts for status in await asyncio.gather(*(herald.status(k) for k in keys))):
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # the server's statistics are refreshed about once a second
        queued = await route_backlog(temporal, route.task_queue)
        held_at = datetime.now(UTC)
        late = await asyncio.wait_for(herald.wait(late_key), 30)
        await route.release()
        finals = await asyncio.wait_for(asyncio.gather(*(herald.wait(k) for k in keys)), 60)
        released_after = (datetime.now(UTC) - held_at).total_seconds()
    assert [f.state for f in finals] == [IntentState.DELIVERED] * len(keys)
    assert late.state is IntentState.EXPIRED

    by_priority = {level.priority: level for level in queued.by_priority}
    assert queued.route == f"{route.task_queue}-submit"
    assert by_priority[5].tasks == BATCH and by_priority[5].oldest_seconds > 0
    assert by_priority[2].tasks >= 2  # the two urgent ones, and the late one until it expired

    report = await ledger_report(pool)
    ages = {(a.by, a.key): a for a in report.queue_ages}
    batch_age, urgent_age = ages[("tenant", batch_tenant)], ages[("tenant", urgent_tenant)]
    assert batch_age.attempts == BATCH and urgent_age.attempts == 2
    assert urgent_age.expired_in_queue == 1 and batch_age.expired_in_queue == 0
    # Every one was held at least from the statistics' reading to the release (and the sleep before).
    assert urgent_age.p50_ms is not None and urgent_age.p50_ms >= 1000
    assert batch_age.oldest_ms is not None and batch_age.oldest_ms >= 1000
    assert ages[("priority", "5")].attempts >= BATCH and ages[("priority", "2")].expired_in_queue >= 1
    assert f"tenant {batch_tenant}" in report.render()
    print(f"\nbacklog {queued.render()}\nheld {released_after:.1f} s; {batch_age}\n{urgent_age}")

    async with ledger_pool(settings.database_url.get_secret_value(), 5.0) as exporter_pool:
        app = build_exporter(
            exporter_pool, query_timeout=5.0, read_backlog=lambda: route_backlog(temporal, route.task_queue)
        )
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://exporter") as http:
            text = (await http.get("/metrics")).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("herald_route_backlog_up", ())] == 1
    tenant_oldest = ("herald_route_queue_age_by_tenant_seconds", (("quantile", "1"), ("tenant", batch_tenant)))
    assert samples[tenant_oldest] == batch_age.oldest_ms / 1000
    assert samples[("herald_expired_in_route_queue_by_tenant", (("tenant", urgent_tenant),))] == 1


async def test_a_server_that_does_not_answer_costs_only_the_backlog_series(settings: Any) -> None:
    """The exporter's backlog reader failing (Temporal away) gives herald_route_backlog_up 0 and the
    ledger's numbers all the same."""

    async def unreachable() -> Any:
        raise RuntimeError("Failed client connect: connection refused")

    async with ledger_pool(settings.database_url.get_secret_value(), 5.0) as exporter_pool:
        app = build_exporter(exporter_pool, query_timeout=5.0, read_backlog=unreachable)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://exporter") as http:
            families = {f.name: f for f in text_string_to_metric_families((await http.get("/metrics")).text)}
    assert [s.value for s in families["herald_route_backlog_up"].samples] == [0]
    assert [s.value for s in families["herald_ledger_up"].samples] == [1]
    assert "herald_route_backlog_tasks" not in families


def test_starter_report_prints_queue_age_and_the_routes_backlog(stack: Any) -> None:
    """`starter.py report` as a process: the queue-age breakdown and the route's backlog from the
    stack's Temporal server; with Temporal away, the backlog is "unknown" and the rest still printed."""
    done = run_starter("report", env=stack_env(stack))
    assert done.returncode == 0, done.stderr
    assert "queue age by priority and tenant, last 1 h" in done.stdout
    assert "route backlog herald-notifications-submit (the Temporal server's count, now)" in done.stdout

    away = run_starter("report", env={**stack_env(stack), "HERALD_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"})
    assert away.returncode == 0, away.stderr
    assert "route backlog: unknown (cannot reach Temporal at 127.0.0.1:" in away.stdout
    assert "queue age by priority and tenant" in away.stdout


async def test_an_urgent_lane_no_worker_polls_is_said_and_counted(temporal: Client, settings: Any) -> None:
    """An account code started on a route whose urgent lane no worker polls waits there untouched:
    `starter.py report`'s line says so, and the exporter serves its tasks and its 0 pollers."""
    task_queue = f"herald-unpolled-{secrets.token_hex(4)}"
    herald = HeraldClient(temporal, task_queue, keyring=SESSION_KEYRING, policy=TEST_POLICY)
    code = receipt_request(fresh_key("signin"), fresh_recipient(), template_id="class_reminder", template_version=1,
                           render_data={"class_name": "Spin", "starts_at": "Mon 18:00"})  # fmt: skip
    receipt = await herald.send(code)
    try:

        async def lane_counted() -> RouteBacklog | None:
            backlog = await route_backlog(temporal, task_queue)
            return backlog if backlog.lane is not None and backlog.lane.tasks else None

        backlog = await reads.eventually(lane_counted, "the lane's waiting task counted", 20, every=0.5)
        assert backlog.lane is not None
        assert (backlog.lane.queue, backlog.lane.tasks, backlog.lane.pollers) == (f"{task_queue}-urgent", 1, 0)
        assert f"urgent lane {task_queue}-urgent: 1 workflow tasks waiting" in backlog.render()
        assert "NO WORKER POLLS IT" in backlog.render()
        async with ledger_pool(settings.database_url.get_secret_value(), 5.0) as exporter_pool:
            app = build_exporter(
                exporter_pool, query_timeout=5.0, read_backlog=lambda: route_backlog(temporal, task_queue)
            )
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://exporter") as http:
                text = (await http.get("/metrics")).text
        samples = {(s.name, tuple(s.labels.items())): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip
        route = (("route", f"{task_queue}-submit"),)
        assert samples[("herald_urgent_lane_tasks", route)] == 1
        assert samples[("herald_urgent_lane_pollers", route)] == 0
    finally:
        await temporal.get_workflow_handle(receipt.workflow_id).terminate("test: a lane no worker polls")
