"""The integration tier runs on the session's real stack (``tests/stack.py``); its own fixtures beyond it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

from devstack.processes import ManagedProcess, free_port, wait_for_port
from devstack.stack import LocalStack
from tests.integration.routes import LIMIT


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
