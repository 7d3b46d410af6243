"""The session's keys: one fingerprint key and one key-encryption key, each a 0600 file.

Every stack a test starts (the session's, the fault stack, the soak's own) and every in-process
client and worker name a recipient alike and wrap recipients' data keys alike, as the processes of
one deployment do. Written once per process; xdist workers each have their own.
"""

from __future__ import annotations

import base64
import secrets
import tempfile
from pathlib import Path

from herald.privacy.fingerprints import Keyring
from herald.privacy.key_encryption import KeyWrapper
from herald.runtime.process import ProcessRuntime
from herald.settings import load_settings

SESSION_FINGERPRINT_KEYS = Path(tempfile.mkdtemp(prefix="herald-fp-")) / "fingerprint-keys"
SESSION_FINGERPRINT_KEYS.write_text(f"session:{base64.b64encode(secrets.token_bytes(32)).decode()}\n")
SESSION_FINGERPRINT_KEYS.chmod(0o600)
# Likewise one key-encryption key (herald/privacy/key_encryption.py): a key sealed by an in-process client is
# unwrapped by the stack's workers, and a stack of a test's own shares it.
SESSION_KEY_ENCRYPTION_KEYS = SESSION_FINGERPRINT_KEYS.parent / "key-encryption-keys"
SESSION_KEY_ENCRYPTION_KEYS.write_text(f"session-kek:{base64.b64encode(secrets.token_bytes(32)).decode()}\n")
SESSION_KEY_ENCRYPTION_KEYS.chmod(0o600)
# The session's keys as a process builds them from its settings (herald.runtime), for what a test
# hands them to: clients, vaults, activities, the receipt endpoint, intents it builds in-process.
SESSION_RUNTIME = ProcessRuntime(load_settings({
    "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS),
    "HERALD_KEY_ENCRYPTION_KEY_FILES": str(SESSION_KEY_ENCRYPTION_KEYS),
}))  # fmt: skip
SESSION_KEYRING: Keyring = SESSION_RUNTIME.keyring()
SESSION_KEKS: KeyWrapper = SESSION_RUNTIME.keks()
