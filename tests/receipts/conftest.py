"""The receipt tier runs its routes on the session's real ledger (``tests/stack.py``; PostgreSQL only)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.import_plugin("tests.stack")
