"""The message: what the person receives, as one type from the intent to the adapter.

``Message`` is rendered once, when the intent is built, and every attempt sends exactly it. The
intent holds it, the submit activity's input carries it (sealed, as the intent holds it), and the
adapter receives it opened, inside its ``OutboundMessage`` (``herald.providers.port``): a field a
person receives is declared here and nowhere else.

What is in it, and what is not:

    channel ...... which kind of message it is (an SMS or an e-mail), hence which provider takes it
    recipient .... where it goes: E.164 for SMS, an address for e-mail
    body ......... the text; subject and html_body beside it for e-mail
    attachment ... e-mail: a reference to a stored artifact, never the bytes (Temporal keeps them)
    category ..... what it is for: consent and quiet hours are decided on it, and a marketing
                   e-mail carries its unsubscribe link
Not in it: what an attempt adds (its reference, the Message-ID it reuses, the queue validity), the
send policy's other inputs (the recipient's time zone, the tenant) and the ledger's facts about it
(its SMS billing, its fingerprints): they change per attempt or describe the message, they are
not received.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar

from herald.core.artifacts import ArtifactRef
from herald.core.outcomes import Frozen
from herald.core.send_policy import Category


class Channel(str, Enum):
    SMS = "sms"
    EMAIL = "email"


class Message(Frozen):
    """One channel's message to one person, rendered once: the same for every attempt."""

    # The fields that name or speak to the person: sealed in Temporal's copy, each under its own
    # name (herald/privacy/recipient_vault.py), and emptied when the person is erased.
    PERSONAL: ClassVar[tuple[str, ...]] = ("recipient", "body", "subject", "html_body")

    channel: Channel
    recipient: str
    body: str
    # E-mail only (None for SMS).
    subject: str | None = None
    # E-mail only: the HTML part, render data escaped in it by the template engine; sent as
    # multipart/alternative beside the body (None: text only).
    html_body: str | None = None
    # E-mail only: a reference; the submit activity loads the bytes and verifies hash and size.
    attachment: ArtifactRef | None = None
    # From the template.
    category: Category = Category.TRANSACTIONAL

    def content_sha256(self) -> str:
        """The SHA-256 of what the recipient receives: an SMS's body (what a lookup by reference
        matches), or an e-mail's subject, body, HTML part and attachment hash together."""
        if self.subject is None and self.attachment is None and self.html_body is None:
            return hashlib.sha256(self.body.encode("utf-8")).hexdigest()
        fields: dict[str, Any] = {
            "subject": self.subject,
            "body": self.body,
            "attachment_sha256": self.attachment.sha256 if self.attachment else None,
        }
        if self.html_body is not None:
            # Only when there is one, so every e-mail's hash recorded before HTML parts still matches.
            fields["html_body"] = self.html_body
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class MessageReference(Frozen):
    """What identifies an attempt's message when its provider id never came back: the lookup's
    input carries it (the recipient sealed), the adapter's search receives it opened."""

    recipient: str
    content_sha256: str
    # Our attempt reference, for providers that index it (an ESP's activity feed, by unique_args).
    attempt_ref: str
    # When the attempt began: a message created before it is not this attempt's.
    since: datetime
    # The latest a request of this attempt can have created a message (its start plus the in-flight
    # bound, ``DeliveryPolicy.submit_in_flight_bound``): a message created later is another's.
    created_by: datetime
    # E-mail: the attempt whose Message-ID the copy carried (None: its own).
    message_id_of: str | None = None
