"""The provider port: what every adapter implements, whatever its channel and vendor.

The activities and the composition root speak only to ``Provider``; the workflow sees only the
channel-neutral outcomes of ``herald.core.outcomes`` and the declared ``Capabilities``. A provider's
vocabulary (Twilio's error codes and statuses, an ESP's event names, SMTP reply codes) is turned
into those outcomes inside its adapter and its receipt route, never further in.

Capabilities decide the reconciliation path (``DESIGN.md``): with a status lookup, look the
attempt up; with a lookup by reference that sees every state and a bounded queue, "not found" can
prove absence, as can a lookup whose listing lags by a known bound (an ESP's activity feed);
without either, wait for a report that carries our reference, and only the silence rule may allow
a new attempt, while the provider's event stream is demonstrably flowing (``herald.core.silence``).

Adding a provider is an adapter implementing ``Provider``, its settings, its receipt route and its
report vocabulary (``herald/providers/report_vocabularies.py``); nothing in the workflow changes.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from herald.core.capabilities import Capabilities
from herald.core.message import Message, MessageReference
from herald.core.outcomes import Frozen, LookupOutcome, ReferenceSearch, SubmitOutcome


class CancelOutcome(Frozen):
    canceled: bool
    reason: str


class Attachment(Frozen):
    """A file sent with an e-mail, already loaded and verified against its reference."""

    filename: str = Field(min_length=1, max_length=255)
    media_type: str = Field(pattern=r"^[a-z0-9.+-]+/[a-z0-9.+-]+$")
    content: bytes


class OutboundMessage(Frozen):
    """One attempt's message as every adapter receives it; built by the submit activity, never
    stored in Temporal history (it may hold attachment bytes)."""

    # What the person receives, opened: plaintext recipient, body, subject and HTML part.
    message: Message
    attempt_ref: str
    # E-mail only: the message's attachment, loaded and verified against its reference.
    attachments: list[Attachment] = []
    # E-mail only: the attempt whose Message-ID this copy carries. Set when the evidence-window rule
    # allowed a new attempt after an unresolved one: recipients' clients then see one message.
    message_id_of: str | None = None
    # Where the receipt server listens, for adapters that name a callback per message (Twilio).
    receipts_url: str | None = None
    # The longest the provider may queue the message, for adapters with a bounded queue.
    validity_seconds: int | None = None


class Provider(Protocol):
    """One provider account behind one channel, as typed outcomes; never raises for the network."""

    @property
    def name(self) -> str:
        """How the ledger names this provider (attempts.provider, receipt_inbox.provider)."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def route(self) -> str:
        """Which account, sender or relay the attempt goes through (attempts.route); no secrets."""
        ...

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        """Hand one attempt to the provider once: Accepted, Retryable, Rejected or Unknown."""
        ...

    async def fetch(self, provider_id: str) -> LookupOutcome:
        """The message's current status by its provider id (Unavailable without ``status_lookup``)."""
        ...

    async def find_by_reference(self, reference: MessageReference) -> ReferenceSearch:
        """The attempt's message without its provider id (Unavailable without ``lookup_by_reference``):
        Found or NotFound where the provider indexes our reference (an ESP's activity feed); where it
        matches by recipient and content only (Twilio), every fitting message as Candidates, for the
        ledger to decide which, if any, is the attempt's (``herald.core.claims``)."""
        ...

    async def cancel(self, provider_id: str) -> CancelOutcome:
        """Ask the provider to drop a message it has not sent; refusals are answers, not errors."""
        ...

    async def aclose(self) -> None: ...
