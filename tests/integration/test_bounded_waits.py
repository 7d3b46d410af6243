"""Bounded waits: every entry point answers while a dependency is down or hangs.

A process started while the database or Temporal is unreachable exits in one line naming the
variable that points at it (never a traceback, never the password); the ledger exporter answers a
scrape within its own deadline while the database hangs at the network level, where PostgreSQL's
statement timeout cannot help because the server never hears the query.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.metrics.exporter import build_exporter, ledger_pool
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
RETENTION = ["-m", "herald.ledger.retention", "--inbox-days", "30"]
EXPORTER = ["-m", "herald.metrics"]
MIGRATE = ["-m", "herald.ledger.migrate"]


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
