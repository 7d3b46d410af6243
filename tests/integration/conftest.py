"""The integration tier runs on the session's real stack (``tests/stack.py``); its own fixtures beyond it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

from psycopg_pool import AsyncConnectionPool

from devstack.processes import ManagedProcess, free_port, wait_for_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.ledger.provider_marks import provider_states
from tests import reads
from tests.integration.routes import LIMIT
from tests.intents import fresh_key, fresh_recipient, receipt_request


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.import_plugin("tests.stack")


@pytest.fixture
async def limited_emulator(stack: LocalStack) -> AsyncIterator[str]:
    """A second emulator, limited to LIMIT messages/s per sender, as its own process."""
    e = stack.config.emulator
    port = free_port()
    argv = [
        sys.executable, "-m", "emulator", "--host", "127.0.0.1", "--port", str(port), "--account-sid", e.account_sid,
        "--auth-token", e.auth_token, "--step-ms", str(e.step_ms), "--rate-limit-per-sender", str(LIMIT),
        "--log-level", "warning",
    ]  # fmt: skip
    process = ManagedProcess(
        "emulator-limited", argv, env={"PYTHONUNBUFFERED": "1"}, log_path=stack.log_dir / "emulator-limited.log"
    )
    process.start()
    try:
        await asyncio.to_thread(wait_for_port, "127.0.0.1", port, 30, process.process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()


@pytest.fixture(scope="module")
async def twilio_answering(herald: HeraldClient, pool: AsyncConnectionPool) -> None:
    """Twilio out of any outage an earlier test of this process left in the ledger (a test that made it
    refuse connections marks it unreachable: herald.core.routes). One intent on the built-in route, which
    names Twilio alone, goes to Twilio even in outage, and its answer ends the outage, as in production."""
    key = fresh_key()
    await herald.send(receipt_request(key, fresh_recipient()))
    assert (await reads.final(herald, key, Channel.SMS, 60)).state is IntentState.DELIVERED
    async with pool.connection() as conn:
        states = await provider_states(conn)
    assert [s.provider for s in states if s.provider == "twilio" and s.outage_since is not None] == []
