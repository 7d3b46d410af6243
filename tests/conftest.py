"""Next to nothing every tier needs: each tier's own conftest holds its fixtures.

The real stack's fixtures (``tests/stack.py``, with the session's keyring and key-encryption keys
they hand to clients, workers and the receipt server) are loaded by the tiers that run on it
(``tests/integration``, ``tests/receipts``), the fault stack by ``tests/faults``, the time-skipping
server by ``tests/workflow``; the unit, provider, emulator and replay tiers start no server and bind
no port. The session's keys themselves are values (``tests/keys.py``), imported where used.
"""

from __future__ import annotations

import pytest

# The modules several tiers import (a conftest may import them before the stack tiers load
# tests/stack.py as their plugin): their asserts are rewritten wherever they are first imported.
pytest.register_assert_rewrite("tests.stack", "tests.reads")
