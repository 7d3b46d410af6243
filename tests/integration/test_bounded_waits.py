"""Bounded waits: every entry point answers while a dependency is down or hangs.

A process started while the database or Temporal is unreachable exits in one line naming the
variable that points at it (never a traceback, never the password); the ledger exporter answers a
scrape within its own deadline while the database hangs at the network level, where PostgreSQL's
statement timeout cannot help because the server never hears the query.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.metrics.exporter import build_exporter, ledger_pool
from herald.temporal.task_queues import submit_task_queue
from tests.receipts.freezing_proxy import FreezingProxy

SECRET = "s3cret-never-printed"
# Nothing listens on port 1 of the loopback: a connection there is refused at once.
CLOSED = "127.0.0.1:1"
DATABASE_DOWN = f"postgresql://herald:{SECRET}@{CLOSED}/ledger"
# Each run is a Python start-up plus one refused connection; a hung wait would blow this.
RUN_SECONDS = 20

RECEIPTS = ["-m", "herald.receipts"]
RELAY = ["-m", "herald.outbox"]
APPLY_SCHEMA = ["-m", "herald.outbox", "--apply-schema"]
RETENTION = ["-m", "herald.jobs.retention", "--inbox-days", "30"]
EXPORTER = ["-m", "herald.metrics"]
MIGRATE = ["-m", "herald.jobs.migrate"]
WORKER = [str(Path(__file__).resolve().parents[2] / "worker.py")]


def clean_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """The test process's environment without any Herald, Temporal or database setting, plus `env`."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("HERALD_", "TEMPORAL_", "OTEL_")) and name != "DATABASE_URL"
    }
    # Ports of their own, so a process that did start would not collide with the session's servers.
    ports = {"HERALD_RECEIPT_PORT": str(free_port()), "HERALD_METRICS_PORT": str(free_port())}
    return {**kept, **env, "HERALD_STATE_DIR": str(tmp_path), **ports}


def run(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    ran = subprocess.run(
        [sys.executable, *argv], check=False, env=env, capture_output=True, text=True, timeout=RUN_SECONDS
    )
    return ran, time.monotonic() - started


def assert_one_line(ran: subprocess.CompletedProcess[str], elapsed: float, expected: str, *secrets: str) -> None:
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode != 0, ran.stderr
    assert len(lines) == 1, ran.stderr
    assert expected in lines[0], ran.stderr
    assert "Traceback" not in ran.stderr
    for secret in secrets:
        assert secret not in ran.stderr + ran.stdout
    assert elapsed < RUN_SECONDS


@pytest.mark.parametrize(
    ("argv", "variable"),
    [
        (RECEIPTS, "DATABASE_URL"),
        (RELAY, "HERALD_OUTBOX_DATABASE_URL"),
        (APPLY_SCHEMA, "HERALD_OUTBOX_DATABASE_URL"),
        (RETENTION, "DATABASE_URL"),
        (EXPORTER, "DATABASE_URL"),
        (MIGRATE, "HERALD_MIGRATION_DATABASE_URL"),
    ],
    ids=["receipts", "relay", "apply-schema", "retention", "exporter", "migrate"],
)
async def test_an_unreachable_database_at_start_is_one_line_naming_its_variable(
    argv: list[str], variable: str, tmp_path: Path
) -> None:
    """Started with the database refusing connections, the entry point exits non-zero with one
    stderr line naming the variable, without a traceback or the URL's password."""
    env = clean_env(
        tmp_path,
        DATABASE_URL=DATABASE_DOWN,
        HERALD_OUTBOX_DATABASE_URL=DATABASE_DOWN,
        HERALD_MIGRATION_DATABASE_URL=DATABASE_DOWN,
        HERALD_TEMPORAL_ADDRESS=CLOSED,
    )
    ran, elapsed = await asyncio.to_thread(run, argv, env)
    assert_one_line(ran, elapsed, f"cannot reach the database at {variable}: ", SECRET)


@pytest.mark.parametrize("argv", [RECEIPTS, RELAY], ids=["receipts", "relay"])
async def test_an_unreachable_temporal_at_start_is_one_line_naming_its_variable(
    argv: list[str], stack: LocalStack, tmp_path: Path
) -> None:
    """With the database up and Temporal refusing connections, the receipt server and the relay exit
    non-zero with one line naming HERALD_TEMPORAL_ADDRESS, the CLI's wording, no password."""
    services = stack.config.service_env(stack.database_url)
    password = conninfo_to_dict(services["DATABASE_URL"]).get("password") or SECRET
    env = clean_env(
        tmp_path,
        **{**services, "HERALD_OUTBOX_DATABASE_URL": services["DATABASE_URL"], "HERALD_TEMPORAL_ADDRESS": CLOSED},
    )
    ran, elapsed = await asyncio.to_thread(run, argv, env)
    assert_one_line(ran, elapsed, f"cannot reach Temporal at {CLOSED} (HERALD_TEMPORAL_ADDRESS): ", password)


async def pollers(temporal: Client, task_queue: str) -> dict[str, int]:
    """How many pollers the server has seen on each of a worker's task queues (it remembers them for
    minutes after they stop): the workflow queue's two kinds, and the submit queue's activities."""
    seen: dict[str, int] = {}
    for queue, kind in (
        (task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        (task_queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
        (submit_task_queue(task_queue), TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ):
        request = DescribeTaskQueueRequest(namespace=temporal.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind)
        for tries in range(3):
            try:
                response = await temporal.workflow_service.describe_task_queue(request)
                break
            except RPCError as error:
                # A loaded dev server has answered this read "operation was canceled": a read, asked again.
                if tries == 2 or error.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE):
                    raise
                await asyncio.sleep(0.5)
        seen[f"{queue} {TaskQueueType.Name(kind)}"] = len(response.pollers)
    return seen


async def test_a_worker_that_cannot_reach_its_ledger_exits_before_it_polls(
    stack: LocalStack, temporal: Client, tmp_path: Path
) -> None:
    """`python worker.py` with the database refusing connections and Temporal up exits non-zero with
    one line naming DATABASE_URL (no traceback, no password), and never polls either task queue."""
    task_queue = f"herald-no-ledger-{secrets.token_hex(4)}"  # no other worker polls it
    services = stack.config.service_env(stack.database_url)
    env = clean_env(tmp_path, **{**services, "DATABASE_URL": DATABASE_DOWN, "HERALD_TASK_QUEUE": task_queue})
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable, *WORKER, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=RUN_SECONDS)
    except TimeoutError:  # still running: what it polled meanwhile is what the failure shows
        process.kill()
        await process.wait()
        pytest.fail(f"the worker still ran after {RUN_SECONDS}s; pollers seen: {await pollers(temporal, task_queue)}")
    ran = subprocess.CompletedProcess(WORKER, process.returncode or 0, out.decode(), err.decode())
    assert_one_line(ran, time.monotonic() - started, "cannot reach the database at DATABASE_URL: ", SECRET)
    assert set((await pollers(temporal, task_queue)).values()) == {0}


async def frozen_database(settings: Any) -> tuple[FreezingProxy, str]:
    """A started proxy in front of the session's ledger, and the services' DSN through it."""
    target = conninfo_to_dict(settings.database_url.get_secret_value())
    proxy = FreezingProxy(str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
    await proxy.start()
    return proxy, make_conninfo(settings.database_url.get_secret_value(), host="127.0.0.1", port=proxy.port)


async def test_an_exporter_started_against_a_hung_database_says_so_within_the_connect_timeout(
    settings: Any, tmp_path: Path
) -> None:
    """A database that accepts the connection and then says nothing stops `python -m herald.metrics`
    within the connect timeout, in one line naming DATABASE_URL."""
    proxy, through_proxy = await frozen_database(settings)
    proxy.freeze()
    try:
        env = clean_env(tmp_path, DATABASE_URL=through_proxy)
        ran, elapsed = await asyncio.to_thread(run, EXPORTER, env)
    finally:
        await proxy.close()
    password = conninfo_to_dict(through_proxy).get("password") or SECRET
    assert_one_line(ran, elapsed, "cannot reach the database at DATABASE_URL: ", password)


def ledger_up(response: httpx.Response) -> float:
    assert response.status_code == 200
    families = {family.name: family for family in text_string_to_metric_families(response.text)}
    return families["herald_ledger_up"].samples[0].value


async def test_a_scrape_while_the_database_hangs_answers_ledger_down_in_time_and_recovers(settings: Any) -> None:
    """While the database forwards nothing, a scrape answers 200 with herald_ledger_up 0 within the
    query timeout plus 2 s; once it answers again, a scrape reads the ledger (herald_ledger_up 1)."""
    query_timeout = 1.0
    proxy, through_proxy = await frozen_database(settings)
    try:
        async with ledger_pool(through_proxy, query_timeout) as pool:
            transport = httpx.ASGITransport(app=build_exporter(pool, query_timeout=query_timeout))
            async with httpx.AsyncClient(transport=transport, base_url="http://exporter", timeout=30) as http:
                assert ledger_up(await http.get("/metrics")) == 1  # the path works
                proxy.freeze()
                started = time.monotonic()
                frozen = await http.get("/metrics")
                elapsed = time.monotonic() - started
                assert ledger_up(frozen) == 0
                assert elapsed < query_timeout + 2.0, f"answered after {elapsed:.1f} s"
                proxy.thaw()
                deadline = time.monotonic() + 20
                while ledger_up(response := await http.get("/metrics")) != 1 and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)  # the stuck connections are cancelled or replaced
                assert ledger_up(response) == 1
    finally:
        await proxy.close()
