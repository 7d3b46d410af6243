"""The notification intent as the workflow carries it: one business event's message on one channel.

``Intent`` is the immutable record: the message rendered once (``herald.core.message``), its
SHA-256, and a keyed fingerprint of the whole payload used to refuse a reused key with new content.
How a request becomes one (validation, rendering, fingerprints) is intake's
(``herald.intake.requests``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import model_validator

from herald.core.message import Channel, Message
from herald.core.outcomes import Frozen
from herald.core.recipients import short
from herald.core.segments import Encoding
from herald.core.send_policy import SHARED_TENANT


class Intent(Frozen):
    """The immutable intent carried by its workflow and recorded in the ledger."""

    business_key: str
    # What the person receives; its personal fields are sealed in Temporal's copy
    # (herald/privacy/recipient_vault.py).
    message: Message
    template_id: str
    template_version: int
    render_data: dict[str, str | int]
    # The message's SHA-256 (Message.content_sha256), taken before sealing: what a lookup matches.
    content_sha256: str
    intent_fingerprint: str
    created_at: datetime
    expires_at: datetime
    # SMS only: how carriers will bill the body (None for e-mail, and in intents recorded before).
    encoding: Encoding | None = None
    segments: int | None = None
    # The recipient's zone for quiet hours (None: from the number's region, else the policy's default).
    time_zone: str | None = None
    # The keyed fingerprint of the canonical recipient (herald/privacy/fingerprints.py), computed where the
    # key is, by the client; None in intents recorded before keyed fingerprints.
    recipient_fingerprint: str | None = None
    tenant: str = SHARED_TENANT
    priority: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _message_recorded_flat(cls, data: Any) -> Any:
        """An intent recorded before ``Message`` had the message's fields at its top level (the
        committed histories under tests/replay/histories start so): read them into ``message``."""
        if isinstance(data, dict) and "message" not in data and "recipient" in data:
            data = dict(data)
            data["message"] = {name: data.pop(name) for name in Message.model_fields if name in data}
        return data

    @property
    def workflow_id(self) -> str:
        return workflow_id_for(self.business_key, self.message.channel)


def workflow_id_for(business_key: str, channel: Channel | str) -> str:
    """One workflow per (business key, channel): `order_receipt:pay_157/sms`."""
    return f"{business_key}/{Channel(channel).value}"


def destination_fingerprint(intent: Intent) -> str | None:
    """Which destination, without naming it, for status views: the keyed fingerprint's first 16 hex
    (None for intents recorded before keyed fingerprints: a plain hash's prefix gave the number back)."""
    return short(intent.recipient_fingerprint) if intent.recipient_fingerprint else None
