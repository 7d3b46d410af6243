"""What every tier needs, and nothing more: the session's keys installed for in-process code.

Each tier's own conftest holds its fixtures: the real stack's (``tests/stack.py``) are loaded by
the tiers that run on it (``tests/integration``, ``tests/receipts``), the fault stack by
``tests/faults``, the time-skipping server by ``tests/workflow``; the unit, provider, emulator and
replay tiers start no server and bind no port.
"""

from __future__ import annotations

from herald import fingerprints, key_encryption
from herald.settings import load_settings
from tests.keys import SESSION_FINGERPRINT_KEYS, SESSION_KEY_ENCRYPTION_KEYS

# Tests that build intents in-process fingerprint under the session's key (tests/keys.py), and
# wrap recipients' data keys under the session's key-encryption key.
fingerprints.install_from(load_settings({"HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS)}))
key_encryption.install_from(load_settings({"HERALD_KEY_ENCRYPTION_KEY_FILES": str(SESSION_KEY_ENCRYPTION_KEYS)}))
