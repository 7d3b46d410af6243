"""Where every server of a deployment listens unless told otherwise, and the small shapes every
section shares."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# Where every server of a deployment listens unless told otherwise: loopback, so nothing is
# exposed by default. The ports are each server's own (devstack/config.py reads them from here).
LOOPBACK = "127.0.0.1"
TEMPORAL_PORT = 7233
# The Temporal Web UI (the dev server's); the codec server lets it read decrypted payloads.
TEMPORAL_UI_PORT = 8233
RECEIPT_PORT = 8235
# 8238, not 8236: the local stack's Temporal serves its metrics on 8236.
CODEC_SERVER_PORT = 8238
# The operator's console (herald/console): beside the emulators' 8234, 8237 and 8239 of the local stack.
CONSOLE_PORT = 8240
LEDGER_METRICS_PORT = 9465
# The SDK's own default; see Settings.workflow_task_slots.
WORKFLOW_TASK_SLOTS = 100
# The SDK's own default; see Settings.workflow_cache.
WORKFLOW_CACHE = 1000


def no_trailing_slash(value: str) -> str:
    return value.rstrip("/")
