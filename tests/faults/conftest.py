"""A second, separate stack for the fault matrix, so crashing its parts never disturbs other tests.

Everything here is a real process: the Temporal dev server (persisted to a file for a module that
sets RESTARTS_TEMPORAL, so it can be stopped and restarted; in memory otherwise, where a burst of
intents runs about twice as fast), its own embedded PostgreSQL (so it can be killed), the emulator, the
receipt server and the worker as subprocesses, which the scenarios SIGKILL and restart.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.ledger.store import open_pool
from herald.settings import load_settings
from herald.temporal.client import connect
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator, Esp, stack_config


@pytest.fixture(scope="module")
def fault_stack(request: pytest.FixtureRequest) -> Any:
    state = Path(tempfile.mkdtemp(prefix="herald-faults-"))
    restarts = getattr(request.module, "RESTARTS_TEMPORAL", False)
    config = stack_config(
        state, free_port(), db_filename="temporal.db" if restarts else None, task_queue="herald-faults"
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
    async with Emulator.of(fault_stack) as admin:
        yield admin


@pytest.fixture(scope="module")
async def fault_esp(fault_stack: LocalStack) -> AsyncIterator[Esp]:
    async with Esp.of(fault_stack) as admin:
        yield admin
