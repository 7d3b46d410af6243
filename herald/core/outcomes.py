"""Typed facts that provider adapters report and activities pass to the workflow.

An adapter never decides what happens next; it says what it observed:

    SubmitOutcome.result
      ├── Accepted     the provider returned its id: the attempt exists there
      ├── Unreachable  provably nothing reached the provider: the connection failed before the
      │                request left (refused, DNS, TLS), an SMTP session failed before DATA, or
      │                the provider turned all traffic away for now (429): an outage, not a verdict
      ├── Retryable    the provider looked at this message and said "not now" (a retryable code)
      ├── Rejected     definite, permanent refusal (opt-out, invalid number, ...)
      └── Unknown      we cannot tell: read timeout, reset after send, 5xx after send

Unreachable and Retryable both prove the provider does not have the message; they differ in what
they spend. A refusal of this message spends the retry budget (``max_attempts``); an outage does
not, and is retried until the intent's deadline, so a two-minute outage is a two-minute delay, not
a wall of ``permanent_failure``.

    LookupOutcome.result
      ├── Found       the provider has this attempt, with its current status
      ├── NotFound    the provider answered and has no such attempt
      └── Unavailable the lookup itself failed; says nothing about the attempt

    ReferenceSearch.result (a search without the provider's id)
      ├── Found, NotFound, Unavailable   as above, where the provider indexes our own reference
      └── Candidates  messages that fit the attempt by recipient and content, not by an id of ours:
                      which of them, if any, is the attempt's is the ledger's call (``herald.core.claims``),
                      since another intent's message can fit as well

Provider vocabularies are mapped to ``ProviderStatus`` inside the adapter so no
provider label leaks into the workflow.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class Frozen(BaseModel):
    """Base for every contract model: immutable, and strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ProviderStatus(str, Enum):
    """Herald's narrow view of a provider's message lifecycle."""

    QUEUED = "queued"  # accepted by the provider, not yet handed to a carrier
    SENT = "sent"  # handed to the carrier, no handset report yet
    DELIVERED = "delivered"  # the carrier reported delivery to the handset
    UNDELIVERED = "undelivered"  # the carrier reported it could not deliver
    FAILED = "failed"  # the provider could not send it at all
    CANCELED = "canceled"  # the provider dropped it before sending (scheduled messages)

    @property
    def is_final(self) -> bool:
        return self in _FINAL_PROVIDER_STATUSES

    @property
    def rank(self) -> int:
        """Order in the lifecycle; a status never moves to a lower rank."""
        return _PROVIDER_RANK[self]


_FINAL_PROVIDER_STATUSES = frozenset(
    {ProviderStatus.DELIVERED, ProviderStatus.UNDELIVERED, ProviderStatus.FAILED, ProviderStatus.CANCELED}
)
_PROVIDER_RANK = {
    ProviderStatus.QUEUED: 0,
    ProviderStatus.SENT: 1,
    ProviderStatus.DELIVERED: 2,
    ProviderStatus.UNDELIVERED: 2,
    ProviderStatus.FAILED: 2,
    ProviderStatus.CANCELED: 2,
}


class Accepted(Frozen):
    kind: Literal["accepted"] = "accepted"
    provider_id: str
    status: ProviderStatus
    error_code: int | None = None
    # Whether a failure with this error code may be retried, classified by the adapter from its own
    # vocabulary, so the workflow reads no provider's table.
    failure_retryable: bool = False


class NotTaken(Frozen):
    """An answer proving the provider does not have the message (Unreachable, Retryable, Rejected):
    why, and the provider's code and HTTP status where it gave them."""

    reason: str
    error_code: int | None = None
    http_status: int | None = None


class Retryable(NotTaken):
    kind: Literal["retryable"] = "retryable"
    # The provider's own hint (Retry-After), in seconds; the workflow's policy caps it.
    delay_seconds: float | None = None


class Unreachable(NotTaken):
    kind: Literal["unreachable"] = "unreachable"
    # The provider's own hint (Retry-After on a 429), in seconds; the workflow's policy caps it.
    delay_seconds: float | None = None


class Rejected(NotTaken):
    kind: Literal["rejected"] = "rejected"


class Unknown(Frozen):
    kind: Literal["unknown"] = "unknown"
    reason: str


class SubmitOutcome(Frozen):
    """What one submit call established; ``Unknown`` must never be read as a failure."""

    result: Annotated[Union[Accepted, Unreachable, Retryable, Rejected, Unknown], Field(discriminator="kind")]


class Found(Frozen):
    kind: Literal["found"] = "found"
    provider_id: str
    status: ProviderStatus
    error_code: int | None = None
    provider_updated_at: datetime | None = None
    # Whether a failure with this error code may be retried, classified by the adapter from its own
    # vocabulary, so the workflow reads no provider's table.
    failure_retryable: bool = False


class NotFound(Frozen):
    """The provider answered and listed no such attempt; whether that proves absence is the
    workflow's call (``herald.core.delivery_policy.absence_proven``), from the fields below."""

    kind: Literal["not_found"] = "not_found"
    # How far back the provider was searched.
    searched_since: datetime | None = None
    # When the search began: it saw the provider as it was then.
    searched_at: datetime | None = None
    # The adapter submits with a bound on the provider's queue time (Twilio: ValidityPeriod), so a
    # message that was never listed can stop being invisible only by being sent (listed) or dropped.
    queue_bounded: bool = False
    # The search lists every message it will ever list within this many seconds of the provider
    # accepting it (an ESP's activity feed and its lag), so past that "not found" is absence.
    listed_within_seconds: float | None = None


class Unavailable(Frozen):
    kind: Literal["unavailable"] = "unavailable"
    reason: str


class LookupOutcome(Frozen):
    result: Annotated[Union[Found, NotFound, Unavailable], Field(discriminator="kind")]


class Candidate(Frozen):
    """A message that fits an attempt's reference by recipient and content, with when the provider
    created it (which attempts could have created it is decided from that time)."""

    found: Found
    created_at: datetime


class Candidates(Frozen):
    """One or more messages fit the reference; none is known to be the attempt's. With the fields
    of the NotFound the search becomes when every candidate turns out to be another attempt's."""

    kind: Literal["candidates"] = "candidates"
    messages: list[Candidate] = Field(min_length=1)
    searched_since: datetime | None = None
    searched_at: datetime | None = None
    queue_bounded: bool = False

    def none_left(self) -> NotFound:
        """The search as a NotFound: every candidate belongs to another attempt."""
        return NotFound(searched_since=self.searched_since, searched_at=self.searched_at, queue_bounded=self.queue_bounded)


class ReferenceSearch(Frozen):
    """What a search by our reference established (``Provider.find_by_reference``)."""

    result: Annotated[Union[Found, NotFound, Candidates, Unavailable], Field(discriminator="kind")]
