"""A second, separate stack for the fault matrix, so crashing its parts never disturbs other tests.

Everything here is a real process: the Temporal dev server (persisted to a file for a module that
sets RESTARTS_TEMPORAL, so it can be stopped and restarted; in memory otherwise, where a burst of
2,000 intents runs about twice as fast), its own embedded PostgreSQL (so it can be killed), the emulator, the
receipt server and the worker as subprocesses, which the scenarios SIGKILL and restart.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.config import AdapterDev, EmulatorDev, EspDev, ReceiptsDev, StackConfig, TemporalDev
from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.ledger.store import open_pool
from herald.settings import load_settings
from herald.temporal.client import connect
from tests.support import (
    ADAPTER_READ_TIMEOUT,
    SESSION_FINGERPRINT_KEYS,
    SESSION_KEY_ENCRYPTION_KEYS,
    SESSION_KEYRING,
    TEST_POLICY,
    Emulator,
    Esp,
)


@pytest.fixture(scope="module")
def fault_stack(request: pytest.FixtureRequest) -> Any:
    state = Path(tempfile.mkdtemp(prefix="herald-faults-"))
    restarts = getattr(request.module, "RESTARTS_TEMPORAL", False)
    config = StackConfig(
        state_dir=state,
        fingerprint_keys=SESSION_FINGERPRINT_KEYS,
        key_encryption_keys=SESSION_KEY_ENCRYPTION_KEYS,
        temporal=TemporalDev(
            port=free_port(), ui_port=free_port(), metrics_port=free_port(),
            db_filename="temporal.db" if restarts else None, task_queue="herald-faults",
        ),  # fmt: skip
        emulator=EmulatorDev(port=free_port(), step_ms=60),
        esp=EspDev(smtp_port=free_port(), admin_port=free_port(), step_ms=60),
        receipts=ReceiptsDev(port=free_port()),
        adapter=AdapterDev(read_timeout=ADAPTER_READ_TIMEOUT, connect_timeout=1.0),
    )
    stack = LocalStack(config, database_url="")  # "" = always its own embedded server, never DATABASE_URL
    try:
        stack.start_postgres()
        stack.migrate()
        stack.start_temporal()
        stack.start_emulator()
        stack.start_esp()
        stack.start_receipts()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
async def fault_herald(fault_stack: LocalStack) -> HeraldClient:
    settings = load_settings(fault_stack.config.service_env(fault_stack.database_url))
    return HeraldClient(
        await connect(settings.temporal), settings.temporal.task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING
    )


@pytest.fixture(scope="module")
async def fault_pool(fault_stack: LocalStack) -> AsyncIterator[AsyncConnectionPool]:
    async with open_pool(fault_stack.database_url, max_size=2) as pool:
        yield pool


@pytest.fixture(scope="module")
async def fault_emulator(fault_stack: LocalStack) -> AsyncIterator[Emulator]:
    e = fault_stack.config.emulator
    admin = Emulator(f"http://{e.host}:{e.port}")
    yield admin
    await admin.aclose()


@pytest.fixture(scope="module")
async def fault_esp(fault_stack: LocalStack) -> AsyncIterator[Esp]:
    e = fault_stack.config.esp
    admin = Esp(f"http://{e.host}:{e.admin_port}")
    yield admin
    await admin.aclose()
