"""The notification intent as the workflow carries it: one business event's message on one channel.

``Intent`` is the immutable record: the request plus the body rendered once, its SHA-256, and a
keyed fingerprint of the whole payload used to refuse a reused key with new content. How a request
becomes one (validation, rendering, fingerprints) is intake's (``herald.intake.requests``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from enum import Enum
from typing import Any

from herald.core.artifacts import ArtifactRef
from herald.core.outcomes import Frozen
from herald.core.recipients import short
from herald.core.segments import Encoding
from herald.core.send_policy import SHARED_TENANT, Category


class Channel(str, Enum):
    SMS = "sms"
    EMAIL = "email"


class Intent(Frozen):
    """The immutable intent carried by its workflow and recorded in the ledger."""

    business_key: str
    channel: Channel
    recipient: str
    template_id: str
    template_version: int
    render_data: dict[str, str | int]
    body: str
    content_sha256: str
    intent_fingerprint: str
    created_at: datetime
    expires_at: datetime
    # E-mail only (None for SMS, and in intents recorded before the e-mail channel).
    subject: str | None = None
    attachment: ArtifactRef | None = None
    # SMS only: how carriers will bill the body (None for e-mail, and in intents recorded before).
    encoding: Encoding | None = None
    segments: int | None = None
    # From the template: what consent, quiet hours and suppression are decided on.
    category: Category = Category.TRANSACTIONAL
    time_zone: str | None = None
    # The keyed fingerprint of the canonical recipient (herald/privacy/fingerprints.py), computed where the
    # key is, by the client; None in intents recorded before keyed fingerprints.
    recipient_fingerprint: str | None = None
    tenant: str = SHARED_TENANT
    priority: int | None = None
    # E-mail only: the HTML part rendered beside the body, render data escaped in it (None: the
    # template has none, and in intents recorded before HTML parts). Personal data like the body:
    # sealed with it in Temporal's copy (herald/privacy/recipient_vault.py).
    html_body: str | None = None

    @property
    def workflow_id(self) -> str:
        return workflow_id_for(self.business_key, self.channel)


def workflow_id_for(business_key: str, channel: Channel | str) -> str:
    """One workflow per (business key, channel): `order_receipt:pay_157/sms`."""
    return f"{business_key}/{Channel(channel).value}"


def destination_fingerprint(intent: Intent) -> str | None:
    """Which destination, without naming it, for status views: the keyed fingerprint's first 16 hex
    (None for intents recorded before keyed fingerprints: a plain hash's prefix gave the number back)."""
    return short(intent.recipient_fingerprint) if intent.recipient_fingerprint else None


def content_sha256(
    body: str, subject: str | None = None, attachment: ArtifactRef | None = None, html_body: str | None = None
) -> str:
    """The SHA-256 of what the recipient receives: an SMS's body (what a lookup by reference
    matches), or an e-mail's subject, body, HTML part and attachment hash together."""
    if subject is None and attachment is None and html_body is None:
        return hashlib.sha256(body.encode("utf-8")).hexdigest()
    fields: dict[str, Any] = {
        "subject": subject,
        "body": body,
        "attachment_sha256": attachment.sha256 if attachment else None,
    }
    if html_body is not None:
        # Only when there is one, so every e-mail's hash recorded before HTML parts still matches.
        fields["html_body"] = html_body
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
