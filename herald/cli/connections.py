"""The client a command starts, reads or cancels intents with, from what the process runtime opens."""

from __future__ import annotations

from herald.client import HeraldClient
from herald.core.delivery_policy import DeliveryPolicy
from herald.privacy.recipient_vault import RecipientVault
from herald.runtime.process import ProcessRuntime


async def herald_client(
    runtime: ProcessRuntime, *, policy: DeliveryPolicy | None = None, vault: RecipientVault | None = None
) -> HeraldClient:
    """Herald's client on the settings' Temporal and task queue, naming recipients with the settings'
    fingerprint keys; `vault` seals intents with their recipients' keys (None: not sealing)."""
    client = await runtime.temporal()
    temporal = runtime.settings().temporal
    return HeraldClient(
        client, temporal.task_queue, keyring=runtime.keyring(), policy=policy, vault=vault,
        urgent_lane=temporal.urgent_lane,
    )  # fmt: skip
